"""One job of a sweep, the same under every launcher: resume, budget, attempts, tracking.

:func:`run_tracked` is what ``spu.main.run_from_config`` calls for each composed
config, so the basic launcher and the Ray launcher skip, cap and retry alike:

1. the run key's latest recorded attempt decides whether it runs
   (:mod:`spu.launch.resume`); a finished key is skipped and shown with its stored score;
2. in a sweep with ``budget.max_cost_usd``, a job starting after the cap is reached
   does not run (:mod:`spu.launch.budget`);
3. the run goes through ``run_one`` and tracking; an ``infra_error`` or ``memory_limit``
   is retried ``sweep.retries`` times (paper 3.1: once) as attempt 2 with ``retried_from``
   set to the first attempt's MLflow run id, and both attempts stay recorded.

The Ray launcher makes the same resume and budget decisions in its driver before it
asks for resources, and records attempts lost with their worker
(:func:`record_lost_attempt`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from spu.identity import (
    config_label,
    harness_label,
    identity_for,
    run_key,
    settings_change,
    settings_for,
)
from spu.launch.results import RESULT_FILE
from spu.launch.resume import (
    RETRIED_OUTCOMES,
    ResumeMode,
    RunPlan,
    latest_recorded,
    plan_run,
)
from spu.schema import (
    Identity,
    Outcome,
    ProcessEvidence,
    RunRecord,
    RunSettings,
    SandboxInfo,
)
from spu.tracking.locks import holder, run_key_lock, take
from spu.tracking.query import RecordedRun, recorded_run_from_record
from spu.tracking.store import TrackingTarget, log_run, resolve_target

log = logging.getLogger(__name__)

class ResultStatus:
    """Values of a job result's ``status``.

    Not Hydra's ``JobStatus``, which says whether a job completed or failed.
    """

    ran = "ran"
    """The run ran in this launch (possibly retried)."""
    skipped = "skipped"
    """An earlier launch finished it; the result shows the stored record."""
    not_launched = "not_launched"
    """Not run: the sweep's budget was spent before it started."""
    in_progress = "in_progress"
    """Not run: another process holds the run key (a concurrent sweep is running it)."""
    broken_task = "broken_task"
    """Not run: the task package is broken (the note says why)."""


JobStatus = ResultStatus
"""The former name of :class:`ResultStatus`, kept for code written against it."""


@dataclass(frozen=True)
class RunIdentity:
    """What names a run, read from a composed config and its task's public files."""

    run_key: str
    task_id: str
    task_version: str
    task_dir: Path
    model: str
    harness: str
    effort: str
    repeat: int
    default_harness: str | None = None
    identity: Identity | None = None
    """What runs, the fields ``run_key`` is hashed from (:mod:`spu.identity`)."""
    harness_label: str | None = None
    """The harness's own name in configuration labels (a command's entrypoint name)."""

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RunIdentity | None:
        """The identity of ``cfg``'s run, or None when no task is selected."""
        if OmegaConf.is_missing(cfg, "task") or cfg.task is None:
            return None
        if cfg.task.get("broken"):  # a broken package selected by name: nothing to run
            return None
        task, repeat = cfg.task, int(cfg.repeat)
        ident = identity_for(cfg.model, cfg.harness, cfg.effort, cfg.get("tools"),
                             Path(str(task.path)), str(task.id), str(task.version), repeat,
                             cfg.get("consensus"), cfg.get("output_root"), cfg.get("sandbox"))
        return cls(run_key=run_key(ident), task_id=str(task.id),
                   task_version=str(task.version), task_dir=Path(str(task.path)),
                   model=str(cfg.model.name), harness=str(cfg.harness.name),
                   effort=str(cfg.effort.name), repeat=repeat,
                   default_harness=cfg.model.get("default_harness"), identity=ident,
                   harness_label=harness_label(cfg.harness, cfg.get("consensus")))

    def again(self, repeat: int) -> RunIdentity:
        """The same run's identity at another ``repeat`` (its own run key)."""
        assert self.identity is not None
        ident = self.identity.model_copy(update={"repeat": int(repeat)})
        return replace(self, run_key=run_key(ident), repeat=repeat, identity=ident)

    @property
    def config(self) -> str:
        """The configuration label of the run."""
        return config_label(self.model, self.effort, self.harness, self.default_harness,
                            self.harness_label)


