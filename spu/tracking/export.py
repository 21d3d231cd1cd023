"""The runs table (SPEC section 5): one row per run, from MLflow or from ``run.json`` files.

The table is the input of the statistics module. Every value comes from the params,
metrics and tags that :func:`spu.tracking.store.log_run` logs, so exporting reads
MLflow's run store only (no artifact download), and the same row builder serves
``run.json`` files: a record exports to the same row whichever way it is read.

Retries. An ``infra_error`` run is retried (paper 3.1) and each attempt is its own
MLflow run with the same ``run_key``. The statistics need exactly one official row
per run key, whatever experiment or launcher recorded it (a key is one run: the same
configuration, task version and repeat): the **latest attempt**, by
:func:`spu.tracking.query.attempt_rank` as for resuming (highest
``attempt``, then the latest logged, then the largest run id; among ``run.json``
files, the run folder's own record over the archived ``attempts/<n>/``). By
default only official rows are exported, with ``attempt`` and ``n_attempts`` showing
that earlier attempts exist; ``all_attempts=True`` (``--all-attempts``) adds them,
with ``official`` false, so a first attempt stays visible and filterable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.identity import config_label
from spu.schema import (
    RUNS_TABLE_COLUMNS,
    RUNS_TABLE_EXTRA_COLUMNS,
    RUNS_TABLE_SPEC_COLUMNS,
    Outcome,
    RunRecord,
    RunsTableWriteError,
    runs_table_frame,
)
from spu.schema import write_runs_table as write_table
from spu.tracking.query import (
    RunLookupError,
    attempt_rank,
    logged_order,
    missing_sqlite_store,
    read_run_file,
    search_runs,
)
from spu.tracking.store import client_for, run_metrics, run_params, run_tags

if TYPE_CHECKING:
    import pandas as pd

# The format lives with the schema, which the statistics and the simulator use as well.
SPEC_COLUMNS = RUNS_TABLE_SPEC_COLUMNS
EXTRA_COLUMNS = RUNS_TABLE_EXTRA_COLUMNS
COLUMNS = RUNS_TABLE_COLUMNS

OUTCOMES = frozenset(o.value for o in Outcome)


class RunsExportError(ValueError):
    """The runs cannot be exported; the message names the store, run or file and key."""


@dataclass(frozen=True)
class LoggedRun:
    """One run as tracking holds it: params, metrics and tags, plus where it came from."""

    run_id: str
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    tags: Mapping[str, str]
    experiment: str | None = None
    start_time_ms: int | None = None


def logged_from_record(record: RunRecord, run_id: str,
                       experiment: str | None = None) -> LoggedRun:
    """What :func:`~spu.tracking.store.log_run` would log for ``record``."""
    return LoggedRun(run_id=run_id, params=run_params(record), metrics=run_metrics(record),
                     tags=run_tags(record), experiment=experiment)


def _text(value: str | None) -> str | None:
    return value if value else None


def _count(run: LoggedRun, key: str, required: bool = True) -> int | None:
    value = run.metrics.get(key)
    if value is None or math.isnan(value):
        if required:
            raise RunsExportError(f"run {run.run_id}: metric {key!r} is missing")
        return None
    return int(value)


def _flag(run: LoggedRun, key: str) -> bool:
    value = run.tags.get(key, "false")
    if value not in ("true", "false"):
        raise RunsExportError(f"run {run.run_id}: tag {key!r} is {value!r}, not true/false")
    return value == "true"


def runs_row(run: LoggedRun) -> dict[str, Any]:
    """The runs-table row of one logged run (before official rows are chosen)."""
    outcome, repeat, attempt = _checked_keys(run)
    return {**_spec_columns(run, outcome, repeat), **_added_columns(run, attempt)}


def _checked_keys(run: LoggedRun) -> tuple[str, int, int]:
    """The run's outcome, repeat and attempt, once every required key is there."""
    p, m, t = run.params, run.metrics, run.tags
    for key in ("model", "harness", "effort", "task", "repeat", "run_key"):
        if key not in p:
            raise RunsExportError(f"run {run.run_id}: param {key!r} is missing")
    outcome = t.get("outcome")
    if outcome not in OUTCOMES:
        raise RunsExportError(f"run {run.run_id}: tag 'outcome' is {outcome!r}, not one of "
                              f"{', '.join(sorted(OUTCOMES))}")
    for key in ("score_strict", "score_recovered"):
        if key not in m:
            raise RunsExportError(f"run {run.run_id}: metric {key!r} is missing")
    try:
        repeat = int(p["repeat"])
        attempt = int(t.get("attempt", "1"))
    except ValueError as exc:
        raise RunsExportError(f"run {run.run_id}: param 'repeat' or tag 'attempt' is not "
                              f"a whole number ({exc})") from None
    return outcome, repeat, attempt


