"""Resume decisions, and the lookup of recorded runs in MLflow and in run folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from spu.launch.resume import ResumeMode, latest_attempts, plan_run
from spu.schema import Outcome, RunRecord, SandboxInfo
from spu.tracking.query import (
    RecordedRun,
    RunLookupError,
    find_recorded_run,
    recorded_runs,
)
from spu.tracking.store import TrackingTarget, client_for, log_run

KEY = "0123456789abcdef"


def recorded(outcome: str, attempt: int = 1, tracking_id: str | None = "mlflow-1") -> RecordedRun:
    return RecordedRun(run_key=KEY, attempt=attempt, outcome=outcome, scored=False, score=-1.0,
                       task_id="t", model="m", harness="h", effort="e", repeat=0,
                       tracking_id=tracking_id)


@pytest.mark.parametrize(
    ("latest", "mode", "retries", "expected"),
    [
        # nothing recorded: attempt 1, one retry allowed
        (None, "skip_finished", 1, (False, 1, 2, None)),
        # a finished run of any kind but an unretried infra error is skipped
        (recorded("valid"), "skip_finished", 1, (True, 1, 1, "mlflow-1")),
        (recorded("timeout"), "skip_finished", 1, (True, 1, 1, "mlflow-1")),
        (recorded("refusal"), "skip_finished", 1, (True, 1, 1, "mlflow-1")),
        (recorded("policy_stop"), "skip_finished", 1, (True, 1, 1, "mlflow-1")),
        (recorded("no_file"), "skip_finished", 1, (True, 1, 1, "mlflow-1")),
        # an infra error with its retry unused (the driver died in between): attempt 2
        (recorded("infra_error"), "skip_finished", 1, (False, 2, 2, "mlflow-1")),
        # the memory limit is retried too (paper 3.1)
        (recorded("memory_limit"), "skip_finished", 1, (False, 2, 2, "mlflow-1")),
        (recorded("memory_limit", attempt=2), "skip_finished", 1, (True, 2, 2, "mlflow-1")),
        # ... unless retries are off, or the retry was made
        (recorded("infra_error"), "skip_finished", 0, (True, 1, 1, "mlflow-1")),
        (recorded("infra_error", attempt=2), "skip_finished", 1, (True, 2, 2, "mlflow-1")),
        # retry_unscored re-runs infra errors and missing files as a new attempt with retries
        (recorded("infra_error", attempt=2), "retry_unscored", 1, (False, 3, 4, "mlflow-1")),
        (recorded("no_file"), "retry_unscored", 1, (False, 2, 3, "mlflow-1")),
        (recorded("rejected"), "retry_unscored", 1, (True, 1, 1, "mlflow-1")),
        (recorded("timeout"), "retry_unscored", 1, (True, 1, 1, "mlflow-1")),
        # off: a fresh attempt 1 whatever exists
        (recorded("valid"), ResumeMode.off, 1, (False, 1, 2, None)),
    ],
)
def test_plan_run(latest, mode, retries, expected) -> None:
    plan = plan_run(latest, mode, retries)
    assert (plan.skip, plan.first_attempt, plan.last_attempt, plan.retried_from) == expected


def test_plan_run_rejects_an_unknown_mode_naming_the_key() -> None:
    with pytest.raises(ValueError, match="sweep.resume='skip'"):
        plan_run(None, "skip", 1)


def _target(tmp_path: Path) -> TrackingTarget:
    out = tmp_path / "outputs"
    return TrackingTarget(uri=f"sqlite:///{out / 'mlflow.db'}",
                          artifact_root=(out / "mlartifacts").as_uri(), experiment="resume")


def _record(attempt: int, outcome: Outcome, key: str = KEY, cost: float = 0.0,
            retried_from: str | None = None) -> RunRecord:
    return RunRecord(run_key=key, task_id="spu-t", task_version="1.0", model="random",
                     harness="baseline", effort="none", repeat=2, outcome=outcome,
                     scored=outcome is Outcome.valid, score_strict=0.25, score_recovered=0.5,
                     threshold=0.6, cost_usd=cost, sandbox=SandboxInfo(backend="local"),
                     attempt=attempt, retried_from=retried_from)


def _write(out: Path, record: RunRecord) -> Path:
    run_dir = out / "runs" / record.run_key
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(record.model_dump_json())
    return run_dir


def test_the_latest_attempt_is_the_record_that_counts(tmp_path) -> None:
    target, out = _target(tmp_path), tmp_path / "outputs"
    first = log_run(_record(1, Outcome.infra_error), _write(out, _record(1, Outcome.infra_error)),
                    target)
    second = _record(2, Outcome.valid, cost=1.5, retried_from=first)
    log_run(second, _write(out, second), target)
    found = find_recorded_run(target, KEY)
    assert found is not None
    assert (found.attempt, found.outcome, found.scored, found.repeat) == (2, "valid", True, 2)
    assert found.score == 0.5  # scored: the recovered score
    assert (found.cost_usd, found.threshold) == (1.5, 0.6)
    assert recorded_runs(target) == {KEY: found}
    assert find_recorded_run(target, "fedcba9876543210") is None


def test_lookups_create_no_store_and_refuse_malformed_keys(tmp_path) -> None:
    target = _target(tmp_path)
    assert recorded_runs(target) == {}
    assert not (tmp_path / "outputs" / "mlflow.db").exists()
    log_run(_record(1, Outcome.valid), _write(tmp_path / "outputs", _record(1, Outcome.valid)),
            target)
    with pytest.raises(RunLookupError, match="is not a run key"):
        recorded_runs(target, ["x' OR 1=1 --"])


def test_a_run_json_left_untracked_by_a_killed_process_is_logged_not_rerun(tmp_path) -> None:
    """Invariant: a run that finished before its driver died counts once, never twice."""
    target, out = _target(tmp_path), tmp_path / "outputs"
    _write(out, _record(1, Outcome.valid))
    latest = latest_attempts(target, out, [KEY])[KEY]
    assert latest.tracking_id is not None and latest.outcome == "valid"
    assert plan_run(latest, "skip_finished", 1).skip
    # A second lookup finds it in tracking and logs nothing more.
    again = latest_attempts(target, out, [KEY])[KEY]
    assert again.tracking_id == latest.tracking_id
    assert len(client_for(target).search_runs(
        [client_for(target).get_experiment_by_name("resume").experiment_id])) == 1


def test_a_complete_record_left_running_is_marked_ended(tmp_path) -> None:
    target, out = _target(tmp_path), tmp_path / "outputs"
    record = _record(1, Outcome.valid)
    run_id = log_run(record, _write(out, record), target)
    client = client_for(target)
    client.update_run(run_id, status="RUNNING")  # the logger was killed before it ended it
    assert find_recorded_run(target, KEY).terminated is False  # type: ignore[union-attr]
    latest_attempts(target, out, [KEY])
    assert client.get_run(run_id).info.status == "FINISHED"


def test_without_tracking_the_run_folder_is_the_record(tmp_path) -> None:
    out = tmp_path / "outputs"
    _write(out, _record(1, Outcome.no_file))
    latest = latest_attempts(None, out, [KEY, "fedcba9876543210"])
    assert list(latest) == [KEY]
    assert (latest[KEY].outcome, latest[KEY].tracking_id) == ("no_file", None)


def test_a_corrupt_run_json_names_the_file(tmp_path) -> None:
    out = tmp_path / "outputs"
    (out / "runs" / KEY).mkdir(parents=True)
    (out / "runs" / KEY / "run.json").write_text('{"run_key": 3}')
    with pytest.raises(RunLookupError, match=rf"{KEY}/run.json: run_key"):
        latest_attempts(None, out, [KEY])
