"""Exact ties with float noise (issue 43, gap 3) in the statistics that compare values.

Each statistic gets values equal in exact arithmetic but different in the last float
place (``0.1 + 0.2`` against ``0.3``; 32/65 summed two ways) and must treat them as tied
(:mod:`spu.stats.ties`): the result equals the one on the exactly tied values, and scipy's
on those where scipy computes it. Kruskal-Wallis, Wilcoxon zeros and above-chance are in
``test_populations.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.stats.costs import pareto_frontier
from spu.stats.effort import effort_correlations
from spu.stats.interaction import spread_summary

A = float(np.mean([2 / 65, 1.0, 29 / 65]))  # 32/65 summed one way: 0.4923076923076923
B = float(np.mean([-34 / 65, 1.0, 1.0]))  # and another: 0.49230769230769234
NOISY_03 = 0.1 + 0.2  # 0.30000000000000004


def test_the_noise_is_there() -> None:
    assert A != B and A < B and NOISY_03 > 0.3 and 0.7 - 0.4 < 0.3


def test_pareto_ties_equal_costs_and_equal_scores() -> None:
    """Paper 3.5, Figure 11: a configuration is dominated only by one with lower-or-equal
    cost and higher-or-equal score, one strictly. Two costs of 0.3 (one summed as 0.1 +
    0.2) at one score dominate neither; two scores of 32/65 at one cost neither. Worked by
    hand: all three points of each case but the costlier lower one are on the frontier,
    as on the exactly tied values; without the rounding the noisy one would be dominated."""
    cost = np.array([0.3, NOISY_03, 0.5])
    score = np.array([0.4, 0.4, 0.45])
    assert pareto_frontier(cost, score).tolist() == [True, True, True]
    assert pareto_frontier(np.array([0.3, 0.3, 0.5]), score).tolist() == [True, True, True]
    cost = np.array([1.0, 1.0, 2.0])
    score = np.array([A, B, 0.3])
    assert pareto_frontier(cost, score).tolist() == [True, True, False]
    assert pareto_frontier(cost, np.array([32 / 65] * 2 + [0.3])).tolist() == [
        True, True, False]


def _effort_runs(scores: list[float], runtimes: list[float]) -> pd.DataFrame:
    n = len(scores)
    return pd.DataFrame({"config": "A", "task_id": [f"t{i}" for i in range(n)],
                         "scored": True, "score_recovered": scores, "runtime_s": runtimes,
                         "tool_calls": 1, "web_fetches": 1, "used_gpu": False})


def test_effort_spearman_ranks_noisy_ties_alike() -> None:
    """E.3's Spearman correlations of score with run time: two task scores of 32/65 and
    two run times of 0.3 take average ranks, as scipy's spearmanr on the exactly tied
    values (tolerance 1e-12); the noisy values untied would give another rho."""
    noisy = _effort_runs([A, B, 0.1, 0.9, 0.6, 0.2], [NOISY_03, 0.3, 1.0, 2.0, 0.5, 0.3])
    exact = ([32 / 65, 32 / 65, 0.1, 0.9, 0.6, 0.2], [0.3, 0.3, 1.0, 2.0, 0.5, 0.3])
    table, _ = effort_correlations(noisy, ["A"], resamples=20)
    row = table[(table["config"] == "A") & (table["measure"] == "runtime_s")].iloc[0]
    reference = sps.spearmanr(exact[1], exact[0])
    assert row["rho"] == pytest.approx(reference.statistic, abs=1e-12)
    assert row["p_value"] == pytest.approx(reference.pvalue, abs=1e-12)
    untied = sps.spearmanr(noisy["runtime_s"], noisy["score_recovered"]).statistic
    assert abs(untied - reference.statistic) > 1e-3


def _spread_inputs(sd: list[float], agreement: list[float]) -> tuple[pd.DataFrame, ...]:
    n = len(sd)
    tasks = pd.DataFrame({"task_id": [f"t{i}" for i in range(n)], "visibility": "public",
                          "discipline": "chemistry", "task_sd": sd, "task_min": 0.0,
                          "task_max": 0.4})
    runs = pd.DataFrame({"task_id": [f"t{i}" for i in range(n)], "config": "A",
                         "repeat": 0, "scored": True, "visibility": "public",
                         "score_recovered": 0.2})
    return tasks, runs, pd.DataFrame({"task_id": tasks["task_id"], "agreement_mean": agreement})


def test_spread_agreement_spearman_ranks_noisy_ties_alike() -> None:
    """4.4's Spearman of the task spread with the configurations' agreement: spreads and
    agreements equal as numbers tie, as scipy's spearmanr on the exactly tied values."""
    rows, _ = spread_summary(*_spread_inputs([NOISY_03, 0.3, 0.1, 0.5, A, B],
                                             [0.2, 0.6, 0.7, 0.1, 0.7 - 0.4, 0.3]))
    got = {r["statistic"]: r["value"] for r in rows}["spread_agreement_spearman"]
    reference = sps.spearmanr([0.3, 0.3, 0.1, 0.5, 32 / 65, 32 / 65],
                              [0.2, 0.6, 0.7, 0.1, 0.3, 0.3]).statistic
    assert got == pytest.approx(reference, abs=1e-12)


def test_sole_top_score_ties_up_to_float_noise() -> None:
    """4.4's configurations with the sole highest score on a widest-spread task: two
    configurations whose scores are both 32/65 (summed two ways) share the top, so
    neither holds it alone, as when the scores are exactly equal."""
    tasks = pd.DataFrame({"task_id": ["t0"], "visibility": "public", "discipline": "x",
                          "task_sd": [0.2], "task_min": [0.1], "task_max": [32 / 65]})

    def sole_top(scores: list[float]) -> int:
        runs = pd.DataFrame({"task_id": "t0", "config": ["A", "B", "C"], "repeat": 0,
                             "scored": True, "visibility": "public",
                             "score_recovered": scores})
        rows, _ = spread_summary(tasks, runs)
        return int({r["statistic"]: r["value"] for r in rows}["configs_sole_top_on_widest"])

    assert sole_top([32 / 65, 32 / 65, 0.1]) == 0
    assert sole_top([A, B, 0.1]) == 0
