"""The sandbox network's own guarantees: the filter fails closed, a killed run leaves nothing.

Every address targeted is this machine's or in a namespace the test creates.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spu.sandbox.disk import release_stale_everywhere
from spu.sandbox.network import (
    CGROUP_PARENT,
    _ensure_fail_closed_rule,
    cgroup2_root,
    prune_stale_networks,
)
from spu.sandbox.process import start_placed
from tests.conftest import REPO
from tests.processes import running

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or cgroup2_root() is None,
                       reason="the network filter needs root and a cgroup v2 hierarchy"),
]

CONNECT = ("import socket, sys\n"
           "try:\n"
           "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()\n"
           "    print('reached')\n"
           "except OSError as exc:\n"
           "    print('refused', exc)\n")


def _connect_from(cgroup: Path | None, host: str, port: int) -> str:
    def _join(pid: int) -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(pid))

    proc = start_placed([sys.executable, "-c", CONNECT, host, str(port)], os.environ, _join,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=30)
    return str(out).strip()


def test_a_pasta_whose_chain_is_missing_reaches_nothing(internet_host) -> None:
    """Invariant: a socket in the framework's pasta cgroup without its run's chain is rejected.

    The internet host answers a process outside that cgroup (the control) and not one
    inside it: a filter half set up or half removed fails closed.
    """
    _ensure_fail_closed_rule()
    root = cgroup2_root()
    assert root is not None
    (root / CGROUP_PARENT).mkdir(exist_ok=True)
    orphan = root / CGROUP_PARENT / f"test-orphan-{os.getpid()}"
    orphan.mkdir()
    try:
        assert _connect_from(None, internet_host.address, internet_host.port) == "reached"
        assert _connect_from(orphan, internet_host.address, internet_host.port).startswith(
            "refused")
    finally:
        orphan.rmdir()


DRIVER = """
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from spu.sandbox import RunLimits, SandboxRequest, get_sandbox
run = Path(sys.argv[1])
(run / "task").mkdir(parents=True)
box = get_sandbox("local")()
box.prepare(SandboxRequest(task_dir=run / "task", run_dir=run,
                           limits=RunLimits(time_s=600, memory_gb=0.5, cpus=1, disk_gb=0.05)))
box.exec(["sh", "-c", "echo kept > /output/before-the-kill.txt; sleep 600"],
         {{"PATH": "/usr/bin:/bin"}}, stdout=run / "logs" / "o", stderr=run / "logs" / "e")
"""


def _pids_in(cgroup: Path) -> list[int]:
    try:
        return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def test_a_driver_killed_mid_run_leaves_nothing_the_next_run_keeps(tmp_path) -> None:
    """Invariant: after ``kill -9`` of the framework, the next run removes pasta, its filter
    chain, its namespace name and the run's disk, and the agent's files come back."""
    run = tmp_path / "run"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=str(REPO)))
    driver = subprocess.Popen([sys.executable, str(script), str(run)], start_new_session=True)
    try:
        marker = run / "output" / "before-the-kill.txt"
        for _ in range(600):
            if marker.exists() or driver.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.exists(), "the agent started"
        owner = str(driver.pid)
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    root = cgroup2_root()
    assert root is not None
    groups = [g for g in (root / CGROUP_PARENT).iterdir() if g.name.startswith(owner + "-")]
    assert len(groups) == 1 and _pids_in(groups[0]), "pasta outlived its driver"
    ident = groups[0].name
    chain = "SPU-" + ident.split("-", 1)[1]
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    assert chain in rules
    assert f"spu-{ident}" in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                            text=True).stdout
    assert str(run) in Path("/proc/self/mountinfo").read_text()
    pasta = _pids_in(groups[0])

    assert prune_stale_networks() >= 1
    assert release_stale_everywhere() >= 1

    assert not groups[0].exists()
    assert chain not in subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    assert f"spu-{ident}" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                text=True).stdout
    for _ in range(100):  # killed; its new parent (PID 1) reaps it in its own time
        if not any(running(pid) for pid in pasta):
            break
        time.sleep(0.05)
    assert not any(running(pid) for pid in pasta)
    assert str(run) not in Path("/proc/self/mountinfo").read_text()
    assert (run / "output" / "before-the-kill.txt").read_text() == "kept\n"
    assert not list(run.glob(".spu-disk*"))


def _spu_chains() -> set[str]:
    listing = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    return {line.split()[1] for line in listing.splitlines()
            if line.startswith("-N SPU-") and len(line.split()) == 2}


def test_filters_set_up_and_removed_in_parallel_leave_no_chain() -> None:
    """Runs end at the same time: each removes its own jump and chain, never another's.

    (Deleting jumps by their position in a listing, runs that ended together deleted
    each other's jumps and left their own chains: hundreds after a day of sweeps.)
    """
    from concurrent.futures import ThreadPoolExecutor

    from spu.sandbox.network import UserNetwork

    def one(port: int) -> str:
        net = UserNetwork(host_ports=[port])
        net._set_up_filter()
        chain = net._chain
        assert chain is not None and chain in _spu_chains()
        net.close()
        return chain

    with ThreadPoolExecutor(max_workers=8) as pool:
        chains = list(pool.map(one, range(40000, 40032)))
    assert len(set(chains)) == 32
    # Only this test's own chains are looked at: other tests' runs may be up meanwhile.
    assert not set(chains) & _spu_chains()


def test_a_chain_left_without_its_cgroup_is_pruned() -> None:
    """A chain whose cgroup went first (its run killed between the two) is removed too."""
    import uuid

    from spu.sandbox.network import UserNetwork

    gone = subprocess.Popen(["true"])
    gone.wait()
    net = UserNetwork(host_ports=[40100])
    net.ident = f"{gone.pid}-{uuid.uuid4().hex[:10]}"  # made by a process that is gone
    net._set_up_filter()
    chain, cgroup = net._chain, net._cgroup
    assert chain is not None and cgroup is not None
    net._chain = None  # the process died here: the chain stays, the cgroup goes
    net.close()
    assert not cgroup.exists() and chain in _spu_chains()
    assert prune_stale_networks() >= 1
    assert chain not in _spu_chains()
