"""The default job under Hydra's basic launcher: a second call skips, and says so."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import EXAMPLE_TASK
from tests.launchers.conftest import run_sweep, tracked_runs


def table_rows(stdout: str) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(task, model) -> (outcome, score, run) from the printed results table."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 10 and cells[0] != "task":  # the last: the run key
            rows[(cells[0], cells[1])] = (cells[4], cells[5], cells[8])
    return rows


@pytest.mark.slow
def test_the_default_job_skips_finished_runs_and_shows_their_stored_scores(tmp_path) -> None:
    root = tmp_path / "tasks"
    shutil.copytree(EXAMPLE_TASK, root / EXAMPLE_TASK.name)
    out = tmp_path / "outputs"
    first = run_sweep(f"output_root={out}", f"task_root={root}")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = run_sweep(f"output_root={out}", f"task_root={root}")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]

    before, after = table_rows(first.stdout), table_rows(second.stdout)
    assert len(before) == 3  # the three baselines on the one task
    assert {run for _, _, run in before.values()} == {"ran"}
    assert {run for _, _, run in after.values()} == {"skipped"}
    # The skipped rows carry the stored outcome and score of the first call.
    assert {k: v[:2] for k, v in after.items()} == {k: v[:2] for k, v in before.items()}
    assert "0 ran now, 3 skipped (finished by an earlier launch" in second.stdout
    assert len(tracked_runs(out)) == 3


@pytest.mark.slow
def test_the_budget_stop_is_said_once_per_sweep(tmp_path) -> None:
    """Issue 14 item 9: the budget message appeared once per job kept from starting
    (basic launcher) or twice (Ray driver: a log record and the display)."""
    from spu.schema import Outcome, RunRecord, SandboxInfo
    from spu.tracking.store import TrackingTarget, log_run
    from tests.conftest import baseline_run_key

    root = tmp_path / "tasks"
    shutil.copytree(EXAMPLE_TASK, root / EXAMPLE_TASK.name)
    out = tmp_path / "outputs"
    key = baseline_run_key(root / EXAMPLE_TASK.name)
    record = RunRecord(run_key=key, task_id=EXAMPLE_TASK.name, task_version="1.0",
                       model="random", harness="baseline", effort="none", repeat=0,
                       outcome=Outcome.valid, scored=True, score_strict=0.2,
                       score_recovered=0.2, cost_usd=3.0, sandbox=SandboxInfo(backend="local"))
    run_dir = out / "runs" / key
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(record.model_dump_json())
    log_run(record, run_dir, TrackingTarget(uri=f"sqlite:///{out / 'mlflow.db'}",
                                            artifact_root=(out / "mlartifacts").as_uri(),
                                            experiment="default"))
    result = run_sweep(f"output_root={out}", f"task_root={root}", "model=random",
                       f"task={EXAMPLE_TASK.name}", "repeat=0,1,2,3", "budget.max_cost_usd=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = result.stdout + result.stderr
    assert "3 not launched" in result.stdout
    assert text.count("budget.max_cost_usd=2 reached") == 1, text
