"""Figure 24d: the higher effort's first draft minus each submission, with intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spu.analysis.trajectory_analysis import effort_pairs


def test_draft_minus_submissions_hand_worked() -> None:
    rows = []
    drafts = [0.5, 0.3, None, 0.6]
    high = [0.4, 0.35, 0.2, 0.5]
    low = [0.2, 0.1, 0.3, 0.4]
    for t in range(4):
        base = {"task_id": f"t{t}", "model": "m", "runtime_s": 1.0, "output_tokens": 1,
                "code_chars": 1, "n_searches": 1, "used_gpu": False}
        rows.append({**base, "effort": "max", "score": high[t],
                     "first_draft_score": np.nan if drafts[t] is None else drafts[t]})
        rows.append({**base, "effort": "medium", "score": low[t], "first_draft_score": np.nan})
    t = effort_pairs(pd.DataFrame(rows), seed=1, resamples=4000).set_index("quantity")
    # drafted tasks t0, t1, t3: draft - high = 0.1, -0.05, 0.1; draft - low = 0.3, 0.2, 0.2
    assert t.loc["draft minus submission (high)", "value"] == pytest.approx(0.05)
    assert t.loc["draft minus submission (low)", "value"] == pytest.approx(0.7 / 3)
    assert t.loc["draft minus submission (low)", "n_tasks"] == 3
    # the bootstrap of three task means: its interval lies within their range
    assert -0.05 <= t.loc["draft minus submission (high)", "ci_low"] <= 0.05
    assert 0.05 <= t.loc["draft minus submission (high)", "ci_high"] <= 0.1
    assert np.isnan(t.loc["ratio of run time", "ci_low"])


def test_revision_intervals_resample_tasks() -> None:
    """17c and 24e: means over runs, intervals from tasks drawn with replacement."""
    from spu.analysis.trajectory_analysis import revision_intervals, task_bootstrap_mean

    rev = pd.DataFrame({"config": ["A", "A", "A", "B"], "task_id": ["t1", "t1", "t2", "t2"],
                        "submission_differs": [True, False, True, True],
                        "change": [0.1, 0.0, 0.3, -0.2],
                        "flipped_into_measured": [0.5, np.nan, 1.0, 0.0],
                        "flipped_expected_share": [0.5, np.nan, 0.5, 0.25],
                        "flips_scored": [2, np.nan, 1, 4],
                        "flips_into_measured": [1, np.nan, 1, 0]})
    t = revision_intervals(rev, seed=0, resamples=2000).set_index(["config", "quantity"])
    a = t.loc[("A", "submission minus first draft")]
    # the 0.0 run submitted its draft: not a revision
    assert a["n_runs"] == 2 and a["mean"] == pytest.approx(0.2)
    # two tasks, one run each: the resampled means are 0.1, 0.2 or 0.3
    assert a["ci_low"] == pytest.approx(0.1) and a["ci_high"] == pytest.approx(0.3)
    # 24e by default pools the pairs: 1 + 1 + 0 of 2 + 1 + 4 moved into the measured order,
    # against 0.5 * 2 + 0.5 * 1 + 0.25 * 4 = 2.5 of 7 expected
    into = t.loc[("all", "share of flips into the measured order")]
    assert into["mean"] == pytest.approx(2 / 7) and into["n_runs"] == 3
    # tasks t1 (1 of 2) and t2 (1 of 5): the resamples give 2/4, 2/7 or 2/10
    assert into["ci_low"] == pytest.approx(0.2) and into["ci_high"] == pytest.approx(0.5)
    assert t.loc[("all", "share expected from random flips"), "mean"] == pytest.approx(2.5 / 7)
    excess = t.loc[("all", "into the measured order minus expected")]
    assert excess["mean"] == pytest.approx(-0.5 / 7)
    # --flip-share runs: each run's share, averaged
    runs = revision_intervals(rev, seed=0, resamples=200, flip_share="runs").set_index(
        ["config", "quantity"])
    assert runs.loc[("all", "into the measured order minus expected"), "mean"] == pytest.approx(
        (0.0 + 0.5 - 0.25) / 3)
    assert runs.loc[("all", "share of flips into the measured order"), "mean"] == pytest.approx(
        0.5)
    # a task with two runs weighs twice when drawn: the exact weighted mean per resample
    mean, low, high = task_bootstrap_mean(np.array([0.0, 1.0, 2.0]),
                                          np.array(["x", "x", "y"]),
                                          np.random.default_rng(1), 4000)
    assert mean == 1.0 and low == pytest.approx(0.5) and high == pytest.approx(2.0)
