"""Agreement, consensus (paper E.8) and the monotone prior (4.2), on task packages and run
folders written to disk, read the way ``spu stats --tasks --runs-dir`` reads them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.stats.agreement import agreement_analysis, consensus_orders, rank_agreement
from spu.stats.monotone import abs_spearman, monotone_prior
from spu.stats.runs_table import check_runs_table
from spu.stats.submissions import load_submitted_orders, load_task_set, orders_from_bytes
from tests.stats.conftest import run_row, write_run, write_task

ORDERS = {"A": ["a", "b", "c", "d"], "B": ["a", "b", "d", "c"], "C": ["b", "a", "c", "d"]}
"""Measured a < b < c < d. A is right (1.0); B and C swap one adjacent pair: rho =
1 - 6 * 2 / (4 * 15) = 0.8."""


@pytest.fixture
def setting(tmp_path):
    write_task(tmp_path / "tasks", "t1", {"G": {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}})
    out = tmp_path / "outputs"
    rows = []
    for config, order in ORDERS.items():
        key = f"key-{config}"
        if config == "C":  # a recovered file: rankings keyed by group (departure 1)
            raw = b'{"task_id": "t1", "rankings": {"G": ["b", "a", "c", "d"]}}'
            write_run(out, key, "t1", None, raw=raw)
        else:
            write_run(out, key, "t1", [{"group_id": "G", "order": order}])
        score = 1.0 if config == "A" else 0.8
        rows.append(run_row(config, "t1", score, run_key=key,
                            outcome="recovered" if config == "C" else "valid"))
    runs = check_runs_table(pd.DataFrame(rows))
    tasks = load_task_set([tmp_path / "tasks"])
    return runs, tasks, out


def test_orders_are_read_from_run_folders_recovering_departures(setting) -> None:
    runs, _, out = setting
    submitted = load_submitted_orders(out, runs)
    assert submitted.notes == []
    assert {run_id: o["G"] for run_id, o in submitted.orders.items()} == {
        f"{c}-t1-0": ORDERS[c] for c in ORDERS}


def test_agreement_and_consensus_hand_worked(setting) -> None:
    """Agreement: A-B 0.8, A-C 0.8, B-C 0.6 (B positions of C's order: 1, 0, 3, 2, d^2 = 4,
    rho = 1 - 24/60), mean 0.7333. Consensus by average position: a 1/3, b 2/3, c 7/3,
    d 8/3 -> a b c d, score 1.0; the submissions average 2.6/3, so the gain is 0.1333.
    Leave one out: the consensus of the other two is a b c d every time (ties broken by
    id), so A's difference is 0 and B's and C's are 0.8 - 1 = -0.2."""
    runs, tasks, out = setting
    orders = load_submitted_orders(out, runs).orders
    contract = tasks["t1"].package.contract
    assert rank_agreement(contract, orders["B-t1-0"], orders["C-t1-0"]) == pytest.approx(0.6)
    result = agreement_analysis(runs, orders, tasks, ["A", "B", "C"], resamples=100)
    row = result.tasks.iloc[0]
    assert row.agreement_mean == pytest.approx(2.2 / 3)
    assert row.consensus_score == pytest.approx(1.0)
    assert row.consensus_gain == pytest.approx(1.0 - 2.6 / 3)
    loo = result.leave_one_out.set_index("config")["diff_mean"]
    assert loo.to_dict() == pytest.approx({"A": 0.0, "B": -0.2, "C": -0.2})


def test_agreement_is_the_spearman_of_the_two_orders() -> None:
    """Reference: scipy.stats.spearmanr of the two submitted positions."""
    from spu.schema import ComparisonGroup, Contract

    rng = np.random.default_rng(0)
    items = [f"e{i}" for i in range(9)]
    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=items)])
    a, b = list(rng.permutation(items)), list(rng.permutation(items))
    expected = sps.spearmanr([a.index(i) for i in items], [b.index(i) for i in items])[0]
    assert rank_agreement(contract, {"G": a}, {"G": b}) == pytest.approx(expected, abs=1e-12)
    assert np.isnan(rank_agreement(contract, {"G": a}, {"G": b[:-1]}))


def test_consensus_ties_break_by_experiment_id() -> None:
    from spu.schema import ComparisonGroup, Contract

    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["x", "y"])])
    assert consensus_orders(contract, [{"G": ["y", "x"]}, {"G": ["x", "y"]}]) == {
        "G": ["x", "y"]}


def test_unreadable_run_folders_are_reported_not_fatal(tmp_path) -> None:
    out = tmp_path / "outputs"
    write_run(out, "k1", "t1", None, raw=b"not json")
    runs = check_runs_table(pd.DataFrame([run_row("A", "t1", 0.1, run_key="k1"),
                                          run_row("A", "t2", 0.1, run_key="k2")]))
    submitted = load_submitted_orders(out, runs)
    assert submitted.orders == {}
    assert any("no readable rankings" in n for n in submitted.notes)
    assert any("no run folder" in n for n in submitted.notes)
    assert orders_from_bytes(None) is None


def test_monotone_prior_hand_worked(tmp_path) -> None:
    """Group G (5 items): temperature takes 5 values, pressure only 2 (not examined), the
    solvent is text. Measured 3, 1, 4, 5, 2 along temperatures 10..50: rho = 1 - 6 * 16 /
    120 = 0.2. A ranks along temperature (|rho| 1, monotone); B submits the measured order
    (0.2). Group H has three items and is not examined."""
    temps = {"e1": 10, "e2": 20, "e3": 30, "e4": 40, "e5": 50}
    settings = {e: {"temp": t, "pressure": 1 + (t > 30), "solvent": "THF"}
                for e, t in temps.items()}
    write_task(tmp_path / "tasks", "t1",
               {"G": {"e1": 3.0, "e2": 1.0, "e3": 4.0, "e4": 5.0, "e5": 2.0},
                "H": {"h1": 1.0, "h2": 2.0, "h3": 3.0}},
               settings={**settings, "h1": {"temp": 1}, "h2": {"temp": 2}, "h3": {"temp": 3}})
    tasks = load_task_set([tmp_path / "tasks"])
    runs = check_runs_table(pd.DataFrame([run_row("A", "t1", 0.1), run_row("B", "t1", 0.6)]))
    h = ["h1", "h2", "h3"]
    orders = {"A-t1-0": {"G": ["e1", "e2", "e3", "e4", "e5"], "H": h},
              "B-t1-0": {"G": ["e2", "e5", "e1", "e3", "e4"], "H": h}}
    result = monotone_prior(runs, orders, tasks, ["A", "B"])
    groups = result.groups.set_index("config")
    assert set(result.groups["group_id"]) == {"G"}
    assert (groups["n_settings"] == 1).all()
    assert groups.loc["A", "submitted_abs_rho"] == pytest.approx(1.0)
    assert groups.loc["B", "submitted_abs_rho"] == pytest.approx(0.2)
    assert groups["measured_abs_rho"].tolist() == pytest.approx([0.2, 0.2])
    assert groups["submitted_monotone"].tolist() == [True, False]
    configs = result.configs.set_index("config")
    assert configs.loc["A", "submitted_monotone_share"] == 1.0
    assert configs.loc["A", "measured_monotone_share"] == 0.0


def test_abs_spearman_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 4, 12).astype(float), rng.normal(size=12)
    assert abs_spearman(x, y) == pytest.approx(abs(sps.spearmanr(x, y)[0]), abs=1e-12)
    assert np.isnan(abs_spearman(np.ones(4), y[:4]))
