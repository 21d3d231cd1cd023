"""Outcomes and scoring rules (paper 3.2, Table 6); costs and the Pareto frontier (3.5)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.stats.costs import COST_COLUMNS, cost_table, pareto_frontier
from spu.stats.outcomes import outcome_table
from spu.stats.runs_table import check_runs_table, official
from tests.stats.conftest import run_row


def test_outcome_table_hand_worked() -> None:
    """Five runs of one configuration: valid 0.6; recovered 0.2 (strict -1); a refusal that
    left a valid file (strict 0.4, not scored); a policy stop without a file; a timeout
    after a valid file (scored, 0.5). Mean at -1 = (0.6 - 1 + 0.4 - 1 + 0.5) / 5 = -0.1;
    after recovery (0.6 + 0.2 + 0.4 - 1 + 0.5) / 5 = 0.14; scored mean (0.6 + 0.2 + 0.5) / 3."""
    rows = [
        run_row("A", "t1", 0.6),
        run_row("A", "t2", 0.2, outcome="recovered"),
        {**run_row("A", "t3", None, outcome="refusal"), "score_strict": 0.4,
         "score_recovered": 0.4},
        run_row("A", "t4", None, outcome="policy_stop"),
        {**run_row("A", "t5", 0.5, outcome="timeout"), "score_strict": 0.5},
    ]
    table = outcome_table(check_runs_table(pd.DataFrame(rows)), ["A"]).iloc[0]
    assert (table.n_runs, table.rejected, table.refusal, table.no_file) == (5, 1, 1, 1)
    assert table.mean_at_minus1 == pytest.approx(-0.1)
    assert table.mean_after_recovery == pytest.approx(0.14)
    assert table.scored_mean == pytest.approx(1.3 / 3)
    assert table.n_scored == 3 and table.outcome_timeout == 1


def test_outcome_counts_reproduce_table_6(paper_runs) -> None:
    """The simulator draws Table 6's counts; the table gives them back."""
    table = outcome_table(official(paper_runs), sorted(paper_runs["config"].unique()))
    t = table.set_index("config")
    assert t.loc["Doubao", "rejected"] == 33 and t.loc["Opus 5.5", "refusal"] == 56
    assert t.loc["GPT-6.1 Sol", ["rejected", "refusal", "no_file"]].tolist() == [0, 2, 4]
    assert t.loc["Fable 5.1", ["refusal", "no_file"]].tolist() == [69, 1]
    assert (t["n_runs"] == 100).all()
    assert (t["n_scored"] == t["n_runs"] - t["refusal"] - t["no_file"]).all()


def test_pareto_frontier_hand_worked() -> None:
    # Point 2 costs more than point 1 and scores less: dominated. 3 and 1 tie on score,
    # 3 costs more: dominated. A NaN cost is on no frontier and dominates nothing.
    cost = np.array([1.0, 0.5, 2.0, 3.0, np.nan])
    score = np.array([0.4, 0.2, 0.3, 0.4, 0.9])
    assert pareto_frontier(cost, score).tolist() == [True, True, False, False, False]


def test_cost_table(paper_runs) -> None:
    public = official(paper_runs)
    order = sorted(public["config"].unique())
    adjusted = pd.Series(np.linspace(0.5, 0.2, len(order)), index=order)
    table = cost_table(public, order, adjusted, seed=0, resamples=2000)
    assert list(table.columns[:len(COST_COLUMNS)]) == list(COST_COLUMNS)
    for row in table.itertuples():
        own = public[public["config"] == row.config]
        scored = own[own["scored"]]
        assert row.cost_mean == pytest.approx(scored["cost_usd"].mean(), rel=1e-12)
        assert row.cost_total == pytest.approx(own["cost_usd"].sum(), rel=1e-12)
        prompt = scored[["input_tokens", "cache_read_tokens", "cache_write_tokens"]].sum(axis=1)
        assert row.cache_read_share == pytest.approx(
            scored["cache_read_tokens"].sum() / prompt.sum(), rel=1e-12)
        assert row.cost_ci_low < row.cost_mean < row.cost_ci_high
        assert row.cache_read_share_ci_low <= row.cache_read_share <= row.cache_read_share_ci_high
        assert row.runtime_h_ci_low < row.runtime_h_mean < row.runtime_h_ci_high
    # the interval is a percentile bootstrap over runs: compare with scipy's (same width
    # up to Monte Carlo error of 2,000 resamples)
    astra = public[(public["config"] == "Astra Max") & public["scored"]]["cost_usd"].to_numpy()
    ref = sps.bootstrap((astra,), np.mean, n_resamples=2000, method="percentile",
                        rng=np.random.default_rng(1)).confidence_interval
    row = table.set_index("config").loc["Astra Max"]
    assert row.cost_ci_low == pytest.approx(ref.low, rel=0.03)
    assert row.cost_ci_high == pytest.approx(ref.high, rel=0.03)
    expected = pareto_frontier(table["cost_mean"].to_numpy(), adjusted[order].to_numpy())
    assert table["pareto"].tolist() == expected.tolist()
