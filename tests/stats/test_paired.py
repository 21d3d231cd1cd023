"""Paired comparisons: Wilcoxon, Holm and detectable differences (paper 3.3, E.2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from spu.stats.paired import detectable_difference_z, holm, paired_table, sign_flip_p
from spu.stats.runs_table import official, score_matrix


def test_z_reproduces_the_papers_two_values() -> None:
    """Appendix E.2: z = 4.26 at alpha = 0.05/78 and 2.80 at 0.05 (two decimals)."""
    assert round(detectable_difference_z(0.05 / 78), 2) == 4.26
    assert round(detectable_difference_z(0.05), 2) == 2.80
    assert detectable_difference_z(0.05) == pytest.approx(
        sps.norm.ppf(0.975) + sps.norm.ppf(0.8), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_holm_matches_statsmodels(seed) -> None:
    p = np.random.default_rng(seed).uniform(0, 0.2, 78) ** 2
    expected = multipletests(p, alpha=0.05, method="holm")[1]
    np.testing.assert_allclose(holm(p), expected, atol=1e-15)


def test_holm_leaves_missing_p_values_out_of_the_family() -> None:
    p = np.array([0.01, np.nan, 0.04])
    out = holm(p)
    assert np.isnan(out[1])
    np.testing.assert_allclose(out[[0, 2]], multipletests([0.01, 0.04], method="holm")[1])


def test_paired_table_matches_scipy_and_statsmodels(paper_runs) -> None:
    public = official(paper_runs)
    order = sorted(public["config"].unique())
    matrix = score_matrix(public, order)
    table = paired_table(matrix, order)
    assert len(table) == 78
    assert list(table.columns[:9]) == ["config_a", "config_b", "n_shared", "mean_diff",
                                       "p_value", "p_holm", "significant", "mde",
                                       "mde_uncorrected"]
    for row in table.sample(10, random_state=0).itertuples():
        both = matrix[[row.config_a, row.config_b]].dropna()
        d = both[row.config_a] - both[row.config_b]
        assert row.n_shared == len(both)
        assert row.mean_diff == pytest.approx(d.mean(), abs=1e-12)
        assert row.p_value == pytest.approx(sps.wilcoxon(d.to_numpy()).pvalue, abs=1e-15)
        sd = d.std(ddof=1)
        assert row.mde == pytest.approx(detectable_difference_z(0.05 / 78) * sd
                                        / np.sqrt(len(d)), abs=1e-12)
        assert row.mde_uncorrected == pytest.approx(2.8015849 * sd / np.sqrt(len(d)), rel=1e-6)
    expected = multipletests(table["p_value"], method="holm")[1]
    np.testing.assert_allclose(table["p_holm"], expected, atol=1e-15)
    assert (table["significant"] == (table["p_holm"] < 0.05)).all()


def test_pair_with_nothing_to_compare() -> None:
    matrix = pd.DataFrame({"A": [0.5, np.nan, 0.2], "B": [np.nan, 0.3, 0.2]})
    row = paired_table(matrix, ["A", "B"]).iloc[0]
    assert row.n_shared == 1 and np.isnan(row.p_value) and np.isnan(row.mde)
    assert not row.significant


@pytest.mark.parametrize("n", [3, 8, 12])
def test_exact_sign_flip_matches_scipy_permutation_test(n) -> None:
    d = np.random.default_rng(n).normal(0.1, 0.3, n)
    ref = sps.permutation_test((d,), np.mean, permutation_type="samples",
                               alternative="two-sided", n_resamples=np.inf)
    assert sign_flip_p(d) == pytest.approx(ref.pvalue, abs=1e-12)


def test_sign_flip_beyond_exact_limit_is_seeded_monte_carlo() -> None:
    d = np.random.default_rng(0).normal(0.2, 0.3, 25)
    a = sign_flip_p(d, np.random.default_rng(1), draws=20_000)
    assert a == sign_flip_p(d, np.random.default_rng(1), draws=20_000)
    ref = sps.permutation_test((d,), np.mean, permutation_type="samples",
                               n_resamples=20_000, rng=np.random.default_rng(2)).pvalue
    assert a == pytest.approx(ref, abs=0.01)  # two Monte Carlo estimates, SE about 0.002


def test_holm_leaves_the_collector_alone() -> None:
    """Invariant: a statistic never thaws what the launcher froze (GC policy is the launcher's)."""
    import gc

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        holm([0.04, 0.01, 0.02, float("nan")])
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
