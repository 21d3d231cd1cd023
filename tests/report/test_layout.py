"""The report's figures are readable: rendered in headless Chromium, nothing overlaps.

Issue 14 item 11: on a small real table the heat map's discipline labels overprinted,
a legend covered an axis label, a colour bar covered column labels, a label was
clipped, a legend covered an ``n=`` label. Every figure the report draws (whatever
module adds it) is checked by :mod:`tests.report.browser` on tables from 2 to 20
configurations and 5 to 200 tasks, the paper's simulated table among them.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from spu.report.build import build_report
from spu.stats.analysis import StatsOptions, analyze
from spu.stats.runs_table import check_runs_table
from spu.stats.simulate import (
    PAPER_CONFIGS,
    SimulatedConfig,
    SimulationParameters,
    simulate_runs,
)
from tests.report.browser import empty_panels, find_browser, layout, overlaps, screenshot

pytestmark = pytest.mark.slow

SHARES = (("chemistry", 0.39), ("materials science", 0.29), ("biology", 0.20),
          ("medicine", 0.12))
"""The paper's public tasks by discipline (39, 29, 20, 12 of 100)."""

BASELINE = SimulatedConfig("Random", "random", "baseline", "none", 0.0, private_scored=2,
                           cost_usd=0.0, prompt_mtokens=0.0, output_mtokens=0.0,
                           runtime_h=0.001)
"""A baseline: no API cost, so the Pareto frontier starts at $0."""


