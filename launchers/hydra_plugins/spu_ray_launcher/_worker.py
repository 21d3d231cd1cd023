"""What a Ray worker runs for one job: Hydra's ``run_job``, with its GPU ids in the config.

The GPUs Ray assigned to the task (``ray.get_gpu_ids()``) become the run's
``sandbox.gpu_ids``: the sandbox hands exactly those to the agent
(``CUDA_VISIBLE_DEVICES``, or Docker ``device_requests``).
"""

from __future__ import annotations

from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict


def assigned_gpu_ids() -> list[str]:
    """The GPU ids Ray assigned to the current task, as strings."""
    import ray

    return [str(g) for g in ray.get_gpu_ids()]


def run_job_on_worker(hydra_context: HydraContext, sweep_config: DictConfig,
                      task_function: TaskFunction, singleton_state: dict[Any, Any]) -> JobReturn:
    """Run one Hydra job in this worker, as the basic launcher would in its process."""
    setup_globals()
    Singleton.set_state(singleton_state)
    gpu_ids = assigned_gpu_ids()
    if gpu_ids:
        with open_dict(sweep_config):
            sweep_config.sandbox.gpu_ids = gpu_ids
    HydraConfig.instance().set_config(sweep_config)
    return run_job(hydra_context=hydra_context, task_function=task_function,
                   config=sweep_config, job_dir_key="hydra.sweep.dir",
                   job_subdir_key="hydra.sweep.subdir")
