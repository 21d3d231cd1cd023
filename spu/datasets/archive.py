"""A dataset's archive: what it may hold, extracted as if hostile, checked against its manifest.

An archive comes from a registry anyone can publish, so it is read as an attacker
would write it. Before a member's bytes are read its header is checked
(:func:`member_problem`): a regular file or a folder, a relative path of safe parts under
``dataset.json`` or ``tasks/``, within the size caps; links, hard links, devices, FIFOs,
sparse files, absolute paths, ``..`` and a member met twice are refused. A header whose
own data (a long name, PAX records) is larger than :data:`MAX_HEADER_BYTES` is refused
before it is read, so no member can make the reader allocate more than that. Files are
written by this module, never by ``tarfile``'s extraction, each created new (no file
followed, none replaced).

:func:`check_tree` then holds the extracted tree to its ``dataset.json``: exactly the
tasks listed, each a task package with no link, its id, version, discipline,
visibility and ``task_digest`` as listed, its answer key present exactly when listed
``included``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spu.datasets import DatasetError

MANIFEST = "dataset.json"
"""The manifest at the top of an archive and of a pulled dataset."""
TASKS = "tasks"
"""The folder of the task packages."""
ANSWERS = ("hidden", "answers.json")
"""Where a task's answer key travels, under its folder."""

MAX_MANIFEST_BYTES = 16 << 20
"""Largest ``dataset.json`` read: 16 MiB."""
MAX_HEADER_BYTES = 1 << 20
"""Largest extended header (a long name, PAX records) read: 1 MiB."""
MAX_PATH_CHARS = 1024
"""Longest member path."""
MAX_PATH_DEPTH = 32
"""Deepest member path (parts)."""
CHUNK = 1 << 20
"""Bytes copied at a time."""


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps on what one archive may hold (they bound a tar bomb's damage)."""

    member_bytes: int = 1 << 30
    """Largest member: 1 GiB (a task's largest staged file, :mod:`spu.tasks.package`)."""
    total_bytes: int = 16 << 30
    """Largest sum of the members: 16 GiB."""
    members: int = 100_000
    """Most members."""
    archive_bytes: int = 16 << 30
    """Largest archive a registry may list: 16 GiB."""


LIMITS = ArchiveLimits()
"""The caps every pull applies."""


def archive_name(name: str, version: str) -> str:
    """The archive file of ``name@version`` (SPEC 16).

    Examples:
        >>> archive_name("spu-public", "1.0")
        'spu-public-1.0.tar.gz'
    """
    return f"{name}-{version}.tar.gz"


def _kind(info: tarfile.TarInfo) -> str | None:
    """What a member is when it is not a plain file or folder (None when it is)."""
    if info.issym():
        return f"a link (to {info.linkname!r})"
    if info.islnk():
        return f"a hard link (to {info.linkname!r})"
    if info.ischr() or info.isblk():
        return "a device"
    if info.isfifo():
        return "a FIFO"
    if info.issparse():
        return "a sparse file"
    if info.isreg() or info.isdir():
        return None
    return f"a member of type {info.type!r}"


def path_problem(name: str) -> str | None:
    """Why a member path may not be written under the dataset's folder, or None.

    Examples:
        >>> path_problem("tasks/t1/task.yaml") is None, path_problem("dataset.json") is None
        (True, True)
        >>> path_problem("/etc/passwd")
        'is an absolute path'
        >>> path_problem("tasks/t1/../../x")
        "climbs out with '..'"
        >>> path_problem("run.sh")
        'is outside dataset.json and tasks/'
    """
    if not name or len(name) > MAX_PATH_CHARS:
        return f"has a path of {len(name)} characters (1 to {MAX_PATH_CHARS})"
    if any(ord(c) < 32 or c in "\\\x7f" for c in name):
        return "has a control character or a backslash in its path"
    if name.startswith("/"):
        return "is an absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "climbs out with '..'"
    if any(p in ("", ".") for p in parts):
        return "has an empty or '.' part in its path"
    if len(parts) > MAX_PATH_DEPTH:
        return f"is {len(parts)} folders deep (at most {MAX_PATH_DEPTH})"
    if parts != [MANIFEST] and parts[0] != TASKS:
        return f"is outside {MANIFEST} and {TASKS}/"
    return None


def member_problem(info: tarfile.TarInfo, limits: ArchiveLimits | None = None) -> str | None:
    """Why a member's header is refused (before its bytes are read), or None."""
    limits = limits or LIMITS
    kind = _kind(info)
    if kind is not None:
        return f"is {kind}"
    problem = path_problem(info.name)
    if problem is not None:
        return problem
    if info.name == MANIFEST and not info.isreg():
        return "is not a file"
    if info.size < 0:
        return "has a negative size"
    if info.size > limits.member_bytes:
        return f"holds {info.size} bytes, over the cap of {limits.member_bytes}"
    return None


class _BoundedReads(io.RawIOBase):
    """A seekable reader over the decompressed archive that refuses one oversized read.

    ``tarfile`` reads a GNU long name or PAX records in one ``read(size)`` of the size
    their header states; past :data:`MAX_HEADER_BYTES` that read is refused instead of
    allocated. File data is read by :func:`extract_archive` in chunks of :data:`CHUNK`.
    """

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        if size is None or size < 0 or size > max(MAX_HEADER_BYTES, CHUNK):
            raise DatasetError(f"a header asks to read {size} bytes at once (at most "
                               f"{max(MAX_HEADER_BYTES, CHUNK)})")
        return bytes(self.raw.read(size))

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.raw.seek(offset, whence))

    def tell(self) -> int:
        return int(self.raw.tell())