def sized_runs(n_configs: int, n_tasks: int, seed: int = 3) -> pd.DataFrame:
    """A simulated runs table of ``n_configs`` configurations on ``n_tasks`` public tasks.

    The paper's configurations (labels suffixed past thirteen) with their exclusions
    scaled to the task count, and the zero-cost baseline among them.
    """
    scale = n_tasks / 100
    configs = [BASELINE]
    for i in range(n_configs - 1):
        c = PAPER_CONFIGS[i % len(PAPER_CONFIGS)]
        suffix = f" v{i // len(PAPER_CONFIGS) + 1}" if i >= len(PAPER_CONFIGS) else ""
        configs.append(dataclasses.replace(
            c, label=c.label + suffix, mean=c.mean - 0.01 * (i // len(PAPER_CONFIGS)),
            excluded_public=tuple((o, int(k * scale)) for o, k in c.excluded_public),
            recovered_public=int(c.recovered_public * scale),
            private_scored=min(c.private_scored, 2)))
    counts = [max(1, round(share * n_tasks)) for _, share in SHARES]
    counts[0] += n_tasks - sum(counts)
    params = SimulationParameters(
        configs=tuple(configs),
        public_tasks=tuple((d, n, max(1, n // 4)) for (d, _), n in zip(SHARES, counts,
                                                                       strict=True)),
        private_tasks=(("biology", 2),), repeat_config=configs[-1].label)
    return simulate_runs(params, seed=seed)


@pytest.fixture(scope="module")
def browser() -> str:
    found = find_browser()
    if found is None:
        pytest.skip("no headless Chromium (Debian: chromium-headless-shell or chromium; "
                    "make test-system-deps installs it)")
    return found


def render(runs: pd.DataFrame, out: Path) -> Path:
    result = analyze(check_runs_table(runs), StatsOptions(resamples=200, simulations=200))
    build_report(result, out)
    return out / "report.html"


def assert_readable(page: Path, browser: str) -> list[dict]:
    """No text overlaps another (issue 14), no panel is empty without saying why (issue 40)."""
    figures = layout(page, browser)
    assert figures, "the report has no inline figure"
    found = overlaps(figures)
    assert not found, "\n".join(map(str, found))
    empty = empty_panels(figures)
    assert not empty, "\n".join(map(str, empty))
    return figures


@pytest.mark.parametrize(("n_configs", "n_tasks"),
                         [(2, 5), (20, 5), (3, 22), (2, 200), (20, 200)],
                         ids=lambda v: str(v))
def test_figures_do_not_overlap_from_small_to_large_tables(n_configs, n_tasks, browser,
                                                           tmp_path) -> None:
    figures = assert_readable(render(sized_runs(n_configs, n_tasks), tmp_path), browser)
    drawn = {f["figure"] for f in figures}
    assert {"means", "pareto", "heatmap", "pairs"} <= drawn


def test_figures_of_the_papers_simulated_table_do_not_overlap(browser, tmp_path) -> None:
    """``python -m spu.stats.simulate``: the paper's 13 configurations on 116 tasks."""
    assert_readable(render(simulate_runs(seed=0), tmp_path), browser)


def test_the_small_table_keeps_every_label_and_the_zero_cost_frontier(browser,
                                                                     tmp_path) -> None:
    """The $0 baseline that Table 3 marks Pareto is on the cost-score chart; the
    discipline of every task and both configurations are labelled."""
    runs = sized_runs(2, 5)
    page = render(runs, tmp_path)
    figures = {f["figure"]: f for f in layout(page, browser)}
    pareto = {t["label"] for t in figures["pareto"]["texts"]}
    assert {"Random", "Opus 5.5"} <= pareto, pareto
    heatmap = " ".join(t["label"] for t in figures["heatmap"]["texts"])
    for discipline, _ in SHARES:
        assert discipline in heatmap, (discipline, heatmap)
    costs = (tmp_path / "tables" / "costs.md").read_text()
    random_row = next(line for line in costs.splitlines() if line.startswith("| Random"))
    assert random_row.rstrip(" |").endswith("yes")  # Pareto in Table 3
    means = " ".join(t["label"] for t in figures["means"]["texts"])
    assert "Shared tasks (0)" not in means


def test_a_table_that_cost_nothing_gets_a_zero_cost_axis_and_a_labelled_heatmap(
        browser, tmp_path) -> None:
    """Baselines only (issue 24): the cost axis is one ``$0`` tick, not negative dollars
    around zero; each heatmap column is named by its task, each cell carries its score."""
    from tests.stats.conftest import run_row

    tasks = [f"spu-t{i}" for i in range(6)]
    scores = {"random-none": (0.1, -0.3, 0.5, 0.0, 0.25, -0.1),
              "presented_order-none": (0.7, -0.2, 0.4, 0.35, 0.3, 0.05)}
    runs = pd.DataFrame([run_row(config, task, score, cost_usd=0.0)
                         for config, row in scores.items()
                         for task, score in zip(tasks, row, strict=True)])
    page = render(runs, tmp_path)
    figures = {f["figure"]: f for f in assert_readable(page, browser)}
    pareto = [t["label"] for t in figures["pareto"]["texts"]]
    assert "$0" in pareto and not [t for t in pareto if t.startswith(("−", "-"))
                                   and "0." not in t], pareto
    assert "no configuration had a cost" in " ".join(pareto)
    heatmap = {t["label"] for t in figures["heatmap"]["texts"]}
    assert set(tasks) <= heatmap, heatmap
    assert {"0.10", "0.70", "-0.10"} <= heatmap or {"0.10", "0.70", "−0.10"} <= heatmap, heatmap


def test_the_baseline_report_reads_whole_in_the_browser(browser, tmp_path) -> None:
    """Issue 40, item 5, on what the default job leaves (three baselines on 22 tasks, no
    refusal, no pair Holm-significant, nothing cost anything): the heatmap's 66 cell scores
    fit their cells or are dropped and said so (they overprinted "-0.43-0.11-0.10"),
    Figures 7b and 25c say why they are empty, the page opens on a table of contents, no
    table shows inf or nan, and a blank cell's table says what a dash means.

    The page is screenshot in headless Chromium (the reader's first screens) and its
    layout read through the DOM: label boxes compared, empty axes found."""
    import numpy as np

    from tests.stats.conftest import run_row

    rng = np.random.default_rng(5)
    tasks = [f"spu-t{i:02d}" for i in range(22)]
    runs = pd.DataFrame([run_row(config, task, float(np.round(rng.uniform(-0.45, 0.9), 4)),
                                 discipline=SHARES[i % 4][0], cost_usd=0.0, runtime_s=2.0,
                                 input_tokens=0, output_tokens=0)
                         for config in ("monotone_prior-none", "presented_order-none",
                                        "random-none")
                         for i, task in enumerate(tasks)])
    page = render(runs, tmp_path)
    figures = {f["figure"]: f for f in assert_readable(page, browser)}
    assert {"figure_7", "figure_25", "heatmap"} <= set(figures)
    for name, words in (("figure_7", "no configuration refused"),
                        ("figure_25", "no pair of configurations differs")):
        assert any(words in w for a in figures[name]["axes"] for w in a["words"]), name
    shot = screenshot(page, browser, tmp_path / "first-screens.png")
    image = matplotlib.image.imread(shot)
    assert image.shape[0] >= 2000 and image.std() > 0.01  # drawn, not blank
    html = page.read_text()
    assert html.index('<nav id="contents">') < html.index("<figure")
    assert 'href="#fig-heatmap"' in html and 'href="#costs"' in html
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    assert not [c for c in cells if c.strip().lower() in ("inf", "nan", "-inf")], cells
    for section in re.findall(r'<section id="(\w+)">.*?</section>', html, re.S):
        body = re.search(rf'<section id="{section}">.*?</section>', html, re.S).group(0)
        if re.search(r"<td[^>]*>-</td>", body):
            assert "A dash (-) marks" in body, section
