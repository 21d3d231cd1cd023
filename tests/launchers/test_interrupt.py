"""Ctrl-C of a sweep (issue 24): one line, exit 130, no traceback, nothing left running.

A real ``python -m spu.main -m`` sweep in a subprocess is sent SIGINT while its second
run's agent sleeps: the first run is recorded, the second cut off (no ``run.json``, so a
relaunch runs it again), and no process of the sweep outlives it. A second SIGINT during
the cleanup stops at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, REPO

SLEEPY = '''#!/usr/bin/env python3
import os, pathlib, time
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "started").write_text(str(os.getpid()))
pathlib.Path({pids!r} + ".tmp").write_text(str(os.getpid()))
os.replace({pids!r} + ".tmp", {pids!r})
time.sleep(300)
'''


def marked_processes(marker: str) -> list[int]:
    """Processes whose environment holds ``marker`` (everything the sweep started)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry))
    return found


def interrupted_sweep(tmp_path: Path, signals: int) -> tuple[subprocess.CompletedProcess[str],
                                                               int, str]:
    pids = tmp_path / "agent.pid"
    sleepy = tmp_path / "sleepy.py"
    sleepy.write_text(SLEEPY.format(pids=str(pids)))
    sleepy.chmod(0o755)
    marker = f"SPU_TEST_SWEEP={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    args = [sys.executable, "-m", "spu.main", "-m", "harness=command",
            f"harness.entrypoint={REPO / 'docs/examples/my_agent.py'},{sleepy}",
            f"task={EXAMPLE_TASK.name}", f"task_root={EXAMPLE_TASK.parent}",
            f"output_root={tmp_path / 'outputs'}",
            "sandbox=subprocess", "sandbox.allow_unisolated=true", "tracking=none",
            f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    # A sweep started with SIGINT ignored keeps it ignored, as a shell's background job
    # does (spu.launch.interrupt.install): start it as a terminal would, whatever an
    # earlier test of this worker left the worker's own disposition at.
    inherited = signal.getsignal(signal.SIGINT)
    if inherited is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    finally:
        if inherited is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    deadline = time.monotonic() + 120
    while not pids.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids.exists(), proc.communicate(timeout=30)
    agent = int(pids.read_text())
    for _ in range(signals):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        masks = _signal_masks(proc.pid)
        proc.kill()
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the sweep did not end within 60 s of {signals} SIGINT(s); its signal "
                    f"masks then: {masks}; worker's SIGINT: {inherited}; stdout tail: "
                    f"{out[-600:]!r}; stderr tail: {err[-600:]!r}")
    return subprocess.CompletedProcess(args, proc.returncode, out, err), agent, marker


def _signal_masks(pid: int) -> str:
    """The Sig* lines of ``/proc/<pid>/status`` and each thread's blocked mask."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        threads = [Path(f"/proc/{pid}/task/{t}/status").read_text() for t in
                   os.listdir(f"/proc/{pid}/task")]
    except OSError as exc:
        return f"unreadable ({exc})"
    lines = [line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt", "State"))]
    blocked = [line for t in threads for line in t.splitlines() if line.startswith("SigBlk")]
    return "; ".join(lines) + f"; threads' SigBlk: {sorted(set(blocked))}"


def assert_nothing_left(agent: int, marker: str) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (marked_processes(marker)
                                           or Path(f"/proc/{agent}").exists()):
        time.sleep(0.1)
    assert not Path(f"/proc/{agent}").exists(), "the cut-off agent is still running"
    assert marked_processes(marker) == [], "a process of the sweep outlived it"


@pytest.mark.slow
def test_ctrl_c_ends_a_sweep_in_one_line(tmp_path: Path) -> None:
    """Invariant: an interrupted sweep says what it recorded and what it cut off, in one
    line, exits 130 with no traceback, and leaves nothing running."""
    result, agent, marker = interrupted_sweep(tmp_path, signals=1)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("interrupted:")]
    assert lines == ["interrupted: 1 run recorded, 1 cut off; run the same command to resume"]
    assert result.stderr.rstrip().endswith(lines[0])
    assert_nothing_left(agent, marker)
    records = sorted((tmp_path / "outputs" / "runs").glob("*/run.json"))
    started = list((tmp_path / "outputs" / "runs").glob("*/output/started"))
    assert len(records) == 1 and len(started) == 1
    assert not (started[0].parent.parent / "run.json").exists()


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    """Invariant: a second Ctrl-C during the cleanup kills what is left and exits 130; one
    that comes after the cleanup (it can take less than the 50 ms between the two) changes
    nothing: still 130, never the default SIGINT's death (Python's finalization puts that
    back)."""
    result, agent, marker = interrupted_sweep(tmp_path, signals=2)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    line = "interrupted: 1 run recorded, 1 cut off; run the same command to resume"
    assert result.stderr.rstrip().splitlines()[-1] in (line + " (stopped at once)", line)
    assert_nothing_left(agent, marker)
