"""The docker backend's container, as the engine records it (HostConfig), and its image errors."""

from __future__ import annotations

import contextlib
import os

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
