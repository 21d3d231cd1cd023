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
