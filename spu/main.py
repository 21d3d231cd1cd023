"""The Hydra application: ``python -m spu.main [overrides] [-m sweep]``.

It only composes and runs: the config becomes a typed :class:`~spu.runner.RunSpec`,
``run_one`` runs and grades it, and the record goes to tracking. Each job also
leaves ``result.json`` in its Hydra output folder, which the results table of
:mod:`spu.callbacks` reads when the sweep ends (whatever launcher ran the jobs).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from spu.config import SPUConfig, register_configs

log = logging.getLogger("spu")

RESULT_FILE = "result.json"

register_configs()


class SelectionError(ValueError):
    """The configuration selects nothing runnable (for example, no task)."""


def spec_from_config(cfg: DictConfig) -> Any:
    """Turn a composed config into a :class:`~spu.runner.RunSpec`."""
    from spu.runner import RunSpec

    conf: SPUConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    if OmegaConf.is_missing(cfg, "task"):
        root = Path(conf.task_root).resolve()
        raise SelectionError(
            f"no task selected: pass task=<id> or -m task='glob(*)' "
            f"(task packages are read from task_root={root})"
        )
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
        gpu_ids=tuple(conf.sandbox.gpu_ids),
    )


def summary(record: Any, mlflow_run_id: str | None) -> dict[str, Any]:
    """The short result of one job (what the results table shows)."""
    return {
        "run_key": record.run_key,
        "task": record.task_id,
        "model": record.model,
        "harness": record.harness,
        "effort": record.effort,
        "repeat": record.repeat,
        "outcome": record.outcome.value,
        "scored": record.scored,
        "score": record.score_recovered if record.scored else record.score_strict,
        "threshold": record.threshold,
        "cost_usd": record.cost_usd,
        "runtime_s": record.runtime_s,
        "mlflow_run_id": mlflow_run_id,
    }


def run_from_config(cfg: DictConfig) -> dict[str, Any]:
    """Run and track the job of one composed config; returns its summary."""
    from spu.runner import run_one
    from spu.tracking import log_run, resolve_target

    spec = spec_from_config(cfg)
    record = run_one(spec)
    run_dir = spec.output_root / "runs" / record.run_key
    mlflow_id = None
    if cfg.tracking.enabled:
        target = resolve_target(cfg.tracking, spec.output_root, cfg.experiment.name)
        mlflow_id = log_run(record, run_dir, target)
    result = summary(record, mlflow_id)
    if HydraConfig.initialized():
        out = Path(HydraConfig.get().runtime.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / RESULT_FILE).write_text(json.dumps(result))
    log.info(
        "%s %s/%s: %s, score %.3f", record.run_key, record.task_id, record.config,
        record.outcome.value, result["score"],
    )
    return result


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> dict[str, Any]:
    return run_from_config(cfg)


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