@dataclass
class _Budget:
    members: int = 0
    total: int = 0


def extract_archive(archive: Path, dest: Path,
                    limits: ArchiveLimits | None = None) -> dict[str, str]:
    """Extract ``archive`` (a gzipped tar) into ``dest``, a new empty folder, as if hostile.

    Returns the SHA-256 of every file written, by its path relative to ``dest``.

    Raises:
        DatasetError: the first member refused, or the archive unreadable (one line,
            without the dataset's name: the caller adds it). ``dest`` may then hold part
            of the archive: the caller removes it.
    """
    limits = limits or LIMITS
    written: dict[str, str] = {}
    budget = _Budget()
    try:
        with gzip.open(archive, "rb") as raw, tarfile.open(
                fileobj=_BoundedReads(raw), mode="r:") as tar:  # type: ignore[call-overload]
            for info in tar:
                _check_budget(info, budget, limits)
                problem = member_problem(info, limits)
                if problem is not None:
                    raise DatasetError(f"archive member {info.name[:200]!r} {problem}")
                target = dest.joinpath(*info.name.split("/"))
                if info.isdir():
                    _make_folder(dest, target)
                    continue
                written[info.name] = _write_member(tar, info, dest, target)
    except DatasetError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"the archive cannot be read as a gzipped tar ({exc})") from None
    return written


def _check_budget(info: tarfile.TarInfo, budget: _Budget, limits: ArchiveLimits) -> None:
    budget.members += 1
    budget.total += max(0, info.size)
    if budget.members > limits.members:
        raise DatasetError(f"the archive holds more than {limits.members} members")
    if budget.total > limits.total_bytes:
        raise DatasetError(f"the archive's members hold more than {limits.total_bytes} bytes")


def _make_folder(dest: Path, target: Path) -> None:
    """Make ``target`` and its parents as folders under ``dest``, never through a link."""
    rel = target.relative_to(dest)
    here = dest
    for part in rel.parts:
        here = here / part
        try:
            os.mkdir(here, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                raise DatasetError(f"archive member {rel.as_posix()!r} is both a file and a "
                                   f"folder") from None


def _write_member(tar: tarfile.TarFile, info: tarfile.TarInfo, dest: Path,
                  target: Path) -> str:
    """Write one regular member as a new file; its SHA-256."""
    _make_folder(dest, target.parent)
    source = tar.extractfile(info)
    assert source is not None  # a regular member
    digest = hashlib.sha256()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags, 0o644)
    except FileExistsError:
        raise DatasetError(f"archive member {info.name!r} appears twice") from None
    with os.fdopen(fd, "wb") as out:
        left = info.size
        while left > 0:
            block = source.read(min(CHUNK, left))
            if not block:
                raise DatasetError(f"archive member {info.name!r} is cut short")
            digest.update(block)
            out.write(block)
            left -= len(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def file_digests(root: Path) -> dict[str, str]:
    """SHA-256 of every regular file under ``root``, by POSIX path (links not followed)."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            found[path.relative_to(root).as_posix()] = file_sha256(path)
    return found
