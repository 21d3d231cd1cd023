"""Record runs in MLflow: one MLflow run per agent run, in one experiment per sweep.

Everything the runs table needs is logged as params, metrics and tags in one
``log_batch`` call, so :mod:`spu.tracking.export` rebuilds the table from MLflow
alone, without downloading artifacts. The run folder's files follow as artifacts:
``run.json``, ``grade.json``, the trajectory (``trajectory.jsonl.gz``, copied as a
stream), the submission folder ``output/`` (``rankings.json``, ``report.md``,
``sources.json``, ``scripts/``), the raw CLI logs ``logs/`` (gzip-compressed on
the fly above :data:`COMPRESS_LOGS_ABOVE_BYTES`) and the tools service's records ``tools/``
(``audit.jsonl``, the full answers, ``egress.jsonl``).
A file over
:data:`STORE_ONCE_ABOVE_BYTES` is stored once by content (``<artifact
root>/blobs/sha256/<ab>/<sha256>``) and the run's artifact is a small reference to it,
``<name>.blob.json``: a 200 MB output that several runs share is not copied again.

The store is made safe to share: a run's MLflow record is created tagged with its run
key, so that a record cut short (a killed process, a full disk) is found and closed by
the next launch; opening a SQLite store for the first time (which creates or migrates
its schema) is serialized by a lock file (:mod:`spu.tracking.locks`); and a store that
is corrupted, locked or full becomes one :class:`TrackingStoreError` line saying what to
do (:func:`store_fault`).

MLflow is imported inside the functions that use it, so importing this module (and
``spu``) does not load it.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import spu
from spu.config import EXPERIMENT_PREFIX, TracesConfig, TrackingConfig
from spu.identity import official_score
from spu.internals import open_mlflow_store
from spu.schema import RUN_RECORD_VERSION, Outcome, RunRecord, exposure_kinds
from spu.tasks.freshness import freshness_text
from spu.tracking.empty_store import seed_sqlite_store
from spu.tracking.locks import holder, holder_lock, take
from spu.tracking.trajectories import LEGACY_TRAJECTORY_FILE, TRAJECTORY_FILE

if TYPE_CHECKING:
    from mlflow.store.artifact.artifact_repo import ArtifactRepository
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

ARTIFACT_FILES = ("run.json", "grade.json", TRAJECTORY_FILE, LEGACY_TRAJECTORY_FILE)
"""Files of a run folder logged at the artifact root."""

ARTIFACT_DIRS = ("output", "logs", "tools", "model")
"""Folders of a run folder logged file by file (the workspace and task copy are not);
``tools/`` holds the audit log of the tools service, its full answers and the egress log;
``model/`` the model gateway's record of the run's model requests."""

COMPRESS_LOGS_ABOVE_BYTES = 1 << 20
"""Raw logs larger than this are logged gzip-compressed (``agent.stdout.gz``)."""

MAX_ARTIFACT_BYTES = 256 << 20
"""Files of the agent's folders larger than this are not logged (a note says so)."""

STORE_ONCE_ABOVE_BYTES = 16 << 20
"""Files logged larger than this are stored once by content and referenced."""

BLOB_FOLDER = "blobs/sha256"
"""Where content-addressed artifacts live under the artifact root."""

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
    traces: TracesConfig | None = None
    """The trace and transcript of each run (None: :class:`~spu.config.TracesConfig`'s)."""


def experiment_name(name: str) -> str:
    """The MLflow experiment of SPU experiment ``name``: ``spu-<name>``.

    Examples
    --------
    >>> experiment_name("default"), experiment_name("spu-paper")
    ('spu-default', 'spu-paper')
    """
    return name if name.startswith(EXPERIMENT_PREFIX) else EXPERIMENT_PREFIX + name


