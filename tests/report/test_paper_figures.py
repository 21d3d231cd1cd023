"""The paper's figures in the report: one function per figure, every missing one listed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import matplotlib
import matplotlib.image
import pandas as pd
import pytest

from spu.report.build import build_report
from spu.report.paper_figures import REGISTRY, paper_figure_index, paper_figures
from spu.stats.analysis import StatsOptions, analyze
from spu.stats.runs_table import check_runs_table
from spu.stats.simulate import simulate_runs
from tests.stats.conftest import run_row, write_run, write_task

FROM_THE_RUNS_TABLE = (1, 3, 5, 6, 7, 8, 9, 10, 12, 13, 18, 19, 20, 24, 25, 26)
"""Figures a paper-sized runs table alone determines (at least in part)."""


@pytest.fixture(scope="module")
def result():
    runs = check_runs_table(simulate_runs(seed=5))
    return analyze(runs, StatsOptions(resamples=200, simulations=200))


def test_every_paper_figure_has_an_entry() -> None:
    assert [f.number for f in REGISTRY] == list(range(1, 29))
    import spu.report.paper_figures as module

    for spec in REGISTRY:
        if spec.draw is not None:
            assert spec.draw.__name__ == spec.name and getattr(module, spec.name)
            assert spec.caption


@pytest.mark.slow  # more than a few seconds
def test_a_paper_sized_table_draws_its_figures_and_lists_the_rest(result, tmp_path) -> None:
    drawable, missing = paper_figures(result)
    assert sorted(int(n.split("_")[1]) for n in drawable) == list(FROM_THE_RUNS_TABLE)
    needs = {(figure, panels): need for figure, panels, need in missing}
    assert "submitted orders" in needs[("Figure 12", "c")]
    assert "submitted orders" in needs[("Figure 27", "a-c")]
    assert "trajectories" in needs[("Figure 14", "all")]
    assert "--tasks" in needs[("Figure 13", "b")]
    written = build_report(result, tmp_path)
    for name in drawable:
        png = tmp_path / "figures" / f"{name}.png"
        assert png in written
        image = matplotlib.image.imread(png)
        assert image.shape[0] > 300 and image.shape[1] > 300, name
        assert ET.parse(tmp_path / "figures" / f"{name}.svg").getroot().tag.endswith("svg")
    index = (tmp_path / "tables" / "paper_figures.md").read_text()
    # The pipe table pads its cells (tabulate): compare the row's cells, not its spacing.
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|"))[:2]
            for line in index.splitlines() if line.startswith("|")}
    assert ("Figure 11", "pareto") in rows and ("Figure 9", "figure_9") in rows
    assert "Figure 27" in index and "submitted orders" in index
    page = (tmp_path / "report.html").read_text()
    assert 'id="fig-figure_26"' in page and "Paper figures" in page


def test_figures_need_their_inputs_and_say_so() -> None:
    """A private-only table draws Figure 10 (and Figure 8) and lists Figure 9, whose
    input (official public runs) is empty, instead of dropping or failing it."""
    runs = simulate_runs(seed=6)
    private = check_runs_table(runs[runs["visibility"] == "private"])
    result = analyze(private, StatsOptions(resamples=50, simulations=50))
    drawable, missing = paper_figures(result)
    assert "figure_10" in drawable and "figure_9" not in drawable
    assert any(figure == "Figure 9" for figure, _, _ in missing)
    table = paper_figure_index(drawable, missing)
    row = next(r for r in table.rows if r[0] == "Figure 9")
    assert row[1] == "" and row[2]


def test_figures_from_submitted_orders(tmp_path) -> None:
    """Task packages and run folders add Figures 16, 27 and 28."""
    items = {f"e{i:02d}": float(v) for i, v in enumerate([3, 1, 4, 5, 2, 9, 7, 8, 6, 0, 11,
                                                          10])}
    settings = {k: {"temp": 10 * i} for i, k in enumerate(items)}
    rows = []
    orders = {"A": sorted(items), "B": sorted(items, key=items.get),
              "C": sorted(items, key=lambda k: -items[k])}
    for t in ("t1", "t2", "t3"):
        write_task(tmp_path / "tasks", t, {"G": items}, settings=settings)
        for config, order in orders.items():
            key = f"{config}-{t}"
            write_run(tmp_path / "outputs", key, t, [{"group_id": "G", "order": order}])
            rows.append(run_row(config, t, {"A": 0.2, "B": 1.0, "C": -1.0}[config],
                                run_key=key, n_items=12))
    result = analyze(check_runs_table(pd.DataFrame(rows)), StatsOptions(
        resamples=50, simulations=50, task_roots=(tmp_path / "tasks",),
        runs_dir=tmp_path / "outputs"))
    drawable, missing = paper_figures(result)
    assert {"figure_16", "figure_27", "figure_28"} <= set(drawable)
    assert not any(figure == "Figure 28" and panels == "c, d" for figure, panels, _ in missing)
