"""An agent's exit is seen when it happens, not at the watcher's next turn of the clock."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from spu.sandbox.process import ExitWatch, exited_unreaped, run_with_limits
from tests.clocks import clock_waits, record_sleeps


def test_a_run_learns_of_its_process_exit_from_the_kernel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant: ``run_with_limits`` waits for its process on a pidfd, looking at its clock
    and flags between times, and sleeps on no clock: the watcher slept 50 ms a turn, so a
    no-op agent that ran 20 ms was seen up to 50 ms after it ended (57 of a default run's
    83 ms in ``Sandbox.exec``, by py-spy)."""
    slept = record_sleeps(monkeypatch)
    evidence = run_with_limits(["sh", "-c", "sleep 0.2; echo done"], {"PATH": "/usr/bin:/bin"},
                               cwd=tmp_path, stdout=tmp_path / "out", stderr=tmp_path / "err",
                               timeout_s=60, grace_s=1)
    assert evidence.exit_code == 0 and not evidence.timed_out
    assert (tmp_path / "out").read_text() == "done\n"
    assert clock_waits(slept) == [], slept


def test_a_wait_ends_at_the_exit_or_at_its_time() -> None:
    """``ExitWatch.wait`` returns at its time while the process runs, and at once when it
    has exited (reaped or not)."""
    proc = subprocess.Popen(["sh", "-c", "read line"], stdin=subprocess.PIPE)
    try:
        with ExitWatch(proc.pid) as watch:
            assert watch.by_kernel
            assert watch.wait(0.05) is False  # still running: the wait ended at its time
            assert proc.poll() is None
            assert proc.stdin is not None
            proc.stdin.close()  # the shell's read ends, and so does the shell
            assert watch.wait(30) is True  # ended by the exit, not by its time
            assert os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_an_exit_is_seen_and_the_child_left_unreaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """``exited_unreaped`` sees the exit on the pidfd (no 10 ms turns) and leaves the zombie,
    so the process group cannot be reused before it is reaped."""
    slept = record_sleeps(monkeypatch)
    proc = subprocess.Popen(["sh", "-c", "sleep 0.1"])
    assert exited_unreaped(proc.pid, 60)
    assert slept == []
    status = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    assert status is not None and status.si_pid == proc.pid  # still there to reap
    assert proc.wait(timeout=30) == 0