def resolve_target(cfg: TrackingConfig, output_root: Path, experiment: str) -> TrackingTarget:
    """Fill the defaults: SQLite and artifacts under ``output_root``.

    The experiment is ``tracking.experiment`` as given, else ``spu-<experiment.name>``
    (:func:`experiment_name`).
    """
    root = Path(output_root).resolve()
    uri = cfg.uri or f"sqlite:///{root / 'mlflow.db'}"
    artifacts = cfg.artifact_root or (root / "mlartifacts").as_uri()
    if "://" not in artifacts:
        artifacts = Path(artifacts).resolve().as_uri()
    return TrackingTarget(uri=uri, artifact_root=artifacts,
                          experiment=cfg.experiment or experiment_name(experiment),
                          traces=cfg.traces)


class TrackingStoreError(RuntimeError):
    """The tracking store cannot be used; the message names it and says what to do."""


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else None."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


_OPENED: set[str] = set()
"""SQLite stores this process has opened (created or migrated) already."""


class _KnownStoreFaults(logging.Filter):
    """Drops MLflow's traceback of a fault :func:`store_fault` turns into one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or store_fault(exc, "") is None


_FAULT_FILTER = _KnownStoreFaults()

STORE_LOCK_TIMEOUT_S = 600.0
"""Longest wait for another SPU process's turn at a SQLite store."""


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Take turns at a SQLite store with the other SPU processes (``<db>.lock``).

    SQLite lets one writer in at a time and makes the others wait a few seconds before
    failing with "database is locked"; two sweeps logging at once on a slow disk hit
    that. SPU's own processes therefore queue on a lock file instead (a server store,
    ``http://`` or ``postgresql://``, needs no turn).

    Raises:
        TrackingStoreError: the turn did not come within :data:`STORE_LOCK_TIMEOUT_S`.
    """
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    lock = holder_lock(db.with_name(db.name + ".lock"))
    if not take(lock, timeout_s=STORE_LOCK_TIMEOUT_S):
        raise TrackingStoreError(
            f"tracking store {db} has been busy for {STORE_LOCK_TIMEOUT_S:.0f} s (process "
            f"{holder(lock)} holds {lock.lock_file}): let it finish (or stop it) and relaunch")
    try:
        yield
    finally:
        lock.release()


def client_for(target: TrackingTarget | str) -> MlflowClient:
    """An MLflow client on a tracking URI (creating the SQLite folder if needed).

    The first opening of a SQLite store in a process holds ``<db>.lock``: MLflow
    creates or migrates the schema then, and two processes doing it at once collide
    (``_alembic_tmp_experiments already exists``).

    Raises:
        TrackingStoreError: the store is corrupted, locked or full (:func:`store_fault`).
    """
    from mlflow.tracking import MlflowClient

    uri = target.uri if isinstance(target, TrackingTarget) else target
    db = sqlite_path(uri)
    # MLflow logs each database error with its traceback before raising it.
    logging.getLogger("mlflow.store.db.utils").addFilter(_FAULT_FILTER)
    try:
        if db is None or uri in _OPENED:
            return MlflowClient(tracking_uri=uri)
        with store_lock(uri):
            seed_sqlite_store(db)
            client = MlflowClient(tracking_uri=uri)
            open_mlflow_store(client)  # the schema is created here
        _OPENED.add(uri)
        return client
    except Exception as exc:
        fault = store_fault(exc, uri)
        if fault is None:
            raise
        raise fault from exc


_CORRUPTED = ("is corrupted or not an MLflow database ({detail}): move it aside "
              "(mv {db} {db}.broken) and relaunch the same sweep; its finished runs are "
              "logged again from runs/<run_key>/run.json")
_LOCKED = "is locked by another process ({detail}): let it finish (or stop it) and relaunch"
_FULL = ("cannot grow: its disk is full ({detail}); free space there and relaunch "
         "(finished runs are kept in runs/ and skipped)")
_READ_ONLY = ("cannot be opened for writing ({detail}); check its folder's permissions and "
              "free space, then relaunch")

_STORE_FAULTS: dict[int, str] = {
    11: _CORRUPTED,   # SQLITE_CORRUPT
    26: _CORRUPTED,   # SQLITE_NOTADB
    5: _LOCKED,       # SQLITE_BUSY
    6: _LOCKED,       # SQLITE_LOCKED
    13: _FULL,        # SQLITE_FULL
    10: _FULL,        # SQLITE_IOERR (a write the full disk refused)
    8: _READ_ONLY,    # SQLITE_READONLY
    14: _READ_ONLY,   # SQLITE_CANTOPEN
}
"""SQLite's primary result code (``sqlite3.Error.sqlite_errorcode & 0xff``) -> advice."""


