"""The Hydra application: ``python -m spu.main [overrides] [-m sweep]``.

It only composes and runs: the config becomes a typed :class:`~spu.runner.RunSpec`,
``run_one`` runs and grades it, and the record goes to tracking. Each job also
leaves ``result.json`` in its Hydra output folder, which the results table of
:mod:`spu.callbacks` reads when the sweep ends (whatever launcher ran the jobs).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from spu.config import SPUConfig, register_configs

log = logging.getLogger("spu")

register_configs()


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
    )


def summary(record: Any, mlflow_run_id: str | None) -> dict[str, Any]:
    """The short result of one job that ran (what the results table shows)."""
    from spu.launch.job import JobStatus, recorded_result
    from spu.tracking.query import recorded_run_from_record

    return recorded_result(recorded_run_from_record(record, mlflow_run_id), JobStatus.ran, "")


def run_from_config(cfg: DictConfig) -> dict[str, Any]:
    """Run and track the job of one composed config; returns its summary.

    A run key that an earlier launch finished is skipped and its stored result
    returned; an ``infra_error`` is retried (``sweep.retries``); in a sweep, a job
    starting after ``budget.max_cost_usd`` is reached does not run
    (:func:`spu.launch.job.run_tracked`, the same under every launcher).
    """
    from spu.launch.job import run_tracked, write_result

    spec = spec_from_config(cfg)
    out = sweep_dir = None
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        out = Path(hydra_cfg.runtime.output_dir)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            sweep_dir = Path(hydra_cfg.sweep.dir)
    job = run_tracked(cfg, spec, sweep_dir)
    if job.attempts is not None:
        record = job.attempts.record
        result = summary(record, job.attempts.tracking_id)
        result.update(retries=job.attempts.retries, retried_from=record.retried_from)
        log.info(
            "%s %s/%s: %s, score %.3f", record.run_key, record.task_id, record.config,
            record.outcome.value, result["score"],
        )
    else:
        assert job.result is not None
        result = job.result
        log.info("%s %s/%s-%s: %s (%s)", result["run_key"], result["task"], result["model"],
                 result["effort"], job.status, result["note"])
    if out is not None:
        write_result(out, result)
    return result


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> dict[str, Any]:
    from spu.runner import RunConfigError
    from spu.tasks.package import TaskLoadError

    try:
        return run_from_config(cfg)
    except (RunConfigError, TaskLoadError, SelectionError) as exc:
        # A configuration that cannot run: say what to fix, without a traceback.
        print(f"spu: {exc}", file=sys.stderr)
        sys.exit(2)


def _export_task_root(argv: list[str]) -> None:
    """Pass ``task_root=PATH`` to the task config source before Hydra composes anything."""
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == "task_root":
            os.environ["SPU_TASK_ROOT"] = str(Path(value).expanduser().resolve())


def main() -> None:
    """Entry point of ``python -m spu.main``."""
    _export_task_root(sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
