"""One sweep job under any launcher: retries of infra errors, resume, budget (in process)."""

from __future__ import annotations

import json

import pytest
from hydra.errors import ConfigCompositionException

from spu.main import run_from_config
from tests.launchers.conftest import tracked_runs

UNISOLATED = ("sandbox=subprocess", "sandbox.allow_unisolated=true")
"""The subprocess sandbox, which an agent run may use only when the command allows it."""


TASK = "example-coupling-conditions"


@pytest.fixture
def compose_tasks(compose, task_root, monkeypatch):
    """The real config, tasks from the private task root."""
    monkeypatch.setenv("SPU_TASK_ROOT", str(task_root))

    def _compose(*overrides: str):
        return compose(f"task_root={task_root}", f"task={TASK}", *overrides)

    return _compose


def test_a_run_that_fails_at_start_is_retried_once_and_recorded_twice(
        compose_tasks, agents, tmp_path) -> None:
    """Invariant: an infra_error is retried once; both attempts stay recorded and linked."""
    out = tmp_path / "outputs"
    cfg = compose_tasks("harness=command", f"harness.entrypoint={agents.broken}",
                        *UNISOLATED)
    result = run_from_config(cfg)
    assert (result["outcome"], result["attempt"], result["retries"]) == ("infra_error", 2, 1)
    records = sorted(tracked_runs(out), key=lambda r: r.attempt)
    assert [(r.attempt, r.outcome, r.status) for r in records] == [
        (1, "infra_error", "FAILED"), (2, "infra_error", "FAILED")]
    assert records[0].retried_from is None
    assert records[1].retried_from == records[0].run_id
    assert result["retried_from"] == records[0].run_id
    run_dir = out / "runs" / result["run_key"]
    first = json.loads((run_dir / "attempts" / "1" / "run.json").read_text())
    assert first["attempt"] == 1 and "could not start" in first["process"]["error"]
    assert json.loads((run_dir / "run.json").read_text())["attempt"] == 2

    # Relaunching: the retry was made, so the run is finished and skipped.
    again = run_from_config(cfg)
    assert (again["status"], again["outcome"], again["attempt"]) == ("skipped", "infra_error", 2)
    assert len(tracked_runs(out)) == 2

    # +resume=retry_unscored runs it again as attempt 3, with its own retry.
    retried = run_from_config(compose_tasks(
        "harness=command", f"harness.entrypoint={agents.broken}", *UNISOLATED,
        "+resume=retry_unscored"))
    assert (retried["status"], retried["attempt"]) == ("ran", 4)
    records = sorted(tracked_runs(out), key=lambda r: r.attempt)
    assert [r.attempt for r in records] == [1, 2, 3, 4]
    assert records[2].retried_from == records[1].run_id
    assert sorted(p.name for p in (run_dir / "attempts").iterdir()) == ["1", "2", "3"]


def test_a_timeout_is_final_and_a_valid_run_is_skipped_next_time(
        compose_tasks, tmp_path) -> None:
    """Invariant: timeouts are not retried (paper 3.1); a finished run never runs twice."""
    out = tmp_path / "outputs"
    sleeper = tmp_path / "sleeper"
    sleeper.write_text("#!/bin/sh\nsleep 30\n")
    sleeper.chmod(0o755)
    cfg = compose_tasks("harness=command", f"harness.entrypoint={sleeper}",
                        *UNISOLATED, "limits.time_s=1", "limits.grace_s=1")
    result = run_from_config(cfg)
    assert (result["outcome"], result["attempt"], result["retries"]) == ("timeout", 1, 0)
    assert len(tracked_runs(out)) == 1
    assert run_from_config(cfg)["status"] == "skipped"

    valid = run_from_config(compose_tasks("model=presented_order", *UNISOLATED))
    assert (valid["status"], valid["outcome"]) == ("ran", "valid")
    skipped = run_from_config(compose_tasks("model=presented_order", *UNISOLATED))
    assert skipped["status"] == "skipped"
    # The stored score is what the table shows for the skipped run.
    assert (skipped["score"], skipped["mlflow_run_id"]) == (valid["score"],
                                                          valid["mlflow_run_id"])
    assert len(tracked_runs(out)) == 2
    # sweep.resume=off runs it again on purpose.
    rerun = run_from_config(compose_tasks("model=presented_order", *UNISOLATED,
                                          "+resume=off"))
    assert (rerun["status"], rerun["attempt"]) == ("ran", 1)
    assert len(tracked_runs(out)) == 3


def test_without_tracking_resume_reads_the_run_folders(compose_tasks, tmp_path) -> None:
    cfg = compose_tasks("model=random", *UNISOLATED, "tracking=none")
    first = run_from_config(cfg)
    assert first["status"] == "ran" and first["mlflow_run_id"] is None
    second = run_from_config(cfg)
    assert (second["status"], second["score"]) == ("skipped", first["score"])
    assert not (tmp_path / "outputs" / "mlflow.db").exists()


def test_bad_resume_mode_fails_at_composition_naming_the_key(compose_tasks) -> None:
    """``sweep.resume`` is an Enum of the schema: a typo never reaches a job."""
    with pytest.raises(ConfigCompositionException) as err:
        compose_tasks(*UNISOLATED, "sweep.resume=sometimes")
    message = f"{err.value} {err.value.__cause__}"
    assert "sweep.resume" in message and "skip_finished" in message


def test_results_table_marks_skipped_rows_and_keeps_their_stored_score() -> None:
    from rich.console import Console

    from spu.callbacks import results_table

    rows = [
        {"task": "t1", "model": "random", "effort": "none", "repeat": 0, "outcome": "valid",
         "score": 0.214, "threshold": 0.643, "runtime_s": 0.2, "status": "skipped"},
        {"task": "t2", "model": "random", "effort": "none", "repeat": 0, "outcome": "valid",
         "score": -0.5, "threshold": 0.5, "runtime_s": 0.3, "status": "ran", "attempt": 2},
        {"task": "t3", "model": "random", "effort": "none", "repeat": 0, "outcome": "-",
         "score": None, "threshold": None, "runtime_s": None, "status": "not_launched",
         "note": "budget"},
    ]
    console = Console(width=200, record=True)
    console.print(results_table(rows, "sweep"))
    text = console.export_text()
    assert "0.214" in text and "skipped" in text
    assert "ran (attempt 2)" in text and "not launched (budget)" in text
    assert "1 ran now, 1 skipped" in text and "1 not launched" in text



def test_the_status_types_have_distinct_names_and_keep_their_former_ones() -> None:
    """Invariant: SPU's job-result status and live agent status are not named like Hydra's
    ``JobStatus``; code written against their former names still gets the same types."""
    from hydra.core.utils import JobStatus as HydraJobStatus

    from spu.harness import monitor
    from spu.launch import job

    assert job.JobStatus is job.ResultStatus and monitor.RunStatus is monitor.AgentStatus
    assert job.ResultStatus.skipped == "skipped" and job.ResultStatus is not HydraJobStatus
