"""Placement on actors without a cluster: device health, actor counts, accounts, records.

The health check is run against a stand-in for NVML that behaves as ``pynvml`` does
(handles by index, memory info, ECC counters, an event set that times out when empty),
so every branch a real GPU would take runs here.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from spu.launch.actors import (
    ActorAccount,
    DeviceHealth,
    actor_count,
    check_placement,
    device_uuid,
    load_probe,
    utilization_lines,
    warm_up,
)
from spu.launch.progress import SweepProgress
from spu.launch.resources import GIB, RunRequest
from spu.schema import GpuPlacement, RunRecord


class FakeNvml:
    """``pynvml`` as far as the health check uses it, with faults the test injects."""

    def __init__(self, devices: int = 2) -> None:
        self.devices = devices
        self.used_mb = {str(i): 0.0 for i in range(devices)}
        self.ecc = {str(i): 0 for i in range(devices)}
        self.gone: set[str] = set()
        self.xids: list[int] = []
        self.events_supported = True

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802 - NVML's names
        if str(index) in self.gone or index >= self.devices:
            raise RuntimeError(f"NVML_ERROR_GPU_IS_LOST on device {index}")
        return str(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        return self.nvmlDeviceGetHandleByIndex(int(uuid.rsplit("-", 1)[1]))

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:  # noqa: N802
        return f"GPU-fake-{handle}".encode()

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:  # noqa: N802
        if handle in self.gone:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return SimpleNamespace(total=80 * 1024 * 2**20, used=self.used_mb[handle] * 2**20)

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:  # noqa: N802
        assert (kind, counter) == (1, 0)  # uncorrected, volatile
        return self.ecc[handle]

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "events"

    def nvmlDeviceRegisterEvents(self, handle: str, kinds: int, events: str) -> None:  # noqa: N802
        if not self.events_supported:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlEventSetWait(self, events: str, timeout_ms: int) -> SimpleNamespace:  # noqa: N802
        if not self.xids:
            raise RuntimeError("NVML_ERROR_TIMEOUT")
        return SimpleNamespace(eventData=self.xids.pop(0))


def test_a_healthy_device_passes_and_each_fault_is_named() -> None:
    nvml = FakeNvml()
    health = DeviceHealth(["1"], nvml=nvml)
    assert health.start().healthy and health.check(1).healthy
    nvml.used_mb["1"] = 30_000
    assert "still in use between runs" in str(health.check(2).problem)
    nvml.used_mb["1"] = 0
    nvml.ecc["1"] = 3
    assert health.check(3).problem == "GPU 1: 3 new uncorrectable ECC error(s)"
    nvml.ecc["1"] = 0
    nvml.xids += [79, 48]
    assert health.check(4).problem == "Xid 79, 48 reported since the last check"
    assert health.check(5).healthy  # the events were read
    nvml.gone.add("1")
    assert "not reachable through NVML" in str(health.check(6).problem)


def test_ecc_errors_there_before_the_actor_started_do_not_retire_it() -> None:
    nvml = FakeNvml()
    nvml.ecc["0"] = 5
    health = DeviceHealth(["0"], nvml=nvml)
    assert health.start().healthy
    nvml.ecc["0"] = 6
    assert "1 new uncorrectable" in str(health.check(1).problem)


def test_without_nvml_the_check_says_so_once_and_passes() -> None:
    health = DeviceHealth(["0"], nvml=None)
    first = health.start()
    assert first.healthy and len(first.notes) == 1 and "no NVML" in first.notes[0]
    again = health.check(1)
    assert again.healthy and again.notes == []
    # No GPU at all (a sandbox-slot actor): nothing to say.
    assert DeviceHealth([], nvml=None).start().notes == []


def test_a_driver_without_xid_events_is_said_once_and_checks_go_on() -> None:
    nvml = FakeNvml()
    nvml.events_supported = False
    health = DeviceHealth(["0"], nvml=nvml)
    report = health.start()
    assert report.healthy and report.notes == ["GPU 0: the driver reports no Xid events here"]
    nvml.ecc["0"] = 1
    assert health.check(1).problem is not None


def test_the_probe_gets_the_actor_context_and_a_failing_probe_means_unhealthy() -> None:
    seen: list[dict[str, Any]] = []

    def probe(context: Any) -> str | None:
        seen.append(dict(context))
        return "bad" if context["runs"] >= 2 else None

    health = DeviceHealth(["0"], probe=probe, context={"actor": "spu-x-0", "index": 0})
    assert health.start().healthy and health.check(1).healthy
    assert health.check(2).problem == "bad"
    assert seen[-1] == {"actor": "spu-x-0", "index": 0, "devices": ["0"], "runs": 2}

    def broken(context: Any) -> str | None:
        raise OSError("probe crashed")

    assert DeviceHealth([], probe=broken).check(0).problem == \
        "health probe failed: OSError: probe crashed"


def test_the_tests_probe_retires_the_first_actor_after_its_first_run() -> None:
    probe = load_probe("tests.launchers.probes:first_actor_fails_after_one_run")
    assert probe is not None
    assert probe({"index": 0, "actor": "a", "runs": 0}) is None
    assert "marked unhealthy" in str(probe({"index": 0, "actor": "a", "runs": 1}))
    assert probe({"index": 1, "actor": "b", "runs": 5}) is None


@pytest.mark.parametrize(("path", "message"), [
    ("no_colon", "not module:function"),
    ("spu.nowhere:probe", "No module named"),
    ("tests.launchers.probes:missing", "has no attribute"),
    ("tests.launchers.probes:__doc__", "not callable"),
])
def test_a_bad_probe_path_fails_in_one_line_naming_the_key(path: str, message: str) -> None:
    with pytest.raises(ValueError, match="hydra.launcher.health_probe") as err:
        load_probe(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_placement_names_the_key_when_misspelt() -> None:
    assert check_placement("tasks") == "tasks"
    with pytest.raises(ValueError, match=r"hydra.launcher.placement='actor'"):
        check_placement("actor")


def test_one_actor_per_gpu_or_per_sandbox_slot() -> None:
    nodes = [{"CPU": 1, "GPU": 0, "sandbox_slot": 0},  # the grading side
             {"CPU": 16, "GPU": 8, "memory": 128 * GIB, "sandbox_slot": 8},
             {"CPU": 4, "GPU": 8, "memory": 128 * GIB, "sandbox_slot": 8}]
    paper = RunRequest(cpus=2, gpus=1, memory_bytes=16 * GIB, sandbox_slots=1)
    # 8 GPUs on the first node; CPUs hold only 2 on the second.
    assert actor_count(paper, nodes, runs=1653) == 10
    assert actor_count(paper, nodes, runs=3) == 3
    assert actor_count(paper, nodes, runs=100, max_concurrent=4) == 4
    no_gpu = RunRequest(cpus=1, gpus=0, memory_bytes=0, sandbox_slots=1)
    assert actor_count(no_gpu, nodes, runs=100) == 12
    assert actor_count(no_gpu, [{"CPU": 1, "sandbox_slot": 0}], runs=5) == 1


def test_device_uuid_from_nvml_and_none_without() -> None:
    assert device_uuid(FakeNvml(), ["1"]) == "GPU-fake-1"
    assert device_uuid(None, ["1"]) is None and device_uuid(FakeNvml(), []) is None
    assert device_uuid(FakeNvml(devices=1), ["3"]) is None


def test_accounts_give_each_gpu_its_utilization_and_name_a_retired_device() -> None:
    a = ActorAccount("spu-ab-0", 0, node="n" * 20, visible_devices="0", uuid="GPU-1",
                     started=0.0)
    a.ran(30.0, 12.5)
    a.ran(20.0, None)
    a.retired = "Xid 79"
    a.stop(100.0)
    b = ActorAccount("spu-ab-1", 1, started=50.0)
    lines = utilization_lines([a, b], now=100.0)
    assert lines[0] == ("spu-ab-0 on node nnnnnnnn GPU 0 (GPU-1): 2 runs, busy 50 s, idle 50 s, "
                        "utilization 50%, 12 GPU s; retired: Xid 79")
    assert lines[1].startswith("spu-ab-1 on node ? no GPU: 0 runs, busy 0 s, idle 50 s")


def test_the_status_line_names_retired_devices() -> None:
    progress = SweepProgress(3)
    progress.retired.append("spu-ab-0 (node 1234 GPU 0): Xid 79")
    assert "retired 1: spu-ab-0 (node 1234 GPU 0): Xid 79" in progress.snapshot().line()
    assert "retired" not in SweepProgress(3).snapshot().line()


def test_warm_up_prepares_the_seccomp_filter_once() -> None:
    from spu.sandbox.seccomp import agent_filter_bpf

    warm_up("subprocess")
    assert agent_filter_bpf() is agent_filter_bpf()  # built once, kept
    assert any("not probed" in n for n in warm_up("no-such-backend"))


def test_run_records_carry_the_gpu_placement_and_old_records_still_load() -> None:
    base = {"run_key": "k", "task_id": "t", "task_version": "1", "model": "m",
            "harness": "h", "effort": "e", "outcome": "valid", "sandbox": {"backend": "local"}}
    old = RunRecord.model_validate(base)
    assert old.gpu is None
    placed = {**base, "gpu": {"actor": "spu-ab-0", "devices": ["1"], "visible_devices": "1",
                              "uuid": None}}
    record = RunRecord.model_validate_json(json.dumps(placed))
    assert record.gpu == GpuPlacement(actor="spu-ab-0", devices=["1"], visible_devices="1")
    assert json.loads(record.model_dump_json())["gpu"]["actor"] == "spu-ab-0"
    with pytest.raises(ValueError, match="extra"):
        RunRecord.model_validate({**base, "gpu": {"actor": "a", "device": "0"}})


def test_warm_up_finds_the_agent_cli_installed_or_says_why_not(tmp_path: Any) -> None:
    from spu.harness.npm_tools import INSTALLED_MARKER, install_prefix

    root = tmp_path / "tools"
    prefix = install_prefix(root, "@acme/agent", "1.2.3")
    (prefix / "node_modules" / "@acme" / "agent").mkdir(parents=True)
    (prefix / "node_modules" / "@acme" / "agent" / "package.json").write_text(
        json.dumps({"version": "1.2.3"}))
    (prefix / INSTALLED_MARKER).write_text("{}")
    assert warm_up(None, ("@acme/agent", "1.2.3", str(root))) == []
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    notes = warm_up(None, ("@acme/agent", "9.9.9", str(blocked)))
    assert len(notes) == 1 and notes[0].startswith("CLI @acme/agent@9.9.9 not installed ahead")
