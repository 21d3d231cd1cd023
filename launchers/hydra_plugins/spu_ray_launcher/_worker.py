"""What runs on an agent node for one attempt: the agent's side of the run, nothing else.

The node gets the run's spec (no answer root), the task's public files and, for
``harness=command``, the agent's executable, all through Ray; it runs the agent in its
sandbox (:func:`spu.launch.remote.run_agent_job`) and returns the submission, trajectory
and logs. The GPUs Ray assigned to the task (``ray.get_gpu_ids()``) become the run's
GPU ids: the sandbox hands exactly those to the agent (``CUDA_VISIBLE_DEVICES``, or
Docker ``device_requests``). While the agent runs, the node reports its spending to the
sweep's monitor, so that an attempt lost with its node still counts what it spent.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from spu.launch.remote import AgentJob, AgentReturn, FileBundle, run_agent_job


def assigned_gpu_ids() -> list[str]:
    """The GPU ids Ray assigned to the current task, as strings."""
    import ray

    return [str(g) for g in ray.get_gpu_ids()]


def run_agent_on_node(job: AgentJob, task_files: FileBundle, monitor: Any) -> AgentReturn:
    """Run the agent's side of one attempt on this node (a Ray task)."""
    import ray

    from spu.launch.console import printable_log_lines
    from spu.sandbox.limits import raise_open_files_limit

    raise_open_files_limit()  # Ray's workers keep the raylet's soft nofile
    printable_log_lines()  # Ray streams this worker's log lines to the driver's console
    node = ray.get_runtime_context().get_node_id()
    gpu_ids = assigned_gpu_ids()
    if gpu_ids:
        spec = job.spec
        job = replace(job, spec=replace(spec, gpu_ids=tuple(gpu_ids),
                                        sandbox=replace(spec.sandbox, gpu_ids=list(gpu_ids))))
    key, attempt = job.run_key, int(job.spec.attempt)
    monitor.started.remote(key, attempt, node, time.time())

    def report(usage: dict[str, int], cost_usd: float | None,
               status: dict[str, Any] | None = None) -> None:
        monitor.spent.remote(key, attempt, usage, cost_usd, status)

    returned = run_agent_job(job, task_files, node=node, report=report)
    monitor.ended.remote(key, attempt, time.time())
    return returned


class RunActor:
    """One long-lived worker owning one GPU (or one sandbox slot): runs one run at a time.

    Started with ``num_gpus`` and the run's CPUs, memory and sandbox slot, it keeps
    them for its life. When it starts it reads which device it got
    (``ray.get_gpu_ids()``, ``CUDA_VISIBLE_DEVICES`` and the UUID from NVML), prepares
    what every run needs (:func:`spu.launch.actors.warm_up`: the agent's CLI, the
    seccomp filter, the sandbox's probe) and checks its device;
    after each run it checks the device again and says so with the run's return, so
    that the driver retires it before its next run when the device is unhealthy.
    """

    def __init__(self, name: str, index: int, probe: str | None = None,
                 sandbox: str | None = None,
                 cli: tuple[str, str, str | None] | None = None) -> None:
        import os

        import ray

        from spu.launch.actors import DeviceHealth, device_uuid, load_nvml, load_probe
        from spu.sandbox.limits import raise_open_files_limit

        raise_open_files_limit()  # its runs' host sides: a driver's, not the raylet's default
        self.name = name
        self.node = ray.get_runtime_context().get_node_id()
        self.devices = assigned_gpu_ids()
        self.visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        nvml = load_nvml() if self.devices else None
        self.uuid = device_uuid(nvml, self.devices)
        self.health = DeviceHealth(self.devices, load_probe(probe), nvml,
                                   context={"actor": name, "index": index, "node": self.node})
        self.warm_notes = warm_up_here(sandbox, cli)
        self.first = self.health.start()
        self.runs = 0

    def ready(self) -> dict[str, Any]:
        """Where it runs, the device it owns, and its first health check."""
        import os

        return {"name": self.name, "node": self.node, "devices": self.devices,
                "visible_devices": self.visible, "uuid": self.uuid, "pid": os.getpid(),
                "problem": self.first.problem, "notes": [*self.warm_notes, *self.first.notes]}

    def run(self, job: AgentJob, task_files: FileBundle,
            monitor: Any) -> tuple[AgentReturn, str | None, list[str]]:
        """Run one attempt's agent side; then the device's health (problem, notes)."""
        from spu.schema import GpuPlacement

        returned = run_agent_on_node(job, task_files, monitor)
        returned.phase.placement = GpuPlacement(actor=self.name, devices=list(self.devices),
                                                visible_devices=self.visible, uuid=self.uuid)
        self.runs += 1
        report = self.health.check(self.runs)
        return returned, report.problem, report.notes


def warm_up_here(sandbox: str | None, cli: tuple[str, str, str | None] | None) -> list[str]:
    """:func:`spu.launch.actors.warm_up` in this worker."""
    from spu.launch.actors import warm_up

    return warm_up(sandbox, cli)
