"""Hydra sweeper plugin ``hydra/sweeper=spu``: the basic sweeper, validated per configuration.

The jobs are the basic sweeper's, with a model's default harness and an experiment's
model sweep applied as :mod:`spu.launch.jobs` says (the dry run lists the same jobs);
a sweep with no job is one line (:class:`~spu.launch.jobs.NothingToRun`), raised before
anything is written under ``output_root``.

Hydra's basic sweeper composes every job's config once before it launches anything, to
catch composition errors early: half a second per job, twelve minutes for the 1,508 jobs
of ``experiment=paper``. A sweep's jobs differ mostly by ``task``, an option that only
names a task package, and by ``repeat``, a number; so this sweeper composes one job per
distinct set of the other overrides (one per configuration), checks that every task option
exists and that every repeat is a whole number from 0 (anything else is composed, for
Hydra's own message). The jobs, their order and their batches are the basic sweeper's.
"""

# No ``from __future__ import annotations``: Hydra's plugin scan runs this module before
# it is in ``sys.modules``, where dataclasses cannot resolve string annotations.
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from spu.internals import basic_sweeper

# Hydra's own sweeper is private API: reached through spu.internals, which checks the
# installed Hydra is a version it was written against.
BasicSweeper = basic_sweeper()

TASK_GROUP = "task"

log = logging.getLogger(__name__)


@dataclass
class SPUSweeperConf:
    """The basic sweeper's settings (``params``: the sweep of an experiment config)."""

    _target_: str = "hydra_plugins.spu_sweeper.SPUSweeper"
    max_batch_size: Any = None
    params: Any = None


ConfigStore.instance().store(group="hydra/sweeper", name="spu", node=SPUSweeperConf,
                             provider="spu")


def _is_task(override: str) -> bool:
    return override.lstrip("+").startswith(f"{TASK_GROUP}=")


def _is_plain_repeat(override: str) -> bool:
    """``repeat=N`` with N a whole number from 0 (what the schema accepts as it is)."""
    key, sep, value = override.partition("=")
    return key == "repeat" and bool(sep) and value.isdigit() and value.isascii()


class SPUSweeper(BasicSweeper):
    """:class:`BasicSweeper` whose validation composes one job per configuration."""

    def sweep(self, arguments: list[str]) -> Any:
        """Launch the jobs of :func:`spu.launch.jobs.sweep_jobs`, batch by batch.

        The basic sweeper's loop, with the jobs made by SPU's rules; no job is an error
        before the sweep folder is made.
        """
        from spu.launch.jobs import NothingToRun, sweep_jobs

        assert self.config is not None and self.launcher is not None
        assert self.hydra_context is not None
        self.overrides = sweep_jobs(dict(self.params or {}), arguments,
                                    self.hydra_context.config_loader, self.max_batch_size)
        if not self.overrides:
            raise NothingToRun(self._nothing_to_run(arguments))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns = []
        initial_job_idx = 0
        while not self.is_done():
            batch = self.get_job_batch()
            tic = time.perf_counter()
            self.validate_batch_is_legal(batch)
            log.debug("validated %d jobs in %.2f s", len(batch), time.perf_counter() - tic)
            results = self.launcher.launch(batch, initial_job_idx=initial_job_idx)
            for r in results:
                _ = r.return_value  # raises where the job raised
            initial_job_idx += len(batch)
            returns.append(results)
        return returns

    def _nothing_to_run(self, arguments: Sequence[str]) -> str:
        """Why the sweep has no job, in one line."""
        from spu.overrides import task_problem

        assert self.config is not None and self.hydra_context is not None
        value = next((a.partition("=")[2] for a in reversed(arguments) if _is_task(a)), None)
        if value is None:
            value = str((self.params or {}).get(TASK_GROUP, "glob(*)"))
        root = Path(str(self.config.task_root)).expanduser().resolve()
        options = sorted(self.hydra_context.config_loader.get_group_options(TASK_GROUP))
        if not options:
            return task_problem(value, root, options) + "; nothing was run or written"
        return "the sweep has no job (a sweep value lists nothing): nothing was run or written"

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Compose one job per distinct non-task overrides; check every task option."""
        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        options: set[str] | None = None
        composed: set[tuple[str, ...]] = set()
        for overrides in batch:
            shape = tuple(o for o in overrides if not _is_task(o) and not _is_plain_repeat(o))
            if shape not in composed:
                loader.load_sweep_config(self.config, list(overrides))
                composed.add(shape)
                continue
            for override in overrides:
                if not _is_task(override):
                    continue
                if options is None:
                    options = set(loader.get_group_options(TASK_GROUP))
                name = override.partition("=")[2]
                if name not in options:
                    raise ConfigCompositionException(
                        f"Could not find '{TASK_GROUP}/{name}' (task=... names no task "
                        f"package under task_root)")