def say_settings_change(run_dir: Path, identity: RunIdentity, current: RunSettings) -> None:
    """One line when a skipped run was recorded with other limits or sandbox than asked now.

    Those settings are not part of a run's identity: the recorded run stands, and the
    line says what this command would have changed (``sweep.resume=off`` runs it again).
    """
    from spu.tracking.query import RunLookupError, read_run_file

    try:
        record = read_run_file(run_dir / "run.json")
    except RunLookupError:
        return
    changed = settings_change(record.settings if record is not None else None, current)
    if changed:
        log.warning("run %s (%s/%s r%d): not run again, recorded with %s; these settings are "
                    "not part of its identity (sweep.resume=off runs it again)",
                    identity.run_key, identity.task_id, identity.config, identity.repeat,
                    changed)


def tracking_target(cfg: DictConfig, output_root: Path) -> TrackingTarget | None:
    """Where ``cfg``'s runs are tracked, or None with tracking off."""
    if not cfg.tracking.enabled:
        return None
    if OmegaConf.select(cfg, "tracking.server.backend_store_uri") and not cfg.tracking.uri:
        raise ValueError("tracking=server: the Ray launcher starts that server for its sweep "
                         "(hydra/launcher=ray, ray_local or ray_cluster); under this launcher "
                         "set tracking.uri to a running server instead")
    return resolve_target(cfg.tracking, output_root, str(cfg.experiment.name))


def recorded_result(recorded: RecordedRun, status: str, note: str) -> dict[str, Any]:
    """The result row of a recorded attempt (its stored values), with how it got there."""
    return {
        "run_key": recorded.run_key,
        "task": recorded.task_id,
        "model": recorded.model,
        "harness": recorded.harness,
        "effort": recorded.effort,
        "config": recorded.config or f"{recorded.model}-{recorded.effort}",
        "repeat": recorded.repeat,
        "outcome": recorded.outcome,
        "scored": recorded.scored,
        "score": recorded.score,
        "threshold": recorded.threshold,
        "cost_usd": recorded.cost_usd,
        "runtime_s": recorded.runtime_s,
        "mlflow_run_id": recorded.tracking_id,
        "status": status,
        "attempt": recorded.attempt,
        "note": note,
    }


def not_launched_result(identity: RunIdentity, reason: str) -> dict[str, Any]:
    """The result row of a run the budget kept from starting."""
    return {
        "run_key": identity.run_key,
        "task": identity.task_id,
        "model": identity.model,
        "harness": identity.harness,
        "effort": identity.effort,
        "config": identity.config,
        "repeat": identity.repeat,
        "outcome": "-",
        "scored": False,
        "score": None,
        "threshold": None,
        "cost_usd": None,
        "runtime_s": None,
        "mlflow_run_id": None,
        "status": ResultStatus.not_launched,
        "attempt": 0,
        "note": reason,
    }


def in_progress_result(identity: RunIdentity, holder: str) -> dict[str, Any]:
    """The result row of a run key another process holds."""
    return {**not_launched_result(identity, f"running in another process (pid {holder})"),
            "status": ResultStatus.in_progress}


