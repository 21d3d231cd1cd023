"""Figure 19c: method families that vary between the repeats of a task."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spu.analysis.trajectory_analysis import MIN_VARYING_TASKS, repeat_methods


def _repeats(n_tasks: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_tasks):
        for r in range(4):
            rows.append({"config": "A", "task_id": f"t{t}", "repeat": r,
                         "score": float(rng.normal(0.3, 0.1)),
                         "family_dft": r < 2,  # varies on every task
                         "family_docking": True})  # never varies
    return pd.DataFrame(rows)


def test_per_task_gaps_and_their_mean_by_hand() -> None:
    f = _repeats(5)
    t = repeat_methods(f, seed=0, resamples=500)
    assert set(t["family"]) == {"dft"}  # docking is used by every repeat
    per_task = t[t["task_id"] != "all"]
    for task, part in f.groupby("task_id"):
        want = part.loc[part["family_dft"], "score"].mean() - \
            part.loc[~part["family_dft"], "score"].mean()
        assert per_task.loc[per_task["task_id"] == task, "diff"].item() == pytest.approx(want)
    row = t[t["task_id"] == "all"].iloc[0]
    assert row["diff"] == pytest.approx(per_task["diff"].mean())
    assert row["n_tasks"] == 5 and row["n_used"] == 10 and row["n_runs"] == 20
    assert row["ci_low"] <= row["diff"] <= row["ci_high"]


def test_shown_on_at_least_four_tasks_the_papers_rule() -> None:
    assert MIN_VARYING_TASKS == 4
    three = repeat_methods(_repeats(3))
    four = repeat_methods(_repeats(4))
    assert not three.loc[three["task_id"] == "all", "shown"].item()
    assert four.loc[four["task_id"] == "all", "shown"].item()


def test_single_runs_give_an_empty_table() -> None:
    f = _repeats(3).drop_duplicates("task_id")
    assert repeat_methods(f).empty
