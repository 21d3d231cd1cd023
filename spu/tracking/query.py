"""Look up recorded runs by run key: what a sweep needs to resume without duplicates.

A run key (:func:`spu.identity.run_key`) names one run of one configuration on one task
version and repeat, whatever experiment or launcher ran it: lookups search every
experiment of the store, so ``experiment=single`` finds the run ``experiment=default``
finished and does not log it again. Each attempt of it is one MLflow run tagged with
the key. A record counts once its ``outcome`` tag is logged: :func:`spu.tracking.store.log_run`
logs the key and the outcome in the same batch, so a run cut short while logging has
neither, and the export (:mod:`spu.tracking.export`) skips it for the same reason.
The latest attempt of a key is the one that counts: the largest
:func:`attempt_rank` (highest ``attempt``, then latest start, then largest run id), the
rule the runs table uses too.

The same facts are read from ``<output_root>/runs/<key>/run.json`` when tracking is
off (:func:`read_run_file`). This module also holds what the export shares with the
lookups: reading a ``run.json``, the missing-store check and the paged run search.
MLflow is imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from spu.identity import official_score
from spu.schema import RunRecord
from spu.tasks.package import validation_message
from spu.tracking.locks import RUN_KEY_PATTERN
from spu.tracking.store import TrackingTarget, client_for, store_lock

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient


PAGE_SIZE = 5_000
"""Runs fetched per MLflow search page."""


class RunLookupError(ValueError):
    """A recorded run cannot be read; the message names the store or file and the key."""


@dataclass(frozen=True)
class RecordedRun:
    """The latest recorded attempt of one run key: enough to skip, retry or show it."""

    run_key: str
    """The run key."""
    attempt: int
    """Attempt number of this record (1, or more after retries)."""
    outcome: str
    """How the attempt ended (SPEC section 5)."""
    scored: bool
    """Whether the attempt is scored (paper 3.1)."""
    score: float | None
    """The score the results table shows: recovered if scored, else strict."""
    task_id: str
    """Task identifier."""
    model: str
    """Model configuration name."""
    harness: str
    """Harness name."""
    effort: str
    """Reasoning effort name."""
    repeat: int
    """Repeat index."""
    threshold: float | None = None
    """Chance threshold of the task."""
    cost_usd: float | None = None
    """Estimated API cost of the attempt."""
    runtime_s: float | None = None
    """Wall-clock duration of the agent."""
    tracking_id: str | None = None
    """MLflow run id, or None for a record read from ``run.json`` only."""
    terminated: bool = True
    """False when MLflow still shows the run as running (its logger was cut short)."""
    config: str = ""
    """Configuration label (``opus5-max``; the harness named when not the model's default)."""


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def recorded_run_from_mlflow(run: Run) -> RecordedRun | None:
    """The recorded attempt behind one MLflow run, or None when it is not a complete record.

    Raises:
        RunLookupError: the run has a run key and an outcome but a malformed ``attempt``
            tag or ``repeat`` param (the message names the run and the key).
    """
    tags: Mapping[str, str] = run.data.tags
    params: Mapping[str, str] = run.data.params
    metrics: Mapping[str, float] = run.data.metrics
    key, outcome = tags.get("run_key"), tags.get("outcome")
    if not key or not outcome:
        return None
    try:
        attempt = int(tags.get("attempt", "1"))
        repeat = int(params.get("repeat", "0"))
    except ValueError as exc:
        raise RunLookupError(f"MLflow run {run.info.run_id}: tag 'attempt' or param 'repeat' "
                             f"is not a whole number ({exc})") from None
    return RecordedRun(
        run_key=key,
        attempt=attempt,
        outcome=outcome,
        scored=tags.get("scored") == "true",
        score=_finite(metrics.get("score")),
        task_id=params.get("task", ""),
        model=params.get("model", ""),
        harness=params.get("harness", ""),
        effort=params.get("effort", ""),
        repeat=repeat,
        threshold=_finite(metrics.get("chance_threshold")),
        cost_usd=_finite(metrics.get("cost_usd")),
        runtime_s=_finite(metrics.get("runtime_s")),
        tracking_id=run.info.run_id,
        terminated=run.info.status != "RUNNING",
        config=params.get("config", ""),
    )


def recorded_run_from_record(record: RunRecord, tracking_id: str | None = None) -> RecordedRun:
    """The recorded attempt of a run record (as read from ``run.json``)."""
    return RecordedRun(
        run_key=record.run_key,
        attempt=record.attempt,
        outcome=record.outcome.value,
        scored=record.scored,
        score=official_score(record.scored, record.score_strict, record.score_recovered),
        task_id=record.task_id,
        model=record.model,
        harness=record.harness,
        effort=record.effort,
        repeat=record.repeat,
        threshold=record.threshold,
        cost_usd=record.cost_usd,
        runtime_s=record.runtime_s,
        tracking_id=tracking_id,
        config=record.config or "",
    )


def read_run_file(path: Path) -> RunRecord | None:
    """The run record in ``path`` (a ``run.json``), or None when there is none.

    Raises:
        RunLookupError: the file exists but is not a run record (names the file and key).
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunLookupError(f"{path}: cannot be read ({exc})") from None
    try:
        return RunRecord.model_validate_json(data)
    except ValidationError as exc:
        raise RunLookupError(validation_message(path, exc)) from None


LOGGED_TAG = "logged_ms"
"""Tag holding when a record was logged (ms since the epoch): which copy of a key is the
latest. The MLflow start time is the agent's (two copies of one record share it)."""


def logged_order(tags: dict[str, str], start_time_ms: int | None) -> int:
    """When a record was logged: its :data:`LOGGED_TAG`, else its MLflow start time.

    Records logged before the tag existed started when they were logged.

    Examples
    --------
    >>> logged_order({"logged_ms": "2000"}, 1000), logged_order({}, 1000)
    (2000, 1000)
    """
    try:
        return int(tags[LOGGED_TAG])
    except (KeyError, ValueError):
        return int(start_time_ms or 0)


def attempt_rank(attempt: int, start_time_ms: int | None, run_id: str | None
                 ) -> tuple[int, int, str]:
    """Sort key of the attempts of one run key: the largest is the latest, the official one.

    Highest ``attempt``, then latest start, then largest run id, so that a tie never
    depends on the order in which the store returns the runs.

    Examples
    --------
    >>> max([(1, 5, "b"), (2, 3, "a"), (2, 3, "c")], key=lambda r: attempt_rank(*r))
    (2, 3, 'c')
    """
    return attempt, start_time_ms or 0, run_id or ""


def latest_per_key(runs: Iterable[tuple[RecordedRun, int]]) -> dict[str, RecordedRun]:
    """The latest attempt of each run key, by :func:`attempt_rank`.

    ``runs`` holds ``(record, start time in ms)`` pairs.
    """
    best: dict[str, tuple[tuple[int, int, str], RecordedRun]] = {}
    for run, started in runs:
        rank = attempt_rank(run.attempt, started, run.tracking_id)
        held = best.get(run.run_key)
        if held is None or rank > held[0]:
            best[run.run_key] = (rank, run)
    return {key: run for key, (_, run) in best.items()}


def search_runs(client: MlflowClient, experiment_ids: list[str],
                filter_string: str = "") -> list[Run]:
    """Every active run of the experiments that matches ``filter_string``, read in pages."""
    runs: list[Run] = []
    token = None
    while True:
        page = client.search_runs(experiment_ids, filter_string=filter_string,
                                  max_results=PAGE_SIZE, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def missing_sqlite_store(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI when it does not exist, else None.

    Reading runs must not create an empty store as a side effect (MLflow would).

    Examples
    --------
    >>> missing_sqlite_store("sqlite:////nowhere/mlflow.db")
    PosixPath('/nowhere/mlflow.db')
    >>> missing_sqlite_store("http://localhost:5000") is None
    True
    """
    if not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///"):])
    return None if db.is_file() else db


@dataclass(frozen=True)
class KeyRecords:
    """What the store holds for some run keys, across all its experiments."""

    latest: dict[str, RecordedRun]
    """The latest complete attempt of each key that has one."""
    cut_short: dict[str, list[str]]
    """MLflow run ids of records still RUNNING without an outcome (their logger died)."""


def key_records(target: TrackingTarget, run_keys: Iterable[str] | None = None) -> KeyRecords:
    """The records of run keys in every experiment of the target's store.

    Args:
        target: tracking URI (experiment and artifact root unused: a run key is one
            record whatever experiment holds it).
        run_keys: only these keys (one search per key when there are at most 20,
            else one search of the store filtered here); None for every key.

    Raises:
        RunLookupError: a run key is malformed, or a record is.
    """
    if missing_sqlite_store(target.uri) is not None:
        return KeyRecords({}, {})
    with store_lock(target.uri):
        stored = run_key_index(target.uri)
        return _key_records(client_for(target), run_keys, stored)


PER_KEY_AT_MOST = 20
"""Keys looked up one search each, whatever the store holds."""
_INDEXED: dict[str, int] = {}
"""SQLite stores this process has indexed by run key, with their runs then."""


def run_key_index(uri: str) -> int | None:
    """Index a SQLite store's tags by value, once per process; the runs it holds.

    MLflow's own index of tags starts with the tag's name, so a search for one run key
    read every run's ``run_key`` tag: 110 ms per key at 100,000 runs, 10 ms with this
    index (and at any size). The runs are counted by the highest row id, so deleted
    runs still count: the number only chooses between one search per key and one of the
    whole store. None for a store that is not a SQLite file (its server's database is
    left as it is).
    """
    from spu.tracking.store import sqlite_path

    db = sqlite_path(uri)
    if db is None or not db.is_file():
        return None
    import sqlite3

    con = sqlite3.connect(db, timeout=30)
    try:
        if uri not in _INDEXED:
            con.execute("CREATE INDEX IF NOT EXISTS spu_tags_key_value ON tags (key, value)")
            con.commit()
        # The highest rowid: the runs ever written, an upper bound of those held, read
        # in constant time (COUNT(*) walks the table: 6 ms at 100,000 runs).
        runs = int(con.execute("SELECT MAX(rowid) FROM runs").fetchone()[0] or 0)
    except sqlite3.Error:  # not an MLflow store (yet): MLflow says what is wrong
        return None
    finally:
        con.close()
    _INDEXED[uri] = runs
    return runs


def _key_records(client: MlflowClient, run_keys: Iterable[str] | None,
                 stored: int | None = None) -> KeyRecords:
    experiments = [str(e.experiment_id) for e in client.search_experiments()]
    if not experiments:
        return KeyRecords({}, {})
    keys = None if run_keys is None else sorted(set(run_keys))
    for key in keys or ():
        if not RUN_KEY_PATTERN.fullmatch(key):
            raise RunLookupError(f"{key!r} is not a run key (16 hex digits)")
    # One search per key where that reads less than the whole store: a few keys, or an
    # indexed store that holds more runs than twice the keys (a sweep relaunched in a
    # root that has grown). Otherwise the whole store, once.
    if keys is not None and (len(keys) <= PER_KEY_AT_MOST
                             or (stored is not None and stored >= 2 * len(keys))):
        found = [r for key in keys
                 for r in search_runs(client, experiments, f"tags.run_key = '{key}'")]
    else:
        found = search_runs(client, experiments)
    pairs = []
    cut_short: dict[str, list[str]] = {}
    for run in found:
        run_key = run.data.tags.get("run_key")
        if run_key is None or (keys is not None and run_key not in keys):
            continue
        recorded = recorded_run_from_mlflow(run)
        if recorded is not None:
            pairs.append((recorded, logged_order(run.data.tags, run.info.start_time)))
        elif run.info.status == "RUNNING":
            cut_short.setdefault(run_key, []).append(run.info.run_id)
    return KeyRecords(latest_per_key(pairs), cut_short)


def recorded_runs(target: TrackingTarget,
                  run_keys: Iterable[str] | None = None) -> dict[str, RecordedRun]:
    """The latest complete attempt of every run key recorded in the target's store.

    Every experiment counts (:func:`key_records`).

    Raises:
        RunLookupError: a run key is malformed, or a record is.
    """
    return key_records(target, run_keys).latest


def find_recorded_run(target: TrackingTarget, run_key: str) -> RecordedRun | None:
    """The latest complete attempt of ``run_key`` in the target's store, or None."""
    return recorded_runs(target, [run_key]).get(run_key)


def close_unterminated(target: TrackingTarget, run: RecordedRun) -> None:
    """Mark a complete record still shown as running as ended (its logger was killed)."""
    if run.terminated or run.tracking_id is None:
        return
    status = "FAILED" if run.outcome == "infra_error" else "FINISHED"
    with store_lock(target.uri):
        client_for(target).set_terminated(run.tracking_id, status=status)


def close_cut_short(target: TrackingTarget, run_ids: Iterable[str]) -> None:
    """End records whose logger died before their outcome was logged: KILLED.

    Call it only while holding the run key's lock (:func:`spu.tracking.locks.run_key_lock`):
    then no live process is still logging them.
    """
    with store_lock(target.uri):
        client = client_for(target)
        for run_id in run_ids:
            client.set_tag(run_id, "closed", "cut short before its outcome was logged; "
                                             "closed by a later launch")
            client.set_terminated(run_id, status="KILLED")
