"""``<run_dir>/seal.json``: the SHA-256 of every file a run submitted, signed when it ends.

What is sealed: the submission (``output/rankings.json``, ``report.md``, ``sources.json``
and every file under ``output/scripts/``), the trajectory and the model gateway's
record. The agent wrote the submission, so a link or a hard link there is never
followed or hashed: it is named in ``skipped`` instead, and the set of files found
is part of the seal, so a file that appears later breaks it as a changed one does.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spu.schema import Identity, Outcome, SealManifest

SEAL_FILE = "seal.json"
"""The manifest's name in a run folder."""
SEALED_FILES = ("output/rankings.json", "output/report.md", "output/sources.json",
                "trajectory.jsonl.gz", "model/requests.jsonl")
"""Single files sealed when present, relative to the run folder."""
SEALED_TREES = ("output/scripts",)
"""Folders whose every regular file is sealed."""
MAX_TREE_FILES = 10_000
"""Files sealed under one tree at most; the rest are named in ``skipped``."""
_CHUNK = 1 << 20


def canonical_json(data: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8: the bytes a signature covers."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def signed_body(manifest: SealManifest) -> bytes:
    """The canonical JSON of a manifest without its signature."""
    return canonical_json(manifest.model_dump(mode="json", exclude={"signature"}))


def manifest_bytes(manifest: SealManifest) -> bytes:
    """The bytes of ``seal.json`` (its SHA-256 is the ledger's ``manifest_sha256``)."""
    return json.dumps(manifest.model_dump(mode="json"), sort_keys=True, indent=1).encode() + b"\n"


@dataclass(frozen=True)
class SealedFiles:
    """What a run folder holds where sealed files are: hashes, and paths refused."""

    files: dict[str, str] = field(default_factory=dict)
    """Relative path -> SHA-256 hex."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Relative path -> why it is not hashed (a link, not a regular file...)."""


def file_sha256(path: Path) -> str | None:
    """SHA-256 hex of a regular file with one link, never through a symbolic link; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return None
        digest = hashlib.sha256()
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _kind(path: Path) -> str | None:
    """None for a regular file of one link, else why it is refused."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return "symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_nlink != 1:
        return "hard link"
    return None


def _real_dirs(run_dir: Path, rel: str) -> bool:
    """Every folder on the way from ``run_dir`` to ``rel``'s parent is a folder, not a link."""
    here = run_dir
    for part in Path(rel).parts[:-1]:
        here = here / part
        try:
            if not stat.S_ISDIR(here.lstat().st_mode):
                return False
        except FileNotFoundError:
            return False
    return True


def _tree_files(root: Path, rel_root: str) -> Iterator[tuple[str, Path]]:
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        base = Path(folder)
        for name in sorted(names) + [d for d in dirs if (base / d).is_symlink()]:
            yield f"{rel_root}/{(base / name).relative_to(root).as_posix()}", base / name


def sealed_files(run_dir: Path) -> SealedFiles:
    """Hash what a run folder holds at the sealed paths, refusing links and special files."""
    run_dir = Path(run_dir)
    files: dict[str, str] = {}
    skipped: dict[str, str] = {}

    def take(rel: str, path: Path) -> None:
        why = _kind(path)
        digest = file_sha256(path) if why is None else None
        if digest is None:
            skipped[rel] = why or "unreadable"
        else:
            files[rel] = digest

    for rel in SEALED_FILES:
        path = run_dir / rel
        if not _real_dirs(run_dir, rel):
            if os.path.lexists(path.parent):
                skipped[Path(rel).parent.as_posix()] = "not a folder"
            continue
        if os.path.lexists(path):
            take(rel, path)
    for rel_root in SEALED_TREES:
        root = run_dir / rel_root
        if not os.path.lexists(root) or not _real_dirs(run_dir, rel_root + "/x"):
            continue
        if not stat.S_ISDIR(root.lstat().st_mode):
            skipped[rel_root] = "not a folder"
            continue
        for n, (rel, path) in enumerate(_tree_files(root, rel_root)):
            if n >= MAX_TREE_FILES:
                skipped[rel_root] = f"more than {MAX_TREE_FILES} files: the rest not sealed"
                break
            take(rel, path)
    return SealedFiles(dict(sorted(files.items())), dict(sorted(skipped.items())))


def now_utc() -> str:
    """ISO-8601 time, UTC, to the microsecond."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def build_manifest(run_dir: Path, *, run_key: str, attempt: int, identity: Identity | None,
                   outcome: Outcome, public_key_sha256: str, time: str | None = None
                   ) -> SealManifest:
    """The unsigned manifest of what ``run_dir`` holds now."""
    found = sealed_files(run_dir)
    return SealManifest(run_key=run_key, attempt=attempt, identity=identity, outcome=outcome,
                        time=time or now_utc(), files=found.files, skipped=found.skipped,
                        public_key_sha256=public_key_sha256)
