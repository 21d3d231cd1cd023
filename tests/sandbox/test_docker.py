"""The docker backend's container, as the engine records it (HostConfig), and its image errors."""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from spu.sandbox import RunLimits
from spu.sandbox.limits import GIB

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_container_gets_the_layout_and_limits(open_sandbox, tmp_path) -> None:
    """init, CPUs (what the engine has), memory = memory+swap, pids, network, binds."""
    tools = tmp_path / "tools"
    tools.mkdir()
    limits = RunLimits(time_s=60, memory_gb=0.25, cpus=8, gpus=0, grace_s=1)
    box = open_sandbox("docker", limits, extra_ro_binds={str(tools): "/opt/tools"})
    container = box.sandbox.create_container(["true"], {"SPU_TASK_ID": "x"})
    try:
        container.reload()
        host = container.attrs["HostConfig"]
        config = container.attrs["Config"]
    finally:
        container.remove(force=True)
    cpus = box.sandbox.info().limits.cpus
    assert host["Init"] is True
    assert host["NanoCpus"] == cpus * 10**9 and cpus <= 8
    assert host["Memory"] == host["MemorySwap"] == int(0.25 * GIB)
    assert host["PidsLimit"] == 512
    # The run's network is the holder container's, which pasta connects (filtered).
    assert host["NetworkMode"].startswith("container:")
    assert "network:pasta-filtered" in box.sandbox.info().isolation
    assert host["SecurityOpt"] == ["no-new-privileges"]
    binds = set(host["Binds"])
    assert f"{box.run_dir / 'task'}:/task:ro" in binds
    assert f"{box.run_dir / 'workspace'}:/workspace:rw" in binds
    assert f"{box.run_dir / 'output'}:/output:rw" in binds
    assert f"{tools}:/opt/tools:ro" in binds
    assert config["WorkingDir"] == "/workspace"
    assert "SPU_TASK_ID=x" in config["Env"] and "HOME=/workspace" in config["Env"]


def test_network_false_means_network_mode_none(open_sandbox) -> None:
    box = open_sandbox("docker", network=False)
    assert box.sandbox.container_options()["network_mode"] == "none"
    assert "network:offline" in box.sandbox.info().isolation


def test_a_docker_network_mode_is_recorded_as_unfiltered(request, tmp_path) -> None:
    """``sandbox.network_mode=bridge`` is Docker's own network: unfiltered, said in the record."""
    from spu.sandbox import SandboxRequest, get_sandbox
    from spu.tasks import load_task
    from spu.tasks.package import stage_public_files
    from tests.conftest import EXAMPLE_TASK
    from tests.sandbox.conftest import require_backend

    options = {**require_backend(request, "docker"), "network_mode": "bridge"}
    run_dir = tmp_path / "run"
    sandbox = get_sandbox("docker")(options=options)
    sandbox.prepare(SandboxRequest(
        task_dir=stage_public_files(load_task(EXAMPLE_TASK), run_dir / "task"),
        run_dir=run_dir, limits=RunLimits(time_s=60, memory_gb=0.25, cpus=1),
        host_ports=[12345]))
    try:
        info = sandbox.info()
        assert sandbox.container_options()["network_mode"] == "bridge"
        assert info.network == "docker-bridge" and "network:docker-bridge" in info.isolation
        assert info.host_ports == [], "Docker's own modes forward no host port"
        assert any("not filtered" in w and "12345" in w for w in info.warnings)
    finally:
        sandbox.cleanup()


