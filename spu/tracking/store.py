"""Record runs in MLflow: one MLflow run per agent run, in one experiment per sweep.

MLflow is imported inside the functions that use it, so importing this module (and
``spu``) does not load it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spu.config import TrackingConfig
from spu.schema import RunRecord

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

ARTIFACT_PATHS = ("run.json", "grade.json", "trajectory.json", "output", "logs")
"""What of a run folder is logged as artifacts (the workspace and task copy are not)."""


@dataclass(frozen=True)
class TrackingTarget:
    """Where to record: tracking URI, artifact root and experiment name."""

    uri: str
    artifact_root: str
    experiment: str


def resolve_target(cfg: TrackingConfig, output_root: Path, experiment: str) -> TrackingTarget:
    """Fill the defaults: SQLite and artifacts under ``output_root``."""
    root = Path(output_root).resolve()
    uri = cfg.uri or f"sqlite:///{root / 'mlflow.db'}"
    artifacts = cfg.artifact_root or (root / "mlartifacts").as_uri()
    if "://" not in artifacts:
        artifacts = Path(artifacts).resolve().as_uri()
    return TrackingTarget(uri=uri, artifact_root=artifacts,
                          experiment=cfg.experiment or experiment)


def client_for(target: TrackingTarget) -> MlflowClient:
    """An MLflow client on ``target.uri`` (creating the SQLite folder if needed)."""
    from mlflow.tracking import MlflowClient

    if target.uri.startswith("sqlite:///"):
        Path(target.uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=target.uri)


def experiment_id(client: MlflowClient, target: TrackingTarget) -> str:
    """The id of the target experiment, created with its artifact root when missing."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(target.experiment)
    if found is not None:
        return str(found.experiment_id)
    location = f"{target.artifact_root.rstrip('/')}/{target.experiment}"
    try:
        return str(client.create_experiment(target.experiment, artifact_location=location))
    except MlflowException:
        # Another worker created it between the lookup and the create.
        found = client.get_experiment_by_name(target.experiment)
        if found is None:
            raise
        return str(found.experiment_id)


def run_params(record: RunRecord) -> dict[str, str]:
    """Params of a run: what identifies its configuration and task."""
    return {
        "model": record.model,
        "harness": record.harness,
        "effort": record.effort,
        "task": record.task_id,
        "task_version": record.task_version,
        "repeat": str(record.repeat),
        "run_key": record.run_key,
        "config": record.config or "",
        "discipline": record.discipline or "",
        "subfield": record.subfield or "",
        "visibility": record.visibility or "",
        "grader_version": record.grade.grader_version if record.grade else "",
        "sandbox": record.sandbox.backend,
    }


def run_metrics(record: RunRecord) -> dict[str, float]:
    """Metrics of a run: scores, usage, cost, time."""
    metrics = {
        "score": record.score_recovered if record.scored else record.score_strict,
        "score_strict": record.score_strict,
        "score_recovered": record.score_recovered,
        "runtime_s": record.runtime_s,
        "input_tokens": float(record.usage.input),
        "cache_read_tokens": float(record.usage.cache_read),
        "cache_write_tokens": float(record.usage.cache_write),
        "output_tokens": float(record.usage.output),
        "tool_calls": float(record.tool_calls),
        "web_fetches": float(record.web_fetches),
    }
    if record.threshold is not None:
        metrics["chance_threshold"] = record.threshold
    if record.cost_usd is not None:
        metrics["cost_usd"] = record.cost_usd
    if record.grade is not None:
        for g in record.grade.groups:
            metrics[f"rho/{g.group_id}"] = g.rho
    return metrics


def run_tags(record: RunRecord) -> dict[str, str]:
    """Tags of a run: outcome and flags, searchable in the MLflow UI."""
    tags = {
        "outcome": record.outcome.value,
        "scored": str(record.scored).lower(),
        "run_key": record.run_key,
        "flagged_exposure": str(record.flagged_exposure).lower(),
        "used_gpu": str(record.used_gpu).lower(),
        "attempt": str(record.attempt),
    }
    if record.retried_from:
        tags["retried_from"] = record.retried_from
    if record.notes:
        tags["warnings"] = " | ".join(record.notes)[:5000]
    return tags


def log_run(record: RunRecord, run_dir: Path, target: TrackingTarget) -> str:
    """Record one finished run in MLflow; returns the MLflow run id."""
    from mlflow.entities import Metric, Param, RunTag

    client = client_for(target)
    exp = experiment_id(client, target)
    run_name = f"{record.task_id}/{record.config}/r{record.repeat}"
    run = client.create_run(exp, run_name=run_name)
    run_id = run.info.run_id
    import time

    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, float(v), now, 0) for k, v in run_metrics(record).items()],
        params=[Param(k, v) for k, v in run_params(record).items()],
        tags=[RunTag(k, v) for k, v in run_tags(record).items()],
    )
    for name in ARTIFACT_PATHS:
        path = Path(run_dir) / name
        if path.is_dir():
            client.log_artifacts(run_id, str(path), artifact_path=name)
        elif path.is_file():
            client.log_artifact(run_id, str(path))
    status = "FAILED" if record.outcome.value == "infra_error" else "FINISHED"
    client.set_terminated(run_id, status=status)
    return run_id
