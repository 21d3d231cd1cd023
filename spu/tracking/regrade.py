"""``spu regrade``: re-score the stored submissions of finished runs, agents untouched.

After an answer-key fix or a grader change, every finished run under
``<output_root>/runs/<run_key>/`` is graded again from its stored
``output/rankings.json``, against the task found by id under a task root and the
answer key under an answer root, in the same isolated process as a live run. The
run's ``grade.json`` and ``run.json`` get the new grades; the replaced ones are kept
(``history`` in ``grade.json``, ``grade_history`` in ``run.json``), each grade with
its grader version. With a tracking URI, the MLflow run with the same ``run_key`` tag
(and attempt) gets the new score metrics (as a new step) and outcome tags.

Regrading re-runs the last stage of :func:`spu.runner.run_one`, so it applies the
same outcome and scoring rules (:mod:`spu.grading.outcome`); MLflow is imported
only when a tracking URI is given.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spu.gateway import MODEL_DIR
from spu.gateway.verdict import files_at_refusals
from spu.grading.chance import chance_threshold
from spu.grading.isolated import IsolatedGrades, grade_shared
from spu.grading.outcome import (
    FILE_OUTCOMES,
    RERUN_NOTE,
    RunEvidence,
    counts_as_file,
    is_scored,
    judge,
    refused_after_file,
)
from spu.grading.rules import AnswerKeyError, check_answer_key
from spu.grading.submission import read_submission
from spu.schema import AnswerKey, Contract, Grade, Outcome, PastGrade, RunRecord
from spu.seal.verify import seal_faults
from spu.tasks.freshness import published_before_cutoff
from spu.tasks.package import (
    TaskLoadError,
    TaskPackage,
    discover_tasks,
    load_answers,
    load_meta,
    load_task,
)

SCORE_METRICS = ("score", "score_strict", "score_recovered", "chance_threshold")
"""MLflow metrics a regrade rewrites, besides the per-group ``rho/<group>``."""


class RegradeError(RuntimeError):
    """One run cannot be regraded; the message names the run folder and the reason."""


@dataclass(frozen=True)
class RegradeResult:
    """What a regrade did to one run."""

    run_key: str
    """The run's key (its folder name)."""
    status: str
    """``regraded`` (new grade written), ``unchanged`` (same grade) or ``failed``."""
    task_id: str | None = None
    """The task of the run."""
    old_score: float | None = None
    """The run's ``score_recovered`` before."""
    new_score: float | None = None
    """The run's ``score_recovered`` after."""
    old_outcome: str | None = None
    """The outcome before."""
    new_outcome: str | None = None
    """The outcome after."""
    grader_version: str | None = None
    """Version of the grader that made the new grade."""
    isolation: str | None = None
    """How the grading process was isolated."""
    tracking_runs: int = 0
    """MLflow runs updated."""
    error: str | None = None
    """Why the run failed to regrade."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def find_task(task_root: Path, task_id: str) -> Path:
    """The folder of task ``task_id`` under ``task_root`` (by folder name, else by ``task.yaml``).

    Raises:
        TaskLoadError: When no task under ``task_root`` has that id.
    """
    direct = Path(task_root) / task_id
    if (direct / "task.yaml").is_file():
        return direct
    for folder in discover_tasks(task_root):
        try:
            if load_meta(folder).id == task_id:
                return folder
        except TaskLoadError:
            continue
    raise TaskLoadError(f"{task_root}: no task with id {task_id!r}")


def _write_json_atomic(path: Path, data: str) -> None:
    tmp = path.with_name(f".{path.name}.regrade-tmp")
    tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)


def _without_isolation(grade: Grade | None) -> dict[str, Any] | None:
    return None if grade is None else grade.model_dump(mode="json", exclude={"isolation"})


def _strip(grade: Any) -> Any:
    if isinstance(grade, dict):
        return {k: v for k, v in grade.items() if k != "isolation"}
    return grade


def _stored_grades(run_dir: Path, record: RunRecord) -> dict[str, Any]:
    path = run_dir / "grade.json"
    if not path.is_file():
        return {"strict": None, "recovered": _without_isolation(record.grade), "history": []}
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RegradeError(f"{path}: cannot be read ({exc})") from None
    if not isinstance(stored, dict):
        raise RegradeError(f"{path}: not a JSON object")
    stored.setdefault("history", [])
    return stored


def _contract_for(task: TaskPackage, record: RunRecord, accept_version_change: bool,
                  run_dir: Path) -> Contract:
    if record.task_version == task.version:
        return task.contract
    if not accept_version_change:
        raise RegradeError(
            f"{run_dir / 'run.json'}: task_version: the run saw version "
            f"{record.task_version!r}, the task under the task root is {task.version!r}; "
            "pass --accept-version-change to grade it against the current contract and key"
        )
    # The submission names the version the agent was given; the items and the
    # measured values are the current ones.
    return task.contract.model_copy(update={"task_version": record.task_version})


def excluded_for_rerun(record: RunRecord, outcome: Outcome) -> bool:
    """Whether the run was excluded to be rerun past a resource limit, and stays so.

    ``run.json``'s ``excluded_for_rerun``; a record written before that field says it in
    its notes only (:data:`~spu.grading.outcome.RERUN_NOTE`).
    """
    return record.excluded_for_rerun or RERUN_NOTE.format(outcome=outcome.value) in record.notes


def _new_record(record: RunRecord, grades: IsolatedGrades, threshold: float,
                submitted: bool, past: PastGrade, task_version: str,
                published: str | None = None) -> RunRecord:
    # Outcomes not decided by the file (refusal, timeout...) survive a regrade unchanged.
    outcome = record.outcome
    if outcome in FILE_OUTCOMES:
        outcome = judge(RunEvidence.from_process(record.process, submitted=submitted),
                        grades.recovered).outcome
    notes = list(record.notes)
    if grades.warning and grades.warning not in notes:
        notes.append(grades.warning)
    if task_version != record.task_version:
        notes.append(f"regraded against task version {task_version}'s contract and answer "
                     f"key (the run saw version {record.task_version})")
    return record.model_copy(update={
        "outcome": outcome,
        "scored": is_scored(outcome, grades.recovered,
                            score_limits=not excluded_for_rerun(record, outcome)),
        "excluded_for_rerun": excluded_for_rerun(record, outcome),
        "refusal_after_file": refused_after_file(outcome, grades.recovered),
        "score_strict": grades.strict.score,
        "score_recovered": grades.recovered.score,
        "grade": grades.recovered,
        "threshold": threshold,
        "notes": notes,
        "grade_history": [*record.grade_history, past],
        # The key that arrived may date the source: the run's freshness follows it.
        "task_published": published,
        "published_before_cutoff": published_before_cutoff(published, record.training_cutoff),
    })


def _broken_seal(run_dir: Path, record: RunRecord) -> tuple[RegradeResult, RunRecord] | None:
    """A sealed run whose sealed files changed: recorded ``seal_broken``, never graded."""
    faults = seal_faults(run_dir)
    if not faults:
        return None
    new = record.model_copy(update={"outcome": Outcome.seal_broken, "scored": False,
                                    "notes": [*record.notes, f"seal broken: {faults[0]}"]})
    _write_json_atomic(run_dir / "run.json", new.model_dump_json(indent=1))
    return RegradeResult(
        run_key=record.run_key, status="regraded", task_id=record.task_id,
        old_score=record.score_recovered, new_score=record.score_recovered,
        old_outcome=record.outcome.value, new_outcome=Outcome.seal_broken.value,
        grader_version=None, isolation=None), new


def _read_record(run_json: Path) -> RunRecord:
    """The run record in ``run_json``; RegradeError when it cannot be read."""
    try:
        return RunRecord.model_validate_json(run_json.read_bytes())
    except OSError as exc:
        raise RegradeError(f"{run_json}: cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise RegradeError(f"{run_json}: not a run record ({exc})") from None


def _task_and_key(run_dir: Path, record: RunRecord, task_root: Path,
                  answers_root: Path | None) -> tuple[TaskPackage, AnswerKey]:
    """The run's trusted task and its checked answer key; RegradeError when not."""
    try:
        task = load_task(find_task(task_root, record.task_id))
        answers_path = task.answers_path(answers_root)
        answers = load_answers(answers_path)
        check_answer_key(task.contract, answers)
    except TaskLoadError as exc:
        raise RegradeError(f"{run_dir.name}: {exc}") from None
    except AnswerKeyError as exc:
        raise RegradeError(f"{run_dir.name}: {answers_path}: {exc}") from None
    return task, answers


