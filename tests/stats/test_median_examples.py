"""Figure 28b: one run per discipline at the median score (pair_order_median_examples.csv)."""

from __future__ import annotations

import pandas as pd
import pytest

from spu.stats.analysis import StatsOptions, analyze
from spu.stats.pair_order import MEDIAN_EXAMPLES_RULE, median_examples
from spu.stats.runs_table import check_runs_table
from spu.stats.submissions import load_task_set
from tests.stats.conftest import run_row, write_run, write_task

T1 = {f"e{i:02d}": float(v) for i, v in enumerate([3, 1, 4, 5, 2, 9, 7, 8, 6, 0, 11, 10])}
T2 = {f"b{i}": float(i) for i in range(10)}


def _study(root):
    """By hand: scores 0.4, 0.8 (chemistry, t1), 0.1, 0.35 (biology, t2) and 0.5 on a
    two-group task (t3, no candidate); the median of the five is 0.4, so chemistry's run
    is A-t1 (0.4 exactly) and biology's B-t2 (0.05 away, against A-t2's 0.3)."""
    write_task(root / "tasks", "t1", {"G": T1})
    write_task(root / "tasks", "t2", {"G": T2})
    write_task(root / "tasks", "t3", {"G": {f"x{i}": float(i) for i in range(6)},
                                      "H": {f"y{i}": float(i) for i in range(6)}})
    plan = [("A", "t1", 0.4, "chemistry"), ("B", "t1", 0.8, "chemistry"),
            ("A", "t2", 0.1, "biology"), ("B", "t2", 0.35, "biology"),
            ("C", "t3", 0.5, "medicine")]
    rows, orders = [], {}
    for config, task, score, discipline in plan:
        key = f"{config}-{task}-0"
        if task == "t3":
            groups = [{"group_id": g, "order": [f"{p}{i}" for i in range(6)]}
                      for g, p in (("G", "x"), ("H", "y"))]
        else:
            items = T1 if task == "t1" else T2
            groups = [{"group_id": "G", "order": sorted(items, reverse=config == "A")}]
        write_run(root / "outputs", key, task, groups)
        orders[key] = {g["group_id"]: g["order"] for g in groups}
        rows.append(run_row(config, task, score, discipline=discipline, run_key=key))
    return pd.DataFrame(rows), orders


def test_one_run_per_discipline_at_the_median_by_hand(tmp_path) -> None:
    runs, orders = _study(tmp_path)
    table = median_examples(runs, orders, load_task_set([tmp_path / "tasks"]))
    chosen = table.groupby("discipline")["run_id"].first().to_dict()
    assert chosen == {"biology": "B-t2-0", "chemistry": "A-t1-0"}
    assert table["median"].tolist() == pytest.approx([0.4] * len(table))
    assert len(table) == 12 + 10
    # A-t1 submitted the items in reverse name order: e11 first, measured 10 (rank 11 of 12)
    first = table[table["run_id"] == "A-t1-0"].iloc[0]
    assert (first["item"], first["submitted_rank"], first["measured_rank"]) == ("e11", 1, 11)


def test_spu_stats_writes_it_under_the_papers_rule(tmp_path) -> None:
    runs, _ = _study(tmp_path)
    result = analyze(check_runs_table(runs), StatsOptions(
        resamples=30, simulations=30, task_roots=(tmp_path / "tasks",),
        runs_dir=tmp_path / "outputs"))
    table = result.tables["pair_order_median_examples.csv"]
    assert set(table["run_id"]) == {"A-t1-0", "B-t2-0"}
    entry = result.manifest["outputs"]["pair_order_median_examples.csv"]
    assert entry["written"] and entry["rule"] == MEDIAN_EXAMPLES_RULE
    assert "median" in entry["rule"] and "Figure 28b" in entry["section"]
    from spu.report.figures import save_figure
    from spu.report.paper_figures import figure_28

    paths = save_figure(figure_28(result), tmp_path / "figs", "figure_28")
    assert all(p.stat().st_size > 0 for p in paths)
    fig = figure_28(result)
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.startswith("biology: score 0.35") for t in titles)
    assert any(t.startswith("chemistry: score 0.40") for t in titles)
