"""One conformance suite for every sandbox backend of the machine (STYLE: Inspect AI self_check).

Each test runs a small agent from ``tests/sandbox/agents/`` in the backend and checks
what it saw and what the backend reports. Backends that cannot run here are skipped
with the reason; ``subprocess`` promises no isolation, so the isolation checks run on
the isolating backends and the subprocess backend is checked for saying so.
"""

from __future__ import annotations

import os
import signal

import pytest

from spu.sandbox import RunLimits
from spu.sandbox.docker import docker_client
from spu.sandbox.limits import GIB
from spu.sandbox.subprocess import WARNING as NO_SANDBOX
from spu.tasks.package import PUBLIC_PATHS
from tests.conftest import EXAMPLE_TASK
from tests.processes import running
from tests.sandbox.conftest import BACKENDS, ISOLATING, Opened, read_json, run_agent

pytestmark = pytest.mark.slow

SMALL = RunLimits(time_s=60, memory_gb=0.5, cpus=1, gpus=0, grace_s=1)


def _probe(box: Opened, **env: str):
    box.sandbox.write_file(f"{box.paths.workspace}/from-host.txt", b"written by the host")
    evidence = run_agent(box, "probe.py", env=env)
    return evidence, read_json(box.output("probe.json"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_layout_files_and_logs(backend, open_sandbox) -> None:
    """The agent sees the public task files, works in its workspace, writes its output."""
    box = open_sandbox(backend, SMALL)
    evidence, seen = _probe(box)
    assert evidence.exit_code == 0 and evidence.error is None and not evidence.timed_out
    public = sorted(p for p in PUBLIC_PATHS if (EXAMPLE_TASK / p).exists())
    assert seen["task_files"] == public, "exactly the public files, never hidden/"
    assert seen["contract_task_id"] == EXAMPLE_TASK.name
    assert seen["cwd"] == box.paths.workspace and seen["home"] == box.paths.workspace
    assert seen["host_file"] == "written by the host"
    assert seen["write_workspace"] == "ok" and seen["write_output"] == "ok"
    inside = box.sandbox.read_file(f"{box.paths.output}/written-inside.txt")
    assert inside == b"inside"
    assert (box.sandbox.collect() / "written-inside.txt").read_bytes() == b"inside"
    logs = box.run_dir / "logs"
    assert (logs / "probe.py.stdout").read_text().strip() == "probe done"
    assert (logs / "probe.py.stderr").read_text().strip() == "to stderr"


@pytest.mark.parametrize("backend", BACKENDS)
def test_environment_is_cleared(backend, open_sandbox, monkeypatch) -> None:
    """Only what the harness passes (plus HOME, PATH) reaches the agent."""
    monkeypatch.setenv("SPU_HOST_SECRET", "must-not-leak")
    box = open_sandbox(backend, SMALL)
    _, seen = _probe(box, EXTRA_FROM_HARNESS="1")
    assert "SPU_HOST_SECRET" not in seen["env"]
    assert {"SPU_TASK_DIR", "SPU_OUTPUT_DIR", "EXTRA_FROM_HARNESS", "HOME", "PATH"} <= set(
        seen["env"])
    leaked = set(seen["env"]) - {"SPU_TASK_DIR", "SPU_OUTPUT_DIR", "SPU_WORKSPACE",
                                 "EXTRA_FROM_HARNESS", "HOME", "PATH", "LANG", "PWD",
                                 "LC_CTYPE", "HOSTNAME",
                                 "PYTHONDONTWRITEBYTECODE"}  # the image's own ENV
    assert not leaked, f"host environment leaked: {leaked}"


@pytest.mark.parametrize("backend", ISOLATING)
def test_task_is_read_only_and_host_processes_invisible(backend, open_sandbox) -> None:
    """/task cannot be changed; the agent sees only its own processes, not the host's."""
    box = open_sandbox(backend, SMALL)
    before = (box.run_dir / "task" / "task.yaml").read_bytes()
    _, seen = _probe(box)
    assert seen["write_task"] != "ok" and seen["append_task"] != "ok"
    assert (box.run_dir / "task" / "task.yaml").read_bytes() == before
    assert not (box.run_dir / "task" / "planted.txt").exists()
    assert len(seen["pids"]) <= 3, f"host processes visible: {seen['pids']}"
    assert seen["hostname"] == "spu-sandbox"


def test_subprocess_says_it_isolates_nothing(open_sandbox) -> None:
    """The fallback runs on the host and its record says so loudly."""
    box = open_sandbox("subprocess", SMALL)
    _, seen = _probe(box)
    info = box.sandbox.info()
    assert info.isolation == ["network:host"] and NO_SANDBOX in info.warnings
    assert os.getpid() in seen["pids"], "a plain process sees the host's processes"


@pytest.mark.parametrize("backend", ISOLATING)
def test_network_off_leaves_only_loopback(backend, open_sandbox) -> None:
    """``network=false`` cuts the agent off; the default keeps it on (paper: internet on)."""
    off = open_sandbox(backend, SMALL, run="off", network=False)
    _, seen_off = _probe(off)
    assert seen_off["interfaces"] == ["lo"]
    assert "network-namespace" in off.sandbox.info().isolation
    on = open_sandbox(backend, SMALL, run="on")
    _, seen_on = _probe(on)
    assert set(seen_on["interfaces"]) - {"lo"}, "the default network is on"


@pytest.mark.parametrize("backend", ISOLATING)
def test_extra_binds_are_read_only(backend, open_sandbox, tmp_path) -> None:
    """A harness's cached tools folder is mounted where it asks, and cannot be changed."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "cli.txt").write_text("cached tool")
    box = open_sandbox(backend, SMALL, extra_ro_binds={str(tools): "/spu-test-tools"})
    logs = box.run_dir / "logs"
    script = ("import sys\n"
              "print(open('/spu-test-tools/cli.txt').read())\n"
              "try:\n    open('/spu-test-tools/cli.txt', 'a').write('x')\n"
              "except OSError as e:\n    sys.exit(7)\n")
    evidence = box.sandbox.exec(["python3", "-c", script], {"PATH": "/usr/bin:/bin"},
                                stdout=logs / "b.out", stderr=logs / "b.err")
    assert evidence.exit_code == 7, (logs / "b.err").read_text()
    assert (logs / "b.out").read_text().strip() == "cached tool"
    assert (tools / "cli.txt").read_text() == "cached tool"


@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_status_and_evidence(backend, open_sandbox) -> None:
    """The agent's exit status comes back as the evidence's exit code."""
    box = open_sandbox(backend, SMALL)
    evidence, _ = _probe(box, PROBE_EXIT="3")
    assert evidence.exit_code == 3 and evidence.signal is None
    assert not evidence.timed_out and not evidence.oom_killed and evidence.error is None
    assert evidence.duration_s > 0
    crash = run_agent(box, "crash.py")
    assert crash.exit_code == 1 and crash.error is None
    assert "agent crashed" in (box.run_dir / "logs" / "crash.py.stderr").read_text()


@pytest.mark.parametrize("backend", BACKENDS)
def test_wall_limit_stops_the_agent_and_keeps_its_output(backend, open_sandbox) -> None:
    """At the limit the agent is stopped (SIGTERM, then SIGKILL); what it wrote stays."""
    limits = RunLimits(time_s=3, memory_gb=0.5, cpus=1, gpus=0, grace_s=1)
    box = open_sandbox(backend, limits)
    evidence = run_agent(box, "sleeper.py")
    assert evidence.timed_out and not evidence.oom_killed
    # The sleeper ignores SIGTERM, so only the SIGKILL after the grace period ends it.
    assert evidence.signal == signal.SIGKILL
    assert read_json(box.output("rankings.json"))["task_id"] == EXAMPLE_TASK.name
    assert evidence.peak_memory_bytes and evidence.peak_memory_bytes > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_limit_kills_a_hog_and_is_recognised(backend, open_sandbox) -> None:
    """A hog is killed by the memory limit, and the kernel's OOM event says so."""
    limits = RunLimits(time_s=60, memory_gb=0.2, cpus=1, gpus=0, grace_s=1)
    box = open_sandbox(backend, limits)
    if box.sandbox.info().limits.memory_mechanism == "rlimit-as":
        pytest.skip("no writable memory cgroup here: RLIMIT_AS leaves no OOM event")
    evidence = run_agent(box, "hog.py")
    assert evidence.oom_killed and not evidence.timed_out
    assert evidence.exit_code == 137 or evidence.signal == signal.SIGKILL
    assert box.output("started.txt").read_text() == "hog started\n"
    if backend != "docker":  # docker's peak is sampled and may miss a fast hog
        assert evidence.peak_memory_bytes >= 0.9 * 0.2 * GIB


@pytest.mark.parametrize("backend", BACKENDS)
def test_limits_on_a_smaller_machine_are_recorded_as_enforced(backend, open_sandbox) -> None:
    """Asking for 8 CPUs and a GPU on this machine gives what exists, with warnings."""
    limits = RunLimits(time_s=60, memory_gb=0.5, cpus=8, gpus=1, grace_s=1)
    box = open_sandbox(backend, limits)
    info = box.sandbox.info()
    machine = len(os.sched_getaffinity(0))
    assert info.backend == backend
    assert info.limits.cpus == min(8, machine)
    assert info.limits.memory_gb == 0.5 and info.limits.time_s == 60
    assert info.limits.pids_limit == 512
    if machine < 8:
        assert any("asked for 8 CPUs" in w for w in info.warnings)
    if not any(name.startswith("nvidia") and name[6:].isdigit() for name in os.listdir("/dev")):
        assert info.limits.gpus == []
        assert any("this machine has none" in w for w in info.warnings)
    if backend != "docker":
        _, seen = _probe(box)
        assert seen["cpus"] == info.limits.cpus


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_program_that_cannot_start_is_an_infrastructure_error(backend, open_sandbox) -> None:
    """The sandbox, not the agent, failed: the evidence carries an error (infra_error)."""
    box = open_sandbox(backend, SMALL)
    logs = box.run_dir / "logs"
    evidence = box.sandbox.exec(["/nonexistent/agent"], {"PATH": "/usr/bin:/bin"},
                                stdout=logs / "x.out", stderr=logs / "x.err")
    assert evidence.error, evidence


@pytest.mark.parametrize("backend", BACKENDS)
def test_cleanup_leaves_no_process_cgroup_or_container(backend, open_sandbox, tmp_path) -> None:
    """A daemon the agent leaves behind does not outlive the run."""
    box = open_sandbox(backend, SMALL)
    evidence = run_agent(box, "daemon.py")
    assert evidence.exit_code == 0
    cgroups = [] if backend == "docker" else box.sandbox.enforcer.cgroup_paths
    box.sandbox.cleanup()
    if backend == "docker":
        label = f"spu.sandbox={box.sandbox.sandbox_id}"
        assert docker_client().containers.list(all=True, filters={"label": label}) == []
    else:
        assert cgroups, "this machine has writable cgroups: the run had some"
        assert not any(p.exists() for p in cgroups)
    if backend == "subprocess":
        pid = int(box.output("daemon.pid").read_text())
        assert not running(pid), "the daemon survived its run"


