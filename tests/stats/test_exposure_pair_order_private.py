"""Exposure (3.7, E.4), appendix F (pairs in the measured order, top-1) and the private
per-task means (E.5), against independent computations."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.stats.exposure import (
    EXPOSURE_COLUMNS,
    exposure_indicators,
    exposure_summary,
    exposure_table,
    presented_order_summary,
)
from spu.stats.pair_order import (
    example_runs,
    pair_order_configs,
    pair_order_runs,
    pairs_in_order,
    run_pair_order,
    top_is_measured_top,
)
from spu.stats.private import private_task_table
from spu.stats.runs_table import official, score_matrix
from spu.stats.submissions import load_task_set
from spu.stats.tasks import task_table
from tests.stats.conftest import run_row, write_task


def test_exposure_table_against_manual_relative_scores(paper_runs) -> None:
    public = official(paper_runs)
    order = sorted(public["config"].unique())
    table, pooled = exposure_table(public, order, resamples=300, draws=300)
    assert list(table.columns[:8]) == list(EXPOSURE_COLUMNS)
    matrix = score_matrix(public, order)
    row = table[table["config"] == "Doubao"].iloc[0]
    others = matrix.drop(columns="Doubao").mean(axis=1)
    own = public[(public["config"] == "Doubao") & public["scored"]].set_index("task_id")
    relative = own["score_recovered"] - others[own.index]
    flagged = own["flagged_exposure"].astype(bool)
    assert row["n_flagged"] == flagged.sum() == 23
    assert row["diff"] == pytest.approx(relative[flagged].mean() - relative[~flagged].mean(),
                                        abs=1e-12)
    weights = table["n_flagged"].to_numpy()
    assert pooled["statistic"] == pytest.approx(np.dot(weights, table["diff"]) / weights.sum())
    assert pooled["test"] == "exposure_pooled_difference" and pooled["section"] == "3.7"


def test_exposure_summary_and_indicators(paper_runs) -> None:
    public = official(paper_runs)
    rows = {r["statistic"]: r for r in exposure_summary(public)}
    scored = public[public["scored"]]
    flagged = scored[scored["flagged_exposure"]]
    above = (flagged["score_recovered"] > flagged["threshold"]).sum()
    assert rows["flagged_above_chance"]["value"] == above
    assert rows["flagged_above_chance"]["n"] == len(flagged)
    indicators = exposure_indicators(public, sorted(public["config"].unique())).set_index(
        "config")
    share = scored.groupby("config")["flagged_exposure"].mean()
    np.testing.assert_allclose(indicators["flagged_share"], share[indicators.index])
    outside = (scored["requests_outside_tools"] > 0).groupby(scored["config"]).mean()
    np.testing.assert_allclose(indicators["outside_share"], outside[indicators.index])


def test_presented_order_and_runs_that_submitted_it(tmp_path) -> None:
    """Task t1 presents a, b, c (targets.csv order is the contract's, sorted) with measured
    3, 2, 1: the presented order scores -1, below its threshold; run A submitted it."""
    write_task(tmp_path, "t1", {"G": {"a": 3.0, "b": 2.0, "c": 1.0}})
    tasks = load_task_set([tmp_path])
    runs = pd.DataFrame([run_row("A", "t1", -1.0, threshold=0.8, n_items=3),
                         run_row("B", "t1", 1.0, threshold=0.8, n_items=3)])
    stats = task_table(runs, tasks)
    assert stats["presented_order_score"].iloc[0] == pytest.approx(-1.0)
    orders = {"A-t1-0": {"G": ["a", "b", "c"]}, "B-t1-0": {"G": ["c", "b", "a"]}}
    table, summary = presented_order_summary(stats, runs, orders, tasks, ["A", "B"])
    rows = {r["statistic"]: r["value"] for r in summary}
    assert rows["presented_order_mean"] == pytest.approx(-1.0)
    assert rows["presented_order_above_chance"] == 0 and rows["runs_submitting_input_order"] == 1
    assert table.set_index("config").loc["A", "n_input_order"] == 1
    assert np.isnan(table.set_index("config").loc["A", "raw_mean_without_input_order"])


def test_pairs_in_order_against_brute_force_and_kendall() -> None:
    """The share of differently measured pairs in the measured order equals a brute-force
    count; without ties it is (1 + Kendall's tau) / 2 (scipy.stats.kendalltau)."""
    rng = np.random.default_rng(4)
    items = [f"e{i}" for i in range(12)]
    for ties in (False, True):
        values = rng.integers(0, 5, 12).astype(float) if ties else rng.permutation(12) * 1.0
        measured = dict(zip(items, values, strict=True))
        order = list(rng.permutation(items))
        in_order, pairs = pairs_in_order(order, measured)
        brute = [(measured[a] < measured[b]) for a, b in itertools.combinations(order, 2)
                 if measured[a] != measured[b]]
        assert (in_order, pairs) == (sum(brute), len(brute))
        if not ties:
            tau = sps.kendalltau(np.arange(12), [measured[i] for i in order]).statistic
            assert in_order / pairs == pytest.approx((1 + tau) / 2, abs=1e-12)
    hit, chance = top_is_measured_top(["a", "b"], {"a": 1.0, "b": 2.0})  # b last: top
    assert hit and chance == 0.5


def test_pair_order_tables(tmp_path) -> None:
    write_task(tmp_path, "t1", {"G": {f"e{i:02d}": float(i) for i in range(12)}})
    write_task(tmp_path, "t2", {"G": {"a": 1.0, "b": 2.0}, "H": {"c": 1.0, "d": 1.0, "e": 5.0}})
    tasks = load_task_set([tmp_path])
    runs = pd.DataFrame([run_row("A", "t1", 0.4), run_row("A", "t2", 0.2),
                         run_row("B", "t1", 0.8)])
    ordered = [f"e{i:02d}" for i in range(12)]
    orders = {"A-t1-0": {"G": ordered[::-1][:6][::-1] + ordered[:6]},
              "A-t2-0": {"G": ["b", "a"], "H": ["e", "c", "d"]},
              "B-t1-0": {"G": ordered}}
    per_run = pair_order_runs(runs, orders, tasks).set_index("run_id")
    assert per_run.loc["B-t1-0", "pair_share"] == 1.0 and per_run.loc["B-t1-0", "top1"] == 1.0
    # t2: G 0 of 1 pair; H pairs (c,e) (d,e) differ, both out of order: 0.
    assert per_run.loc["A-t2-0", "pair_share"] == 0.0
    assert per_run.loc["A-t2-0", "top1_random"] == pytest.approx((0.5 + 1 / 3) / 2)
    direct = run_pair_order(orders["A-t1-0"], tasks["t1"])
    assert per_run.loc["A-t1-0", "pair_share"] == pytest.approx(direct["pair_share"])
    configs, summary = pair_order_configs(per_run.reset_index(), ["A", "B"], resamples=50)
    assert configs.set_index("config").loc["A", "n_runs"] == 2
    examples = example_runs(runs, orders, tasks)
    assert set(examples["task_id"]) == {"t1"} and len(examples) == 12  # one 12-item task


def test_private_task_table(paper_runs) -> None:
    private = official(paper_runs, "private")
    table = private_task_table(private).set_index("task_id")
    scored = private[private["scored"]].groupby("task_id")["score_recovered"]
    np.testing.assert_allclose(table["task_mean"], scored.mean()[table.index])
    assert (table["n_runs"] == 13).all() and len(table) == 16
    assert table["excluded"].str.contains("refusal").any()
