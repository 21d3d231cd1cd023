"""GPU placement and what each backend would hand over (no GPU needed: checked by inspection)."""

from __future__ import annotations

import pytest

from spu.harness.base import AgentContext
from spu.sandbox import RunLimits
from spu.sandbox.gpus import detect_gpus, place_gpus
from spu.tasks import load_task
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import read_json, run_agent

NO_GPU = RunLimits(time_s=60, memory_gb=0.5, cpus=1, gpus=0, grace_s=1)
ONE_GPU = RunLimits(time_s=60, memory_gb=0.5, cpus=1, gpus=1, grace_s=1)


def test_detect_gpus_reads_the_device_nodes(tmp_path) -> None:
    for name in ("nvidia1", "nvidia0", "nvidia10", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    assert detect_gpus(tmp_path) == ("0", "1", "10")
    assert detect_gpus(tmp_path / "missing") == ()


@pytest.mark.parametrize(
    ("wanted", "assigned", "present", "ids", "warns"),
    [
        (1, [], ["0", "1"], ("0",), False),
        (2, [], ["0", "1"], ("0", "1"), False),
        (4, [], ["0", "1"], ("0", "1"), True),  # a smaller machine gives what it has
        (1, [], [], (), True),  # no GPU: run without, say so
        (0, [], ["0"], (), False),
        (1, ["1"], ["0", "1"], ("1",), False),  # the launcher's placement wins
        (0, ["GPU-3f2a"], ["0"], ("GPU-3f2a",), False),  # UUIDs pass through
        (1, ["3"], [], ("3",), True),  # assigned but not shown here: kept, with a warning
    ],
)
def test_place_gpus(wanted, assigned, present, ids, warns) -> None:
    placement = place_gpus(wanted, assigned, present)
    assert placement.ids == ids
    assert bool(placement.warnings) is warns


def test_placement_env_hides_other_gpus_of_the_machine() -> None:
    assert place_gpus(1, ["2"], ["0", "1", "2"]).env()["CUDA_VISIBLE_DEVICES"] == "2"
    assert place_gpus(0, [], ["0"]).env() == {"CUDA_VISIBLE_DEVICES": "",
                                              "NVIDIA_VISIBLE_DEVICES": "void"}
    assert place_gpus(1, [], []).env() == {}


@pytest.mark.slow
def test_local_hands_assigned_gpus_over_as_cuda_visible_devices(open_sandbox) -> None:
    """What the agent would get on a GPU machine: the launcher's ids in its environment."""
    box = open_sandbox("local", ONE_GPU, gpu_ids=["0"])
    run_agent(box, "probe.py")
    seen = read_json(box.output("probe.json"))
    assert seen["cuda_visible_devices"] == "0"
    info = box.sandbox.info()
    assert info.limits.gpus == ["0"]
    argv = box.sandbox.bwrap_argv(["true"], {})
    assert argv[argv.index("/sys") - 1:argv.index("/sys") + 2] == ["--ro-bind", "/sys", "/sys"]
    if not detect_gpus():
        assert any("does not show" in w for w in info.warnings)
        assert "--dev-bind" not in argv, "no device node exists here to bind"


@pytest.mark.slow
def test_local_without_a_gpu_on_the_machine_records_a_warning(open_sandbox) -> None:
    if detect_gpus():
        pytest.skip("this machine has a GPU")
    box = open_sandbox("local", ONE_GPU)
    info = box.sandbox.info()
    assert info.limits.gpus == []
    assert "asked for 1 GPU(s), this machine has none: running without a GPU" in info.warnings
    run_agent(box, "probe.py")
    assert read_json(box.output("probe.json"))["cuda_visible_devices"] is None


@pytest.mark.slow
@pytest.mark.docker
def test_docker_passes_gpus_as_device_requests(open_sandbox) -> None:
    """The container's HostConfig carries the device request; the host numbering stays out.

    The environment is the one a harness hands over (``AgentContext.base_env``, given the
    launcher's GPU ids): neither it nor the container adds host device numbers.
    """
    box = open_sandbox("docker", ONE_GPU, gpu_ids=["0"])
    ctx = AgentContext(task=load_task(EXAMPLE_TASK), paths=box.paths, run_dir=box.run_dir,
                       run_key="k", limits=ONE_GPU, seed=1, gpu_ids=["0"])
    container = box.sandbox.create_container(["true"], ctx.base_env())
    try:
        container.reload()
        requests = container.attrs["HostConfig"]["DeviceRequests"]
        env = container.attrs["Config"]["Env"]
    finally:
        container.remove(force=True)
    assert requests == [{"Driver": "", "Count": 0, "DeviceIDs": ["0"],
                         "Capabilities": [["gpu"]], "Options": {}}]
    assert not any(e.startswith("CUDA_VISIBLE_DEVICES=") for e in env)
    assert "SPU_TASK_DIR=/task" in env
    assert box.sandbox.info().limits.gpus == ["0"]


@pytest.mark.slow
@pytest.mark.docker
def test_docker_without_gpus_asks_for_none(open_sandbox) -> None:
    box = open_sandbox("docker", NO_GPU)
    assert "device_requests" not in box.sandbox.container_options()
    if not detect_gpus():
        one = open_sandbox("docker", ONE_GPU, run="one")
        assert "device_requests" not in one.sandbox.container_options()
        assert any("this machine has none" in w for w in one.sandbox.info().warnings)
