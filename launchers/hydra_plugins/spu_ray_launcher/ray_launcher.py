"""The Hydra :class:`~hydra.plugins.launcher.Launcher` behind ``hydra/launcher=ray``."""

from __future__ import annotations

from collections.abc import Sequence

import hydra_plugins.spu_ray_launcher.config  # noqa: F401  (stores the schema)
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class SPURayLauncher(Launcher):
    """Runs the agent of each job on a GPU actor (or as a Ray task) with its resources.

    Grading, recording and tracking stay on the driver; agent nodes share no storage
    with it and never receive an answer key.

    See :mod:`hydra_plugins.spu_ray_launcher._driver` for what a launch does.
    """

    def __init__(self, init: DictConfig, resources: DictConfig, max_concurrent: int = 0,
                 tracking_server: str = "auto", tracking_server_workers: int = 1,
                 progress: str = "auto", progress_every_s: float = 30.0, poll_s: float = 1.0,
                 get_timeout_s: float = 600.0, shutdown: bool = True, insecure: bool = False,
                 settle_threads: int = 4, report_every_s: float = 10.0,
                 placement: str = "actors", health_probe: str | None = None,
                 actor_start_timeout_s: float = 600.0, join_local: bool = True) -> None:
        self.init = init
        self.resources = resources
        self.max_concurrent = max_concurrent
        self.tracking_server = tracking_server
        self.tracking_server_workers = tracking_server_workers
        self.progress = progress
        self.progress_every_s = progress_every_s
        self.poll_s = poll_s
        self.get_timeout_s = get_timeout_s
        self.shutdown = shutdown
        self.insecure = insecure
        self.join_local = join_local
        self.settle_threads = settle_threads
        self.report_every_s = report_every_s
        self.placement = placement
        self.health_probe = health_probe
        self.actor_start_timeout_s = actor_start_timeout_s
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        """Keep what :meth:`launch` needs (Hydra calls this once per sweep)."""
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        """Run a batch of jobs on Ray; one :class:`JobReturn` per job, in order."""
        from hydra_plugins.spu_ray_launcher._driver import launch

        return launch(self, job_overrides, initial_job_idx)
