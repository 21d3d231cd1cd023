"""``<output_root>/ledger.jsonl``: a signed line per sealed run, each with the last one's hash.

Lines are appended under a file lock beside the ledger, so parallel settling threads
and processes of one output root never interleave or fork the chain. The head hash
(SHA-256 of the last line) is what a sweep prints and publishes before grading.

An append reads only the ledger's end (:func:`_tail`: a few KiB from the last byte back,
whatever the ledger's length): the last line gives the next line's ``prev`` and its
``seq`` the next ``seq``. The chain itself is checked line by line by ``spu seal verify``
(:mod:`spu.seal.verify`), which a ledger that grows with its output root does not slow.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import BinaryIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from filelock import FileLock

from spu.schema import LedgerEntry
from spu.seal.keys import sign
from spu.seal.manifest import canonical_json

log = logging.getLogger(__name__)

LEDGER_FILE = "ledger.jsonl"
"""The ledger's name under the output root."""
GENESIS = "0" * 64
"""``prev`` of the first line."""


def ledger_path(output_root: Path) -> Path:
    """``<output_root>/ledger.jsonl``."""
    return Path(output_root) / LEDGER_FILE


def line_sha256(line: bytes) -> str:
    """SHA-256 hex of a ledger line without its newline."""
    return hashlib.sha256(line.rstrip(b"\n")).hexdigest()


def entry_body(entry: LedgerEntry) -> bytes:
    """The canonical JSON an entry's signature covers (every field but the signature)."""
    return canonical_json(entry.model_dump(mode="json", exclude={"signature"}))


def entry_line(entry: LedgerEntry) -> bytes:
    """The entry as a ledger line (canonical JSON, with its newline)."""
    return canonical_json(entry.model_dump(mode="json")) + b"\n"


TAIL_BYTES = 4096
"""Bytes read from the ledger's end at first (a line is about 400); doubled while short."""


def _tail(f: BinaryIO, lines: int) -> tuple[bytes, int]:
    """The end of the open ledger ``f`` that holds its last ``lines`` lines whole, and its offset.

    Read backwards from the last byte, :data:`TAIL_BYTES` at first, twice as many each time
    a line is longer: the cost does not grow with the ledger. The bytes returned start at a
    line's start (or the file's); a last line without its newline is among them.
    """
    end = f.seek(0, os.SEEK_END)
    size = TAIL_BYTES
    while True:
        start = max(0, end - size)
        f.seek(start)
        data = f.read(end - start)
        if start == 0:
            return data, 0
        if data.rstrip(b"\n").count(b"\n") >= lines:
            cut = data.index(b"\n") + 1  # the first line may have been read in part
            return data[cut:], start + cut
        size *= 2


def _last_line(path: Path) -> tuple[int, bytes | None]:
    """The ``seq`` of the last line and the line (0 and None for an empty or absent ledger).

    The ``seq`` is the last line's own (``spu seal verify`` checks that it is its line
    number); a last line that is no entry is counted the slow way, line by line.
    """
    if not path.exists():
        return 0, None
    with open(path, "rb") as f:
        data, _ = _tail(f, 1)
    lines = [line for line in data.split(b"\n") if line]
    if not lines:
        return 0, None
    try:
        return LedgerEntry.model_validate_json(lines[-1]).seq, lines[-1]
    except ValueError:
        return sum(1 for line in path.read_bytes().split(b"\n") if line), lines[-1]


def head_hash(output_root: Path) -> str | None:
    """SHA-256 of the ledger's last line: the value to publish; None without a ledger."""
    _, last = _last_line(ledger_path(output_root))
    return None if last is None else line_sha256(last)


def repair_torn_tail(path: Path) -> str | None:
    """Mend a ledger whose last line was cut by a crash mid-append; what was done, or None.

    Call it under the ledger's lock. A last line without its newline that is still a
    whole entry chained to the line before it gets its newline; any other torn tail is
    cut off and kept, appended to ``ledger.jsonl.torn`` beside the ledger, so the chain
    goes on from the last whole line (the run that line was for then has a seal that no
    line names, which ``spu seal verify`` says).
    """
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return None
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return None
        data, offset = _tail(f, 2)
    cut = data.rfind(b"\n") + 1
    tail, before = data[cut:], data[:cut]
    cut += offset
    lines = [line for line in before.split(b"\n") if line]
    try:
        entry = LedgerEntry.model_validate_json(tail)
        whole = entry.prev == (line_sha256(lines[-1]) if lines else GENESIS)
    except ValueError:
        whole = False
    if whole:
        with open(path, "ab") as f:
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
        return f"{path.name}: the last line lacked its newline (a crash mid-append); added it"
    with open(path.with_name(path.name + ".torn"), "ab") as f:
        f.write(tail + b"\n")
    with open(path, "r+b") as f:
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())
    seq, _ = _last_line(path)
    return (f"{path.name}: the last line was incomplete (a crash mid-append): cut its "
            f"{len(tail)} bytes off into {path.name}.torn; the chain goes on from line "
            f"{seq}")


def append_entry(output_root: Path, key: Ed25519PrivateKey, *, run_key: str,
                 manifest_sha256: str, time: str) -> LedgerEntry:
    """Sign and append one entry under the ledger's lock; returns it.

    A torn last line (a crash mid-append) is repaired first (:func:`repair_torn_tail`),
    and the repair is logged as a warning.
    """
    path = ledger_path(output_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        repaired = repair_torn_tail(path)
        if repaired:
            log.warning("%s", repaired)
        count, last = _last_line(path)
        entry = LedgerEntry(seq=count + 1, run_key=run_key, manifest_sha256=manifest_sha256,
                            prev=GENESIS if last is None else line_sha256(last), time=time,
                            signature="")
        entry = entry.model_copy(update={"signature": sign(key, entry_body(entry))})
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "ab") as f:
            f.write(entry_line(entry))
            f.flush()
            os.fsync(f.fileno())
    return entry
