"""Repeats (3.6, 4.5), the configuration-by-task interaction (4.4, E.9) and scores by
discipline (4.6, E.10), against scipy, statsmodels and exact enumerations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps
from statsmodels.stats.anova import anova_lm

from spu.stats.additive import additive_residuals, fit_additive
from spu.stats.agreement import repeat_agreement, repeat_orders_table
from spu.stats.disciplines import (
    all_discipline_configs,
    discipline_gap,
    discipline_stability,
    discipline_summary,
)
from spu.stats.interaction import (
    grouping_share,
    interaction_tasks,
    largest_common_block,
    simulated_nulls,
    variance_decomposition,
)
from spu.stats.repeats import repeat_task_table, stop_clustering_test, stop_effect
from spu.stats.runs_table import official, score_matrix
from spu.stats.submissions import load_task_set
from tests.stats.conftest import run_row, write_task


def _stop_runs(stops_per_task: list[int], runs_per_task: int) -> pd.DataFrame:
    rows = []
    for t, stops in enumerate(stops_per_task):
        for r in range(runs_per_task):
            rows.append({"task_id": f"t{t}", "outcome": "policy_stop" if r < stops else "valid"})
    return pd.DataFrame(rows)


def test_stop_clustering_against_exact_enumeration() -> None:
    """Four tasks of three runs, stops (3, 1, 0, 0): the tasks with at least 3 stops, 1,
    against every placement of the 4 stops among the 12 runs (C(12, 4) = 495): a
    placement puts all three runs of some task stopped in 4 * 9 = 36 of them, so the
    exact one-sided P is 36/495. The Monte Carlo p (20,000 draws) is within 3 SE."""
    runs = _stop_runs([3, 1, 0, 0], 3)
    exact = stop_clustering_test(runs, draws=1000, minimum=3)
    assert exact["statistic"] == 1 and exact["method"] == "exact"
    assert exact["p_value"] == pytest.approx(36 / 495, abs=1e-12)
    count = sum(any(set(range(3 * t, 3 * t + 3)) <= set(c) for t in range(4))
                for c in itertools.combinations(range(12), 4))
    assert count == 36
    sampled = stop_clustering_test(runs, draws=100, minimum=3)
    assert sampled["method"] == "monte-carlo"
    many = stop_clustering_test(runs, seed=2, draws=20_000, minimum=3)
    assert many["method"] == "exact"  # 495 placements: enumerated rather than sampled
    big = _stop_runs([3, 3, 3, 3] + [0] * 25, 5)  # the paper's pattern: 12 stops on 4 tasks
    result = stop_clustering_test(big, draws=20_000)
    expected = 29 * sps.binom.sf(2, 5, 12 / 145)
    assert result["expected"] == pytest.approx(expected, abs=1e-12)
    assert result["statistic"] == 4 and result["p_value"] < 0.01


def test_stop_effect_and_repeat_task_table(paper_runs) -> None:
    public_all = paper_runs[paper_runs["visibility"] == "public"]
    table = repeat_task_table(public_all)
    assert len(table) == 29 and table["n_repeats"].eq(5).all()
    repeated = public_all[(public_all["repeat"] >= 1) & public_all["scored"]]
    sd = repeated.groupby("task_id")["score_recovered"].std()
    np.testing.assert_allclose(table.set_index("task_id")["repeat_sd"], sd[table["task_id"]])
    stops, row = stop_effect(public_all, resamples=200)
    for r in stops.itertuples(index=False):
        own = repeated[repeated["task_id"] == r.task_id]
        stopped = own["outcome"] == "policy_stop"
        assert r.diff == pytest.approx(own.loc[stopped, "score_recovered"].mean()
                                       - own.loc[~stopped, "score_recovered"].mean())
    assert row["value"] == pytest.approx(stops["diff"].mean())


def test_repeat_orders_and_agreement(tmp_path) -> None:
    """Three repeats of one task with two groups: G identical in all, H not; repeats
    against the official run of another configuration."""
    write_task(tmp_path, "t1", {"G": {"a": 1.0, "b": 2.0}, "H": {"c": 1.0, "d": 2.0, "e": 3.0}})
    tasks = load_task_set([tmp_path])
    runs = pd.DataFrame([run_row("A", "t1", 0.5, repeat=r) for r in (1, 2, 3)]
                        + [run_row("B", "t1", 0.2)])
    orders = {"A-t1-1": {"G": ["a", "b"], "H": ["c", "d", "e"]},
              "A-t1-2": {"G": ["a", "b"], "H": ["c", "d", "e"]},
              "A-t1-3": {"G": ["a", "b"], "H": ["e", "d", "c"]},
              "B-t1-0": {"G": ["b", "a"], "H": ["c", "d", "e"]}}
    table = repeat_orders_table(runs[runs["repeat"] >= 1], orders, tasks)
    assert table.set_index("group_id")["identical_in_all_repeats"].to_dict() == {
        "G": True, "H": False}
    agreement, summary = repeat_agreement(runs, orders, tasks, resamples=50)
    row = agreement.iloc[0]
    # Pairs of repeats: (1, 2) agree 1; (1, 3) and (2, 3): G 1, H -1 -> 0. Mean 1/3.
    assert row["within"] == pytest.approx(1 / 3) and row["identical_pairs"] == 1
    # Each repeat against B: G -1; H 1, 1, -1 -> (0 + 0 - 1) / 3.
    assert row["between"] == pytest.approx(-1 / 3)
    assert {r["statistic"] for r in summary} >= {"agreement_gap", "identical_repeat_pairs"}


def test_variance_decomposition_matches_statsmodels_anova(paper_runs) -> None:
    """The mean squares of the block equal statsmodels' two-way ANOVA; shares sum to 1."""
    public_all = paper_runs[paper_runs["visibility"] == "public"]
    order = sorted(public_all["config"].unique())
    variance, summary = variance_decomposition(public_all, order, resamples=300)
    matrix = score_matrix(official(public_all), order)
    found = largest_common_block(matrix)
    block = matrix.loc[list(found.tasks), list(found.configs)]
    assert not block.isna().any().any()
    long = block.stack().rename("y").reset_index()
    long.columns = ["task", "config", "y"]
    anova = anova_lm(smf.ols("y ~ C(task) + C(config)", data=long).fit())
    ms = anova["mean_sq"]
    got = {r["statistic"]: r["value"] for r in summary}
    assert got["block_configs"] == block.shape[1] and got["block_tasks"] == block.shape[0]
    assert got["ms_resid"] == pytest.approx(ms["Residual"], rel=1e-10)
    shares = variance.set_index("component")
    c, t = block.shape[1], block.shape[0]
    assert shares.loc["task", "variance"] == pytest.approx(
        (ms["C(task)"] - ms["Residual"]) / c, rel=1e-10)
    assert shares.loc["configuration", "variance"] == pytest.approx(
        (ms["C(config)"] - ms["Residual"]) / t, rel=1e-10)
    assert shares["share"].sum() == pytest.approx(1.0)
    assert ((shares["ci_low"] <= shares["share"] + 1e-12)
            & (shares["share"] <= shares["ci_high"] + 1e-12)).all()