def _sqlite_errors(exc: BaseException) -> Iterator[sqlite3.Error]:
    """The ``sqlite3`` errors in ``exc``'s chain, raised as they are or wrapped.

    SQLAlchemy keeps the driver's error as ``DBAPIError.orig``; MLflow raises its own
    with SQLAlchemy's as the cause or context.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        original = getattr(current, "orig", None)  # sqlalchemy.exc.DBAPIError
        for candidate in (current, original):
            if isinstance(candidate, sqlite3.Error):
                yield candidate
        current = current.__cause__ or current.__context__


def store_fault(exc: BaseException, uri: str) -> TrackingStoreError | None:
    """One line for a store that is corrupted, locked or full; None for other errors.

    The fault is recognised by SQLite's own result code on the ``sqlite3`` error that
    MLflow and SQLAlchemy raise or wrap, never by message text; the one exception is a
    generic ``SQLITE_ERROR`` for a missing MLflow table (a database that is not MLflow's).

    Examples
    --------
    >>> import sqlite3, tempfile
    >>> db = tempfile.mkdtemp() + "/mlflow.db"
    >>> holder = sqlite3.connect(db, isolation_level=None)
    >>> _ = holder.execute("BEGIN EXCLUSIVE")
    >>> try:
    ...     sqlite3.connect(db, timeout=0).execute("SELECT 1 FROM sqlite_master")
    ... except sqlite3.OperationalError as exc:
    ...     fault = store_fault(exc, f"sqlite:///{db}")
    >>> "is locked by another process (database is locked)" in str(fault)
    True
    """
    for error in _sqlite_errors(exc):
        code = getattr(error, "sqlite_errorcode", None)
        detail = str(error).split("\n", 1)[0]
        if code is None:
            continue
        advice = _STORE_FAULTS.get(code & 0xFF)
        if advice is None and code == 1 and detail.startswith("no such table"):
            advice = _CORRUPTED  # SQLITE_ERROR: generic; a missing table names the case
        if advice is not None:
            db = sqlite_path(uri)
            where = f"tracking store {db}" if db is not None else f"tracking store {uri}"
            return TrackingStoreError(f"{where} " + advice.format(detail=detail, db=db or uri))
    return None


_EXPERIMENT_IDS: dict[tuple[str, str], str] = {}
"""(tracking URI, experiment) -> id, of the experiments this process has found: an
experiment is never renamed or deleted by SPU, and each lookup costs a store query."""


def experiment_id(client: MlflowClient, target: TrackingTarget) -> str:
    """The id of the target experiment, created with its artifact root when missing."""
    key = (target.uri, target.experiment)
    if key not in _EXPERIMENT_IDS:
        _EXPERIMENT_IDS[key] = _find_or_create_experiment(client, target)
    return _EXPERIMENT_IDS[key]


def _find_or_create_experiment(client: MlflowClient, target: TrackingTarget) -> str:
    import time

    from mlflow.exceptions import MlflowException

    from spu.tracking.ui import experiment_ui_tags

    found = client.get_experiment_by_name(target.experiment)
    if found is not None:
        ensure_ui_tags(client, found)
        return str(found.experiment_id)
    location = f"{target.artifact_root.rstrip('/')}/{target.experiment}"
    try:
        return str(client.create_experiment(
            target.experiment, artifact_location=location,
            tags=experiment_ui_tags(int(time.time() * 1000))))
    except MlflowException:
        # Another worker created it between the lookup and the create.
        found = client.get_experiment_by_name(target.experiment)
        if found is None:
            raise
        return str(found.experiment_id)


def ensure_ui_tags(client: MlflowClient, experiment: Any,
                   lengths: dict[str, int] | None = None) -> None:
    """Give an SPU experiment made before them its kind and its SPU view.

    With ``lengths`` (``spu ui``, which knows the runs: the longest ``name``, ``config``
    and ``task``), the view's columns are made as wide as those texts.
    """
    import time

    from spu.tracking.ui import EXPERIMENT_KIND_TAG, RUN_TRACKING_KIND, spu_view_tag

    tags = dict(experiment.tags or {})
    if tags.get(EXPERIMENT_KIND_TAG) is None:
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG,
                                  RUN_TRACKING_KIND)
    now = int(time.time() * 1000)
    key, value = spu_view_tag(now, lengths)
    present = tags.get(key)
    if present is None or (lengths is not None and _view_state(present) != _view_state(value)):
        client.set_experiment_tag(experiment.experiment_id, key, value)


def _view_state(tag_value: str | None) -> str | None:
    """The ``state`` of a saved view's tag value (None when absent or unreadable)."""
    try:
        return str(json.loads(tag_value)["state"]) if tag_value else None
    except (ValueError, KeyError, TypeError):
        return None


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
        "cache_write_rate": record.cache_write_rate or "",
        **identity_params(record),
    }


