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
        if len(cells) == 9 and cells[0] != "task":
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
