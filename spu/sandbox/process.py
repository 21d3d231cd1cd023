"""Running one agent process on the host: wall-clock limit, graceful stop, evidence."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from spu.sandbox.limits import LimitEnforcer
from spu.schema import ProcessEvidence

POLL_S = 0.05


def descendants(pid: int) -> list[int]:
    """All descendant process ids of ``pid``, read from ``/proc`` (deepest last)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                stat = f.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the command name, which is in parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


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
        enforcer: The run's limits, joined between fork and exec.
        wrapped: ``argv`` is a wrapper (bubblewrap) that reports a signal as 128+n; the
            graceful stop goes to the processes under it, not to the wrapper.

    Returns:
        The exit code or signal, whether the limit fired, whether the memory limit
        killed a process, the peak memory (the cgroup's, else ``wait4``'s resident
        peak) and the duration. A process that cannot start gives ``error``.
    """
    start = time.monotonic()
    stdout.parent.mkdir(parents=True, exist_ok=True)
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        try:
            proc = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=enforcer.preexec if enforcer else None,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return ProcessEvidence(error=f"could not start {argv[0]!r}: {exc}")
        timed_out = False
        deadline = None if timeout_s is None else start + timeout_s
        while True:
            wpid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if wpid != 0:
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                if not timed_out:
                    timed_out = True
                    # Not to a wrapper: bubblewrap dying would SIGKILL the agent at once.
                    _signal_tree(proc.pid, signal.SIGTERM, spare_root=wrapped)
                    deadline = now + grace_s
                else:
                    _signal_tree(proc.pid, signal.SIGKILL)
                    deadline = None
            time.sleep(POLL_S)
        proc.returncode = os.waitstatus_to_exitcode(status)
    duration = time.monotonic() - start
    if enforcer is not None:
        enforcer.kill_leftovers()
    exit_code = signal_number = None
    if os.WIFSIGNALED(status):
        signal_number = os.WTERMSIG(status)
    else:
        exit_code = os.WEXITSTATUS(status)
        if wrapped:
            signal_number = signal_of_exit(exit_code)
    peak = enforcer.peak_memory() if enforcer else None
    if peak is None:
        peak = rusage.ru_maxrss * 1024
    oom = enforcer.oom_killed(sigkilled=signal_number == signal.SIGKILL) if enforcer else False
    return ProcessEvidence(
        exit_code=exit_code,
        signal=signal_number,
        timed_out=timed_out,
        oom_killed=oom,
        peak_memory_bytes=peak,
        duration_s=duration,
    )
