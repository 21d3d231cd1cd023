"""Task statistics (2.2, 3.3), outcomes (3.2), coverage (3.3) and cost checks (3.5),
each against an independent computation."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.stats.costs import cost_sensitivity_table, pareto_frontier
from spu.stats.coverage import all_tasks_table, coverage_table, shared_task_counts
from spu.stats.outcomes import (
    departure_table,
    recovered_vs_valid,
    refusal_table,
    scoring_rules_table,
)
from spu.stats.runs_table import official, score_matrix
from spu.stats.submissions import load_task_set
from spu.stats.tasks import kruskal_wallis_disciplines, task_table
from tests.stats.conftest import run_row, write_task


def test_task_table_against_pandas(paper_runs) -> None:
    table = task_table(paper_runs).set_index("task_id")
    scored = paper_runs[(paper_runs["repeat"] == 0) & paper_runs["scored"]]
    expected = scored.groupby("task_id")["score_recovered"].agg(["mean", "std", "size"])
    assert len(table) == 116
    np.testing.assert_allclose(table.loc[expected.index, "task_mean"], expected["mean"],
                               atol=1e-12)
    np.testing.assert_allclose(table.loc[expected.index, "task_sd"], expected["std"], atol=1e-12)
    assert (table.loc[expected.index, "n_scored"] == expected["size"]).all()
    first = paper_runs.groupby("task_id")[["n_items", "n_groups", "threshold"]].first()
    np.testing.assert_allclose(table.loc[first.index, "n_items"], first["n_items"])
    np.testing.assert_allclose(table.loc[first.index, "n_groups"], first["n_groups"].astype(float))
    assert list(table.reset_index().columns[:7]) == [
        "task_id", "discipline", "n_items", "n_groups", "threshold", "task_mean", "task_sd"]


def test_task_packages_add_ties_attainable_maximum_and_presented_order(tmp_path) -> None:
    """Hand-worked: group G has values 1, 1, 2 (tied), presented a, b, c; the presented
    order scores rho((1, 2, 3), (1.5, 1.5, 3)) = 0.866; the best strict order the same."""
    write_task(tmp_path, "t1", {"G": {"a": 1.0, "b": 1.0, "c": 2.0}})
    tasks = load_task_set([tmp_path])
    runs = pd.DataFrame([run_row("A", "t1", 0.5, n_items=3)])
    row = task_table(runs, tasks).iloc[0]
    expected = sps.spearmanr([1, 2, 3], [1.0, 1.0, 2.0]).statistic
    assert row["n_tied_groups"] == 1 and row["n_groups"] == 1
    assert row["attainable_max"] == pytest.approx(expected, abs=1e-12)
    assert row["presented_order_score"] == pytest.approx(expected, abs=1e-12)


def test_kruskal_wallis_matches_a_hand_computation_with_ties() -> None:
    """H with the tie correction, computed here from the rank sums, equals the module's
    (which calls scipy): groups (1, 2, 2) and (2, 3, 4, 5)."""
    values = {"a": [1.0, 2.0, 2.0], "b": [2.0, 3.0, 4.0, 5.0]}
    tasks = pd.DataFrame([{"visibility": "public", "discipline": d, "task_mean": v}
                          for d, vs in values.items() for v in vs])
    pooled = np.concatenate([values["a"], values["b"]])
    ranks = sps.rankdata(pooled)
    n = pooled.size
    h = 12 / (n * (n + 1)) * (ranks[:3].sum() ** 2 / 3 + ranks[3:].sum() ** 2 / 4) - 3 * (n + 1)
    ties = np.unique(pooled, return_counts=True)[1]
    h /= 1 - (ties**3 - ties).sum() / (n**3 - n)
    result = kruskal_wallis_disciplines(tasks)
    assert result["statistic"] == pytest.approx(h, abs=1e-12)
    assert result["p_value"] == pytest.approx(sps.chi2.sf(h, 1), abs=1e-12)
    assert result["df"] == 1 and result["section"] == "3.3"


def test_departures_refusals_and_scoring_rules(paper_runs) -> None:
    public = official(paper_runs)
    order = sorted(public["config"].unique())
    departures = departure_table(public, order)
    rejected = public[public["outcome"].isin(["recovered", "rejected"])]
    assert departures["n_files"].sum() == len(rejected) == 94
    assert set(departures["departure"]) <= {"object_keyed_by_group", "alternative_order_key",
                                            "alternative_top_level_key",
                                            "alternative_group_key", "renamed_identity"}
    refusals = refusal_table(public, order)
    overall = refusals[refusals["discipline"] == "all"].set_index("config")
    assert overall.loc["Opus 5.5", "refusals"] == 56 and overall.loc["Fable 5.1", "share"] == 0.69
    assert (overall["labelled"] == overall["refusals"]).all()  # the simulator labels [bio]
    rules = scoring_rules_table(official(paper_runs, "public").pipe(
        lambda p: pd.concat([p, official(paper_runs, "private")])), order, resamples=200)
    kept = paper_runs[(paper_runs["repeat"] == 0) & (paper_runs["outcome"] != "refusal")]
    means = kept.groupby("config")[["score_strict", "score_recovered"]].mean()
    rules = rules.set_index("config")
    np.testing.assert_allclose(rules["strict_mean"], means.loc[rules.index, "score_strict"])
    np.testing.assert_allclose(rules["recovered_mean"], means.loc[rules.index,
                                                                  "score_recovered"])
    assert (rules["strict_ci_low"] <= rules["strict_mean"]).all()


def test_recovered_vs_valid_against_exact_enumeration() -> None:
    """Two configurations on four tasks, hand-made: relative scores, the weighted pool and
    its exact permutation p (all C(4,2) * C(4,1) = 24 joint relabelings enumerated here)."""
    scores = {"A": [0.9, 0.8, 0.4, 0.3], "B": [0.5, 0.6, 0.2, 0.7], "C": [0.4, 0.4, 0.4, 0.4]}
    outcomes = {"A": ["recovered", "recovered", "valid", "valid"],
                "B": ["valid", "recovered", "valid", "valid"], "C": ["valid"] * 4}
    rows = [run_row(c, f"t{i}", s, outcome=o)
            for c in scores for i, (s, o) in enumerate(zip(scores[c], outcomes[c], strict=True))]
    runs = pd.DataFrame(rows)
    result = recovered_vs_valid(runs, ["A", "B", "C"], resamples=500, draws=1000)
    m = pd.DataFrame(scores)
    relative = {c: m[c] - m.drop(columns=c).mean(axis=1) for c in scores}

    def pooled(marks: dict[str, np.ndarray]) -> float:
        diffs = {c: relative[c][marks[c]].mean() - relative[c][~marks[c]].mean() for c in marks}
        weights = {c: marks[c].sum() for c in marks}
        return sum(weights[c] * diffs[c] for c in marks) / sum(weights.values())

    observed = {c: np.array([o == "recovered" for o in outcomes[c]]) for c in ("A", "B")}
    stat = pooled(observed)
    null = []
    for a in itertools.combinations(range(4), 2):
        for b in itertools.combinations(range(4), 1):
            marks = {"A": np.isin(np.arange(4), a), "B": np.isin(np.arange(4), b)}
            null.append(pooled(marks))
    exact = np.mean(np.abs(null) >= abs(stat) - 1e-12)
    assert result.pooled["diff"] == pytest.approx(stat, abs=1e-12)
    assert result.pooled["exact"] and result.pooled["p_perm"] == pytest.approx(exact)
    assert list(result.table["config"]) == ["A", "B"]
    assert result.pooled["ci_low"] <= stat <= result.pooled["ci_high"]


def test_coverage_difference_against_manual(paper_runs) -> None:
    public = official(paper_runs)
    order = sorted(public["config"].unique())
    table = coverage_table(public, order, resamples=300, draws=300).set_index("config")
    matrix = score_matrix(public, order)
    wide = [c for c in order if matrix[c].notna().mean() >= 0.5]
    assert "Opus 5.5" not in wide and "Fable 5.1" not in wide
    others = [c for c in wide if c != "Opus 5.5"]
    task_mean = matrix[others].mean(axis=1)
    excluded = matrix["Opus 5.5"].isna()
    expected = task_mean[excluded].mean() - task_mean[~excluded].mean()
    row = table.loc["Opus 5.5"]
    assert row["n_excluded"] == 56 and row["n_other_configs"] == 11
    assert row["diff"] == pytest.approx(expected, abs=1e-12)
    assert row["ci_low"] <= row["diff"] <= row["ci_high"]
    from statsmodels.stats.multitest import multipletests

    np.testing.assert_allclose(table["p_holm"], multipletests(table["p_perm"], method="holm")[1])


def test_shared_tasks_over_public_and_private_and_figure_1_table(paper_runs) -> None:
    counts = {r["statistic"]: r["value"] for r in shared_task_counts(paper_runs)}
    official_all = paper_runs[paper_runs["repeat"] == 0]
    matrix = score_matrix(official_all, sorted(official_all["config"].unique()))
    assert counts["shared_tasks_all"] == int(matrix.notna().all(axis=1).sum())
    assert counts["shared_tasks_all"] == (counts["shared_tasks_public"]
                                          + counts["shared_tasks_private"])
    assert counts["wide_coverage_configs"] == 11
    table = all_tasks_table(official_all, list(matrix.columns), resamples=200).set_index("config")
    np.testing.assert_allclose(table["raw_mean"], matrix.mean(axis=0)[table.index])
    shared = matrix.dropna()
    np.testing.assert_allclose(table["shared_mean"], shared.mean(axis=0)[table.index])
    assert (table["n_scored"] == matrix.notna().sum(axis=0)[table.index]).all()


def test_cost_sensitivity_against_manual(paper_runs) -> None:
    public = official(paper_runs)
    order = sorted(public["config"].unique())
    adjusted = pd.Series(np.linspace(0.5, 0.2, len(order)), index=order)
    table = cost_sensitivity_table(public, order, adjusted).set_index("config")
    scored = public[public["scored"]]
    full = scored.groupby("config")["cost_full_input_usd"].mean()
    cached = scored.groupby("config")["cost_usd"].mean()
    np.testing.assert_allclose(table["full_input_ratio"], (full / cached)[table.index])
    charged = public.groupby("config")["cost_usd"].sum() / scored.groupby("config").size()
    np.testing.assert_allclose(table["cost_charged_mean"], charged[table.index])
    assert table["full_input_ratio"].between(3, 10).all()  # the paper's 3.2 to 9.5
    assert (table["pareto_full_input"] == pareto_frontier(
        table["cost_full_input_mean"].to_numpy(), adjusted[table.index].to_numpy())).all()