def identity_params(record: RunRecord) -> dict[str, str]:
    """The run's identity (SPEC 12) as ``identity.*`` params: what its run key hashes.

    Records written before the identity existed give none.
    """
    identity = record.identity
    if identity is None:
        return {}
    config, task, tools = identity.config, identity.task, identity.tools
    values = {
        "identity.key_scheme": identity.key_scheme,
        "identity.api_model": config.api_model,
        "identity.endpoint": config.endpoint,
        "identity.cli_version": config.cli_version,
        "identity.entrypoint_sha256": config.entrypoint_sha256,
        "identity.args": " ".join(config.args) if config.args else None,
        "identity.task_digest": task.task_digest,
        "identity.tools_provider": tools.provider,
        "identity.corpus_sha256": tools.corpus_sha256,
        # What a plugin changes, where set (canonical JSON, as the run key hashes it).
        "identity.env": _json_or_none(config.env),
        "identity.options": _json_or_none(config.options),
        "identity.tools_options": _json_or_none(tools.options),
        "identity.sandbox_options": _json_or_none(identity.sandbox_options),
    }
    # MLflow keeps a param to 6,000 characters; arguments are the one field that may be long.
    return {k: v[:6000] for k, v in values.items() if v}


def _json_or_none(value: Mapping[str, object]) -> str | None:
    return json.dumps(value, sort_keys=True, separators=(",", ":")) if value else None


def run_name(record: RunRecord) -> str:
    """The MLflow run name: ``<config> · <task> · r<repeat>``.

    Sorted by name, a table groups each configuration's runs; the SPU view shows the
    name uncut (:func:`spu.tracking.ui.spu_view_state`).

    Examples:
        >>> from spu.schema import RunRecord
        >>> record = RunRecord.model_construct(task_id="spu-a9sx", repeat=2, config="opus5-max",
        ...                                    model="opus5", effort="max")
        >>> run_name(record)
        'opus5-max · spu-a9sx · r2'
    """
    config = record.config or f"{record.model}-{record.effort}"
    return f"{config} · {record.task_id} · r{record.repeat}"


def agent_times_ms(record: RunRecord) -> tuple[int | None, int | None]:
    """The MLflow run's start and end (ms since the epoch): the agent's, from ``run.json``.

    The start is ``started_at`` (when the agent phase began); the end is the start plus
    the agent's ``runtime_s``, so that MLflow's Duration column is the agent's runtime.
    A record without ``started_at`` gives (None, None): MLflow's own clock then.

    Examples:
        >>> from spu.schema import RunRecord
        >>> r = RunRecord.model_construct(started_at="2026-01-02T03:04:05+00:00",
        ...                               finished_at="2026-01-02T03:06:00+00:00",
        ...                               runtime_s=90.5)
        >>> agent_times_ms(r)
        (1767323045000, 1767323135500)
    """
    from datetime import datetime

    if not record.started_at:
        return None, None
    try:
        start = int(datetime.fromisoformat(record.started_at).timestamp() * 1000)
    except ValueError:
        return None, None
    if record.runtime_s and record.runtime_s > 0:
        return start, start + int(round(record.runtime_s * 1000))
    if record.finished_at:
        try:
            end = int(datetime.fromisoformat(record.finished_at).timestamp() * 1000)
        except ValueError:
            return start, start
        return start, max(start, end)
    return start, start


