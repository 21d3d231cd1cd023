"""What one run asks a cluster for, and how many such runs a cluster holds at once.

A run's request comes from its limits (``limits.cpus``, ``limits.memory_gb``,
``limits.gpus``, after the task's own ``limits`` in ``task.yaml``) unless the launcher
config sets a value, plus one sandbox slot (a custom resource each node offers as
many of as it can run sandboxes). Nodes are described as Ray describes them: a
mapping of resource name to total (``CPU``, ``GPU``, ``memory`` in bytes,
``sandbox_slot``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

SANDBOX_SLOT = "sandbox_slot"
"""Name of the custom resource counting sandboxes a node can run at once."""

GIB = 1 << 30


class ResourceError(ValueError):
    """No node can hold a run as requested; the message names the config key to change."""


@dataclass(frozen=True)
class RunRequest:
    """Resources one run asks for."""

    cpus: float
    """Logical CPUs (Ray ``num_cpus``)."""
    gpus: float
    """GPUs (Ray ``num_gpus``)."""
    memory_bytes: int
    """Memory (Ray ``memory``), 0 for none."""
    sandbox_slots: float
    """Units of the custom resource ``sandbox_slot``, 0 for none."""

    def as_resources(self) -> dict[str, float]:
        """The request in node-resource names (``CPU``, ``GPU``, ``memory``, ``sandbox_slot``)."""
        return {"CPU": self.cpus, "GPU": self.gpus, "memory": float(self.memory_bytes),
                SANDBOX_SLOT: self.sandbox_slots}

    def describe(self) -> str:
        """The request in words."""
        text = f"{self.cpus:g} CPU, {self.gpus:g} GPU, {self.memory_bytes / GIB:.3g} GiB"
        return text + (f", {self.sandbox_slots:g} sandbox slot" if self.sandbox_slots else "")


def _task_limits(task_dir: str | None) -> Mapping[str, Any]:
    if not task_dir or not (Path(task_dir) / "task.yaml").is_file():
        return {}
    from spu.tasks.package import load_meta

    meta = load_meta(Path(task_dir))
    return meta.limits.model_dump(exclude_none=True) if meta.limits else {}


def run_request(limits: Mapping[str, Any], task_dir: str | None,
                chosen: Mapping[str, Any]) -> RunRequest:
    """The request of one run.

    Args:
        limits: the run's ``limits`` (``cpus``, ``gpus``, ``memory_gb``).
        task_dir: its task folder, whose ``task.yaml`` may override the limits.
        chosen: the launcher's ``resources`` (``cpus``, ``gpus``, ``memory_gb``,
            ``sandbox_slots``); a None value takes the limit.

    Examples:
        >>> run_request({"cpus": 8, "gpus": 1, "memory_gb": 16}, None,
        ...             {"cpus": 1, "gpus": None, "memory_gb": 0.5, "sandbox_slots": 1})
        RunRequest(cpus=1.0, gpus=1.0, memory_bytes=536870912, sandbox_slots=1.0)
    """
    merged = {**dict(limits), **_task_limits(task_dir)}

    def pick(name: str, limit: str) -> float:
        value = chosen.get(name)
        return float(merged.get(limit, 0) if value is None else value)

    request = RunRequest(cpus=pick("cpus", "cpus"), gpus=pick("gpus", "gpus"),
                         memory_bytes=int(pick("memory_gb", "memory_gb") * GIB),
                         sandbox_slots=float(chosen.get("sandbox_slots") or 0))
    for name, value in (("cpus", request.cpus), ("gpus", request.gpus),
                        ("memory_gb", request.memory_bytes), ("sandbox_slots",
                                                              request.sandbox_slots)):
        if value < 0 or math.isnan(value):
            raise ResourceError(f"hydra.launcher.resources.{name}: {value} is negative")
    return request


def largest_node(nodes: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The most of each resource any one node offers."""
    names = ("CPU", "GPU", "memory", SANDBOX_SLOT)
    return {k: max((float(n.get(k, 0.0)) for n in nodes), default=0.0) for k in names}


def fit_request(request: RunRequest,
                nodes: Sequence[Mapping[str, float]]) -> tuple[RunRequest, list[str]]:
    """Shrink a request to what the largest node offers (a machine with less gives what it has).

    Returns the request that fits and a note for each resource that was reduced.

    Examples:
        >>> fit_request(RunRequest(8, 1, 16 * GIB, 1), [{"CPU": 2, "memory": 8 * GIB,
        ...                                               "sandbox_slot": 2}])[0]
        RunRequest(cpus=2.0, gpus=0.0, memory_bytes=8589934592, sandbox_slots=1)
    """
    big = largest_node(nodes)
    notes = []
    cpus, gpus = min(request.cpus, big["CPU"]), min(request.gpus, big["GPU"])
    memory = int(min(request.memory_bytes, big["memory"]))
    for name, asked, given, unit in (("CPU", request.cpus, cpus, ""),
                                     ("GPU", request.gpus, gpus, ""),
                                     ("memory", request.memory_bytes / GIB, memory / GIB, " GiB")):
        if given < asked:
            notes.append(f"runs ask for {asked:g}{unit} {name}; the largest node has "
                         f"{given:g}{unit}: each run gets {given:g}{unit}")
    return replace(request, cpus=cpus, gpus=gpus, memory_bytes=memory), notes


def holds(node: Mapping[str, float], request: RunRequest) -> int:
    """How many runs of ``request`` one node holds at once (a large number when unbounded)."""
    counts = [math.floor(float(node.get(name, 0.0)) / asked + 1e-9)
              for name, asked in request.as_resources().items() if asked > 0]
    return min(counts) if counts else 1 << 30


def capacity(request: RunRequest, nodes: Sequence[Mapping[str, float]]) -> int:
    """How many runs of ``request`` the nodes hold at once.

    Examples:
        >>> capacity(RunRequest(1, 0, GIB, 1), [{"CPU": 2, "memory": 8 * GIB, "sandbox_slot": 2},
        ...                                     {"CPU": 8, "memory": 4 * GIB, "sandbox_slot": 8}])
        6
    """
    return sum(holds(node, request) for node in nodes)


def check_feasible(request: RunRequest, nodes: Sequence[Mapping[str, float]]) -> None:
    """Raise :class:`ResourceError` when no node can ever run ``request``."""
    if any(holds(node, request) >= 1 for node in nodes):
        return
    offered = "; ".join(", ".join(f"{k}={v:g}" for k, v in sorted(n.items())
                                  if k in ("CPU", "GPU", "memory", SANDBOX_SLOT))
                        for n in nodes) or "no node"
    hint = ""
    if request.sandbox_slots and not any(n.get(SANDBOX_SLOT) for n in nodes):
        hint = (f" No node offers the custom resource {SANDBOX_SLOT!r}: start nodes with "
                f"`ray start --resources='{{\"{SANDBOX_SLOT}\": N}}'` or set "
                f"hydra.launcher.resources.sandbox_slots=0.")
    raise ResourceError(f"no node can run a run asking for {request.describe()} "
                        f"(nodes: {offered}); lower hydra.launcher.resources.* or limits.*, "
                        f"or set hydra.launcher.resources.fit_to_cluster=true.{hint}")
