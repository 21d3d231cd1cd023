"""Resume decisions: run, retry or skip a run key, from what tracking already holds.

A sweep is relaunched with the same command after a crash, a kill or a budget stop.
Each run key is then decided from its latest recorded attempt
(:class:`~spu.tracking.query.RecordedRun`):

- nothing recorded: run it (attempt 1);
- an ``infra_error``, ``memory_limit`` or ``disk_limit`` whose retries are not used up (the
  driver died between the attempts, or the worker running it died): run the next attempt;
- ``sweep.resume=skip_finished`` (default): anything else is finished, skip it;
- ``sweep.resume=retry_unscored`` (``+resume=retry_unscored``): also re-run keys whose
  latest attempt ended ``infra_error`` or ``no_file``, as a new attempt with its own
  retries;
- ``sweep.resume=off``: run everything again as attempt 1 (a duplicate on purpose).

Every attempt stays recorded: a new attempt points at the one it follows through
``retried_from`` (its MLflow run id) and ``run_one`` archives the earlier attempt's
folder under ``attempts/``.

One writer per run key: a process runs a key only while it holds the key's lock
(:func:`spu.tracking.locks.run_key_lock`), taken before the decision and held until
the run is tracked (:func:`spu.launch.job.run_tracked`). Repairs of what a killed
process left (an untracked ``run.json``, a record left RUNNING) are made under the
same lock, so a concurrent sweep never repairs, and duplicates, a run in progress.
A key is one record whatever experiment holds it: the lookups search the whole store.

Stores written before run identity (:mod:`spu.identity`) keep their runs under keys of
the first scheme. :func:`latest_recorded` looks a run up by its key, then, where
nothing is recorded there, by its first-scheme key (:func:`~spu.identity.legacy_run_key`),
and takes the record found there as this run's when its run folder agrees with the
identity (:func:`legacy_record_matches`): the staged task has the same digest, the agent
file given to the sandbox (``harness=command``) the same SHA-256, the CLI the same
version. Old records are read, never rewritten (a sealed run's files stay as signed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from spu.config import ResumeMode
from spu.identity import identity_legacy_key
from spu.schema import Identity, Outcome
from spu.tracking.locks import holder, run_key_lock, take
from spu.tracking.query import (
    KeyRecords,
    RecordedRun,
    RunLookupError,
    close_cut_short,
    close_unterminated,
    key_records,
    read_run_file,
    recorded_run_from_record,
)
from spu.tracking.store import TrackingTarget, log_run

log = logging.getLogger(__name__)


RETRIED_OUTCOMES = frozenset({Outcome.infra_error.value, Outcome.memory_limit.value,
                              Outcome.disk_limit.value})
"""Outcomes retried ``sweep.retries`` times: "any attempt interrupted before completion by
an API error, a truncated session or the memory limit was rerun once" (paper 3.1). Start
failures, API errors, truncated sessions and lost workers are ``infra_error``; the disk
limit (``limits.disk_gb``) is a resource limit like memory."""

RETRIED_ON_REQUEST = frozenset({Outcome.infra_error.value, Outcome.no_file.value})
"""Outcomes that ``sweep.resume=retry_unscored`` runs again."""


@dataclass(frozen=True)
class RunPlan:
    """What to do with one run key."""

    skip: bool
    """True: a finished record exists and nothing runs."""
    first_attempt: int = 1
    """Attempt number of the first attempt to run."""
    last_attempt: int = 1
    """Highest attempt number this launch may reach by retrying ``infra_error``."""
    retried_from: str | None = None
    """Tracking id of the attempt the first one follows, if any."""
    reason: str = ""
    """Why, in words (shown in logs)."""


def plan_run(latest: RecordedRun | None, mode: ResumeMode | str, retries: int) -> RunPlan:
    """Decide whether and how to run a key, given its latest recorded attempt.

    Args:
        latest: the latest recorded attempt, or None.
        mode: ``sweep.resume``.
        retries: ``sweep.retries``, retries of an ``infra_error`` (paper 3.1: one).

    Examples:
        >>> plan_run(None, "skip_finished", 1)
        RunPlan(skip=False, first_attempt=1, last_attempt=2, retried_from=None, reason='new')
    """
    mode = ResumeMode.parse(mode) if isinstance(mode, str) else mode
    if retries < 0:
        raise ValueError(f"sweep.retries={retries}: must be 0 or more")
    if latest is None or mode is ResumeMode.off:
        why = "new" if latest is None else "sweep.resume=off"
        return RunPlan(skip=False, first_attempt=1, last_attempt=1 + retries, reason=why)
    nxt = latest.attempt + 1
    if latest.outcome in RETRIED_OUTCOMES and not latest.scored and latest.attempt < 1 + retries:
        return RunPlan(skip=False, first_attempt=nxt, last_attempt=1 + retries,
                       retried_from=latest.tracking_id,
                       reason=f"attempt {latest.attempt} ended {latest.outcome}; retrying")
    if mode is ResumeMode.retry_unscored and latest.outcome in RETRIED_ON_REQUEST:
        return RunPlan(skip=False, first_attempt=nxt, last_attempt=nxt + retries,
                       retried_from=latest.tracking_id,
                       reason=f"sweep.resume=retry_unscored: attempt {latest.attempt} "
                              f"ended {latest.outcome}")
    return RunPlan(skip=True, first_attempt=latest.attempt, last_attempt=latest.attempt,
                   retried_from=latest.tracking_id,
                   reason=f"finished earlier ({latest.outcome}, attempt {latest.attempt})")


def latest_attempts(target: TrackingTarget | None, output_root: Path,
                    run_keys: Iterable[str]) -> dict[str, RecordedRun]:
    """The latest recorded attempt of each key, tracking and run folders reconciled.

    Tracking is the record (every experiment of the store); the run folders fill the
    gaps a killed process leaves:

    - a ``run.json`` newer than the latest tracked attempt (the process died after
      ``run_one`` wrote it, before tracking had it) is logged now, so the finished run
      counts instead of running twice;
    - a complete record MLflow still shows as running is marked ended, and a record
      cut short before its outcome (no ``outcome`` tag) is closed as KILLED;
    - with tracking off (``target`` None), ``run.json`` is the record.

    Repairs need the key's lock: a key another process holds is left to it (its
    tracked record, if any, is returned as it is).
    """
    keys = sorted(set(run_keys))
    held_records = key_records(target, keys) if target is not None else KeyRecords({}, {})
    latest: dict[str, RecordedRun] = {}
    for key in keys:
        run_dir = Path(output_root) / "runs" / key
        held = held_records.latest.get(key)
        record = read_run_file(run_dir / "run.json")
        untracked = record is not None and (held is None or record.attempt > held.attempt)
        repairs = target is not None and (untracked or (held is not None and not held.terminated)
                                          or key in held_records.cut_short)
        if not repairs:
            if untracked and record is not None:  # tracking off: the run folder is the record
                latest[key] = recorded_run_from_record(record)
            elif held is not None:
                latest[key] = held
            continue
        assert target is not None
        lock = run_key_lock(Path(output_root), key)
        if not take(lock, blocking=False):
            log.info("run %s: held by another process (pid %s); left to it", key, holder(lock))
            if held is not None:
                latest[key] = held
            continue
        try:
            latest.update(_repair(target, run_dir, key))
        finally:
            lock.release()
    return latest


def _repair(target: TrackingTarget, run_dir: Path, key: str) -> dict[str, RecordedRun]:
    """Under the key's lock: close cut-short records, log an untracked ``run.json``.

    Tracking and the run folder are read again here: the process that held the key
    before may have finished and tracked it since the first look.
    """
    found = key_records(target, [key])
    held = found.latest.get(key)
    if key in found.cut_short:
        close_cut_short(target, found.cut_short[key])
        log.warning("run %s: closed %d MLflow record(s) cut short by a stopped process",
                    key, len(found.cut_short[key]))
    record = read_run_file(run_dir / "run.json")
    if record is not None and (held is None or record.attempt > held.attempt):
        tracking_id = log_run(record, run_dir, target)
        log.warning("run %s: logged attempt %d, left untracked by a process that "
                    "was stopped", key, record.attempt)
        return {key: recorded_run_from_record(record, tracking_id)}
    if held is not None:
        if not held.terminated:
            close_unterminated(target, held)
        return {key: held}
    return {}


def latest_recorded(target: TrackingTarget | None, output_root: Path,
                    wanted: Mapping[str, Identity | None]) -> dict[str, RecordedRun]:
    """:func:`latest_attempts` of each key, an older store's record standing in where it matches.

    Args:
        target: the tracking store (None: tracking off, run folders only).
        output_root: where the run folders are.
        wanted: each run key with the identity it was hashed from (None: key only).
    """
    latest = latest_attempts(target, output_root, wanted)
    by_legacy: dict[str, list[tuple[str, Identity]]] = {}
    for key, ident in wanted.items():
        if key not in latest and ident is not None:
            by_legacy.setdefault(identity_legacy_key(ident), []).append((key, ident))
    if not by_legacy:
        return latest
    found = latest_attempts(target, output_root, by_legacy)
    for legacy, held in found.items():
        for key, ident in by_legacy[legacy]:
            if legacy_record_matches(Path(output_root) / "runs" / legacy, ident):
                log.debug("run %s: recorded under its first-scheme key %s", key, legacy)
                latest[key] = held
    return latest


def legacy_record_matches(run_dir: Path, identity: Identity) -> bool:
    """Whether the first-scheme run in ``run_dir`` ran what ``identity`` names.

    The first scheme hashed names only; the run folder shows the rest: the staged task
    (``task/``) must have ``identity``'s digest, the agent file the sandbox was given
    (``workspace/.agent/``) the entrypoint's SHA-256, and a recorded CLI version the
    configured one. A folder without its ``run.json`` or staged task never matches (the
    run runs again). What the folder cannot show (model endpoint, arguments, tools) is
    taken as unchanged.
    """
    from spu.tasks.digest import file_sha256, task_digest

    try:
        record = read_run_file(run_dir / "run.json")
    except RunLookupError:
        return False
    if record is None or record.identity is not None:
        return False
    config = identity.config
    if (record.model, record.harness, record.effort, record.task_id, record.task_version,
            record.repeat) != (config.model, config.harness, config.effort, identity.task.id,
                               identity.task.version, identity.repeat):
        return False
    staged = run_dir / "task"
    if not staged.is_dir() or staged.is_symlink() \
            or task_digest(staged) != identity.task.task_digest:
        return False
    if config.entrypoint_sha256 is not None:
        agent_dir = run_dir / "workspace" / ".agent"
        given = set()
        if agent_dir.is_dir() and not agent_dir.is_symlink():
            given = {file_sha256(f) for f in agent_dir.iterdir()
                     if f.is_file() and not f.is_symlink()}
        if config.entrypoint_sha256 not in given:
            return False
    return not (record.cli_version and config.cli_version
                and record.cli_version != config.cli_version)
