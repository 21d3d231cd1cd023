"""Locks on files under ``output_root``: one writer per run key, one creator per store.

Two sweeps launched on one ``output_root`` (two terminals, a relaunch while the first
still runs, two Ray drivers) must never run or record one run key twice, and must
not both create or migrate the SQLite tracking store. Each is an exclusive
``flock(2)`` on a small file:

- ``<output_root>/locks/<run_key>.lock``: held by the process that runs a key, from
  the resume decision (what tracking holds) until the run is tracked
  (:func:`run_key_lock`); a second process does not wait, it skips the key;
- ``<mlflow.db>.lock``: held while a process opens the store for the first time,
  which creates or migrates its schema (:func:`spu.tracking.store.client_for`).

``flock`` locks belong to an open file, so the kernel releases them when the process
dies (``kill -9`` included): a lock never outlives its holder, and lock files are left
in place (deleting one would race with a process opening it). On a network file
system, ``flock`` is only as good as the server's lock support: use one driver per
``output_root`` there. A lock is reentrant within one process, so a function that
takes it may call another that takes it too. The locks are the ``filelock`` library's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from filelock import FileLock, Timeout

RUN_KEY_PATTERN = re.compile(r"[0-9a-f]{16}")
"""What :func:`spu.identity.run_key` produces; nothing else names a lock file."""

LOCK_FOLDER = "locks"
"""Folder of the run key locks under ``output_root``."""


def _write_holder(fd: int) -> None:
    # Who holds it, for the message of a process that finds it taken.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def holder_lock(path: Path) -> FileLock:
    """An exclusive ``flock`` on ``path``, reentrant within the process, naming its holder.

    One lock object per path in a process (``is_singleton``), held by the process rather
    than a thread, so a function that takes it may call another that takes it too.

    Examples
    --------
    >>> import tempfile
    >>> lock = holder_lock(Path(tempfile.mkdtemp()) / "k.lock")
    >>> with lock:
    ...     lock.is_locked
    True
    >>> lock.is_locked
    False
    """
    return FileLock(Path(path).absolute(), is_singleton=True, thread_local=False,
                    on_acquired=_write_holder)


def take(lock: FileLock, blocking: bool = True, timeout_s: float | None = None) -> bool:
    """Take ``lock``; False when another process holds it and we do not wait.

    Args:
        lock: a lock from :func:`holder_lock`.
        blocking: wait for the holder to release it.
        timeout_s: with ``blocking``, give up after this many seconds (None: never).
    """
    try:
        lock.acquire(timeout=-1 if timeout_s is None else timeout_s, blocking=blocking)
    except Timeout:
        return False
    return True


def holder(lock: FileLock) -> str:
    """The process id written by the lock's holder, or ``?``."""
    try:
        return Path(lock.lock_file).read_text().strip() or "?"
    except OSError:
        return "?"


def run_key_lock(output_root: Path, run_key: str) -> FileLock:
    """The lock of one run key under ``output_root`` (not taken yet).

    Raises:
        ValueError: ``run_key`` is not a run key (so no path is built from it).
    """
    if not RUN_KEY_PATTERN.fullmatch(run_key):
        raise ValueError(f"{run_key!r} is not a run key (16 hex digits)")
    return holder_lock(Path(output_root) / LOCK_FOLDER / f"{run_key}.lock")
