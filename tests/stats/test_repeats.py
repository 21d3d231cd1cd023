"""Run-to-run variation (paper 3.6, 4.5): variance components against statsmodels' ANOVA."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from spu.stats.repeats import (
    TaskSpread,
    largest_gap_group,
    rank_stability,
    reliability_table,
    repeats_table,
    spearman_brown,
    variance_components,
)
from spu.stats.runs_table import official, score_matrix


def _repeat_scores(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(20):
        mu = rng.normal(0.3, 0.2)
        for _ in range(int(rng.integers(2, 6))):  # unbalanced: 2 to 5 runs per task
            rows.append({"task_id": f"t{t:02d}", "score_recovered": mu + rng.normal(0, 0.15)})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seed", [0, 1])
def test_variance_components_match_statsmodels_anova(seed) -> None:
    """MSW and MSB from ``anova_lm(ols('y ~ C(task)'))``; ICC(1) = (MSB - MSW) /
    (MSB + (k0 - 1) MSW) with k0 = (N - sum k^2 / N) / (n - 1)."""
    scores = _repeat_scores(seed)
    anova = sm.stats.anova_lm(smf.ols("score_recovered ~ C(task_id)", scores).fit())
    msb, msw = anova["mean_sq"].iloc[0], anova["mean_sq"].iloc[1]
    k = scores.groupby("task_id").size().to_numpy(float)
    big_n, n = k.sum(), k.size
    k0 = (big_n - (k**2).sum() / big_n) / (n - 1)
    ours = variance_components(TaskSpread.from_scores(scores))
    assert ours["within_sd"][0] == pytest.approx(np.sqrt(msw), rel=1e-12)
    assert ours["icc"][0] == pytest.approx((msb - msw) / (msb + (k0 - 1) * msw), rel=1e-12)
    task_means = scores.groupby("task_id")["score_recovered"].mean()
    assert ours["task_sd"][0] == pytest.approx(task_means.std(ddof=1), rel=1e-12)


def test_bootstrap_weights_equal_duplicated_tasks() -> None:
    scores = _repeat_scores(2)
    spread = TaskSpread.from_scores(scores)
    weights = np.zeros((1, len(spread.tasks)))
    weights[0, :3] = [2, 1, 3]
    weights[0, 3] = len(spread.tasks) - 6
    ours = {k: v[0] for k, v in variance_components(spread, weights).items()}
    copies = []
    for task, count in zip(spread.tasks, weights[0], strict=True):
        for j in range(int(count)):
            copies.append(scores[scores["task_id"] == task].assign(task_id=f"{task}#{j}"))
    expected = variance_components(TaskSpread.from_scores(pd.concat(copies)))
    for name in ("within_sd", "task_sd", "icc"):
        assert ours[name] == pytest.approx(expected[name][0], rel=1e-12)


def test_spearman_brown_and_reliability_table() -> None:
    # Paper 4.5: ICC 0.655; a mean of k runs has reliability k ICC / (1 + (k - 1) ICC).
    assert spearman_brown(0.655, 1) == pytest.approx(0.655)
    assert spearman_brown(0.655, 2) == pytest.approx(1.31 / 1.655)
    repeats = pd.DataFrame({"config": ["A"], "icc": [0.655], "icc_ci_low": [0.389],
                            "icc_ci_high": [0.846]})
    table = reliability_table(repeats, k_max=3)
    assert table["k"].tolist() == [1, 2, 3]
    assert table["ci_low"].iloc[1] == pytest.approx(2 * 0.389 / 1.389)


def test_repeats_table_on_the_paper_structure(paper_runs) -> None:
    public = paper_runs[paper_runs["visibility"] == "public"]
    table = repeats_table(public, seed=0, resamples=500)
    row = table.iloc[0]
    assert row.config == "Astra Max" and row.n_tasks == 29 and row.n_runs <= 137
    assert row.within_sd_ci_low < row.within_sd < row.within_sd_ci_high
    assert row.icc_ci_low < row.icc < row.icc_ci_high
    assert row.n_official_tasks == 29


def test_largest_gap_group() -> None:
    assert largest_gap_group(np.array([0.5, 0.49, 0.2, 0.19])) == 2
    assert largest_gap_group(np.array([0.3])) == 0


def test_rank_stability_limits(paper_runs) -> None:
    """No noise: every rerun keeps the order. Overwhelming noise on a balanced design (every
    configuration on every task, so all means equally noisy): the leader stays first in
    1/13 of the reruns and the exact order (1 in 13!) never recurs."""
    matrix = score_matrix(official(paper_runs), sorted(paper_runs["config"].unique()))
    calm = rank_stability(matrix, 1e-9, simulations=200)
    assert calm is not None
    assert calm.top_group_kept == calm.leader_first == calm.exact_order == 1.0
    wild = rank_stability(matrix.fillna(0.3), 50.0, simulations=2000, top_group_size=6)
    assert wild is not None and wild.exact_order == 0.0
    assert wild.leader_first == pytest.approx(1 / 13, abs=0.03)
    assert wild.top_group_size == 6
    again = rank_stability(matrix.fillna(0.3), 50.0, simulations=2000, top_group_size=6)
    pd.testing.assert_frame_equal(wild.table, again.table)
