"""Agents started while other threads of the framework fork and exec all the time.

A run always has threads (GPU sampler, monitor, log drains, tools service). The child of
a run is placed in its cgroups and given its CPUs by the parent while it waits on a pipe
(:func:`spu.sandbox.process.start_placed`), never by code between fork and exec; so a
start neither hangs on a lock another thread held at the fork nor lands a process in the
wrong run's cgroup. Every wait here is bounded: a hang fails the test, it never blocks it.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from spu.sandbox import RunLimits
from spu.schema import ProcessEvidence
from tests.processes import running
from tests.sandbox.conftest import Opened

RUNS = 3
CHURNERS = 3
BOUND_S = 120.0
"""How long anything here may take before it counts as hung."""
AGENT = (
    "import os, sys, time\n"
    "open(sys.argv[2], 'w').close()\n"
    "end = time.monotonic() + 90\n"
    "while not os.path.exists(sys.argv[1]) and time.monotonic() < end:\n"
    "    time.sleep(0.05)\n"
)
"""Says it runs (a file in its output), then waits for the test's ``go`` file."""


def _churn(stop: threading.Event, counts: list[int]) -> None:
    """Fork and exec continuously until ``stop``: the traffic of a framework's threads."""
    while not stop.is_set():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        subprocess.run(["true"], check=False)
        counts.append(1)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _with_token(token: str) -> set[int]:
    """The processes whose command line carries ``token`` (one run's agent and wrappers)."""
    return {int(p) for p in os.listdir("/proc")
            if p.isdigit() and token.encode() in _cmdline(int(p))}


def _wait_for(path: Path) -> bool:
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("backend", [pytest.param("local", marks=pytest.mark.slow),  # bwrap
                                     "subprocess"])
def test_agents_started_while_threads_fork_are_each_in_their_own_cgroup(
        backend, open_sandbox) -> None:
    """Invariant: with other threads forking and exec-ing, every agent starts (no hang) and
    every process of a run is in that run's cgroups, and only those, on its CPUs."""
    limits = RunLimits(time_s=100, memory_gb=0.5, cpus=1, gpus=0, grace_s=1, disk_gb=0)
    boxes: list[Opened] = [open_sandbox(backend, limits, run=f"run-{i}", network=False)
                           for i in range(RUNS)]
    if not boxes[0].sandbox.enforcer.cgroup_paths:
        pytest.skip("no writable cgroup here: placement cannot be checked")
    tokens = [f"spu-thread-probe-{uuid.uuid4().hex}" for _ in boxes]
    stop = threading.Event()
    forks: list[int] = []
    churners = [threading.Thread(target=_churn, args=(stop, forks), daemon=True)
                for _ in range(CHURNERS)]
    results: dict[int, ProcessEvidence] = {}

    def _run(i: int) -> None:
        box = boxes[i]
        argv = ["python3", "-c", AGENT, f"{box.paths.workspace}/go",
                f"{box.paths.output}/ready", tokens[i]]
        results[i] = box.sandbox.exec(argv, {"PATH": "/usr/bin:/bin"},
                                      stdout=box.run_dir / "logs" / "probe.out",
                                      stderr=box.run_dir / "logs" / "probe.err")

    starters = [threading.Thread(target=_run, args=(i,), daemon=True) for i in range(RUNS)]
    try:
        for thread in [*churners, *starters]:
            thread.start()
        started = [_wait_for(box.sandbox.collect() / "ready") for box in boxes]
        assert all(started), f"agents that never ran (a start hung): {started}"
        for i, box in enumerate(boxes):
            enforcer = box.sandbox.enforcer
            in_cgroup = set(enforcer.leftover_pids())
            assert in_cgroup, f"run {i}: its cgroup holds no process"
            assert in_cgroup == _with_token(tokens[i]), (
                f"run {i}: its cgroups hold exactly its own processes")
            for pid in in_cgroup:
                assert os.sched_getaffinity(pid) == set(enforcer.cpu_list), f"run {i}: CPUs"
    finally:
        for box in boxes:
            (box.sandbox.layout_roots().workspace / "go").touch()
        for thread in starters:
            thread.join(timeout=BOUND_S)
        stop.set()
        for thread in churners:
            thread.join(timeout=BOUND_S)
    assert not any(t.is_alive() for t in [*starters, *churners]), "a start or a fork hung"
    assert forks, "the other threads forked while the agents started"
    for i in range(RUNS):
        evidence = results[i]
        assert evidence.error is None and evidence.exit_code == 0, (i, evidence)


def test_a_child_whose_placement_fails_never_runs_its_command(tmp_path) -> None:
    """Invariant: when the parent cannot place the held child, the command never runs."""
    from spu.sandbox.process import start_placed

    def _refuse(_pid: int) -> None:
        raise OSError("no cgroup for you")

    marker = tmp_path / "ran"
    with pytest.raises(OSError, match="no cgroup"):
        start_placed(["touch", str(marker)], {"PATH": "/usr/bin:/bin"}, _refuse)
    time.sleep(0.2)
    assert not marker.exists()


def test_a_held_child_gets_exactly_the_environment_given(tmp_path) -> None:
    """Invariant: the hold adds nothing to the environment and changes nothing in it (the
    wrapper's locale coercion stays out), its signals are a plain child's, its stdin empty."""
    from spu.sandbox.process import start_placed

    for env in ({"PATH": "/usr/bin:/bin", "A": "1"},
                {"PATH": "/usr/bin:/bin", "PWD": "/somewhere", "LC_CTYPE": "C"}):
        proc = start_placed(["env"], env, lambda _pid: None, cwd=tmp_path,
                            stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert dict(line.split("=", 1) for line in out.splitlines()) == env
    proc = start_placed(["cat"], {"PATH": "/usr/bin:/bin"}, lambda _pid: None,
                        stdout=subprocess.PIPE)
    assert proc.communicate(timeout=30) == (b"", None) and proc.returncode == 0
    # Signals ignored and blocked as under a plain Popen (the wrapper's own undone).
    status = ["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]
    proc = start_placed(status, {"PATH": "/usr/bin:/bin"}, lambda _pid: None,
                        stdout=subprocess.PIPE)
    held, _ = proc.communicate(timeout=30)
    assert held == subprocess.run(status, capture_output=True, check=True).stdout


def test_a_program_that_cannot_be_run_fails_to_start(tmp_path) -> None:
    """Invariant: a program not on the ``PATH``, or a script whose interpreter is missing,
    fails the start itself (as ``Popen`` does), not as an exit status of the program."""
    from spu.sandbox.process import start_placed

    broken = tmp_path / "broken"
    broken.write_text("#!/nonexistent/python3\nprint('never')\n")
    broken.chmod(0o755)
    for argv in (["no-such-program-spu"], [str(broken)]):
        with pytest.raises(FileNotFoundError):
            start_placed(argv, {"PATH": "/usr/bin:/bin"}, lambda _pid: None)


def test_a_child_behind_the_death_wrapper_ends_with_its_parent() -> None:
    """Invariant: a server started through :func:`dying_with_parent` gets SIGTERM when the
    process that started it is killed (no ``preexec_fn`` asked for it)."""
    import sys

    code = ("import subprocess, time\n"
            "from spu.sandbox.process import dying_with_parent\n"
            "child = subprocess.Popen(dying_with_parent(['sleep', '300']))\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + BOUND_S
        while b"sleep" not in _cmdline(child).split(b"\0")[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cmdline(child).split(b"\0")[0] == b"sleep", "the wrapper ran its command"
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + BOUND_S
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(child), "the child ended with its parent"