def write_result(folder: Path, result: dict[str, Any]) -> None:
    """Write a job's result where the results table finds it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULT_FILE).write_text(json.dumps(result))


@dataclass(frozen=True)
class Attempts:
    """The last attempt of a run in this launch."""

    record: RunRecord
    """Its run record."""
    tracking_id: str | None
    """Its MLflow run id (None with tracking off)."""
    retries: int
    """Retries made in this launch."""


def run_attempts(spec: Any, plan: RunPlan, target: TrackingTarget | None) -> Attempts:
    """Run ``spec`` from ``plan.first_attempt``, retrying up to ``plan.last_attempt``.

    ``infra_error`` and ``memory_limit`` are retried (paper 3.1); timeouts, refusals and
    policy stops are final. Each attempt is recorded (``run.json`` and tracking) before
    the next starts; the next one names it in ``retried_from`` and ``run_one`` moves its
    folder under ``attempts/``.
    """
    from spu.launch.interrupt import TALLY, run_in_flight
    from spu.runner import run_one

    attempt, retried_from = plan.first_attempt, plan.retried_from
    while True:
        with run_in_flight():
            record = run_one(replace(spec, attempt=attempt, retried_from=retried_from))
        attempt = record.attempt  # one more where run_one recorded an interrupted attempt
        run_dir = spec.output_root / "runs" / record.run_key
        TALLY.recorded += 1
        tracking_id = log_run(record, run_dir, target) if target is not None else None
        # A scored run is final: a file left before a resource limit counts (issue 30).
        if (record.outcome.value not in RETRIED_OUTCOMES or record.scored
                or attempt >= plan.last_attempt):
            return Attempts(record, tracking_id, attempt - plan.first_attempt)
        log.warning("run %s: attempt %d ended %s (%s); retrying as attempt %d",
                    record.run_key, attempt, record.outcome.value,
                    record.process.error or "no error message", attempt + 1)
        attempt, retried_from = attempt + 1, tracking_id


def plan_job(cfg: DictConfig, identity: RunIdentity, output_root: Path,
             target: TrackingTarget | None) -> tuple[RunPlan, RecordedRun | None]:
    """The resume plan of one run key, from tracking and its run folder."""
    mode = ResumeMode.parse(str(cfg.sweep.resume))
    latest = None
    if mode is not ResumeMode.off:
        latest = latest_recorded(target, output_root,
                                 {identity.run_key: identity.identity}).get(identity.run_key)
    return plan_run(latest, mode, int(cfg.sweep.retries)), latest


@dataclass(frozen=True)
class JobRun:
    """What :func:`run_tracked` did with one job."""

    status: str
    """A :class:`ResultStatus` value."""
    result: dict[str, Any] | None = None
    """The result row, for a job that did not run."""
    attempts: Attempts | None = None
    """The attempts made, for a job that ran."""


_BUDGET_SAID: set[Path] = set()
"""Sweeps whose budget stop this process has announced."""


def budget_said(sweep_dir: Path, message: str, run_key: str) -> None:
    """Announce a sweep's budget stop once; later jobs kept from starting say so quietly."""
    if sweep_dir in _BUDGET_SAID:
        log.debug("run %s not launched: %s", run_key, message)
        return
    _BUDGET_SAID.add(sweep_dir)
    log.warning("%s; the remaining runs are not launched (relaunch with a higher "
                "budget.max_cost_usd to run them)", message)


def run_tracked(cfg: DictConfig, spec: Any, sweep_dir: Path | None = None) -> JobRun:
    """Resume check, budget check, attempts and tracking of one composed job.

    Args:
        cfg: the composed config of the job.
        spec: its :class:`~spu.runner.RunSpec`.
        sweep_dir: the sweep's folder when the job is part of one (the budget counts
            the results written there); None for a single run.
    """
    identity = RunIdentity.from_config(cfg)
    assert identity is not None, "spec_from_config has checked that a task is selected"
    # One writer per run key: held from the decision until the run is tracked.
    lock = run_key_lock(spec.output_root, identity.run_key)
    if not take(lock, blocking=False):
        log.warning("run %s (%s/%s r%d): skipped, running in another process (pid %s)",
                    identity.run_key, identity.task_id, identity.config, identity.repeat,
                    holder(lock))
        return JobRun(ResultStatus.in_progress, result=in_progress_result(identity, holder(lock)))
    try:
        return _run_locked(cfg, spec, identity, sweep_dir)
    finally:
        lock.release()


def _run_locked(cfg: DictConfig, spec: Any, identity: RunIdentity,
                sweep_dir: Path | None) -> JobRun:
    target = tracking_target(cfg, spec.output_root)
    plan, latest = plan_job(cfg, identity, spec.output_root, target)
    if plan.skip and latest is not None:
        log.debug("run %s (%s/%s r%d): skipped, %s", identity.run_key, identity.task_id,
                 identity.config, identity.repeat, plan.reason)
        say_settings_change(spec.output_root / "runs" / latest.run_key, identity,
                            settings_for(spec.limits, spec.sandbox.name, spec.launcher))
        return JobRun(ResultStatus.skipped,
                      result=recorded_result(latest, ResultStatus.skipped, plan.reason))
    limit = cfg.budget.max_cost_usd
    if limit is not None and sweep_dir is not None:
        from spu.launch.budget import sweep_ledger

        ledger = sweep_ledger(sweep_dir, float(limit))
        if ledger.reached:
            budget_said(sweep_dir, ledger.reached_message(), identity.run_key)
            return JobRun(ResultStatus.not_launched,
                          result=not_launched_result(identity, "budget"))
    if plan.first_attempt > 1:
        log.info("run %s: %s", identity.run_key, plan.reason)
    return JobRun(ResultStatus.ran, attempts=run_attempts(spec, plan, target))


