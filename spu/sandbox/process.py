"""Running one agent process on the host: wall-clock limit, graceful stop, evidence.

The agent's stdout and stderr can be capped (:class:`CappedLog`): the head and the tail
are kept, with a note in between saying how much was dropped.

Nothing runs in a child between fork and exec (no ``preexec_fn``: a run always has
threads). A child that must be in its cgroups before its command runs is started held
(:func:`start_placed`) and placed from here; one that must die with this process is
started through :func:`dying_with_parent`.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from spu.sandbox.limits import LimitEnforcer
from spu.schema import ProcessEvidence

log = logging.getLogger(__name__)

POLL_S = 0.05
WATCH_EVERY_S = 0.5
"""How often ``run_with_limits`` asks its ``over_limit`` watcher (a disk check)."""
CHUNK = 1 << 16


class CappedLog:
    r"""A log file that keeps the first and the last ``cap_bytes / 2`` bytes written to it.

    What falls in between is dropped and replaced, when the log is closed, by one line
    saying how many bytes were dropped. Memory use is bounded by half the cap.

    Examples:
        >>> import io
        >>> sink = io.BytesIO()
        >>> capped = CappedLog(sink, cap_bytes=8)
        >>> capped.write(b"0123456789abcdef")
        >>> capped.close()
        8
        >>> sink.getvalue()
        b'0123\n[spu: 8 bytes of this log dropped here (log cap 8 bytes)]\ncdef'
    """

    def __init__(self, sink: BinaryIO, cap_bytes: int) -> None:
        self.sink = sink
        self.cap = max(2, int(cap_bytes))
        self.head_left = self.cap // 2
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_size = 0
        self.dropped = 0

    def write(self, data: bytes) -> None:
        """Append ``data``: to the head while it has room, else to the tail."""
        if self.head_left > 0:
            part = data[: self.head_left]
            self.sink.write(part)
            self.head_left -= len(part)
            data = data[len(part):]
        if not data:
            return
        self.tail.append(data)
        self.tail_size += len(data)
        keep = self.cap - self.cap // 2
        while self.tail_size - len(self.tail[0]) >= keep:
            self.dropped += len(self.tail[0])
            self.tail_size -= len(self.tail[0])
            self.tail.popleft()
        if self.tail_size > keep:
            cut = self.tail_size - keep
            self.tail[0] = self.tail[0][cut:]
            self.tail_size -= cut
            self.dropped += cut

    def close(self) -> int:
        """Write the note and the tail; returns the bytes dropped."""
        if self.dropped:
            self.sink.write(f"\n[spu: {self.dropped} bytes of this log dropped here "
                            f"(log cap {self.cap} bytes)]\n".encode())
        for part in self.tail:
            self.sink.write(part)
        self.tail.clear()
        self.sink.flush()
        return self.dropped


def drain(source: IO[bytes], target: CappedLog) -> threading.Thread:
    """A started thread copying ``source`` (a pipe) into ``target`` until end of file."""

    def _copy() -> None:
        try:
            while chunk := os.read(source.fileno(), CHUNK):
                target.write(chunk)
        except (OSError, ValueError):
            pass

    thread = threading.Thread(target=_copy, daemon=True)
    thread.start()
    return thread


def descendants(pid: int) -> list[int]:
    """All descendant process ids of ``pid`` (none when it is gone), by ``psutil``."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def exited_unreaped(pid: int, timeout_s: float) -> bool:
    """Whether child ``pid`` exits within ``timeout_s``, leaving it unreaped (a zombie).

    While it is a zombie its process id (and group id) cannot be reused, so signals to
    its group sent before reaping it reach only what is left of that group.
    """
    deadline = time.monotonic() + timeout_s
    with ExitWatch(pid) as exit_watch:
        while True:
            try:
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            exit_watch.wait(left if exit_watch.by_kernel else min(left, 0.01))


class ExitWatch:
    """Waits that end when a child process exits, on the kernel's word (a pidfd).

    ``wait(s)`` returns after ``s`` seconds or as soon as the process has exited, whichever
    comes first, so a watcher that must also look at a clock or a flag every ``s`` seconds
    learns of the exit at once instead of at its next turn (a no-op agent ran 20 ms and was
    seen 50 ms later). Where the kernel has no pidfd (before Linux 5.3), ``wait`` sleeps.
    """

    def __init__(self, pid: int) -> None:
        self._poll = select.poll()  # not select(): a driver's descriptors pass 1,024
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfd here, or the process is reaped
            self._fd = None
        else:
            self._poll.register(self._fd, select.POLLIN)

    @property
    def by_kernel(self) -> bool:
        """Whether the exit ends a wait (a pidfd), or a wait only sleeps."""
        return self._fd is not None

    def __enter__(self) -> ExitWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def wait(self, seconds: float) -> bool:
        """Wait ``seconds``, or less: True when the kernel says the process has exited.

        False at the end of the time, and always without a pidfd (a plain sleep).
        """
        if self._fd is None:
            time.sleep(seconds)
            return False
        return bool(self._poll.poll(max(0, round(seconds * 1000))))


