"""LimitEnforcer on this machine's cgroups: memory, CPU quota, pids, and the RLIMIT_AS fallback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spu.sandbox import RunLimits
from spu.sandbox.limits import CFS_PERIOD_US, CGROUP_ROOT, GIB, LimitEnforcer
from spu.sandbox.process import run_with_limits

V1_WRITABLE = all(os.access(CGROUP_ROOT / c, os.W_OK) for c in ("memory", "cpu", "pids"))
needs_v1 = pytest.mark.skipif(
    not V1_WRITABLE or (CGROUP_ROOT / "cgroup.controllers").exists(),
    reason="needs writable cgroup v1 memory, cpu and pids hierarchies at /sys/fs/cgroup",
)

FORKER = """
import os, sys, time
made = refused = 0
for _ in range(40):
    try:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        made += 1
    except BlockingIOError:
        refused += 1
print(made, refused)
"""


def _run(enforcer: LimitEnforcer, tmp_path: Path, code: str):
    evidence = run_with_limits(["python3", "-c", code], {"PATH": "/usr/bin:/bin"}, cwd=tmp_path,
                               stdout=tmp_path / "out", stderr=tmp_path / "err", timeout_s=60,
                               grace_s=1, enforcer=enforcer)
    return evidence, (tmp_path / "out").read_text()


@needs_v1
def test_v1_files_hold_the_limits(tmp_path) -> None:
    limits = RunLimits(memory_gb=0.25, cpus=1)
    enforcer = LimitEnforcer(limits, "t", pids_limit=64)
    try:
        groups = dict(enforcer._groups)
        assert enforcer.memory_mechanism == "cgroup-v1" and enforcer.cpu_mechanism == "cgroup"
        memory = groups["memory"]
        assert int((memory / "memory.limit_in_bytes").read_text()) == int(0.25 * GIB)
        if (memory / "memory.memsw.limit_in_bytes").exists():
            assert int((memory / "memory.memsw.limit_in_bytes").read_text()) == int(0.25 * GIB)
        # One CPU: a quota of one period per period.
        assert int((groups["cpu"] / "cpu.cfs_quota_us").read_text()) == CFS_PERIOD_US
        assert (groups["pids"] / "pids.max").read_text().strip() == "64"
        assert enforcer.enforced().pids_limit == 64 and enforcer.enforced().cpus == 1
    finally:
        enforcer.cleanup()
    assert not any(p.exists() for p in groups.values())


@needs_v1
def test_pids_limit_refuses_forks_beyond_it(tmp_path) -> None:
    enforcer = LimitEnforcer(RunLimits(memory_gb=0.5, cpus=1), "pids", pids_limit=10)
    try:
        evidence, out = _run(enforcer, tmp_path, FORKER)
    finally:
        enforcer.cleanup()
    made, refused = map(int, out.split())
    assert evidence.exit_code == 0
    assert made <= 9 and refused >= 31, (made, refused)


def test_without_a_writable_cgroup_memory_falls_back_to_rlimit_as(tmp_path) -> None:
    """No cgroup tree (an empty folder stands for one): RLIMIT_AS, said in the warnings."""
    enforcer = LimitEnforcer(RunLimits(memory_gb=0.25, cpus=1), "nocg", cgroup_root=tmp_path)
    assert enforcer.memory_mechanism == "rlimit-as"
    assert any("RLIMIT_AS" in w for w in enforcer.warnings)
    evidence, _ = _run(enforcer, tmp_path,
                       "try:\n    b'1' * (1 << 30)\nexcept MemoryError:\n    print('refused')\n")
    assert (tmp_path / "out").read_text().strip() == "refused"
    assert evidence.exit_code == 0 and not evidence.oom_killed
    enforcer.cleanup()


def test_more_cpus_than_the_machine_has_gives_all_with_a_warning() -> None:
    machine = len(os.sched_getaffinity(0))
    enforcer = LimitEnforcer(RunLimits(cpus=machine + 6), "cpus")
    try:
        assert enforcer.cpu_list == sorted(os.sched_getaffinity(0))
        assert f"asked for {machine + 6} CPUs, this machine gives {machine}: using all" in (
            enforcer.warnings)
    finally:
        enforcer.cleanup()
