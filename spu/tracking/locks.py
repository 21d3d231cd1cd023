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
takes it may call another that takes it too.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
import time
from pathlib import Path
from types import TracebackType

RUN_KEY_PATTERN = re.compile(r"[0-9a-f]{16}")
"""What :func:`spu.identity.run_key` produces; nothing else names a lock file."""

LOCK_FOLDER = "locks"
"""Folder of the run key locks under ``output_root``."""

_held: dict[str, tuple[int, int]] = {}
"""Lock file -> (descriptor, depth) of the locks this process holds."""
_guard = threading.Lock()


class FileLock:
    """An exclusive ``flock`` on ``path``, reentrant within the process.

    Examples
    --------
    >>> import tempfile
    >>> lock = FileLock(Path(tempfile.mkdtemp()) / "k.lock")
    >>> with lock:
    ...     lock.held
    True
    >>> lock.held
    False
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._key = str(self.path.absolute())

    @property
    def held(self) -> bool:
        """True while this process holds the lock."""
        with _guard:
            return self._key in _held

    def acquire(self, blocking: bool = True, timeout_s: float | None = None) -> bool:
        """Take the lock; False when another process holds it and we do not wait.

        Args:
            blocking: wait for the holder to release it.
            timeout_s: with ``blocking``, give up after this many seconds (None: never).
        """
        with _guard:
            if self._key in _held:
                fd, depth = _held[self._key]
                _held[self._key] = (fd, depth + 1)
                return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not blocking or (deadline is not None and time.monotonic() >= deadline):
                    os.close(fd)
                    return False
                time.sleep(0.05)
        # Who holds it, for the message of a process that finds it taken.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        with _guard:
            _held[self._key] = (fd, 1)
        return True

    def release(self) -> None:
        """Give the lock back (the last release of a reentrant hold unlocks it)."""
        with _guard:
            fd, depth = _held[self._key]
            if depth > 1:
                _held[self._key] = (fd, depth - 1)
                return
            del _held[self._key]
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def holder(self) -> str:
        """The process id written by the holder, or ``?``."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def run_key_lock(output_root: Path, run_key: str) -> FileLock:
    """The lock of one run key under ``output_root`` (not taken yet).

    Raises:
        ValueError: ``run_key`` is not a run key (so no path is built from it).
    """
    if not RUN_KEY_PATTERN.fullmatch(run_key):
        raise ValueError(f"{run_key!r} is not a run key (16 hex digits)")
    return FileLock(Path(output_root) / LOCK_FOLDER / f"{run_key}.lock")