def _grade_again(run_dir: Path, record: RunRecord, contract: Contract, answers: AnswerKey,
                 submission: bytes | None, isolation: str) -> IsolatedGrades:
    """The run's submission graded again; RegradeError when grading fails."""
    try:
        grades = grade_shared(contract, answers, submission, isolation=isolation)
        if record.outcome is Outcome.refusal and not counts_as_file(grades.recovered):
            # As the run was graded: on the file a refused request arrived with, if any.
            for kept in files_at_refusals(run_dir / MODEL_DIR):
                at_refusal = grade_shared(contract, answers, kept, isolation=isolation)
                if counts_as_file(at_refusal.recovered):
                    grades = at_refusal
                    break
    except (RuntimeError, ValueError, OSError) as exc:
        raise RegradeError(f"{run_dir.name}: grading failed: {exc}") from None
    return grades


def _write_grade(run_dir: Path, stored: dict[str, Any], grades: IsolatedGrades,
                 replaced_at: str, reason: str | None) -> None:
    """``grade.json`` with the new grades, the ones they replace added to its history."""
    history = [*stored["history"], {
        "strict": stored.get("strict"), "recovered": stored.get("recovered"),
        "replaced_at": replaced_at, "reason": reason,
    }]
    _write_json_atomic(run_dir / "grade.json", json.dumps({
        "strict": grades.strict.model_dump(mode="json"),
        "recovered": grades.recovered.model_dump(mode="json"),
        "history": history,
    }, indent=1))


