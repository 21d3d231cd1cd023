"""Content digests of task packages and of the files a run depends on.

:func:`task_digest` is the ``task_digest`` of a run's identity (SPEC section 12): a
SHA-256 over the task's public files (:data:`~spu.tasks.package.PUBLIC_PATHS`), their
relative paths and contents, never their times or permissions. The staged copy a run
folder keeps (``<run_dir>/task/``) has the digest of the package it was staged from.

Digests are kept per process and recomputed only when a file's size, modification time
or inode changes, so that a sweep of many jobs on one task reads its files once.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from spu.tasks.package import PUBLIC_PATHS

_Signature = tuple[tuple[str, int, int, int, int], ...]

_TREES: dict[str, tuple[_Signature, str]] = {}
_FILES: dict[str, tuple[tuple[int, int, int], str]] = {}


def _entries(task_dir: Path, names: tuple[str, ...] | None = PUBLIC_PATHS
             ) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``names`` of ``task_dir`` (None: all), sorted by relative path.

    Links are not followed.
    """
    found: list[tuple[str, os.stat_result]] = []
    for name in sorted(os.listdir(task_dir)) if names is None else names:
        top = task_dir / name
        try:
            st = os.lstat(top)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            found.append((name, st))
            continue
        for root, dirs, files in os.walk(top, followlinks=False):
            dirs.sort()
            for entry in sorted(files) + [d for d in dirs if os.path.islink(Path(root) / d)]:
                path = Path(root) / entry
                found.append((path.relative_to(task_dir).as_posix(), os.lstat(path)))
    return sorted(found, key=lambda item: item[0])


def task_digest(task_dir: str | Path) -> str:
    r"""SHA-256 (hex) over the public files of a task package: paths and contents.

    Each entry adds three length-prefixed fields to the digest, in path order: its kind
    (``file``, ``link`` or ``special``), its relative path and its content (a file's
    SHA-256, a link's target), each as ``<byte length> : <bytes>``, so that no path or
    link target (which may hold any byte but NUL) can stand for another entry's (a
    package with a link does not run, but its digest still differs from the package
    without it).

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "task.yaml").write_text("id: x\n")
    >>> task_digest(folder)[:16]  # of '4:file9:task.yaml64:<SHA-256 of 'id: x' LF>'
    '73d453ba28265425'
    """
    return _tree_digest(Path(task_dir).resolve(), PUBLIC_PATHS)


def tree_digest(folder: str | Path) -> str:
    r"""SHA-256 (hex) over every file of ``folder``, paths and contents (as :func:`task_digest`).

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "task.yaml").write_text("id: x\n")
    >>> tree_digest(folder) == task_digest(folder)
    True
    """
    return _tree_digest(Path(folder).resolve(), None)


def content_digest(path: str | Path) -> str | None:
    """SHA-256 of a file's content, or over a folder's files (None: neither is there)."""
    path = Path(path).expanduser()
    if path.is_dir():
        return tree_digest(path)
    return file_sha256(path) if path.is_file() else None


def _tree_digest(task_dir: Path, names: tuple[str, ...] | None) -> str:
    entries = _entries(task_dir, names)
    signature: _Signature = tuple((rel, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
                                  for rel, st in entries)
    held = _TREES.get(f"{task_dir}\0{names is None}")
    if held is not None and held[0] == signature:
        return held[1]
    digest = hashlib.sha256()
    for rel, st in entries:
        path = task_dir / rel
        if stat.S_ISLNK(st.st_mode):
            kind, content = "link", os.fsencode(os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            kind, content = "file", file_sha256(path).encode()
        else:
            kind, content = "special", b""
        for field in (kind.encode(), rel.encode("utf-8", "surrogateescape"), content):
            digest.update(b"%d:%s" % (len(field), field))
    value = digest.hexdigest()
    _TREES[f"{task_dir}\0{names is None}"] = (signature, value)
    return value


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of one file's content, kept while its size, time and inode stay."""
    path = Path(path)
    st = os.stat(path)
    sig = (st.st_size, st.st_mtime_ns, st.st_ino)
    key = str(path.resolve())
    held = _FILES.get(key)
    if held is not None and held[0] == sig:
        return held[1]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    value = digest.hexdigest()
    _FILES[key] = (sig, value)
    return value