def test_interaction_f_tests_against_scipy(paper_runs) -> None:
    public_all = paper_runs[paper_runs["visibility"] == "public"]
    order = sorted(public_all["config"].unique())
    table, tests = interaction_tasks(public_all, order)
    assert len(table) == len(tests) > 20
    fit = fit_additive(score_matrix(official(public_all)[official(public_all)["scored"]], order))
    resid = additive_residuals(fit.design, fit.y)[0]
    n, t_count = fit.y.size, len(fit.design.tasks)
    c_count = len(set(fit.design.config_index))
    row = table.iloc[0]
    on = fit.design.task_index == fit.design.tasks.index(row.task_id)
    df1 = (on.sum() - 1) * (n - t_count - c_count + 1) / (n - t_count)
    repeats = public_all[(public_all["repeat"] >= 1) & public_all["scored"]
                         & (public_all["task_id"] == row.task_id)]["score_recovered"]
    f = (resid[on] ** 2).sum() / df1 / repeats.var(ddof=1)
    assert row.F == pytest.approx(f, rel=1e-10)
    assert row.p_value == pytest.approx(sps.f.sf(f, df1, len(repeats) - 1), rel=1e-10)


def test_grouping_share_matches_an_ols_of_the_residuals(paper_runs) -> None:
    """The share the discipline grouping explains equals the R^2 of regressing the
    additive-fit residuals on configuration-by-discipline cells (statsmodels OLS)."""
    public = official(paper_runs)
    order = sorted(public["config"].unique())
    result = grouping_share(public, order, "discipline", draws=200)
    fit = fit_additive(score_matrix(public, order))
    resid = additive_residuals(fit.design, fit.y)[0]
    discipline = public.groupby("task_id")["discipline"].first()
    frame = pd.DataFrame({
        "r": resid, "config": np.array(fit.design.configs)[fit.design.config_index],
        "discipline": discipline[np.array(fit.design.tasks)[fit.design.task_index]].to_numpy()})
    frame["cell"] = frame["config"] + " | " + frame["discipline"]
    ols = smf.ols("r ~ C(cell) - 1", data=frame).fit()
    explained = 1 - ols.ssr / (resid**2).sum()
    assert result["statistic"] == pytest.approx(explained, abs=1e-9)
    assert 0 < result["p_value"] <= 1


