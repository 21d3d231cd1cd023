"""GPU use measured by sampling the run's devices: a fake NVML, nvidia-smi's CSV, no GPU."""

from __future__ import annotations

import time

from spu.sandbox.gpu_usage import GpuSampler, fake_nvml, parse_smi_csv


def test_fake_nvml_reporting_utilization_counts_gpu_seconds() -> None:
    """Busy samples make used_gpu true; gpu_seconds integrates utilization over time."""
    nvml = fake_nvml({"0": [100.0]}, memory_mb=2048)
    sampler = GpuSampler(["0"], interval_s=0.05, nvml=nvml)
    sampler.start()
    time.sleep(0.5)
    usage = sampler.stop()
    assert usage is not None and usage.method == "nvml" and usage.used_gpu
    assert usage.samples >= 3 and usage.busy_samples == usage.samples
    # 100% for about 0.5 s (plus one interval for the first sample): between 0.4 and 1.5 s
    assert 0.4 <= usage.gpu_seconds <= 1.5
    assert usage.peak_utilization == 100.0 and usage.peak_memory_mb == 2048


def test_idle_device_is_not_used() -> None:
    sampler = GpuSampler(["0"], interval_s=0.02, nvml=fake_nvml({"0": [0.0]}))
    sampler.start()
    time.sleep(0.1)
    usage = sampler.stop()
    assert usage is not None and not usage.used_gpu and usage.gpu_seconds == 0.0


def test_half_utilization_counts_half() -> None:
    """Two devices, one at 50%: gpu_seconds is half the elapsed time (tolerance 40%)."""
    sampler = GpuSampler(["0", "1"], interval_s=0.05, nvml=fake_nvml({"0": [50.0], "1": [0.0]}))
    started = time.monotonic()
    sampler.start()
    time.sleep(0.4)
    usage = sampler.stop()
    elapsed = time.monotonic() - started
    assert usage is not None and usage.used_gpu
    assert abs(usage.gpu_seconds - 0.5 * elapsed) <= 0.4 * 0.5 * elapsed + 0.05


def test_no_gpu_handed_measures_nothing() -> None:
    sampler = GpuSampler([], nvml=fake_nvml({"0": [100.0]}))
    sampler.start()
    assert sampler.stop() is None


def test_nvml_that_cannot_start_measures_nothing() -> None:
    """A machine without a driver: NVML fails to initialise, the run goes on unmeasured."""
    nvml = fake_nvml({"0": [10.0]})

    def broken() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    nvml.nvmlInit = broken
    sampler = GpuSampler(["0"], nvml=nvml)
    sampler.start()
    assert sampler.stop() is None


def test_this_machine_without_a_gpu() -> None:
    """The real binding (or nvidia-smi) on a machine with no GPU gives None, never raises."""
    sampler = GpuSampler(["0"], interval_s=0.05)
    sampler.start()
    usage = sampler.stop()
    assert usage is None or usage.method in ("nvml", "nvidia-smi")


def test_parse_smi_csv_by_index_and_uuid() -> None:
    text = "0, GPU-aaaa, 75, 1000\n1, GPU-bbbb, 0, 10\n"
    samples = parse_smi_csv(text, {"GPU-aaaa"})
    assert [(s.device, s.utilization) for s in samples] == [("GPU-aaaa", 75.0)]