def test_containers_of_a_killed_driver_are_removed_by_the_next_sandbox(request) -> None:
    """Invariant: a driver killed with ``kill -9`` leaves no container for long."""
    import socket
    import subprocess

    from spu.sandbox.docker import OWNER_LABEL, docker_client, remove_stale_containers
    from tests.sandbox.conftest import require_backend

    options = require_backend(request, "docker")
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process id that no longer runs
    client = docker_client()
    try:
        stale = client.containers.create(
            options["image"], command=["sleep", "600"], network_mode="none",
            labels={OWNER_LABEL: f"{socket.gethostname()}:{gone.pid}"})
        alive = client.containers.create(
            options["image"], command=["sleep", "600"], network_mode="none",
            labels={OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}"})
        try:
            assert remove_stale_containers(client) >= 1
            ids = {c.id for c in client.containers.list(all=True)}
            assert stale.id not in ids and alive.id in ids
        finally:
            alive.remove(force=True)
            with contextlib.suppress(Exception):
                stale.remove(force=True)
    finally:
        client.close()


def test_runs_of_one_process_share_a_client_and_one_left_from_a_gone_engine_is_replaced(
        request, tmp_path) -> None:
    """A sweep's runs reuse one client; a client that no longer reaches the engine (it
    restarted: here, a socket nobody listens on) is replaced, and the run goes on."""
    import docker
    from spu.sandbox import SandboxRequest, get_sandbox
    from spu.sandbox.docker import _ENGINES, _Engine
    from spu.tasks import load_task
    from spu.tasks.package import stage_public_files
    from tests.conftest import EXAMPLE_TASK
    from tests.sandbox.conftest import require_backend

    options = require_backend(request, "docker")
    task = load_task(EXAMPLE_TASK)

    def prepared(name: str):
        run_dir = tmp_path / name
        sandbox = get_sandbox("docker")(options=options)
        sandbox.prepare(SandboxRequest(
            task_dir=stage_public_files(task, run_dir / "task"), run_dir=run_dir,
            limits=RunLimits(time_s=60, memory_gb=0.25, cpus=1, grace_s=1), network=False))
        return sandbox, run_dir

    first, _ = prepared("first")
    client = first.client
    first.cleanup()
    second, _ = prepared("second")
    assert second.client is client, "the second run made a client of its own"
    second.cleanup()

    key = next(k for k, engine in _ENGINES.items() if engine.client is client)
    gone = docker.DockerClient(base_url=f"unix://{tmp_path / 'no-engine.sock'}", version="1.41")
    _ENGINES[key] = _Engine(gone, 1)
    third, run_dir = prepared("third")
    try:
        assert third.client is not gone and _ENGINES[key].client is third.client
        evidence = third.exec(["sh", "-c", "echo ran"], {}, stdout=run_dir / "out.log",
                              stderr=run_dir / "err.log")
        assert evidence.exit_code == 0 and evidence.error is None
        assert (run_dir / "out.log").read_text() == "ran\n"
    finally:
        third.cleanup()


def test_stale_containers_are_looked_for_once_a_minute_per_process(monkeypatch) -> None:
    """Each run used to list every container of the engine; now a process does it when
    it has not for :data:`STALE_EVERY_S`."""
    from spu.sandbox import docker as backend

    looked: list[object] = []
    monkeypatch.setattr(backend, "remove_stale_containers", looked.append)
    monkeypatch.setattr(backend, "_STALE_CHECKED", [float("-inf")])
    for _ in range(3):
        backend.remove_stale_when_due("client")
    assert looked == ["client"]
    # As if the last look was a minute ago.
    backend._STALE_CHECKED[0] = time.monotonic() - backend.STALE_EVERY_S - 1
    backend.remove_stale_when_due("client")
    assert looked == ["client", "client"]


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from the host's ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = open(f"/proc/{entry}/stat").read()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(
                    int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def _host_uids(pid: int) -> set[int]:
    """The real, effective, saved and file-system user ids of ``pid``, as the host sees them."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Uid:"):
            return {int(u) for u in line.split()[1:]}
    raise AssertionError(f"no Uid line for {pid}")


def test_the_agent_runs_as_a_non_root_user_of_the_host(open_sandbox, tmp_path) -> None:
    """Docker agents are not root in the host's user namespace: a user id drawn per run,
    seen from the host in ``/proc/<pid>/status``; the layout stays writable for it."""
    import threading

    from spu.sandbox.docker import RUN_LABEL
    from spu.sandbox.local import agent_uid_for

    box = open_sandbox("docker")
    box.sandbox.write_file(f"{box.paths.workspace}/notes.txt", b"from the harness")
    script = ("echo started > /output/started; cat /workspace/notes.txt >> /workspace/seen; "
              "id -un > /output/user; sh -c 'sleep 30' & sleep 30")
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(box.sandbox.exec(
        ["sh", "-c", script], {}, stdout=tmp_path / "out", stderr=tmp_path / "err",
        timeout_s=60)))
    worker.start()
    started = box.run_dir / "output" / "started"
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert started.exists(), (tmp_path / "err").read_text()
        client = box.sandbox.client
        agents: list[dict] = []
        while not agents and time.monotonic() < deadline:
            agents = [c for c in client.api.containers(
                filters={"label": f"{RUN_LABEL}={box.sandbox.sandbox_id}"})
                if not c["Names"][0].endswith("-net")]
            time.sleep(0.2)
        assert len(agents) == 1, [(c["Names"], c["Labels"]) for c in agents]
        agent = agents[0]
        root_pid = int(client.api.inspect_container(agent["Id"])["State"]["Pid"])
        pids = _descendants(root_pid)
        assert len(pids) >= 3  # init, the shell, its sleeps
        expected = agent_uid_for(box.run_dir)
        assert {pid: _host_uids(pid) for pid in pids} == {pid: {expected} for pid in pids}
        assert expected != 0
    finally:
        box.sandbox.request_stop()
        worker.join(timeout=90)
    assert (box.run_dir / "output" / "user").read_text().strip() == "spu-agent"
    assert (box.run_dir / "workspace" / "seen").read_text() == "from the harness"
    assert os.stat(started).st_uid == expected
    assert "unprivileged-user" in box.sandbox.info().isolation
