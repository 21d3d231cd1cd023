"""3.6: the tasks whose repeats have an SD above 0.2 and their share of the within-task
sum of squares, per task in ``repeats_tasks.csv`` and in ``summary.csv``, by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from spu.stats.builtin import repeats
from spu.stats.inputs import StatsInputs, StatsOptions
from spu.stats.repeats import REPEAT_TASKS_RULE, UNSTABLE_SD, unstable_share
from spu.stats.runs_table import check_runs_table
from tests.stats.conftest import run_row


def _inputs() -> StatsInputs:
    """Repeats of A: t1 0.1, 0.4, 0.25 (SD 0.15, SS 0.045); t2 0.0, 0.6 (SD 0.424, SS
    0.18); t3 0.4, 0.5 (SD 0.071, SS 0.005); t4 0.3, 0.58 (SD 0.198, SS 0.0392, just
    under 0.2); t5 one scored repeat (no SD). Total SS 0.2692."""
    rows = [run_row(c, t, 0.3) for c in ("A", "B") for t in ("t1", "t2", "t3", "t4", "t5")]
    repeats_of: dict[str, list[float | None]] = {
        "t1": [0.1, 0.4, 0.25], "t2": [0.0, 0.6], "t3": [0.4, 0.5], "t4": [0.3, 0.58],
        "t5": [0.5, None]}
    for t, scores in repeats_of.items():
        rows += [run_row("A", t, s, repeat=r + 1) for r, s in enumerate(scores)]
    return StatsInputs(check_runs_table(pd.DataFrame(rows)),
                       StatsOptions(resamples=30, simulations=30, null_draws=30))


def test_share_by_task_and_in_summary_by_hand() -> None:
    result = repeats(_inputs())
    table = result.tables["repeats_tasks.csv"].set_index("task_id")
    total = 0.045 + 0.18 + 0.005 + 0.0392
    assert table["within_ss"].to_dict() == pytest.approx(
        {"t1": 0.045, "t2": 0.18, "t3": 0.005, "t4": 0.0392, "t5": float("nan")},
        nan_ok=True)
    assert table.loc["t2", "ss_share"] == pytest.approx(0.18 / total)
    assert table["unstable"].to_dict() == {"t1": False, "t2": True, "t3": False,
                                           "t4": False, "t5": False}
    got = {r["statistic"]: r["value"] for r in result.summary}
    assert got["unstable_tasks A"] == 1
    assert got["unstable_ss_share A"] == pytest.approx(0.18 / total)
    assert table.loc[table["unstable"], "ss_share"].sum() == pytest.approx(
        got["unstable_ss_share A"])


def test_the_papers_threshold_is_the_default_and_the_manifest_names_it() -> None:
    """SD above 0.2 (3.6): t4's 0.198 is not above it, but is above 0.19."""
    assert UNSTABLE_SD == 0.2
    assert unstable_share.__defaults__ == (0.2,)
    result = repeats(_inputs())
    assert result.rules["repeats_tasks.csv"] == REPEAT_TASKS_RULE
    assert "repeat_sd above 0.2" in REPEAT_TASKS_RULE and "3.6" in REPEAT_TASKS_RULE
    from spu.stats.repeats import TaskSpread

    runs = _inputs().public_all
    own = runs[(runs["config"] == "A") & (runs["repeat"] >= 1) & runs["scored"]]
    assert unstable_share(TaskSpread.from_scores(own), sd=0.19)[0] == 2
