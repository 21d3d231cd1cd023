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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from spu.schema import Outcome
from spu.tracking.query import (
    RecordedRun,
    close_unterminated,
    read_run_file,
    recorded_run_from_record,
    recorded_runs,
)
from spu.tracking.store import TrackingTarget, log_run

log = logging.getLogger(__name__)


class ResumeMode(str, Enum):
    """What a relaunched sweep does with run keys that already have a record."""

    skip_finished = "skip_finished"
    retry_unscored = "retry_unscored"
    off = "off"

    @classmethod
    def parse(cls, value: str) -> ResumeMode:
        """The mode named ``value``; an unknown name raises naming ``sweep.resume``."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"sweep.resume={value!r}: not one of {names}") from None


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
    if latest.outcome in RETRIED_OUTCOMES and latest.attempt < 1 + retries:
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

    Tracking is the record; the run folders fill the gaps a killed process leaves:

    - a ``run.json`` newer than the latest tracked attempt (the process died after
      ``run_one`` wrote it, before tracking had it) is logged now, so the finished run
      counts instead of running twice;
    - a complete record MLflow still shows as running is marked ended;
    - with tracking off (``target`` None), ``run.json`` is the record.
    """
    keys = sorted(set(run_keys))
    tracked = recorded_runs(target, keys) if target is not None else {}
    latest: dict[str, RecordedRun] = {}
    for key in keys:
        run_dir = Path(output_root) / "runs" / key
        record = read_run_file(run_dir / "run.json")
        held = tracked.get(key)
        if record is not None and (held is None or record.attempt > held.attempt):
            tracking_id = None
            if target is not None:
                tracking_id = log_run(record, run_dir, target)
                log.warning("run %s: logged attempt %d, left untracked by a process that "
                            "was stopped", key, record.attempt)
            latest[key] = recorded_run_from_record(record, tracking_id)
        elif held is not None:
            if target is not None and not held.terminated:
                close_unterminated(target, held)
            latest[key] = held
    return latest