def regrade_run(
    run_dir: Path,
    task_root: Path,
    answers_root: Path | None = None,
    isolation: str = "auto",
    reason: str | None = None,
    accept_version_change: bool = False,
) -> tuple[RegradeResult, RunRecord | None]:
    """Regrade one finished run folder in place.

    Returns:
        What happened, and the new run record (``None`` when nothing was written).

    Raises:
        RegradeError: When the run folder, its task or its answer key cannot be read,
            or grading fails; nothing of the run is changed then.
    """
    run_dir = Path(run_dir)
    run_json = run_dir / "run.json"
    record = _read_record(run_json)
    if record.outcome is Outcome.sealed:
        broken = _broken_seal(run_dir, record)
        if broken is not None:
            return broken
    task, answers = _task_and_key(run_dir, record, task_root, answers_root)
    contract = _contract_for(task, record, accept_version_change, run_dir)
    submission = read_submission(run_dir / "output")
    grades = _grade_again(run_dir, record, contract, answers, submission, isolation)
    threshold = chance_threshold(task.contract, answers)

    stored = _stored_grades(run_dir, record)
    unchanged = (
        stored.get("strict") is not None
        and _without_isolation(grades.strict) == _strip(stored["strict"])
        and _without_isolation(grades.recovered) == _strip(stored.get("recovered"))
        and record.threshold == threshold
    )
    result = RegradeResult(
        run_key=record.run_key, status="unchanged", task_id=record.task_id,
        old_score=record.score_recovered, new_score=grades.recovered.score,
        old_outcome=record.outcome.value, new_outcome=record.outcome.value,
        grader_version=grades.recovered.grader_version, isolation=grades.isolation,
    )
    if unchanged:
        return result, None

    replaced_at = _now()
    past = PastGrade(
        score_strict=record.score_strict, score_recovered=record.score_recovered,
        outcome=record.outcome.value, scored=record.scored, threshold=record.threshold,
        grade=record.grade, replaced_at=replaced_at, reason=reason,
    )
    published = answers.source.published if answers.source is not None else None
    new = _new_record(record, grades, threshold, submission is not None, past, task.version,
                      published)
    _write_grade(run_dir, stored, grades, replaced_at, reason)
    _write_json_atomic(run_json, new.model_dump_json(indent=1))
    return (
        RegradeResult(
            run_key=record.run_key, status="regraded", task_id=record.task_id,
            old_score=record.score_recovered, new_score=new.score_recovered,
            old_outcome=record.outcome.value, new_outcome=new.outcome.value,
            grader_version=grades.recovered.grader_version, isolation=grades.isolation,
        ),
        new,
    )


