"""Running one agent process on the host: wall-clock limit, graceful stop, evidence."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from spu.schema import ProcessEvidence


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


def _signal_tree(pid: int, sig: int) -> None:
    for target in [*descendants(pid), pid]:
        try:
            os.kill(target, sig)
        except ProcessLookupError:
            pass


def run_with_limits(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None,
    stdout: Path,
    stderr: Path,
    timeout_s: float | None,
    grace_s: float = 10.0,
    preexec_fn: Callable[[], None] | None = None,
    oom_check: Callable[[], bool] | None = None,
    peak_memory: Callable[[], int | None] | None = None,
) -> ProcessEvidence:
    """Run ``argv`` to completion or to the wall-clock limit, then stop it gracefully.

    At the limit every process of the tree gets SIGTERM, and SIGKILL after ``grace_s``.
    Returns the exit code or signal, whether the limit fired, the peak resident memory
    of the tree (from ``wait4``'s rusage unless ``peak_memory`` knows better) and the
    duration. A process that cannot start gives an evidence with ``error`` set.
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
                preexec_fn=preexec_fn,
            )
        except OSError as exc:
            return ProcessEvidence(error=f"could not start {argv[0]!r}: {exc}")
        timed_out = False
        deadline = None if timeout_s is None else start + timeout_s
        status = rusage = None
        while True:
            wpid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if wpid != 0:
                break
            if deadline is not None and time.monotonic() >= deadline and not timed_out:
                timed_out = True
                _signal_tree(proc.pid, signal.SIGTERM)
                deadline = time.monotonic() + grace_s
                continue
            if timed_out and deadline is not None and time.monotonic() >= deadline:
                _signal_tree(proc.pid, signal.SIGKILL)
                deadline = None
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
    exit_code = signal_number = None
    if os.WIFSIGNALED(status):
        signal_number = os.WTERMSIG(status)
    else:
        exit_code = os.WEXITSTATUS(status)
    peak = peak_memory() if peak_memory else None
    if peak is None and rusage is not None:
        peak = rusage.ru_maxrss * 1024
    oom = bool(oom_check()) if oom_check else False
    return ProcessEvidence(
        exit_code=exit_code,
        signal=signal_number,
        timed_out=timed_out,
        oom_killed=oom,
        peak_memory_bytes=peak,
        duration_s=time.monotonic() - start,
    )
