"""Record runs in MLflow: one MLflow run per agent run, in one experiment per sweep.

Everything the runs table needs is logged as params, metrics and tags in one
``log_batch`` call, so :mod:`spu.tracking.export` rebuilds the table from MLflow
alone, without downloading artifacts. The run folder's files follow as artifacts:
``run.json``, ``grade.json``, the trajectory (``trajectory.jsonl.gz``, copied as a
stream), the submission folder ``output/`` (``rankings.json``, ``report.md``,
``sources.json``, ``scripts/``), the raw CLI logs ``logs/`` (gzip-compressed on
the fly above :data:`COMPRESS_LOGS_ABOVE_BYTES`) and the tools service's records ``tools/``
(``audit.jsonl``, the full answers, ``egress.jsonl``).

MLflow is imported inside the functions that use it, so importing this module (and
``spu``) does not load it.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import spu
from spu.analysis.exposure import exposure_kinds
from spu.config import TrackingConfig
from spu.schema import RUN_RECORD_VERSION, Outcome, RunRecord
from spu.tracking.trajectories import LEGACY_TRAJECTORY_FILE, TRAJECTORY_FILE

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

ARTIFACT_FILES = ("run.json", "grade.json", TRAJECTORY_FILE, LEGACY_TRAJECTORY_FILE)
"""Files of a run folder logged at the artifact root."""

ARTIFACT_DIRS = ("output", "logs", "tools")
"""Folders of a run folder logged file by file (the workspace and task copy are not);
``tools/`` holds the audit log of the tools service, its full answers and the egress log."""

COMPRESS_LOGS_ABOVE_BYTES = 1 << 20
"""Raw logs larger than this are logged gzip-compressed (``agent.stdout.gz``)."""

MAX_ARTIFACT_BYTES = 256 << 20
"""Files of the agent's folders larger than this are not logged (a note says so)."""

MAX_ARTIFACT_TOTAL_BYTES = 1 << 30
"""Bytes logged from each of the agent's folders at most (sparse files copy as dense)."""

MAX_ARTIFACT_FILES = 1000
"""Files logged from each of the agent's folders at most (an agent can make millions)."""

MAX_ARTIFACT_DEPTH = 32
"""Folders of the run's output deeper than this are not logged (named as skipped)."""

BATCH_LIMITS = {"metrics": 1000, "params": 100, "tags": 100}
"""MLflow's limits per ``log_batch`` call."""


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


def client_for(target: TrackingTarget | str) -> MlflowClient:
    """An MLflow client on a tracking URI (creating the SQLite folder if needed)."""
    from mlflow.tracking import MlflowClient

    uri = target.uri if isinstance(target, TrackingTarget) else target
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=uri)


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
    """Params of a run: what identifies its configuration, task and software versions."""
    return {
        "model": record.model,
        "harness": record.harness,
        "effort": record.effort,
        "config": record.config or "",
        "task": record.task_id,
        "task_version": record.task_version,
        "discipline": record.discipline or "",
        "subfield": record.subfield or "",
        "visibility": record.visibility or "",
        "repeat": str(record.repeat),
        "run_key": record.run_key,
        "grader_version": record.grade.grader_version if record.grade else "",
        "cli_version": record.cli_version or "",
        "spu_version": spu.__version__,
        "sandbox": record.sandbox.backend,
    }


def metric_name(name: str) -> str:
    """``name`` with the characters MLflow refuses in metric keys replaced by ``_``."""
    return re.sub(r"[^0-9A-Za-z_\-. /]", "_", name)


def run_metrics(record: RunRecord) -> dict[str, float]:
    """Metrics of a run: scores, per-group rho, usage, cost, time, activity."""
    usage = record.usage
    metrics: dict[str, float] = {
        "score": record.score_recovered if record.scored else record.score_strict,
        "score_strict": record.score_strict,
        "score_recovered": record.score_recovered,
        "input_tokens": usage.input,
        "cache_read_tokens": usage.cache_read,
        "cache_write_tokens": usage.cache_write,
        "cache_write_1h_tokens": usage.cache_write_1h,
        "output_tokens": usage.output,
        "long_context_requests": record.long_context_requests,
        "runtime_s": record.runtime_s,
        "tool_calls": record.tool_calls,
        "web_fetches": record.web_fetches,
    }
    optional = {
        "chance_threshold": record.threshold,
        "n_items": record.n_items,
        "cost_usd": record.cost_usd,
        "cost_full_input_usd": record.cost_full_input_usd,
        "cli_cost_usd": record.cli_cost_usd,
        "requests_outside_tools": record.requests_outside_tools,
        "audited_calls": record.audited_calls,
        "shell_downloads": record.shell_downloads,
        "peak_memory_bytes": record.process.peak_memory_bytes,
        "gpu_seconds": record.gpu_seconds,
    }
    metrics.update({k: v for k, v in optional.items() if v is not None})
    if record.grade is not None:
        for g in record.grade.groups:
            metrics[metric_name(f"rho/{g.group_id}")] = g.rho
    return {k: float(v) for k, v in metrics.items()}


def _flag(value: bool) -> str:
    return "true" if value else "false"


