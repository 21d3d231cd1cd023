"""Effort (4.10, E.3) and detectable differences / study design (E.2), against scipy,
statsmodels and a power simulation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps

from spu.stats.additive import AdditiveDesign, additive_residuals, residual_gram
from spu.stats.design import PilotVariances, detectable_curves, pilot_variances, study_design
from spu.stats.effort import (
    effort_correlations,
    effort_pairs,
    effort_ratios,
    effort_table,
    effort_tasks,
)
from spu.stats.paired import detectable_difference_z, paired_table
from spu.stats.resampling import resample_counts
from spu.stats.runs_table import official, score_matrix


def test_effort_pair_tasks_and_four_ways(paper_runs) -> None:
    public_all = paper_runs[paper_runs["visibility"] == "public"]
    pairs = effort_pairs(official(paper_runs))
    assert [(p.low, p.high) for p in pairs] == [("Astra Medium", "Astra Max")]
    pair = pairs[0]
    tasks = effort_tasks(public_all, pair)
    matrix = score_matrix(official(paper_runs), [pair.low, pair.high]).dropna()
    np.testing.assert_allclose(tasks["diff"], (matrix[pair.low] - matrix[pair.high]).to_numpy())
    table = effort_table(tasks, public_all, pair, resamples=300).set_index("way")
    assert table.loc["official", "n_tasks"] == len(matrix) == 100
    assert table.loc["official", "p_wilcoxon"] == pytest.approx(
        sps.wilcoxon(tasks["diff"]).pvalue, abs=1e-12)
    repeats = public_all[(public_all["config"] == pair.high) & (public_all["repeat"] >= 1)
                         & public_all["scored"]].groupby("task_id")["score_recovered"].mean()
    on = tasks.set_index("task_id").loc[repeats.index]
    assert table.loc["repeats_mean", "diff"] == pytest.approx(
        (on["low"] - repeats).mean(), abs=1e-12)
    assert table.loc["official_repeat_tasks", "n_tasks"] == len(repeats) == 29


def test_effort_ratios_against_pandas(paper_runs) -> None:
    public = official(paper_runs)
    pair = effort_pairs(public)[0]
    ratios = effort_ratios(public, pair, resamples=300).set_index("quantity")
    scored = public[public["scored"]]
    wide = scored.pivot(index="task_id", columns="config", values="runtime_s")[
        [pair.low, pair.high]].dropna()
    ratio = wide[pair.high] / wide[pair.low]
    assert ratios.loc["runtime_s", "median_ratio"] == pytest.approx(ratio.median(), rel=1e-12)
    assert ratios.loc["runtime_s", "ci_low"] <= ratio.median() <= ratios.loc["runtime_s",
                                                                             "ci_high"]
    # The simulated runs of Astra Max last 2.90 / 0.46 = 6.3 times as long on average.
    assert 4 < ratios.loc["runtime_s", "mean_ratio"] < 9
    gpu = scored.groupby("config")["used_gpu"].mean()
    assert ratios.loc["used_gpu", "high_mean"] == pytest.approx(gpu[pair.high])


def test_residual_correlation_matches_statsmodels_fixed_effects(paper_runs) -> None:
    """With task and configuration fixed effects removed by statsmodels OLS
    (``y ~ C(task) + C(config)``), the residual correlation of score and log run time
    equals ours to 1e-10; the weighted cross products equal the residuals of a
    resampled design fitted directly."""
    public = official(paper_runs)
    scored = public[public["scored"]].copy()
    assert (scored["runtime_s"] > 0).all()  # no zero: log run time as the paper writes it
    scored["log_runtime"] = np.log(scored["runtime_s"])
    y_fit = smf.ols("score_recovered ~ C(task_id) + C(config)", data=scored).fit()
    x_fit = smf.ols("log_runtime ~ C(task_id) + C(config)", data=scored).fit()
    expected = np.corrcoef(y_fit.resid, x_fit.resid)[0, 1]
    order = sorted(public["config"].unique())
    table, summary = effort_correlations(public, order, resamples=200)
    adjusted = table[table["config"].str.startswith("(")].set_index("measure")
    assert adjusted.loc["runtime_s", "rho"] == pytest.approx(expected, abs=1e-10)
    assert adjusted.loc["runtime_s", "transform"] == "log"
    assert adjusted.loc["runtime_s", "ci_low"] < expected < adjusted.loc["runtime_s", "ci_high"]
    design, y = AdditiveDesign.from_matrix(score_matrix(public, order))
    weights = resample_counts(len(design.tasks), 3, np.random.default_rng(1))
    gram = residual_gram(design, y[None], weights)
    direct = additive_residuals(design, y, weights)
    np.testing.assert_allclose(gram[:, 0, 0], (weights[:, design.task_index] * direct**2)
                               .sum(axis=1), rtol=1e-10)


def test_within_configuration_correlations_are_scipy_spearman_with_holm(paper_runs) -> None:
    from statsmodels.stats.multitest import multipletests

    public = official(paper_runs)
    order = sorted(public["config"].unique())
    table, _ = effort_correlations(public, order, resamples=50)
    rows = table[(table["measure"] == "tool_calls") & ~table["config"].str.startswith("(")]
    for r in rows.itertuples(index=False):
        own = public[(public["config"] == r.config) & public["scored"]]
        result = sps.spearmanr(own["tool_calls"], own["score_recovered"])
        assert r.rho == pytest.approx(result.statistic, abs=1e-12)
        assert r.p_value == pytest.approx(result.pvalue, abs=1e-12)
    np.testing.assert_allclose(rows["p_holm"], multipletests(rows["p_value"], method="holm")[1])


def test_detectable_curves_follow_the_formula(paper_runs) -> None:
    matrix = score_matrix(official(paper_runs), sorted(paper_runs["config"].unique()))
    pairs = paired_table(matrix, list(matrix.columns))
    pilot = pilot_variances(pairs, 0.15)
    assert pilot.paired_sd == pytest.approx(pairs["sd_diff"].median())
    curves = detectable_curves(pilot)
    z = detectable_difference_z(0.05)
    shared = curves[curves["curve"] == "shared_tasks"]
    np.testing.assert_allclose(shared["mde"], z * pilot.paired_sd / np.sqrt(shared["n_tasks"]))
    repeats = curves[curves["curve"] == "repeats"]
    new = curves[curves["curve"] == "new_tasks"].set_index("total_runs")
    # A budget spent on new tasks always detects at least as small a difference.
    for r in repeats.itertuples(index=False):
        assert new.loc[r.total_runs, "mde"] <= r.mde + 1e-12


@pytest.mark.parametrize("runs_per_task", [1, 3])
def test_study_design_gives_the_nominal_power(runs_per_task) -> None:
    """Simulated studies sized by :func:`study_design` (interaction SD 0.15, noise SD 0.15,
    difference 0.1, two-sided 0.05) reject a zero mean paired difference, by a z test on
    the per-task mean differences, in 80% of 2,000 simulations, within 3 standard errors
    (0.027)."""
    sigma_g, sigma_e, delta = 0.15, 0.15, 0.1
    pilot = PilotVariances(math.sqrt(2 * sigma_g**2 + 2 * sigma_e**2), 0, 0, sigma_e)
    design = study_design(pilot, [delta], max_runs_per_task=3)
    n = int(design.loc[design["runs_per_task"] == runs_per_task, "tasks_needed"].iloc[0])
    rng = np.random.default_rng(runs_per_task)
    sims = 2000
    interaction = rng.normal(0, sigma_g, (sims, n, 2))
    noise = rng.normal(0, sigma_e, (sims, n, 2, runs_per_task)).mean(axis=3)
    d = delta + (interaction + noise) @ np.array([1.0, -1.0])
    z = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    power = float((np.abs(z) > sps.norm.isf(0.025)).mean())
    assert power == pytest.approx(0.8, abs=3 * math.sqrt(0.8 * 0.2 / sims))


def test_study_design_with_repeats_needs_fewer_tasks_but_more_runs() -> None:
    pilot = PilotVariances(0.3, 0.2, 0.4, 0.15)
    table = study_design(pilot, [0.1, 0.2], max_runs_per_task=4, comparisons=78)
    for _, part in table.groupby("difference"):
        assert part["tasks_needed"].is_monotonic_decreasing
        assert part["total_runs"].is_monotonic_increasing
    assert table["level"].iloc[0] == pytest.approx(0.05 / 78)
    no_repeats = PilotVariances(0.3, 0.2, 0.4, float("nan"))
    flat = study_design(no_repeats, [0.1], max_runs_per_task=3)
    assert flat["tasks_needed"].nunique() == 1  # without a run-to-run SD repeats buy nothing
    assert pd.isna(pilot_variances(pd.DataFrame({"sd_diff": []}), 0.1).paired_sd)
