"""Coverage, raw and adjusted means, above chance and disciplines (paper 3.3, Table 1, 5)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from spu.stats.means import CONFIG_COLUMNS, config_table, discipline_table
from spu.stats.resampling import bootstrap_mean, rng_for, wilson_interval
from spu.stats.runs_table import check_runs_table, official
from tests.stats.conftest import run_row


@pytest.mark.parametrize(("successes", "n"), [(52, 100), (23, 44), (0, 30), (30, 30), (1, 2)])
def test_wilson_matches_statsmodels(successes, n) -> None:
    ours = wilson_interval(successes, n)
    reference = proportion_confint(successes, n, alpha=0.05, method="wilson")
    np.testing.assert_allclose(ours, reference, atol=1e-12)


def test_percentile_bootstrap_matches_scipy() -> None:
    """Same generator, same draws: scipy.stats.bootstrap(method='percentile') agrees exactly."""
    x = np.random.default_rng(0).normal(0.3, 0.3, 44)
    ours = bootstrap_mean(x, np.random.default_rng(5), 10_000)
    ref = sps.bootstrap((x,), np.mean, n_resamples=10_000, method="percentile",
                        rng=np.random.default_rng(5), vectorized=True)
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=1e-12)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=1e-12)


def _small_table() -> pd.DataFrame:
    rows = [
        run_row("A", "t1", 0.5, threshold=0.4), run_row("A", "t2", 0.3, threshold=0.4),
        run_row("A", "t3", 0.9, threshold=0.95), run_row("B", "t1", 0.3, threshold=0.4),
        run_row("B", "t2", None, outcome="refusal"), run_row("B", "t3", 0.7, threshold=0.95),
        run_row("A", "p1", 0.8, visibility="private"),
        run_row("A", "t1", 0.1, repeat=1),
    ]
    return check_runs_table(pd.DataFrame(rows))


def test_config_table_hand_worked() -> None:
    """A: 0.5, 0.3, 0.9 -> raw 0.5667; B: 0.3, -, 0.7 -> raw 0.5. B trails A by exactly 0.2
    on both shared tasks, so the additive fit is exact with alpha_A - alpha_B = 0.2; A is
    scored on every task, so its adjusted mean is its raw mean, and B's is
    0.5667 - 0.2 = 0.3667. Above chance: A beats 0.4 on t1 only (0.3 < 0.4, 0.9 < 0.95),
    B on no task."""
    runs = _small_table()
    table = config_table(official(runs), resamples=500)
    assert list(table.columns[:1]) == ["config"] and set(CONFIG_COLUMNS) <= set(table.columns)
    a, b = table.set_index("config").loc["A"], table.set_index("config").loc["B"]
    assert (a.n_runs, a.n_scored, b.n_runs, b.n_scored) == (3, 3, 3, 2)
    assert a.raw_mean == pytest.approx(0.5666667, abs=1e-6)
    assert b.raw_mean == pytest.approx(0.5)
    assert a.adjusted_mean == pytest.approx(0.5666667, abs=1e-6)
    assert b.adjusted_mean == pytest.approx(0.3666667, abs=1e-6)
    assert (a.above_chance, b.above_chance) == (1, 0)
    assert a.above_chance_share == pytest.approx(1 / 3)
    assert list(table["config"]) == ["A", "B"]  # ordered by adjusted mean
    assert int(a.n_shared_tasks) == 2 and a.shared_mean == pytest.approx(0.7)


def test_raw_interval_is_the_bootstrap_over_the_configurations_tasks(paper_runs) -> None:
    public = official(paper_runs)
    table = config_table(public, seed=3, resamples=2000).set_index("config")
    scores = public[(public["config"] == "Fable 5.1") & public["scored"]]["score_recovered"]
    expected = bootstrap_mean(scores.to_numpy(), rng_for(3, "raw", "Fable 5.1"), 2000)
    assert table.loc["Fable 5.1", "raw_ci_low"] == expected.low
    assert table.loc["Fable 5.1", "raw_ci_high"] == expected.high
    assert table.loc["Fable 5.1", "n_scored"] == 30
    assert table.loc["Opus 5.5", "n_scored"] == 44


def test_same_seed_same_numbers(paper_runs) -> None:
    public = official(paper_runs)
    pd.testing.assert_frame_equal(config_table(public, seed=1, resamples=300),
                                  config_table(public, seed=1, resamples=300))
    other = config_table(public, seed=2, resamples=300)
    first = config_table(public, seed=1, resamples=300)
    assert not np.allclose(other["adjusted_ci_low"], first["adjusted_ci_low"])


def test_discipline_table_counts_scored_runs(paper_runs) -> None:
    public = official(paper_runs)
    order = sorted(public["config"].unique())
    table = discipline_table(public, order, resamples=200)
    scored = public[public["scored"]]
    expected = scored.groupby(["config", "discipline"])["score_recovered"].agg(["size", "mean"])
    merged = table.set_index(["config", "discipline"]).join(expected)
    assert (merged["n_tasks"] == merged["size"]).all()
    np.testing.assert_allclose(merged["raw_mean"], merged["mean"], atol=1e-12)
    assert list(table.columns[:4]) == ["config", "discipline", "n_tasks", "raw_mean"]