def run_tags(record: RunRecord) -> dict[str, str]:
    """Tags of a run: outcome and flags, searchable in the MLflow UI."""
    tags = {
        "outcome": record.outcome.value,
        "scored": _flag(record.scored),
        "run_key": record.run_key,
        "flagged_exposure": _flag(record.flagged_exposure),
        "policy_stopped": _flag(record.policy_stopped),
        "used_gpu": _flag(record.used_gpu),
        "cost_disagreement": _flag(record.cost_disagreement),
        "attempt": str(record.attempt),
        "record_version": record.schema_version or RUN_RECORD_VERSION,
    }
    optional = {
        "exposure_kinds": ",".join(exposure_kinds(record.exposure_hits)),
        "retried_from": record.retried_from,
        "refusal_label": record.refusal_label,
        "policy_stop_step": record.policy_stop.step[:500] if record.policy_stop else None,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "warnings": " | ".join(record.notes)[:5000],
    }
    tags.update({k: v for k, v in optional.items() if v})
    return tags


def _chunks(items: list, size: int) -> Iterator[list]:  # type: ignore[type-arg]
    for i in range(0, len(items), size):
        yield items[i:i + size]


def log_run(record: RunRecord, run_dir: Path, target: TrackingTarget) -> str:
    """Record one finished run in MLflow; returns the MLflow run id.

    Params, metrics and tags go in one ``log_batch`` call (split only past MLflow's
    per-call limits, e.g. a task with more than 1,000 comparison groups), then the
    run folder's artifacts, file by file, streamed.
    """
    import time

    from mlflow.entities import Metric, Param, RunTag

    client = client_for(target)
    exp = experiment_id(client, target)
    run_name = f"{record.task_id}/{record.config}/r{record.repeat}"
    run = client.create_run(exp, run_name=run_name)
    run_id = run.info.run_id
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, 0) for k, v in run_metrics(record).items()]
    params = [Param(k, v) for k, v in run_params(record).items()]
    tags = [RunTag(k, v) for k, v in run_tags(record).items()]
    # Params and tags go in the last batch: the ``outcome`` tag marks a complete
    # record for the export, so a run cut short while logging is never half-exported.
    split = max(0, len(metrics) - BATCH_LIMITS["metrics"])
    for batch in _chunks(metrics[:split], BATCH_LIMITS["metrics"]):
        client.log_batch(run_id, metrics=batch)
    client.log_batch(run_id, metrics=metrics[split:], params=params, tags=tags)
    skipped = log_run_artifacts(client, run_id, Path(run_dir))
    if skipped:
        client.set_tag(run_id, "artifacts_skipped", ", ".join(skipped)[:5000])
    status = "FAILED" if record.outcome is Outcome.infra_error else "FINISHED"
    client.set_terminated(run_id, status=status)
    return run_id


def _regular_files(folder: Path, skipped: list[str]) -> Iterator[Path]:
    """Regular files under ``folder``, never following a link the agent may have planted.

    Walked with a stack, not ``os.walk``: an agent's tree may be deeper than Python
    recurses. A folder more than :data:`MAX_ARTIFACT_DEPTH` levels down is not logged
    (MLflow makes artifact folders recursively); it is named in ``skipped``.
    """
    pending = [(folder, 0)]
    while pending:
        current, depth = pending.pop()
        if depth > MAX_ARTIFACT_DEPTH:
            skipped.append(f"{current.relative_to(folder.parent)}/ (deeper than "
                           f"{MAX_ARTIFACT_DEPTH} levels)")
            continue
        try:
            with os.scandir(current) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                yield Path(entry.path)
        pending.extend((Path(e.path), depth + 1) for e in reversed(entries)
                       if e.is_dir(follow_symlinks=False))


def log_run_artifacts(client: MlflowClient, run_id: str, run_dir: Path) -> list[str]:
    """Log the run folder's artifacts; returns the files left out (too large)."""
    skipped: list[str] = []
    for name in ARTIFACT_FILES:
        path = run_dir / name
        if path.is_file() and not path.is_symlink():
            client.log_artifact(run_id, str(path))
    with tempfile.TemporaryDirectory(prefix="spu-logs-") as scratch:
        for folder in ARTIFACT_DIRS:
            base = run_dir / folder
            if not base.is_dir() or base.is_symlink():
                continue
            total = 0
            for count, path in enumerate(_regular_files(base, skipped)):
                if count == MAX_ARTIFACT_FILES:
                    skipped.append(f"{folder}/: files past the first {MAX_ARTIFACT_FILES}")
                    break
                rel = path.relative_to(run_dir)
                size = path.lstat().st_size
                if size > MAX_ARTIFACT_BYTES or total + size > MAX_ARTIFACT_TOTAL_BYTES:
                    skipped.append(f"{rel} ({size} bytes)")
                    continue
                total += size
                if folder == "logs" and size > COMPRESS_LOGS_ABOVE_BYTES:
                    path = _gzip_copy(path, Path(scratch) / rel.parent)
                client.log_artifact(run_id, str(path), artifact_path=str(rel.parent))
    return skipped


def _gzip_copy(path: Path, folder: Path) -> Path:
    """Stream ``path`` into ``folder/<name>.gz`` and return the new file."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{path.name}.gz"
    with open(path, "rb") as src, open(target, "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst, length=1 << 20)
    return target