def metric_name(name: str) -> str:
    """``name`` with the characters MLflow refuses in metric keys replaced by ``_``."""
    return re.sub(r"[^0-9A-Za-z_\-. /]", "_", name)


def run_metrics(record: RunRecord) -> dict[str, float]:
    """Metrics of a run: scores, per-group rho, usage, cost, time, activity."""
    usage = record.usage
    metrics: dict[str, float] = {
        "score": official_score(record.scored, record.score_strict, record.score_recovered),
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
        "cost_five_minute_usd": record.cost_by_cache_write_rate.get("five_minute"),
        "cost_actual_usd": record.cost_by_cache_write_rate.get("actual"),
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
        "refusal_after_file": _flag(record.refusal_after_file),
        "attempt": str(record.attempt),
        "record_version": record.schema_version or RUN_RECORD_VERSION,
        # Tags, not params: a key that arrives later (spu regrade) may date the source.
        "published_before_cutoff": freshness_text(record.published_before_cutoff),
        # Ended sealed (no key), then graded from its seal (spu regrade, spu grade-bundle).
        "graded_from_seal": _flag(any(p.outcome == "sealed" for p in record.grade_history)),
    }
    optional = {
        "exposure_kinds": ",".join(exposure_kinds(record.exposure_hits)),
        "retried_from": record.retried_from,
        "refusal_label": record.refusal_label,
        "evidence_disagreement": (record.evidence_disagreement or "")[:5000],
        "policy_stop_step": record.policy_stop.step[:500] if record.policy_stop else None,
        "started_at": record.started_at,
        "task_published": record.task_published,
        "training_cutoff": record.training_cutoff,
        "finished_at": record.finished_at,
        "warnings": " | ".join(record.notes)[:5000],
        # The schema departures of appendix E.1 that recovery normalized (paper Figure 6a).
        "departures": ";".join(record.grade.recovered_departures) if record.grade else "",
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
    run folder's artifacts, file by file, streamed. A logging that fails ends the
    MLflow run as FAILED where the store still answers.

    Raises:
        TrackingStoreError: the store is corrupted, locked or full.
    """
    try:
        with store_lock(target.uri):
            return _create_and_log(record, Path(run_dir), target)
    except Exception as exc:
        fault = store_fault(exc, target.uri)
        if fault is None or isinstance(exc, TrackingStoreError):
            raise
        raise fault from exc


def _create_and_log(record: RunRecord, run_dir: Path, target: TrackingTarget) -> str:
    from spu.tracking.builder import views_of

    # the trace and transcript are built (in the builder process, where a sweep opened one)
    # while the run's own record is written below
    views = views_of(record, run_dir, target.traces)
    client = client_for(target)
    exp = experiment_id(client, target)
    start_ms, _ = agent_times_ms(record)
    # Tagged with its key from the start: a record cut short is found and closed later
    # (it counts only once its ``outcome`` tag is logged, in the last batch).
    import time

    from spu.tracking.query import LOGGED_TAG

    run = client.create_run(exp, run_name=run_name(record), start_time=start_ms,
                            tags={"run_key": record.run_key, "attempt": str(record.attempt),
                                  LOGGED_TAG: str(int(time.time() * 1000))})
    run_id = run.info.run_id
    try:
        _log_record(client, run_id, record, run_dir, blob_root(target),
                    run_artifacts(run.info.artifact_uri, target.uri))
    except BaseException as exc:
        # Ctrl-C: the run was cut off, not failed (a relaunch runs it again either way).
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        try:  # best effort: a full or locked store fails this too; the next launch closes it
            client.set_terminated(run_id, status=status)
        except Exception:  # noqa: BLE001
            log.warning("run %s: MLflow run %s left RUNNING; the next launch closes it",
                        record.run_key, run_id)
        raise
    from spu.tracking.traces import log_views

    if views is not None:
        log_views(client, exp, run_id, run.info.artifact_uri, record, run_dir, target, views)
    return run_id


def run_artifacts(artifact_uri: str, tracking_uri: str) -> ArtifactRepository:
    """The artifact store of a run whose artifact URI is known.

    ``create_run`` returns it; ``MlflowClient.log_artifact`` would ask the store for the
    whole run again (its params, metrics and tags) to find it.
    """
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    return get_artifact_repository(artifact_uri, tracking_uri=tracking_uri)


def _log_record(client: MlflowClient, run_id: str, record: RunRecord, run_dir: Path,
                blobs: str | None, artifacts: ArtifactRepository) -> None:
    import time

    from mlflow.entities import Metric, Param, RunTag

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
    skipped = log_run_artifacts(artifacts, run_dir, blobs)
    if skipped:
        client.set_tag(run_id, "artifacts_skipped", ", ".join(skipped)[:5000])
    status = "FAILED" if record.outcome is Outcome.infra_error else "FINISHED"
    client.set_terminated(run_id, status=status, end_time=agent_times_ms(record)[1])


def blob_root(target: TrackingTarget) -> str:
    """Where the target's content-addressed artifacts live: ``<artifact root>/blobs/sha256``."""
    return f"{target.artifact_root.rstrip('/')}/{BLOB_FOLDER}"


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


def log_run_artifacts(artifacts: ArtifactRepository, run_dir: Path,
                      blobs: str | None = None) -> list[str]:
    """Log the run folder's artifacts into a run's store; returns the files left out.

    With ``blobs`` (an artifact URI, :func:`blob_root`), a file over
    :data:`STORE_ONCE_ABOVE_BYTES` is stored there once by content and logged as a
    reference ``<name>.blob.json`` (:func:`store_blob`).
    """
    skipped: list[str] = []
    for name in ARTIFACT_FILES:
        path = run_dir / name
        if path.is_file() and not path.is_symlink():
            artifacts.log_artifact(str(path))
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
                    size = path.stat().st_size
                if blobs is not None and size > STORE_ONCE_ABOVE_BYTES:
                    ref = store_blob(blobs, path)
                    path = Path(scratch) / "refs" / rel.parent / f"{path.name}.blob.json"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(dataclasses.asdict(ref), indent=1))
                artifacts.log_artifact(str(path), artifact_path=str(rel.parent))
    return skipped


