"""Runs on long-lived workers, one per GPU: their health, their accounts, their count.

Under ``hydra.launcher.placement=actors`` the Ray launcher starts one actor per GPU of
the cluster (one per sandbox slot on nodes without GPUs) and hands each run to a free
one. An actor owns its device for its life, so the device a run used is known; it keeps
what every run on its node needs warm (:func:`warm_up`); between two runs it checks its
device (:class:`DeviceHealth`), and a device found unhealthy retires its actor. The
driver keeps an account of each actor (:class:`ActorAccount`) and prints what each GPU
did (:func:`utilization_lines`).

Nothing here imports Ray: the launcher's actor (``_worker.RunActor``) and its driver
use these pieces, and the tests check them without a cluster.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spu.launch.resources import RunRequest, holds

log = logging.getLogger(__name__)

PLACEMENTS = ("actors", "tasks")
"""Values of ``hydra.launcher.placement``."""

MAX_USED_MEMORY_FRACTION = 0.10
"""Device memory in use between runs above this share of the total: a run left a
process holding the device, and the next run would not get it whole."""

NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x0000000000000008

HealthProbe = Callable[[Mapping[str, Any]], "str | None"]
"""A test's (or a site's) own device check: given the actor's context (``actor``,
``index``, ``node``, ``devices``, ``runs``), the reason the device is unhealthy, or None."""


def check_placement(value: str) -> str:
    """``value`` if it is a placement, else a ValueError naming the key.

    Examples:
        >>> check_placement("actors")
        'actors'
    """
    if value not in PLACEMENTS:
        raise ValueError(f"hydra.launcher.placement={value!r}: not one of {', '.join(PLACEMENTS)}")
    return value


def actor_count(request: RunRequest, nodes: Sequence[Mapping[str, float]], runs: int,
                max_concurrent: int = 0) -> int:
    """How many actors a sweep starts: as many runs of ``request`` as the nodes hold.

    A run asking for one GPU makes that one actor per GPU (where the node's CPUs,
    memory and sandbox slots suffice); a run asking for none, one per sandbox slot.
    ``max_concurrent``, when set, is the count instead, as it is the window of task
    placement: on an autoscaling cluster, the actors beyond today's nodes wait for the
    nodes they make the cluster start. Never more than the runs.

    Examples:
        >>> nodes = [{"CPU": 2, "GPU": 2, "sandbox_slot": 2}, {"CPU": 8, "GPU": 4,
        ...          "sandbox_slot": 8}, {"CPU": 1, "sandbox_slot": 0}]
        >>> actor_count(RunRequest(1, 1, 0, 1), nodes, runs=100)
        6
        >>> actor_count(RunRequest(1, 0, 0, 1), nodes, runs=3)
        3
        >>> actor_count(RunRequest(1, 1, 0, 1), nodes, runs=100, max_concurrent=32)
        32
    """
    held = max_concurrent or sum(holds(node, request) for node in nodes)
    return max(1, min(held, runs))


def load_probe(path: str | None) -> HealthProbe | None:
    """The probe named ``module:function`` (None: no probe).

    Raises:
        ValueError: The path does not name a callable (the message names the key).
    """
    if not path:
        return None
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"hydra.launcher.health_probe={path!r}: not module:function")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"hydra.launcher.health_probe={path!r}: {exc}") from None
    if not callable(found):
        raise ValueError(f"hydra.launcher.health_probe={path!r}: not callable")
    return found  # type: ignore[no-any-return]


def load_nvml() -> Any:
    """The NVML binding (``pynvml`` of ``nvidia-ml-py``) initialised, or None where absent."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver: nothing to check through NVML
        log.info("NVML does not start here: %s", exc)
        return None
    return pynvml


def _handle(nvml: Any, device: str) -> Any:
    """The NVML handle of a Ray GPU id (a physical index) or a UUID."""
    if device.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(device))
    return nvml.nvmlDeviceGetHandleByUUID(device)


def device_uuid(nvml: Any, devices: Sequence[str]) -> str | None:
    """The UUID of the first device (None: no NVML, no device, or unreadable)."""
    if nvml is None or not devices:
        return None
    try:
        uuid = nvml.nvmlDeviceGetUUID(_handle(nvml, devices[0]))
    except Exception:  # noqa: BLE001 - the UUID is a record, not a requirement
        return None
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


@dataclass
class HealthReport:
    """One check of an actor's device."""

    problem: str | None = None
    """Why the device is unhealthy (None: healthy)."""
    notes: list[str] = field(default_factory=list)
    """What the check could not look at (said once per actor)."""

    @property
    def healthy(self) -> bool:
        """True when no check failed."""
        return self.problem is None