def _signal_tree(pid: int, sig: int, spare_root: bool = False) -> None:
    for target in [*descendants(pid), *([] if spare_root else [pid])]:
        try:
            os.kill(target, sig)
        except ProcessLookupError:
            pass


def signal_of_exit(exit_code: int | None) -> int | None:
    """The signal behind a wrapper's exit status (bubblewrap and docker-init exit 128+n).

    Examples:
        >>> signal_of_exit(137)
        9
        >>> signal_of_exit(1) is None
        True
    """
    if exit_code is not None and 128 < exit_code < 128 + signal.NSIG:
        return exit_code - 128
    return None


def wrapper_error(stderr: Path, prefixes: tuple[str, ...]) -> str | None:
    """The error of a wrapper (bubblewrap, setpriv, docker-init) that failed to start the agent.

    A wrapper fails before the agent runs, so its message is then all of stderr: every
    line starts with one of ``prefixes``. Anything else is the agent's own output.
    Read only once the wrapper's own handshake says the agent never ran
    (:func:`spu.sandbox.local.started_evidence`): an agent can print such lines itself.
    """
    try:
        with open(stderr, "rb") as f:
            text = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and all(line.startswith(prefixes) for line in lines):
        return "; ".join(lines)
    return None


HOLD_SCRIPT = (
    "import os, signal, sys\n"
    "for name in ('SIGPIPE', 'SIGXFZ', 'SIGXFSZ'):  # as Popen leaves them (restore_signals)\n"
    "    if hasattr(signal, name):\n"
    "        signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
    "report = os.dup(0)  # not inheritable: a successful exec closes it\n"
    "line = b''\n"
    "while not line.endswith(b'\\n'):\n"
    "    part = os.read(0, 16)\n"
    "    if not part:\n"
    "        os._exit(125)  # the parent ended or gave up: the command never runs\n"
    "    line += part\n"
    "null = os.open(os.devnull, os.O_RDWR)\n"
    "os.dup2(null, 0)\n"
    "os.close(null)\n"
    "env = dict(os.environ)\n"
    "env.pop('LC_CTYPE', None)  # what the interpreter's locale coercion may have set\n"
    "if sys.argv[1]:\n"
    "    env['LC_CTYPE'] = sys.argv[1][1:]\n"
    "try:\n"
    "    os.execvpe(sys.argv[2], sys.argv[2:], env)\n"
    "except OSError as exc:\n"
    "    os.write(report, f'{exc.errno} {exc.strerror}'.encode())\n"
    "    os._exit(127)\n"
)
"""The wrapper a held child runs (this interpreter, isolated): it waits for a line on its
stdin (a socket to the parent), then ``exec``s the command with stdin on ``/dev/null``,
its environment exactly as given and its process id unchanged; an ``exec`` that fails
is reported on the socket, as :class:`subprocess.Popen` reports one. The parent puts it
in its cgroups and sets its limits meanwhile: nothing runs between fork and exec (no
``preexec_fn``, which is unsafe in a process with threads). An end of file without the
line (the parent died, or gave up) exits 125 before the command runs."""
HOLD_TIMEOUT_S = 60.0
"""How long a released child may take to reach its command's ``exec``."""


