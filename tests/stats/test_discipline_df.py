"""``tests.csv``'s ``df`` means one thing across the tests of groups of tasks (4.6, E.10)."""

from __future__ import annotations

import pandas as pd
from scipy import stats as sps

from spu.stats.disciplines import all_discipline_configs, discipline_gap, discipline_stability
from spu.stats.interaction import grouping_share, spread_summary
from spu.stats.named_tests import groups_df
from spu.stats.runs_table import official
from spu.stats.tasks import kruskal_wallis_disciplines, task_table


def test_every_discipline_test_has_the_disciplines_less_one(paper_runs) -> None:
    """Four disciplines: df 3 for Kruskal-Wallis (scipy's chi-squared df), the gap's
    permutation test, the splits test and the interaction share; the subfield share has
    the subfields less one; the hypergeometric counts have none."""
    public = official(paper_runs[paper_runs["visibility"] == "public"])
    n_disc = public["discipline"].nunique()
    assert n_disc == 4
    tasks = task_table(paper_runs)
    kw = kruskal_wallis_disciplines(tasks)
    samples = [g["task_mean"].dropna().to_numpy() for _, g in
               tasks[tasks["visibility"] == "public"].groupby("discipline")]
    chi2 = sps.kruskal(*samples)
    assert kw["df"] == 3 and kw["p_value"] == sps.chi2.sf(chi2.statistic, 3)
    order = sorted(public["config"].unique())
    configs = all_discipline_configs(public, order)
    _, gap = discipline_gap(public, configs[:3], configs[3:], resamples=20, permutations=50)
    _, stability = discipline_stability(public, configs, draws=20)
    by_discipline = grouping_share(public, order, "discipline", draws=20)
    assert gap["df"] == stability["df"] == by_discipline["df"] == n_disc - 1
    by_subfield = grouping_share(public, order, "subfield", draws=20)
    assert by_subfield["df"] == public["subfield"].nunique() - 1
    _, widest = spread_summary(tasks, paper_runs)
    assert widest and all(t["df"] is None for t in widest)


def test_groups_df_is_none_without_two_groups() -> None:
    assert [groups_df(k) for k in (0, 1, 2, 13)] == [None, None, 1, 12]
    one = pd.DataFrame({"visibility": "public", "discipline": "x", "task_mean": [0.1, 0.2]})
    assert kruskal_wallis_disciplines(one)["df"] is None
