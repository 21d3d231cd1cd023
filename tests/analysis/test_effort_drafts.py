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
