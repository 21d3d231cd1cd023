"""``spu report``: Markdown tables, PNG and SVG figures and one self-contained HTML page."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from spu.report.build import build_report
from spu.report.tables import configs_table, number, with_interval
from spu.stats.analysis import StatsOptions, analyze
from spu.stats.runs_table import check_runs_table
from spu.stats.simulate import simulate_runs
from tests.conftest import run_module
from tests.stats.conftest import run_row, write_run, write_task

FIGURES = ("means", "pareto", "heatmap", "pairs")


@pytest.fixture(scope="module")
def result():
    runs = check_runs_table(simulate_runs(seed=21))
    return analyze(runs, StatsOptions(resamples=300, simulations=300))


@pytest.fixture(scope="module")
def report(result, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    build_report(result, out)
    return out


@pytest.mark.slow  # more than a few seconds (a simulated study's report)
def test_figures_are_png_and_svg(report) -> None:
    for name in FIGURES:
        png = report / "figures" / f"{name}.png"
        image = matplotlib.image.imread(png)
        assert image.shape[0] > 300 and image.shape[1] > 300, name
        root = ET.parse(report / "figures" / f"{name}.svg").getroot()
        assert root.tag.endswith("svg")


def cells(line: str) -> list[str]:
    """The cells of one Markdown table line (tabulate pads them to align the columns)."""
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


@pytest.mark.slow  # more than a few seconds (a simulated study's report)
def test_markdown_tables_carry_the_statistics(report, result) -> None:
    configs = result.tables["configs.csv"]
    text = (report / "tables" / "configs.md").read_text()
    first = configs.iloc[0]
    row = next(line for line in text.splitlines()
               if line.startswith("|") and cells(line)[0] == first.config)
    assert with_interval(first.adjusted_mean, first.adjusted_ci_low, first.adjusted_ci_high) in row
    assert with_interval(first.raw_mean, first.raw_ci_low, first.raw_ci_high) in row
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) == 2 + len(configs)  # header, alignment, one row per configuration
    for name in ("outcomes", "costs", "disciplines", "pairs", "private", "repeats",
                 "rank_stability", "summary"):
        assert (report / "tables" / f"{name}.md").is_file(), name
    report_md = (report / "report.md").read_text()
    assert all(f"figures/{name}.png" in report_md for name in FIGURES)


@pytest.mark.slow  # more than a few seconds (a simulated study's report)
def test_html_page_is_self_contained(report) -> None:
    page = (report / "report.html").read_text()
    # Every figure drawn (the four above and the paper figures the table allows) is inlined.
    assert page.count("<svg data-figure=") == len(list((report / "figures").glob("*.png")))
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert all(s.startswith(("data:", "#")) for s in sources), sources
    assert "<link" not in page and "<script" not in page
    for title in ("Results on the public tasks (Table 1)", "Outcomes and scoring rules",
                  "Estimated API cost", "Raw mean score by discipline", "Paired comparisons"):
        assert title in page


@pytest.mark.slow  # more than a few seconds (a simulated study's report)
def test_same_input_same_report(result, report, tmp_path) -> None:
    build_report(result, tmp_path)
    for path in [*(report / "tables").iterdir(), report / "report.md"]:
        assert (tmp_path / path.relative_to(report)).read_bytes() == path.read_bytes()
    for name in FIGURES:
        svg = f"figures/{name}.svg"
        assert (tmp_path / svg).read_bytes() == (report / svg).read_bytes()


def test_formatting_helpers() -> None:
    assert number(0.12345) == "0.123" and number(float("nan")) == "-"
    table = configs_table(pd.DataFrame([{
        "config": "A", "n_scored": 3, "adjusted_mean": 0.5, "adjusted_ci_low": 0.4,
        "adjusted_ci_high": 0.6, "raw_mean": float("nan"), "raw_ci_low": float("nan"),
        "raw_ci_high": float("nan"), "above_chance": 1, "above_chance_share": 1 / 3,
        "shared_mean": 0.5, "shared_ci_low": 0.4, "shared_ci_high": 0.6,
        "n_shared_tasks": 2}]))
    assert table.rows[0] == ("A", "3", "0.500 [0.400, 0.600]", "-", "1 (33%)",
                             "0.500 [0.400, 0.600]")
    assert cells(table.to_markdown().splitlines()[-1])[:2] == ["A", "3"]


@pytest.mark.slow  # more than a few seconds (a simulated study's report)
def test_agreement_and_monotone_tables_when_orders_are_given(tmp_path) -> None:
    """With task packages and run folders the report adds the consensus and monotone tables."""
    items = {f"e{i}": float(v) for i, v in enumerate([3, 1, 4, 5, 2])}
    settings = {f"e{i}": {"temp": 10 * i} for i in range(5)}
    rows = []
    for t in ("t1", "t2"):
        write_task(tmp_path / "tasks", t, {"G": items}, settings=settings)
        for config, order in (("A", ["e0", "e1", "e2", "e3", "e4"]),
                              ("B", ["e1", "e4", "e0", "e2", "e3"]),
                              ("C", ["e4", "e1", "e0", "e2", "e3"])):
            key = f"{config}-{t}"
            write_run(tmp_path / "outputs", key, t, [{"group_id": "G", "order": order}])
            rows.append(run_row(config, t, {"A": 0.2, "B": 1.0, "C": 0.9}[config], run_key=key))
    result = analyze(check_runs_table(pd.DataFrame(rows)), StatsOptions(
        resamples=100, simulations=100, task_roots=(tmp_path / "tasks",),
        runs_dir=tmp_path / "outputs"))
    build_report(result, tmp_path / "report")
    page = (tmp_path / "report" / "report.html").read_text()
    assert "Against the consensus of the other configurations" in page
    assert "The monotone prior" in page
    monotone = (tmp_path / "report" / "tables" / "monotone.md").read_text()
    rows = [cells(line) for line in monotone.splitlines() if line.startswith("| A ")]
    assert rows == [["A", "2", "1.000", "0.200", "100%", "0%"]]


@pytest.mark.slow
def test_cli_writes_the_report_and_refuses_bad_input(tmp_path) -> None:
    runs = tmp_path / "runs.csv"
    simulate_runs(seed=3).to_csv(runs, index=False)
    done = run_module(["spu", "report", str(runs), "--out", str(tmp_path / "rep"),
                       "--resamples", "200", "--simulations", "200", "--with-csv"])
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "rep" / "report.html").is_file()
    assert (tmp_path / "rep" / "stats" / "configs.csv").is_file()
    bad = pd.read_csv(runs).drop(columns=["outcome"])
    bad.to_csv(tmp_path / "bad.csv", index=False)
    done = run_module(["spu", "report", str(tmp_path / "bad.csv"), "--out",
                       str(tmp_path / "nothing")])
    assert done.returncode == 2 and "missing column(s) 'outcome'" in done.stderr
    assert not (tmp_path / "nothing").exists()


@pytest.mark.slow  # more than a few seconds (a simulated study's report)
def test_figures_leave_matplotlib_global_state_alone(result, tmp_path) -> None:
    """Importing and drawing the figures neither selects pyplot's backend nor changes the
    process's rcParams; the report style applies within each figure only."""
    import subprocess
    import sys

    import matplotlib

    from spu.report.figures import STYLE, means_figure, save_figure
    from tests.conftest import REPO

    before = dict(matplotlib.rcParams)
    fig = means_figure(result.tables["configs.csv"])
    paths = save_figure(fig, tmp_path, "means")
    assert dict(matplotlib.rcParams) == before
    assert [p.suffix for p in paths] == [".png", ".svg"]
    # The style reached the figure: no top spine (the process default draws one).
    assert STYLE["axes.spines.top"] is False and matplotlib.rcParams["axes.spines.top"]
    assert not fig.axes[0].spines["top"].get_visible()
    probe = ("import matplotlib, sys\n"
             "backend = matplotlib.rcParams._get_backend_or_none()\n"
             "size = matplotlib.rcParams['font.size']\n"
             "import spu.report.figures\n"
             "print(matplotlib.rcParams._get_backend_or_none() == backend,\n"
             "      matplotlib.rcParams['font.size'] == size, 'matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert out.stdout.split() == ["True", "True", "False"]


def test_numbers_read_as_what_they_are() -> None:
    """Issue 14 item 11: costs under a cent are not 0.00, counts are not 100.0000, and
    no -0.000 appears."""
    from spu.report.tables import money, summary_table

    assert number(-0.0001) == "0.000" and number(-0.0001, 4) == "-0.0001"
    assert money(0.0042) == "0.0042" and money(0.0) == "0.00" and money(12.345) == "12.35"
    table = summary_table(pd.DataFrame([
        {"analysis": "public", "statistic": "tasks", "value": 100.0, "ci_low": float("nan"),
         "ci_high": float("nan"), "n": float("nan")},
        {"analysis": "paired", "statistic": "z", "value": -0.00001, "ci_low": float("nan"),
         "ci_high": float("nan"), "n": 78.0}]))
    assert table.rows[0][2] == "100" and table.rows[1][2:] == ("0.0000", "78", "")


def test_table_3_shows_a_scripted_runs_small_usage() -> None:
    """Issue 40: a scripted run's 4,200 prompt tokens and 2 seconds read "0.0 M tokens" and
    "0.00 h"; below the column's resolution two significant digits remain, and a baseline's
    nothing is 0."""
    from spu.report.tables import costs_table

    costs = pd.DataFrame([
        {"config": "scripted", "n_scored": 3, "prompt_tokens_mean": 4200.0,
         "cache_read_share": 0.5, "output_tokens_mean": 350.0, "runtime_h_mean": 2 / 3600,
         "cost_mean": 0.0, "cost_ci_low": 0.0, "cost_ci_high": 0.0, "cost_total": 0.0,
         "pareto": True},
        {"config": "random", "n_scored": 3, "prompt_tokens_mean": 0.0,
         "cache_read_share": float("nan"), "output_tokens_mean": 0.0,
         "runtime_h_mean": 0.25, "cost_mean": 0.0, "cost_ci_low": 0.0, "cost_ci_high": 0.0,
         "cost_total": 0.0, "pareto": False}])
    table = costs_table(costs)
    assert table.rows[0][2:6] == ("0.0042", "50%", "0.00035", "0.00056")
    assert table.rows[1][2:6] == ("0", "-", "0", "0.25")
    assert "A dash (-) marks no scored run, or no prompt token" in table.full_caption


@pytest.mark.slow  # ten seconds and more (the quick tier stays under 5 minutes)
def test_the_rule_that_made_each_table_and_figure_stands_beside_it(report, result) -> None:
    """Issue 43: report.html shows, under each figure and table drawn from spu stats, the
    rule of its files (manifest.json: rule, population, the paper's sentence, and whether
    it is the paper's rule or a reading); report.md says the same."""
    import html as html_module

    page = (report / "report.html").read_text()
    outputs = result.manifest["outputs"]
    for name in [*FIGURES, *(p.stem for p in (report / "figures").glob("figure_*.png"))]:
        block = re.search(rf'<figure id="fig-{name}">.*?</figure>', page, re.S)
        assert block and '<div class="rule">' in block.group(0), name
    for table in ("configs", "outcomes", "costs", "disciplines", "pairs", "summary"):
        section = re.search(rf'<section id="{table}">.*?</section>', page, re.S)
        assert section, table
        assert html_module.escape(outputs[f"{table}.csv"]["rule"]) in section.group(0), table
        assert "Population" in section.group(0)
    # the decomposition's block is a reading, said as one beside Figure 26
    figure_26 = re.search(r'<figure id="fig-figure_26">.*?</figure>', page, re.S)
    assert figure_26 and "our reading of the paper" in figure_26.group(0)
    assert "> Rule: configs.csv (" in (report / "report.md").read_text()
