"""Paper 4.3 *Revision* and *Self-assessment*: the intervals and tests, against scipy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.analysis.trajectory_analysis import revision_tests, self_assessment_tests


def test_revision_sign_test_and_mean_change_against_scipy() -> None:
    """Only runs whose submission differs (revisions > 0) count; ties leave the sign test."""
    rng = np.random.default_rng(5)
    n = 40
    rev = pd.DataFrame({"task_id": [f"t{i % 13}" for i in range(n)],
                        "revisions": [0] * 5 + [1] * (n - 5),
                        "change": np.round(rng.normal(0.02, 0.2, n), 2)})
    rev.loc[7, "change"] = 0.0
    got = {r["statistic"]: r["value"] for r in revision_tests(rev, resamples=500)}
    differs = rev[rev["revisions"] > 0]["change"]
    up, down = int((differs > 0).sum()), int((differs < 0).sum())
    assert got["revision_mean_change"] == pytest.approx(differs.mean())
    assert (got["revision_gains"], got["revision_losses"]) == (up, down)
    assert got["revision_sign_test_p"] == pytest.approx(sps.binomtest(up, up + down).pvalue)
    assert got["revision_mean_change_ci_low"] <= got["revision_mean_change"] <= got[
        "revision_mean_change_ci_high"]


def test_self_assessment_against_scipy() -> None:
    sa = pd.DataFrame({"task_id": ["a", "a", "b", "c", "d", "e"],
                       "stated_expected_rho": [0.6, 0.7, 0.5, 0.8, 0.65, 0.4],
                       "score": [0.3, 0.75, 0.2, 0.5, 0.1, 0.45]})
    sa["overestimate"] = sa["stated_expected_rho"] - sa["score"]
    got = {r["statistic"]: r["value"] for r in self_assessment_tests(sa, resamples=500)}
    assert got["self_assessment_mean_overestimate"] == pytest.approx(sa["overestimate"].mean())
    assert got["self_assessment_wilcoxon_p"] == pytest.approx(
        sps.wilcoxon(sa["overestimate"]).pvalue)
    assert got["self_assessment_spearman"] == pytest.approx(
        sps.spearmanr(sa["stated_expected_rho"], sa["score"]).statistic)
    assert (got["self_assessment_stated_median"], got["self_assessment_achieved_median"]) == (
        pytest.approx(0.625), pytest.approx(0.375))
    assert got["self_assessment_overpredicting"] == 4