def update_tracking(record: RunRecord, run_dir: Path, tracking_uri: str) -> int:
    """Rewrite the score metrics and outcome tags of the run's MLflow run(s).

    The MLflow run is found by its ``run_key`` tag (and ``attempt`` tag) in any
    experiment. Metrics are logged as a new step, so MLflow keeps the old values in
    the metric history; params are immutable in MLflow, so the new grader version goes
    in the ``grader_version`` tag. ``run.json`` and ``grade.json`` are logged again.

    Returns:
        The number of MLflow runs updated (0 when none has this run key).
    """
    import time

    from mlflow.entities import Metric, RunTag, ViewType

    from spu.tracking.store import client_for, run_metrics, run_tags

    client = client_for(tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    if not experiments:
        return 0
    found = client.search_runs(experiments, filter_string=f"tags.run_key = '{record.run_key}'",
                               run_view_type=ViewType.ALL)
    matching = [r for r in found if r.data.tags.get("attempt", "1") == str(record.attempt)]
    step = len(record.grade_history)
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, step) for k, v in run_metrics(record).items()
               if k in SCORE_METRICS or k.startswith("rho/")]
    tags = {k: v for k, v in run_tags(record).items()
            if k in ("outcome", "scored", "warnings", "task_published", "published_before_cutoff",
                     "graded_from_seal")}
    tags["grader_version"] = record.grade.grader_version if record.grade else ""
    if record.grade_history:
        latest = record.grade_history[-1]
        tags["regraded_at"] = latest.replaced_at
        if latest.reason:
            tags["regrade_reason"] = latest.reason[:5000]
    for run in matching:
        client.log_batch(run.info.run_id, metrics=metrics,
                         tags=[RunTag(k, v) for k, v in tags.items()])
        for name in ("run.json", "grade.json"):
            path = Path(run_dir) / name
            if path.is_file():
                client.log_artifact(run.info.run_id, str(path))
    return len(matching)


def regrade_runs(
    output_root: Path,
    task_root: Path,
    answers_root: Path | None = None,
    run_keys: list[str] | None = None,
    isolation: str = "auto",
    reason: str | None = None,
    tracking_uri: str | None = None,
    accept_version_change: bool = False,
) -> list[RegradeResult]:
    """Regrade every finished run under ``<output_root>/runs`` (or only ``run_keys``).

    A run that cannot be regraded is reported as ``failed`` with the reason; the
    others go on. Returns one result per run, in run-key order.
    """
    runs_dir = Path(output_root) / "runs"
    if run_keys:
        folders = [runs_dir / key for key in run_keys]
    else:
        folders = sorted(p for p in runs_dir.glob("*") if (p / "run.json").is_file())
    results = []
    for folder in folders:
        try:
            result, record = regrade_run(folder, task_root, answers_root, isolation, reason,
                                         accept_version_change)
        except RegradeError as exc:
            results.append(RegradeResult(run_key=folder.name, status="failed", error=str(exc)))
            continue
        if record is not None and tracking_uri:
            try:
                n = update_tracking(record, folder, tracking_uri)
            except Exception as exc:  # noqa: BLE001  (any MLflow failure: the files are written)
                result = replace(result, error=f"tracking not updated: {exc}")
            else:
                result = replace(result, tracking_runs=n)
        results.append(result)
    return results


