"""An append reads the ledger's end, not the ledger: its cost does not grow with the root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from spu.schema import LedgerEntry
from spu.seal.keys import load_public_key, public_key_path, sign, signing_key
from spu.seal.ledger import (
    GENESIS,
    append_entry,
    entry_body,
    entry_line,
    head_hash,
    ledger_path,
    line_sha256,
)
from spu.seal.verify import read_ledger

FEW_KIB = 4096
"""The ledger's end an append may read (``spu.seal.ledger.TAIL_BYTES``; a line is ~400 B)."""


def write_chain(root: Path, key: Ed25519PrivateKey, n: int) -> Path:
    """A valid ledger of ``n`` lines, written at once (``append_entry`` fsyncs each line)."""
    prev, lines = GENESIS, []
    for seq in range(1, n + 1):
        entry = LedgerEntry(seq=seq, run_key=f"{seq:016x}", manifest_sha256="0" * 64,
                            prev=prev, time="2026-01-01T00:00:00+00:00", signature="")
        line = entry_line(entry.model_copy(update={"signature": sign(key, entry_body(entry))}))
        lines.append(line)
        prev = line_sha256(line)
    path = ledger_path(root)
    path.write_bytes(b"".join(lines))
    return path


def bytes_read(step: Callable[[], object]) -> int:
    """Bytes this process read (``read`` system calls, ``/proc/self/io``) while ``step`` ran."""
    def rchar() -> int:
        io = Path("/proc/self/io").read_text()
        return int(next(line for line in io.splitlines() if line.startswith("rchar:")).split()[1])

    before = rchar()
    step()
    after = rchar()
    return after - before - len(Path("/proc/self/io").read_bytes())  # less the second look


def test_an_append_reads_as_little_of_a_long_ledger_as_of_a_short_one(tmp_path: Path) -> None:
    """Invariant: appending to a ledger of 3,000 lines reads a few KiB, as for 10 lines, and
    the chain still verifies line by line with the head the sweep publishes. (An append
    read the whole ledger twice: 89 ms at 100,000 lines.)"""
    short, long = tmp_path / "short", tmp_path / "long"
    key = signing_key(short)
    long_key = signing_key(long)
    write_chain(short, key, 10)
    size = write_chain(long, long_key, 3000).stat().st_size
    assert size > 100 * FEW_KIB

    read_short = bytes_read(lambda: append_entry(short, key, run_key="a" * 16,
                                                 manifest_sha256="1" * 64, time="t"))
    read_long = bytes_read(lambda: append_entry(long, long_key, run_key="b" * 16,
                                                manifest_sha256="1" * 64, time="t"))
    assert read_long <= 4 * FEW_KIB and read_long <= read_short + FEW_KIB, (
        read_short, read_long, size)
    assert bytes_read(lambda: head_hash(long)) <= 4 * FEW_KIB

    entries, faults, head = read_ledger(long, load_public_key(public_key_path(long)))
    assert faults == [] and len(entries) == 3001 and entries[-1].seq == 3001
    assert head == head_hash(long)


def test_a_line_longer_than_the_first_read_is_still_read_whole(tmp_path: Path) -> None:
    """A last line longer than the first read from the end (a long run key in an old ledger) is read
    back to its start: the next ``prev`` is its hash, and the chain verifies."""
    root = tmp_path / "outputs"
    key = signing_key(root)
    append_entry(root, key, run_key="k" * (3 * FEW_KIB), manifest_sha256="0" * 64,
                 time="t")
    append_entry(root, key, run_key="next", manifest_sha256="0" * 64, time="t")
    entries, faults, head = read_ledger(root, load_public_key(public_key_path(root)))
    assert faults == [] and [e.seq for e in entries] == [1, 2]
    assert head == head_hash(root)
