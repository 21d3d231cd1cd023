"""A run's cgroups are emptied and removed on the kernel's word, not after fixed sleeps.

Each test makes its own cgroup (v2 under the machine's cgroup2 mount for the network's,
the run's own through :class:`LimitEnforcer`) and puts processes of its own in it.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spu.sandbox import RunLimits
from spu.sandbox.limits import CGROUP_ROOT, LimitEnforcer
from spu.sandbox.network import _kill_cgroup, cgroup2_root
from tests.clocks import record_sleeps

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are root's to make here")

FIXED_SLEEP_S = 0.02
"""A sleep this long or longer is a fixed wait (the old teardown slept 50 ms at a time);
the millisecond steps of a v1 cgroup's look end at 16 ms."""

FORKS = ("import os, time\n"
         "for _ in range(3):\n"
         "    if os.fork() == 0:\n"
         "        time.sleep(600)\n"
         "        os._exit(0)\n"
         "print('ready', flush=True)\n"
         "time.sleep(600)\n")


def start_in(folder: Path) -> subprocess.Popen[str]:
    """A process tree (a parent and its forks) in the cgroup ``folder``, started."""
    proc = subprocess.Popen(["python3", "-c", FORKS], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: (folder / "cgroup.procs").write_text(
                                str(os.getpid())))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def v2_cgroup() -> Iterator[Path]:
    root = cgroup2_root()
    if root is None or not os.access(root, os.W_OK):
        pytest.skip("no writable cgroup v2 hierarchy")
    folder = root / f"spu-test-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    yield folder
    if folder.exists():
        _kill_cgroup(folder)
        folder.rmdir()


def test_a_network_cgroup_is_emptied_without_a_fixed_sleep(v2_cgroup: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant: killing a pasta's cgroup returns once the kernel says it is empty, every
    process of it gone, with no sleep on a clock (it slept 50 ms after each kill: 73 of the
    106 samples of a network's close)."""
    proc = start_in(v2_cgroup)
    slept = record_sleeps(monkeypatch)
    _kill_cgroup(v2_cgroup)
    monkeypatch.undo()
    assert (v2_cgroup / "cgroup.procs").read_text().split() == []
    assert "populated 0" in (v2_cgroup / "cgroup.events").read_text()
    assert [s for s in slept if s >= FIXED_SLEEP_S] == [], slept
    proc.wait(timeout=10)


def test_a_runs_cgroups_are_removed_without_a_fixed_sleep(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant: a run's cgroups with processes still in them (an agent's daemons) are
    emptied and removed by ``cleanup``, without a sleep of 20 ms or more (it slept 50 ms
    whenever a killed process had not left yet)."""
    enforcer = LimitEnforcer(RunLimits(memory_gb=0.5, cpus=1), "teardown", pids_limit=64)
    paths = enforcer.cgroup_paths
    if not paths:
        pytest.skip(f"no writable cgroup here ({enforcer.warnings})")
    proc = start_in(paths[0])
    for path in paths[1:]:  # v1: the same processes in each controller's hierarchy
        for pid in (paths[0] / "cgroup.procs").read_text().split():
            (path / "cgroup.procs").write_text(pid)
    slept = record_sleeps(monkeypatch)
    enforcer.cleanup()
    monkeypatch.undo()
    assert not any(p.exists() for p in paths), paths
    assert [s for s in slept if s >= FIXED_SLEEP_S] == [], slept
    proc.wait(timeout=10)


def test_cleanup_of_an_empty_run_cgroup_removes_it_at_once(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The common case (the agent's processes are gone): nothing is slept at all."""
    enforcer = LimitEnforcer(RunLimits(memory_gb=0.5, cpus=1), "empty")
    paths = enforcer.cgroup_paths
    if not paths:
        pytest.skip(f"no writable cgroup here ({enforcer.warnings}; root {CGROUP_ROOT})")
    slept = record_sleeps(monkeypatch)
    enforcer.cleanup()
    monkeypatch.undo()
    assert not any(p.exists() for p in paths) and slept == []