def test_pair_correlations_are_pearson_on_shared_tasks(paper_runs) -> None:
    public_all = paper_runs[paper_runs["visibility"] == "public"]
    order = sorted(public_all["config"].unique())
    pairs, tests, summary = simulated_nulls(public_all, order, 0.15, draws=200)
    assert len(pairs) == 55  # eleven widely covered configurations
    matrix = score_matrix(official(public_all), order)
    row = pairs.iloc[0]
    both = matrix[[row.config_a, row.config_b]].dropna()
    assert row.r == pytest.approx(np.corrcoef(both.T)[0, 1], abs=1e-12)
    assert row.n_tasks == len(both)
    assert (pairs["p_sim"] >= 1 / 201).all()


def test_discipline_gap_exact_permutation_and_summary() -> None:
    """Six tasks in two disciplines (3 and 3): the widest minus the narrowest discipline
    mean of the leading-minus-trailing task differences, against all 20 relabelings."""
    diffs = {"t1": 0.5, "t2": 0.4, "t3": 0.6, "t4": 0.1, "t5": 0.0, "t6": 0.2}
    rows = []
    for t, d in diffs.items():
        discipline = "x" if t in ("t1", "t2", "t3") else "y"
        rows += [run_row("A", t, 0.2 + d, discipline=discipline),
                 run_row("B", t, 0.2, discipline=discipline)]
    runs = pd.DataFrame(rows)
    table, test = discipline_gap(runs, ["A"], ["B"], resamples=100, permutations=1000)
    values = np.array(list(diffs.values()))
    observed = abs(values[:3].mean() - values[3:].mean())
    null = [abs(values[list(c)].mean() - np.delete(values, list(c)).mean())
            for c in itertools.combinations(range(6), 3)]
    assert test["statistic"] == pytest.approx(observed)
    assert test["p_value"] == pytest.approx(np.mean(np.array(null) >= observed - 1e-12))
    assert test["method"].startswith("exact")
    summary = discipline_summary(runs, resamples=100).set_index("discipline")
    assert summary.loc["x", "raw_mean"] == pytest.approx(runs[runs["discipline"] == "x"][
        "score_recovered"].mean())


def test_discipline_stability_is_mean_spearman(paper_runs) -> None:
    public = official(paper_runs)
    configs = all_discipline_configs(public, sorted(public["config"].unique()))
    # The paper's rule, a scored run in every discipline: the simulation leaves Opus 5.5
    # (44 tasks) a medicine task, so twelve; with a coverage condition of half the tasks,
    # eleven.
    assert len(configs) == 12
    assert len(all_discipline_configs(public, configs, low_coverage=0.5)) == 11
    table, test = discipline_stability(public, configs, draws=200)
    scored = public[public["scored"] & public["config"].isin(configs)]
    means = scored.groupby(["discipline", "config"])["score_recovered"].mean().unstack()
    expected = [sps.spearmanr(means.loc[a], means.loc[b]).statistic
                for a, b in itertools.combinations(sorted(means.index), 2)]
    np.testing.assert_allclose(table["rho"], expected, atol=1e-12)
    assert test["statistic"] == pytest.approx(np.mean(expected))
    assert 0 < test["p_value"] <= 1 and not math.isnan(test["null_median"])