def _spec_columns(run: LoggedRun, outcome: str, repeat: int) -> dict[str, Any]:
    """The row's columns that SPEC section 5 requires, in its order."""
    p, m = run.params, run.metrics
    return {
        "run_id": run.run_id,
        # A record without its label: the model's default harness is not recorded,
        # so the label cannot name a non-default harness.
        "config": _text(p.get("config")) or config_label(p["model"], p["effort"]),
        "model": p["model"],
        "harness": p["harness"],
        "effort": p["effort"],
        "task_id": p["task"],
        "discipline": _text(p.get("discipline")),
        "subfield": _text(p.get("subfield")),
        "visibility": _text(p.get("visibility")),
        "repeat": repeat,
        "outcome": outcome,
        "score_strict": m["score_strict"],
        "score_recovered": m["score_recovered"],
        "scored": _flag(run, "scored"),
        "threshold": m.get("chance_threshold", math.nan),
        "n_items": _count(run, "n_items", required=False),
        "input_tokens": _count(run, "input_tokens"),
        "cache_read_tokens": _count(run, "cache_read_tokens"),
        "cache_write_tokens": _count(run, "cache_write_tokens"),
        "output_tokens": _count(run, "output_tokens"),
        "cost_usd": m.get("cost_usd", math.nan),
        "runtime_s": m.get("runtime_s", math.nan),
        "tool_calls": _count(run, "tool_calls"),
        "web_fetches": _count(run, "web_fetches"),
        "used_gpu": _flag(run, "used_gpu"),
        "flagged_exposure": _flag(run, "flagged_exposure"),
    }


def _added_columns(run: LoggedRun, attempt: int) -> dict[str, Any]:
    """The row's columns after SPEC's: identity, attempts, costs, audit, grading."""
    p, m, t = run.params, run.metrics, run.tags
    return {
        "run_key": p["run_key"],
        "task_version": _text(p.get("task_version")),
        "attempt": attempt,
        "n_attempts": 1,
        "official": True,
        "retried_from": _text(t.get("retried_from")),
        "experiment": run.experiment,
        "cache_write_1h_tokens": _count(run, "cache_write_1h_tokens", required=False) or 0,
        "cost_full_input_usd": m.get("cost_full_input_usd", math.nan),
        "cache_write_rate": _text(p.get("cache_write_rate")),
        "cost_five_minute_usd": m.get("cost_five_minute_usd", math.nan),
        "cost_actual_usd": m.get("cost_actual_usd", math.nan),
        "cli_cost_usd": m.get("cli_cost_usd", math.nan),
        "cost_disagreement": _flag(run, "cost_disagreement"),
        "long_context_requests": _count(run, "long_context_requests", required=False) or 0,
        "exposure_kinds": _text(t.get("exposure_kinds")),
        "refusal_label": _text(t.get("refusal_label")),
        "refusal_after_file": _flag(run, "refusal_after_file"),
        "requests_outside_tools": _count(run, "requests_outside_tools", required=False),
        "peak_memory_bytes": _count(run, "peak_memory_bytes", required=False),
        "gpu_seconds": m.get("gpu_seconds", math.nan),
        "cli_version": _text(p.get("cli_version")),
        # spu regrade records a new grader version as a tag (params cannot change).
        "grader_version": _text(t.get("grader_version") or p.get("grader_version")),
        "sandbox": _text(p.get("sandbox")),
        "started_at": _text(t.get("started_at")),
        "finished_at": _text(t.get("finished_at")),
        "audited_calls": _count(run, "audited_calls", required=False),
        "shell_downloads": _count(run, "shell_downloads", required=False),
        "policy_stopped": _flag(run, "policy_stopped"),
        # Every graded run logs one rho/<group> metric per comparison group.
        "n_groups": sum(1 for k in m if k.startswith("rho/")) or None,
        "departures": _text(t.get("departures")),
        # Whether the task was published before the model's training cutoff (an extra
        # column, SPEC 5): true, false or unknown (also for runs logged before it existed).
        "published_before_cutoff": t.get("published_before_cutoff") or "unknown",
        "task_published": _text(t.get("task_published")),
        "graded_from_seal": _flag(run, "graded_from_seal"),
        "_start_ms": run.start_time_ms or 0,
    }


def mark_official(rows: list[dict[str, Any]], all_attempts: bool = False
                  ) -> list[dict[str, Any]]:
    """Choose the official row of each run key and count its attempts.

    The official row is the latest attempt (:func:`~spu.tracking.query.attempt_rank`),
    across experiments: a run key logged in two experiments (a store made before
    lookups searched the whole store, or ``sweep.resume=off``) still gives one row.
    """
    by_key: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault(row["run_key"], []).append(row)
    out: list[dict[str, Any]] = []
    for attempts in by_key.values():
        attempts.sort(key=lambda r: attempt_rank(r["attempt"], r["_start_ms"], r["run_id"]))
        for row in attempts:
            row["n_attempts"] = len(attempts)
            row["official"] = row is attempts[-1]
        out.extend(attempts if all_attempts else attempts[-1:])
    return out


def frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """The runs table as a DataFrame with the SPEC columns first and stable dtypes."""
    return runs_table_frame(rows)


def table_from_logged(runs: Iterable[LoggedRun], all_attempts: bool = False) -> pd.DataFrame:
    """The runs table of logged runs.

    One row per run key and experiment, unless ``all_attempts``.
    """
    return frame(mark_official([runs_row(r) for r in runs], all_attempts))


def runs_table(tracking_uri: str, experiment: str | None = None, *,
               all_attempts: bool = False) -> pd.DataFrame:
    """The runs table of an MLflow store (SPEC section 5).

    Args:
        tracking_uri: the MLflow tracking URI (``sqlite:///outputs/mlflow.db``, a server).
        experiment: one experiment's name (``paper`` finds ``spu-paper``); None exports
            every experiment.
        all_attempts: keep earlier attempts of retried runs (``official`` false).

    Raises:
        RunsExportError: the store or the experiment does not exist, or a run lacks a
            value the table needs (the message names the run and the key).
    """
    return table_from_logged(logged_runs(tracking_uri, experiment), all_attempts)


def logged_runs(tracking_uri: str, experiment: str | None = None) -> list[LoggedRun]:
    """Every complete run of an MLflow store (or of one experiment), read in pages."""
    db = missing_sqlite_store(tracking_uri)
    if db is not None:
        raise RunsExportError(f"no tracking store at {db} (tracking URI {tracking_uri})")
    client = client_for(tracking_uri)
    if experiment is not None:
        from spu.tracking.store import experiment_name

        # ``paper`` names SPU's experiment ``spu-paper`` too.
        found = client.get_experiment_by_name(experiment) or client.get_experiment_by_name(
            experiment_name(experiment))
        if found is None:
            names = sorted(e.name for e in client.search_experiments())
            raise RunsExportError(f"{tracking_uri}: no experiment named {experiment!r} "
                                  f"(experiments: {', '.join(names) or 'none'})")
        experiments = {found.experiment_id: found.name}
    else:
        experiments = {e.experiment_id: e.name for e in client.search_experiments()}
    if not experiments:
        return []
    return [
        LoggedRun(
            run_id=run.info.run_id,
            params=run.data.params,
            metrics=run.data.metrics,
            tags=run.data.tags,
            experiment=experiments.get(run.info.experiment_id),
            start_time_ms=logged_order(run.data.tags, run.info.start_time),
        )
        for run in search_runs(client, list(experiments))
        # A run without an outcome was cut short while logging: not a complete record.
        if "outcome" in run.data.tags
    ]


def record_paths(runs_dir: Path) -> list[tuple[Path, str]]:
    """``(run.json path, run id)`` of every attempt under ``<output_root>/runs``.

    The current attempt of a run key is ``<key>/run.json`` (run id ``<key>``); earlier
    ones are ``<key>/attempts/<n>/run.json`` (run id ``<key>/attempts/<n>``).
    """
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise RunsExportError(f"{runs_dir}: no such runs folder")
    found = []
    for path in sorted(runs_dir.glob("*/run.json")) + sorted(
            runs_dir.glob("*/attempts/*/run.json")):
        found.append((path, path.parent.relative_to(runs_dir).as_posix()))
    return found


def load_record(path: Path) -> RunRecord:
    """Read one ``run.json`` (:func:`~spu.tracking.query.read_run_file`), which must exist.

    Raises:
        RunsExportError: the file is missing, unreadable or not a run record (the
            message names the file and the key).
    """
    try:
        record = read_run_file(path)
    except RunLookupError as exc:
        raise RunsExportError(str(exc)) from None
    if record is None:
        raise RunsExportError(f"{path}: no such file")
    return record


def runs_table_from_records(runs_dir: Path, *, all_attempts: bool = False) -> pd.DataFrame:
    """The runs table of the ``run.json`` files under ``runs_dir`` (tracking disabled).

    Official rows are chosen as in :func:`runs_table`.
    """
    logged = []
    for path, run_id in record_paths(runs_dir):
        run = logged_from_record(load_record(path), run_id)
        # The folder's own run.json is the newest; archived attempts/<n> in order of n.
        parts = run_id.split("/")
        order = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 1 << 62
        logged.append(dataclasses.replace(run, start_time_ms=order))
    return table_from_logged(logged, all_attempts)


def write_runs_table(df: pd.DataFrame, out: Path) -> Path:
    """Write the table as CSV or Parquet, chosen by the suffix of ``out``.

    Raises:
        RunsExportError: ``out`` ends in neither ``.csv`` nor ``.parquet``.
    """
    try:
        return Path(write_table(df, out))
    except RunsTableWriteError as exc:
        raise RunsExportError(str(exc)) from None