def lost_attempt_record(identity: RunIdentity, sandbox_backend: str, attempt: int,
                        retried_from: str | None, reason: str) -> RunRecord:
    """The record of an attempt whose process died before it could record itself.

    A Ray worker or node that dies takes its attempt with it; the driver records the
    attempt as ``infra_error`` so that it counts as the first attempt and is retried.
    """
    return RunRecord(
        run_key=identity.run_key,
        task_id=identity.task_id,
        task_version=identity.task_version,
        model=identity.model,
        harness=identity.harness,
        effort=identity.effort,
        repeat=identity.repeat,
        identity=identity.identity,
        config=identity.config,
        outcome=Outcome.infra_error,
        sandbox=SandboxInfo(backend=sandbox_backend),
        process=ProcessEvidence(error=reason),
        attempt=attempt,
        retried_from=retried_from,
        notes=[f"attempt lost with its worker: {reason}"],
    )


@dataclass(frozen=True)
class LostAttempt:
    """What a launcher learns when the process running a job died."""

    retry: bool
    """True: the job should be launched again (its next attempt)."""
    result: dict[str, Any] | None
    """The job's final result when it should not run again."""


def record_lost_attempt(cfg: DictConfig, reason: str, retries_left: bool) -> LostAttempt:
    """Record the attempt a dead worker took with it, and say whether to launch it again.

    The run folder tells what the worker got to: a ``run.json`` there means no attempt
    was lost (``run_one`` had not started, or had finished and only tracking was
    missing, which :func:`~spu.launch.resume.latest_attempts` repairs); without one,
    the attempt in progress is recorded as ``infra_error`` (``run.json`` and tracking),
    so the next launch of the job runs the attempt after it.

    Args:
        cfg: the job's composed config.
        reason: why the worker died, in words.
        retries_left: whether the launcher still relaunches this job.
    """
    identity = RunIdentity.from_config(cfg)
    if identity is None:
        return LostAttempt(retry=False, result=None)
    output_root = Path(str(cfg.output_root)).resolve()
    lock = run_key_lock(output_root, identity.run_key)
    if not take(lock, blocking=False):
        # Another process runs the key now: the lost attempt is not ours to record.
        return LostAttempt(retry=False, result=in_progress_result(identity, holder(lock)))
    try:
        return _record_lost_locked(cfg, identity, output_root, reason, retries_left)
    finally:
        lock.release()


def _record_lost_locked(cfg: DictConfig, identity: RunIdentity, output_root: Path,
                        reason: str, retries_left: bool) -> LostAttempt:
    from spu.runner import seal_record, write_run_record

    target = tracking_target(cfg, output_root)
    run_dir = output_root / "runs" / identity.run_key
    in_progress = not (run_dir / "run.json").is_file()
    plan, latest = plan_job(cfg, identity, output_root, target)
    if not in_progress or plan.skip:
        if plan.skip and latest is not None:
            return LostAttempt(retry=False,
                               result=recorded_result(latest, ResultStatus.ran, plan.reason))
        return LostAttempt(retry=retries_left, result=None)
    record = lost_attempt_record(identity, str(cfg.sandbox.name), plan.first_attempt,
                                 plan.retried_from, reason)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_record(run_dir, record)
    seal_record(output_root, run_dir, record)
    tracking_id = log_run(record, run_dir, target) if target is not None else None
    log.warning("run %s: attempt %d lost with its worker (%s)", identity.run_key,
                record.attempt, reason)
    retry = retries_left and plan.first_attempt < plan.last_attempt
    if retry:
        return LostAttempt(retry=True, result=None)
    final = recorded_run_from_record(record, tracking_id)
    return LostAttempt(retry=False, result=recorded_result(final, ResultStatus.ran, reason))