def start_placed(argv: Sequence[str], env: Mapping[str, str], place: Callable[[int], None],
                 *, cwd: Path | None = None, **popen: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` with ``place(pid)`` done by this process before the command runs.

    The child is held before its ``exec`` (:data:`HOLD_SCRIPT`). ``place`` moves it into
    its cgroups and sets its limits (what a ``preexec_fn`` did in the child); when it
    raises, the child is killed unstarted and the exception passes on. ``popen`` goes to
    :class:`subprocess.Popen` (``stdout``, ``stderr``, ``pass_fds``, ``text``, ...);
    the command's stdin is ``/dev/null``.

    Raises:
        OSError: The command could not be run (as from :class:`subprocess.Popen`).
    """
    ours, theirs = socket.socketpair()
    lc_ctype = "" if "LC_CTYPE" not in env else "=" + env["LC_CTYPE"]
    try:
        with theirs:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", HOLD_SCRIPT, lc_ctype, *argv],
                env=dict(env), cwd=cwd, stdin=theirs.fileno(), **popen)
        with ours:
            try:
                place(proc.pid)
                ours.settimeout(HOLD_TIMEOUT_S)
                ours.sendall(b"go\n")
                failed = _read_to_end(ours)
            except BaseException:
                _discard(proc)
                raise
    except OSError:
        ours.close()
        raise
    if failed:
        _discard(proc)
        number, _, why = failed.decode(errors="replace").partition(" ")
        raise OSError(int(number) if number.isdigit() else errno.EIO, why, argv[0])
    return proc


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def _discard(proc: subprocess.Popen[Any]) -> None:
    """Kill and reap a child that never ran its command; close its pipes."""
    proc.kill()
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


DIE_WITH_PARENT_SCRIPT = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)  # the parent ended before the request\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def dying_with_parent(argv: Sequence[str]) -> list[str]:
    """``argv`` behind a small wrapper that asks Linux for SIGTERM when this process ends.

    The wrapper is a program of its own (this interpreter), run after the exec: nothing
    runs between fork and exec, as a ``preexec_fn`` would. The signal is kept across its
    ``exec`` of ``argv``. (Linux sends it when the *thread* that started the child ends.)
    """
    return [sys.executable, "-I", "-c", DIE_WITH_PARENT_SCRIPT, str(os.getpid()), *argv]


@dataclass
class _Watch:
    """What the wait for one process saw."""

    status: int = 0
    rusage: Any = None
    timed_out: bool = False
    disk_full: bool = False


def _watch(proc: subprocess.Popen[Any], start: float, timeout_s: float | None, grace_s: float,
           wrapped: bool, over_limit: Callable[[], bool] | None,
           stop: threading.Event | None) -> _Watch:
    """Wait for ``proc``; stop its tree gracefully at the limit, the disk watch or ``stop``.

    The clock and the flags are looked at every :data:`POLL_S`; the process's exit ends the
    wait at once (:class:`ExitWatch`).
    """
    seen = _Watch()
    deadline = None if timeout_s is None else start + timeout_s
    next_watch = start + WATCH_EVERY_S
    kill_at: float | None = None
    stopping = False
    with ExitWatch(proc.pid) as exit_watch:
        while True:
            wpid, seen.status, seen.rusage = os.wait4(proc.pid, os.WNOHANG)
            if wpid != 0:
                return seen
            now = time.monotonic()
            if not stopping:
                if deadline is not None and now >= deadline:
                    seen.timed_out = stopping = True
                elif stop is not None and stop.is_set():
                    stopping = True  # asked to stop (a rejected API key): not a timeout
                elif over_limit is not None and now >= next_watch:
                    next_watch = now + WATCH_EVERY_S
                    seen.disk_full = stopping = over_limit()
                if stopping:
                    # Not to a wrapper: bubblewrap dying would SIGKILL the agent at once.
                    _signal_tree(proc.pid, signal.SIGTERM, spare_root=wrapped)
                    kill_at = now + grace_s
            elif kill_at is not None and now >= kill_at:
                _signal_tree(proc.pid, signal.SIGKILL)
                kill_at = None
            exit_watch.wait(POLL_S)


def _close_logs(proc: subprocess.Popen[Any], drains: Sequence[threading.Thread],
                logs: Sequence[CappedLog], grace_s: float) -> int:
    """Finish the capped logs once the process ended; returns the bytes they dropped."""
    for thread in drains:
        # A daemon the agent left may hold the pipe open: don't wait for it forever.
        thread.join(timeout=max(1.0, grace_s))
    dropped = 0
    for capped_log in logs:
        try:
            dropped += capped_log.close()
        except OSError as exc:  # the host's disk is full: the evidence still counts
            dropped += capped_log.dropped
            log.error("agent log not completed: %s", exc)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return dropped


def _evidence(seen: _Watch, enforcer: LimitEnforcer | None, wrapped: bool, **fields: Any,
              ) -> ProcessEvidence:
    """The evidence of an ended process: its exit or signal, memory peak and OOM kill."""
    exit_code = signal_number = None
    if os.WIFSIGNALED(seen.status):
        signal_number = os.WTERMSIG(seen.status)
    else:
        exit_code = os.WEXITSTATUS(seen.status)
        if wrapped:
            signal_number = signal_of_exit(exit_code)
    peak = enforcer.peak_memory() if enforcer else None
    if peak is None:
        peak = seen.rusage.ru_maxrss * 1024
    oom = enforcer.oom_killed(sigkilled=signal_number == signal.SIGKILL) if enforcer else False
    return ProcessEvidence(exit_code=exit_code, signal=signal_number, timed_out=seen.timed_out,
                           oom_killed=oom, peak_memory_bytes=peak, disk_full=seen.disk_full,
                           **fields)


def run_with_limits(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None,
    stdout: Path,
    stderr: Path,
    timeout_s: float | None,
    grace_s: float = 10.0,
    enforcer: LimitEnforcer | None = None,
    wrapped: bool = False,
    log_cap_bytes: int | None = None,
    pass_fds: Sequence[int] = (),
    on_start: Callable[[int], None] | None = None,
    over_limit: Callable[[], bool] | None = None,
    stop: threading.Event | None = None,
) -> ProcessEvidence:
    """Run ``argv`` to completion or to the wall-clock limit, then stop it gracefully.

    At the limit every process of the tree gets SIGTERM, and SIGKILL after ``grace_s``.
    When the main process has ended, whatever it left in the run's cgroups is killed.

    Args:
        argv: The command.
        env: Its whole environment.
        cwd: Its working folder on the host (None: this process's).
        stdout: File that receives its standard output.
        stderr: File that receives its standard error.
        timeout_s: Wall-clock limit in seconds (None: none).
        grace_s: Seconds between SIGTERM and SIGKILL.
        enforcer: The run's limits, which this process puts the child under while it
            is held before its command (:func:`start_placed`).
        wrapped: ``argv`` is a wrapper (bubblewrap) that reports a signal as 128+n; the
            graceful stop goes to the processes under it, not to the wrapper.
        log_cap_bytes: Cap on each of stdout and stderr (None: uncapped).
        pass_fds: File descriptors the process inherits.
        on_start: Called with the process id once it runs (e.g. to give a sandbox its
            network); an exception kills the process and becomes ``error``.
        over_limit: Asked every half second; True stops the run like the time limit
            and sets ``disk_full`` (the disk limit).
        stop: set from another thread to stop the process now, as at the limit
            (without ``timed_out``).

    Returns:
        The exit code or signal, whether the limit fired, whether the memory limit
        killed a process, the peak memory (the cgroup's, else ``wait4``'s resident
        peak) and the duration. A process that cannot start gives ``error``.
    """
    start = time.monotonic()
    stdout.parent.mkdir(parents=True, exist_ok=True)
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        capped = log_cap_bytes is not None
        try:
            proc = start_placed(
                argv, env, enforcer.place if enforcer else _nowhere, cwd=cwd,
                stdout=subprocess.PIPE if capped else out,
                stderr=subprocess.PIPE if capped else err,
                start_new_session=True, pass_fds=tuple(pass_fds),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return ProcessEvidence(error=f"could not start {argv[0]!r}: {exc}")
        logs, drains = _drain_capped(proc, out, err, log_cap_bytes) if capped else ([], [])
        start_error = _call_on_start(proc, on_start)
        seen = _watch(proc, start, timeout_s, grace_s, wrapped, over_limit, stop)
        proc.returncode = os.waitstatus_to_exitcode(seen.status)
        if over_limit is not None and not seen.disk_full and start_error is None:
            seen.disk_full = over_limit()  # an agent that filled the disk and exited at once
        if enforcer is not None:
            enforcer.kill_leftovers()
        dropped = _close_logs(proc, drains, logs, grace_s)
    return _evidence(seen, enforcer, wrapped, duration_s=time.monotonic() - start,
                     log_dropped_bytes=dropped, error=start_error)


def _drain_capped(proc: subprocess.Popen[Any], out: BinaryIO, err: BinaryIO,
                  log_cap_bytes: int | None) -> tuple[list[CappedLog], list[threading.Thread]]:
    """The process's capped stdout and stderr, and the threads that drain its pipes."""
    assert proc.stdout is not None and proc.stderr is not None
    logs = [CappedLog(out, log_cap_bytes or 0), CappedLog(err, log_cap_bytes or 0)]
    drains = [drain(proc.stdout, logs[0]), drain(proc.stderr, logs[1])]
    return logs, drains


def _call_on_start(proc: subprocess.Popen[Any],
                   on_start: Callable[[int], None] | None) -> str | None:
    """Call ``on_start`` with the process id; its failure kills the process and is returned."""
    start_error = None
    if on_start is not None:
        try:
            on_start(proc.pid)
        except Exception as exc:  # noqa: BLE001 - any failure to start is the run's error
            start_error = str(exc)
            _signal_tree(proc.pid, signal.SIGKILL)
    return start_error


def _nowhere(_pid: int) -> None:
    """No placement: the child runs under this process's own limits."""


def die_with_parent() -> None:
    """Ask Linux for SIGTERM when this process's parent ends; exit if it has ended already.

    For a host service's child (the egress proxy, a run's model gateway): it must not
    outlive the process that started it.
    """
    if sys.platform != "linux":
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass
    if os.getppid() == 1:  # the parent died before the request
        os._exit(0)
