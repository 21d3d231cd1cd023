"""A composed configuration becomes a typed run spec: what every launcher hands to the run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from spu.config import SPUConfig, config_problems


class SelectionError(ValueError):
    """The configuration selects nothing runnable (for example, no task)."""


def spec_from_config(cfg: DictConfig) -> Any:
    """Turn a composed config into a :class:`~spu.runner.RunSpec`."""
    from spu.runner import RunSpec

    if OmegaConf.is_missing(cfg, "task"):
        root = Path(cfg.task_root).resolve()
        raise SelectionError(
            f"no task selected: pass task=<id> or -m task='glob(*)' "
            f"(task packages are read from task_root={root})"
        )
    conf: SPUConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    from spu.datasets.store import dataset_problem

    problems = [*config_problems(conf), *filter(None, [dataset_problem(conf.dataset,
                                                                       conf.task_root)])]
    if problems:
        raise SelectionError(problems[0])
    return RunSpec(
        model=conf.model,
        harness=conf.harness,
        effort=conf.effort,
        task_dir=Path(conf.task.path),
        repeat=conf.repeat,
        output_root=Path(conf.output_root).resolve(),
        answers_root=Path(conf.answers_root).resolve() if conf.answers_root else None,
        sandbox=conf.sandbox,
        limits=conf.limits,
        # A relative corpus is the launching directory's, wherever the run executes.
        tools=dataclasses.replace(conf.tools, corpus=str(Path(conf.tools.corpus).resolve()))
        if conf.tools.corpus else conf.tools,
        gpu_ids=tuple(conf.sandbox.gpu_ids),
        cost=conf.cost,
        model_gateway=conf.model_gateway,
        consensus=conf.consensus,
        status_every_s=conf.sweep.status_every_s,
        retry_limits_with_file=bool(conf.sweep.retry_limits_with_file),
        dataset=conf.dataset,
    )