@dataclass
class DeviceHealth:
    """Checks an actor's devices between runs: NVML where present, then the probe.

    Through NVML each device must answer, have most of its memory free
    (:data:`MAX_USED_MEMORY_FRACTION`), show no uncorrectable ECC error beyond those
    counted when the actor started, and no critical Xid event since the last check,
    where the driver reports them. Without NVML the check says so once and passes.
    """

    devices: list[str]
    probe: HealthProbe | None = None
    nvml: Any = None
    context: dict[str, Any] = field(default_factory=dict)
    """What the probe is given (``actor``, ``index``, ``node``, ``devices``; ``runs``
    is added at each check)."""
    _ecc: dict[str, int] = field(default_factory=dict)
    _events: Any = None
    _said: set[str] = field(default_factory=set)

    def start(self) -> HealthReport:
        """Count the ECC errors already there and listen for Xid events; check once."""
        notes: list[str] = []
        if self.nvml is not None:
            for device in self.devices:
                try:
                    handle = _handle(self.nvml, device)
                except Exception as exc:  # noqa: BLE001 - the first check names it
                    log.warning("GPU %s not reachable through NVML: %s", device, exc)
                    continue
                count = self._ecc_count(handle)
                if count is not None:
                    self._ecc[device] = count
                self._listen(handle, device, notes)
        report = self.check(0)
        report.notes[:0] = notes
        return report

    def _ecc_count(self, handle: Any) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEccErrors(
                handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC))
        except Exception:  # noqa: BLE001 - a device without ECC reporting
            return None

    def _listen(self, handle: Any, device: str, notes: list[str]) -> None:
        try:
            if self._events is None:
                self._events = self.nvml.nvmlEventSetCreate()
            self.nvml.nvmlDeviceRegisterEvents(handle, NVML_EVENT_TYPE_XID_CRITICAL_ERROR,
                                               self._events)
        except Exception:  # noqa: BLE001 - Xid events are optional
            self._note(notes, f"GPU {device}: the driver reports no Xid events here")

    def _note(self, notes: list[str], text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            notes.append(text)

    def check(self, runs: int) -> HealthReport:
        """The device's health now, after ``runs`` runs of the actor."""
        report = HealthReport()
        if not self.devices:
            pass
        elif self.nvml is None:
            self._note(report.notes, "no NVML here (nvidia-ml-py missing or no driver): "
                                     "the device check passes unchecked")
        else:
            report.problem = self._nvml_problem()
        if report.problem is None and self.probe is not None:
            try:
                found = self.probe({**self.context, "devices": list(self.devices),
                                    "runs": runs})
            except Exception as exc:  # noqa: BLE001 - a probe that fails says unhealthy
                found = f"health probe failed: {type(exc).__name__}: {exc}"
            report.problem = str(found) if found else None
        return report

    def _nvml_problem(self) -> str | None:
        nvml = self.nvml
        for device in self.devices:
            try:
                handle = _handle(nvml, device)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as exc:  # noqa: BLE001 - an unreachable device is the finding
                return f"GPU {device} not reachable through NVML: {exc}"
            total = float(getattr(memory, "total", 0) or 0)
            used = float(getattr(memory, "used", 0) or 0)
            if total and used > MAX_USED_MEMORY_FRACTION * total:
                return (f"GPU {device}: {used / 2**20:.0f} MiB of {total / 2**20:.0f} MiB "
                        f"still in use between runs")
            count = self._ecc_count(handle)
            if count is not None and device in self._ecc and count > self._ecc[device]:
                return (f"GPU {device}: {count - self._ecc[device]} new uncorrectable ECC "
                        f"error(s)")
        return self._xid_problem()

    def _xid_problem(self) -> str | None:
        if self._events is None:
            return None
        xids = []
        while True:
            try:
                event = self.nvml.nvmlEventSetWait(self._events, 0)
            except Exception:  # noqa: BLE001 - NVML_ERROR_TIMEOUT: no event waiting
                break
            xids.append(str(getattr(event, "eventData", "?")))
        return f"Xid {', '.join(xids)} reported since the last check" if xids else None


def warm_up(sandbox: str | None = None,
            cli: tuple[str, str, str | None] | None = None) -> list[str]:
    """Prepare once, in this (the actor's) process, what every run on the node needs.

    The agent's CLI (``cli``: its npm package, version and tools folder) is installed
    into the node's tools folder before the first run rather than during it; the
    sandbox's seccomp filter is compiled and kept (:func:`spu.sandbox.seccomp.
    agent_filter_bpf` caches it), and the sandbox backend is probed once (bubblewrap's
    namespaces, Docker's engine and image: each backend remembers its answer per
    process); each run still gets a fresh sandbox, workspace, disk image and gateway.
    Returns a note for what could not be prepared (the run that needs it says why in
    its own record).
    """
    notes: list[str] = []
    if cli is not None:
        package, version, folder = cli
        try:
            from spu.harness.npm_tools import ensure_installed, tools_dir

            ensure_installed(package, version, tools_dir(folder))
        except Exception as exc:  # noqa: BLE001 - the run's harness check reports it
            notes.append(f"CLI {package}@{version} not installed ahead: {exc}")
    try:
        from spu.sandbox.seccomp import agent_filter_bpf

        agent_filter_bpf()
    except Exception as exc:  # noqa: BLE001 - the run's sandbox reports it
        notes.append(f"seccomp filter not prepared: {exc}")
    if sandbox:
        try:
            from spu.sandbox.base import get_sandbox

            ok, why = get_sandbox(sandbox).available()
            if not ok:
                notes.append(f"sandbox {sandbox} not available here: {why}")
        except Exception as exc:  # noqa: BLE001 - the run's sandbox reports it
            notes.append(f"sandbox {sandbox} not probed: {type(exc).__name__}: {exc}")
    return notes


@dataclass
class ActorAccount:
    """What one actor did in a sweep, kept by the driver."""

    name: str
    index: int
    node: str = ""
    devices: list[str] = field(default_factory=list)
    visible_devices: str | None = None
    uuid: str | None = None
    started: float = field(default_factory=time.monotonic)
    """When the actor was ready (monotonic seconds)."""
    ended: float | None = None
    """When it stopped taking runs: retired, lost, or the sweep's end."""
    runs: int = 0
    busy_s: float = 0.0
    """Seconds its runs took, on the node's clock."""
    gpu_seconds: float = 0.0
    """Utilization-weighted GPU seconds its runs measured (the run's GPU sampler)."""
    retired: str | None = None
    """Why its device was taken out of the sweep (None: it was not)."""
    lost: str | None = None
    """Why the actor died (None: it did not)."""

    def ran(self, seconds: float, gpu_seconds: float | None) -> None:
        """Count one finished run."""
        self.runs += 1
        self.busy_s += max(0.0, seconds)
        self.gpu_seconds += float(gpu_seconds or 0.0)

    def stop(self, now: float | None = None) -> None:
        """It takes no more runs from now."""
        if self.ended is None:
            self.ended = time.monotonic() if now is None else now

    def life_s(self, now: float | None = None) -> float:
        """Seconds from ready to stop (or to ``now``)."""
        end = self.ended if self.ended is not None else (
            time.monotonic() if now is None else now)
        return max(0.0, end - self.started)

    def idle_s(self, now: float | None = None) -> float:
        """Seconds of its life with no run."""
        return max(0.0, self.life_s(now) - self.busy_s)

    def utilization(self, now: float | None = None) -> float:
        """Share of its life spent running (0 to 1)."""
        life = self.life_s(now)
        return min(1.0, self.busy_s / life) if life > 0 else 0.0

    def device(self) -> str:
        """The device in words: its node, CUDA_VISIBLE_DEVICES and UUID."""
        where = f"node {self.node[:8]}" if self.node else "node ?"
        gpu = (f"GPU {self.visible_devices}" if self.visible_devices
               else f"GPU {','.join(self.devices)}" if self.devices else "no GPU")
        return f"{where} {gpu}" + (f" ({self.uuid})" if self.uuid else "")


def utilization_lines(accounts: Sequence[ActorAccount], now: float | None = None) -> list[str]:
    """One line per actor for the sweep's summary.

    Examples:
        >>> a = ActorAccount("spu-x-0", 0, node="abcdef0123", visible_devices="1",
        ...                  started=0.0, ended=100.0)
        >>> a.ran(60.0, 30.0)
        >>> utilization_lines([a])[0]
        'spu-x-0 on node abcdef01 GPU 1: 1 run, busy 60 s, idle 40 s, utilization 60%, 30 GPU s'
    """
    lines = []
    for a in accounts:
        line = (f"{a.name} on {a.device()}: {a.runs} run{'s' if a.runs != 1 else ''}, "
                f"busy {a.busy_s:.0f} s, idle {a.idle_s(now):.0f} s, utilization "
                f"{100 * a.utilization(now):.0f}%, {a.gpu_seconds:.0f} GPU s")
        if a.retired:
            line += f"; retired: {a.retired}"
        if a.lost:
            line += f"; lost: {a.lost}"
        lines.append(line)
    return lines
