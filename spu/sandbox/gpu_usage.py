"""GPU use of a run, measured: the GPUs handed to the agent are sampled while it runs.

The placement (:mod:`spu.sandbox.gpus`) gives each run its own devices, so what those
devices do while the agent runs is the agent's work. A background thread reads each
device's utilization every ``interval_s`` seconds through NVML (``nvidia-ml-py``,
imported only here, only when a run has a GPU) or, where the binding is missing,
``nvidia-smi``. ``gpu_seconds`` integrates the utilization over time (one device busy
at 50% for 10 s is 5 GPU-seconds); ``used_gpu`` is true when any sample shows work.

Traps handled here:

- a run without GPUs, a machine without a driver or a binding that cannot initialise
  gives ``None`` (nothing measured), never an error: the run goes on;
- device ids may be indices (``"0"``) or UUIDs (``"GPU-3f2a..."``), as the launcher
  assigned them;
- a sample that fails (a device lost mid-run) is counted, and the reason kept, but the
  other samples still count;
- the first sample is taken at start, so a run shorter than one interval is still seen.

Examples
--------
A fake NVML reporting 40% utilization on device 0:

>>> from types import SimpleNamespace
>>> fake = fake_nvml({"0": [40.0]})
>>> sampler = GpuSampler(["0"], interval_s=0.01, nvml=fake)
>>> sampler.start(); usage = sampler.stop()
>>> usage.used_gpu, usage.method, usage.peak_utilization
(True, 'nvml', 40.0)
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from spu.schema import GpuUsage

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0
"""Seconds between two samples."""

BUSY_PERCENT = 1.0
"""Utilization (percent) from which a sample counts as work on the device."""


@dataclass(frozen=True)
class DeviceSample:
    """One reading of one device."""

    device: str
    utilization: float
    """Percent of the sample period during which a kernel ran (NVML's definition)."""
    memory_used_mb: float | None = None


Reader = Callable[[], list[DeviceSample]]
"""Reads every sampled device once."""


def _nvml_reader(nvml: Any, ids: Sequence[str]) -> Reader:
    """A reader over NVML handles of ``ids`` (indices or UUIDs); raises if NVML cannot start."""
    nvml.nvmlInit()
    handles = []
    for device in ids:
        if device.isdigit():
            handles.append((device, nvml.nvmlDeviceGetHandleByIndex(int(device))))
        else:
            handles.append((device, nvml.nvmlDeviceGetHandleByUUID(device)))

    def read() -> list[DeviceSample]:
        out = []
        for device, handle in handles:
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
            except Exception:  # noqa: BLE001 - memory is optional; utilization is the signal
                memory = None
            out.append(DeviceSample(device, float(rates.gpu), memory))
        return out

    return read


def _smi_reader(ids: Sequence[str], smi: str) -> Reader:
    """A reader calling ``nvidia-smi --query-gpu`` once per sample."""
    wanted = set(ids)

    def read() -> list[DeviceSample]:
        text = subprocess.run(
            [smi, "--query-gpu=index,uuid,utilization.gpu,memory.used",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True).stdout
        return parse_smi_csv(text, wanted)

    return read


def parse_smi_csv(text: str, wanted: set[str]) -> list[DeviceSample]:
    r"""Samples of the wanted devices from ``nvidia-smi --query-gpu`` CSV lines.

    Examples
    --------
    >>> samples = parse_smi_csv("0, GPU-aa, 37, 1024\n1, GPU-bb, [N/A], 0\n", {"0", "GPU-bb"})
    >>> [(s.device, s.utilization, s.memory_used_mb) for s in samples]
    [('0', 37.0, 1024.0), ('GPU-bb', 0.0, 0.0)]
    """
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        index, uuid = parts[0], parts[1]
        device = index if index in wanted else uuid if uuid in wanted else None
        if device is None:
            continue
        out.append(DeviceSample(device, _number(parts[2]), _number(parts[3])))
    return out


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return 0.0


@dataclass
class GpuSampler:
    """Samples the devices ``ids`` from :meth:`start` to :meth:`stop` in a daemon thread.

    ``nvml`` is the binding module (``pynvml``); tests inject a fake one. ``None`` loads
    ``pynvml`` lazily and falls back to ``nvidia-smi`` when it is missing or fails.
    """

    ids: Sequence[str]
    interval_s: float = DEFAULT_INTERVAL_S
    nvml: Any = None
    smi: str | None = None
    _reader: Reader | None = field(default=None, init=False)
    _method: str = field(default="none", init=False)
    _errors: list[str] = field(default_factory=list, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _busy_s: float = field(default=0.0, init=False)
    _samples: int = field(default=0, init=False)
    _busy_samples: int = field(default=0, init=False)
    _peak: float = field(default=0.0, init=False)
    _peak_memory: float | None = field(default=None, init=False)
    _started: float = field(default=0.0, init=False)
    _last: float = field(default=0.0, init=False)

    def _open(self) -> None:
        nvml = self.nvml
        if nvml is None:
            try:
                import pynvml as nvml  # type: ignore[import-not-found, no-redef]
            except ImportError:
                nvml = None
        if nvml is not None:
            try:
                self._reader, self._method = _nvml_reader(nvml, self.ids), "nvml"
                return
            except Exception as exc:  # noqa: BLE001 - any NVML failure means: not measurable
                self._errors.append(f"NVML: {exc}")
        smi = self.smi or shutil.which("nvidia-smi")
        if smi and self.nvml is None:
            self._reader, self._method = _smi_reader(self.ids, smi), "nvidia-smi"

    def start(self) -> None:
        """Open the binding and take samples until :meth:`stop` (nothing when no device)."""
        if not self.ids:
            return
        self._open()
        if self._reader is None:
            return
        self._started = self._last = time.monotonic()
        self._sample(0.0)
        self._thread = threading.Thread(target=self._loop, name="spu-gpu-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            self._sample(now - self._last)
            self._last = now

    def _sample(self, elapsed: float) -> None:
        assert self._reader is not None
        try:
            samples = self._reader()
        except Exception as exc:  # noqa: BLE001 - a lost device must not end the run
            if len(self._errors) < 5:
                self._errors.append(f"{self._method}: {exc}")
            return
        self._samples += 1
        # A sample stands for the period since the previous one; the first one for a
        # full interval, so that a burst shorter than one interval is not lost.
        period = elapsed if elapsed > 0 else min(self.interval_s, 1.0)
        busy = False
        for s in samples:
            self._busy_s += period * s.utilization / 100.0
            self._peak = max(self._peak, s.utilization)
            busy = busy or s.utilization >= BUSY_PERCENT
            if s.memory_used_mb is not None:
                self._peak_memory = max(self._peak_memory or 0.0, s.memory_used_mb)
        self._busy_samples += busy

    def stop(self) -> GpuUsage | None:
        """Stop sampling; the measurement, or ``None`` when nothing could be measured."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=max(5.0, 2 * self.interval_s))
            now = time.monotonic()
            if now > self._last:
                self._sample(now - self._last)
        if self._reader is None:
            if self.ids and self._errors:
                log.info("GPU use not measured: %s", "; ".join(self._errors))
            return None
        return GpuUsage(
            devices=[str(d) for d in self.ids], method=self._method,
            samples=self._samples, busy_samples=self._busy_samples,
            interval_s=self.interval_s, gpu_seconds=round(self._busy_s, 3),
            used_gpu=self._busy_samples > 0, peak_utilization=self._peak,
            peak_memory_mb=self._peak_memory, errors=list(self._errors),
        )


def fake_nvml(utilization: dict[str, list[float]], memory_mb: float = 0.0) -> SimpleNamespace:
    """A stand-in for ``pynvml`` reporting the given utilization series per device index.

    Each device reports the next value of its series at each reading, then repeats the
    last one. Used by the tests and the doctest above; no GPU needed.
    """
    state = {d: list(v) for d, v in utilization.items()}

    def rates(handle: str) -> SimpleNamespace:
        series = state[handle]
        value = series.pop(0) if len(series) > 1 else series[0]
        return SimpleNamespace(gpu=value, memory=0)

    def by_index(index: int) -> str:
        if str(index) not in state:
            raise RuntimeError(f"NVML: invalid device index {index}")
        return str(index)

    return SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=by_index,
        nvmlDeviceGetHandleByUUID=by_index,
        nvmlDeviceGetUtilizationRates=rates,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=memory_mb * 2**20),
    )