@dataclass(frozen=True)
class BlobRef:
    """A run's reference to an artifact stored once by content."""

    sha256: str
    """Hex SHA-256 of the content."""
    bytes: int
    """Size in bytes."""
    uri: str
    """Where the content is: ``<artifact root>/blobs/sha256/<ab>/<sha256>``."""
    name: str
    """The file's name in the run folder."""


def _sha256(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def store_blob(blobs: str, path: Path) -> BlobRef:
    """Store ``path`` under ``blobs`` by content, unless that content is there already.

    Works for any MLflow artifact URI (a local folder, ``mlflow-artifacts:``, S3...);
    the artifact repository writes through a temporary name, so a reader never
    sees half a blob.
    """
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    digest, size = _sha256(path)
    repo = get_artifact_repository(blobs)
    shard = digest[:2]
    uri = f"{blobs}/{shard}/{digest}"
    present = any(info.path.rsplit("/", 1)[-1] == digest and info.file_size == size
                  for info in repo.list_artifacts(shard))
    if not present:
        with tempfile.TemporaryDirectory(prefix="spu-blob-") as tmp:
            named = Path(tmp) / digest
            os.symlink(path.resolve(), named)  # our own link: read as the named content
            repo.log_artifact(str(named), artifact_path=shard)
    return BlobRef(sha256=digest, bytes=size, uri=uri, name=path.name)


def _gzip_copy(path: Path, folder: Path) -> Path:
    """Stream ``path`` into ``folder/<name>.gz`` and return the new file."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{path.name}.gz"
    with open(path, "rb") as src, open(target, "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst, length=1 << 20)
    return target
