"""Private tasks against uniformly random rankings (paper 3.4, Table 2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from spu.stats.private import (
    p_above_random,
    private_pairs_table,
    private_table,
    random_ranking_null,
)
from spu.stats.runs_table import check_runs_table, official, score_matrix
from spu.stats.submissions import load_task_set
from tests.stats.conftest import run_row, write_task


def test_exact_null_hand_worked(tmp_path) -> None:
    """Three private tasks of two experiments: a random order scores +1 or -1 with
    probability 1/2 each. A configuration that scores 1 on all three has mean 1, which
    random rankings reach with probability 1/8; one scoring 1 on two of them, 1/4."""
    for t in ("p1", "p2", "p3"):
        write_task(tmp_path, t, {"G": {"a": 1.0, "b": 2.0}}, visibility="private")
    tasks = load_task_set([tmp_path])
    rows = [run_row("A", t, 1.0, visibility="private", threshold=1.0) for t in ("p1", "p2", "p3")]
    rows += [run_row("B", "p1", 1.0, visibility="private", threshold=1.0),
             run_row("B", "p2", 1.0, visibility="private", threshold=1.0),
             run_row("B", "p3", None, outcome="refusal", visibility="private")]
    runs = official(check_runs_table(pd.DataFrame(rows)), "private")
    null = random_ranking_null(tasks, ["p1", "p2", "p3"], seed=0, draws=40_000)
    table = private_table(runs, ["A", "B"], null, resamples=200).set_index("config")
    # Monte Carlo SE: sqrt(p (1 - p) / 40000) < 0.0022
    assert table.loc["A", "p_vs_random"] == pytest.approx(1 / 8, abs=0.01)
    assert table.loc["B", "p_vs_random"] == pytest.approx(1 / 4, abs=0.01)
    assert (table["null_method"] == "monte-carlo").all()
    expected = multipletests(table["p_vs_random"], method="holm")[1]
    np.testing.assert_allclose(table["p_holm"], expected)
    assert table.loc["B", "n_runs"] == 3 and table.loc["B", "n_scored"] == 2


def test_null_is_seeded(tmp_path) -> None:
    write_task(tmp_path, "p1", {"G": {"a": 1.0, "b": 2.0, "c": 3.0, "d": 5.0}})
    tasks = load_task_set([tmp_path])
    a = random_ranking_null(tasks, ["p1"], seed=3, draws=500)["p1"]
    b = random_ranking_null(tasks, ["p1"], seed=3, draws=500)["p1"]
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean()) < 0.1  # a random ranking scores 0 on average


def test_normal_approximation_without_task_packages(paper_runs) -> None:
    private = official(paper_runs, "private")
    order = sorted(private["config"].unique())
    table = private_table(private, order, None, resamples=200)
    assert (table["null_method"] == "normal").all() and len(table) == 13
    assert table.set_index("config").loc["Fable 5.1", "n_scored"] == 2
    p, how = p_above_random(np.array([0.0]), np.array([0.5]))
    assert (p, how) == (0.5, "normal")  # a mean of 0 is the null's median


def test_private_pairs_use_the_exact_sign_flip(paper_runs) -> None:
    private = official(paper_runs, "private")
    order = sorted(private["config"].unique())
    table = private_pairs_table(score_matrix(private, order), order)
    assert len(table) == 78 and table["n_shared"].max() <= 16
    # with n shared tasks the smallest attainable two-sided p is 2 / 2**n
    attainable = 2.0 / 2.0 ** table["n_shared"].clip(lower=1)
    assert (table["p_value"] >= attainable - 1e-12).all()
