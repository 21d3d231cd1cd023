"""``spu leaderboard``: its numbers are ``spu stats``' configs.csv and costs.csv."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spu.cli import main as spu_main
from spu.report.leaderboard import LEADERBOARD_COLUMNS, PRIVATE_COLUMNS, training_cutoffs
from spu.stats.simulate import PAPER_CONFIGS, SimulationParameters, simulate_runs


@pytest.mark.parametrize("n_configs", [2, 20])
def test_the_leaderboard_equals_spu_stats(n_configs: int, tmp_path: Path) -> None:
    # The paper's 13 configurations, repeated under new names up to n_configs.
    configs = tuple(dataclasses.replace(PAPER_CONFIGS[i % len(PAPER_CONFIGS)],
                                        label=f"{PAPER_CONFIGS[i % len(PAPER_CONFIGS)].label}-{i}")
                    for i in range(n_configs))
    params = dataclasses.replace(SimulationParameters(), configs=configs)
    runs = simulate_runs(params, seed=3)
    runs.loc[runs.index[:3], ["outcome", "scored"]] = ["sealed", False]
    # Every fifth run's task came before its model's cutoff; every fifth after it, unknown.
    runs["published_before_cutoff"] = [["true", "false", "false", "unknown", "false"][i % 5]
                                       for i in range(len(runs))]
    runs_csv = tmp_path / "runs.csv"
    runs.to_csv(runs_csv, index=False)
    assert spu_main(["stats", str(runs_csv), "--out", str(tmp_path / "stats"),
                     "--resamples", "200"]) == 0
    assert spu_main(["leaderboard", str(runs_csv), "--out", str(tmp_path / "site"),
                     "--resamples", "200"]) == 0
    board = pd.read_csv(tmp_path / "site" / "leaderboard.csv")
    configs = pd.read_csv(tmp_path / "stats" / "configs.csv")
    costs = pd.read_csv(tmp_path / "stats" / "costs.csv").set_index("config")
    assert tuple(board.columns) == LEADERBOARD_COLUMNS
    assert list(board["config"]) == list(configs["config"])
    pd.testing.assert_series_equal(board["adjusted_mean"], configs["adjusted_mean"])
    pd.testing.assert_series_equal(board["ci_low"], configs["adjusted_ci_low"], check_names=False)
    pd.testing.assert_series_equal(board["ci_high"], configs["adjusted_ci_high"],
                                   check_names=False)
    pd.testing.assert_series_equal(board["above_chance_share"], configs["above_chance_share"])
    assert board["cost_mean"].to_numpy() == pytest.approx(
        costs.loc[board["config"], "cost_mean"].to_numpy(), nan_ok=True)
    assert board["sealed_share"].sum() > 0
    official = runs[runs["repeat"] == 0]
    before = official[official["published_before_cutoff"] == "true"]
    public_before = before[before["visibility"] == "public"].groupby("config").size()
    assert board.set_index("config")["n_before_cutoff"].to_dict() == {
        c: float(public_before.get(c, 0)) for c in board["config"]}
    # The private tasks are a section of their own: spu stats' private.csv (paper Table 2).
    private = pd.read_csv(tmp_path / "site" / "leaderboard_private.csv")
    stats_private = pd.read_csv(tmp_path / "stats" / "private.csv")
    assert tuple(private.columns) == PRIVATE_COLUMNS
    assert list(private["config"]) == list(stats_private["config"])
    for mine, theirs in (("raw_mean", "raw_mean"), ("ci_low", "raw_ci_low"),
                         ("ci_high", "raw_ci_high"), ("above_chance_share", "above_chance_share"),
                         ("p_vs_random", "p_vs_random"), ("p_holm", "p_holm")):
        assert private[mine].to_numpy() == pytest.approx(stats_private[theirs].to_numpy(),
                                                         nan_ok=True), mine
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.count("<tr>") == n_configs + 1 + len(private) + 1 and "<script" not in page
    assert "<h2>Public tasks</h2>" in page and "<h2>Private tasks</h2>" in page
    assert page.count('<span class="mark">') == int((board["n_before_cutoff"] > 0).sum()
                                                    + (private["n_before_cutoff"] > 0).sum())
    # The tiers of 3.3: above the widest gap of configs.csv's means; n_separated counts
    # each configuration's Holm-significant tests of pairs.csv, and the page says how many
    # of them lie between the tiers.
    means = configs.sort_values("adjusted_mean", ascending=False)["adjusted_mean"].to_numpy()
    top = int(np.argmax(means[:-1] - means[1:])) + 1
    tier_of = dict(zip(configs.sort_values("adjusted_mean", ascending=False)["config"],
                       [1] * top + [2] * (len(means) - top), strict=True))
    assert board.set_index("config")["tier"].to_dict() == tier_of
    pairs = pd.read_csv(tmp_path / "stats" / "pairs.csv")
    significant = pairs[pairs["significant"]]
    counts = pd.concat([significant["config_a"], significant["config_b"]]).value_counts()
    assert board.set_index("config")["n_separated"].to_dict() == {
        c: int(counts.get(c, 0)) for c in board["config"]}
    between = int(sum(tier_of[a] != tier_of[b] for a, b in
                      zip(significant["config_a"], significant["config_b"], strict=True)))
    assert (f"{between} of the {len(significant)} Holm-significant paired differences lie "
            "between the tiers" in page) or (not len(significant) and "no paired difference"
                                             in page)


def test_training_cutoff_is_unknown_where_not_set(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "m.yaml").write_text("name: m\ntraining_cutoff: 2025-03\n")
    (tmp_path / "model" / "n.yaml").write_text("name: n\n")
    assert training_cutoffs({"m", "n", "gone"}, tmp_path) == {
        "m": "2025-03", "n": "unknown", "gone": "unknown"}


CELL_BOXES = r"""
<script>
(function () {
  const boxes = [...document.querySelectorAll('th, td')].map((e) => {
    const r = document.createRange(); r.selectNodeContents(e); const b = r.getBoundingClientRect();
    return [b.left, b.top, b.right, b.bottom, e.textContent]; });
  const pre = document.createElement('pre'); pre.id = 'spu-cells';
  pre.textContent = JSON.stringify(boxes); document.body.appendChild(pre);
})();
</script>
"""


@pytest.mark.parametrize("n_configs", [2, 20])
def test_the_page_renders_without_overlapping_text(n_configs: int, tmp_path: Path) -> None:
    """In headless Chromium at a laptop's width, no two cells' texts intersect."""
    import json
    import re
    import subprocess

    from spu.report.leaderboard import leaderboard_html
    from tests.report.browser import find_browser

    browser = find_browser()
    if browser is None:
        pytest.skip("no headless Chromium (Debian package chromium-headless-shell)")
    table = pd.DataFrame([{
        "config": f"Configuration with a long name {i}", "model": f"model-{i}",
        "training_cutoff": "unknown" if i % 2 else "2025-03", "n_tasks": 100,
        "coverage": 0.97, "adjusted_mean": 0.3 - i / 100, "ci_low": 0.25, "ci_high": 0.35,
        "above_chance_share": 0.4, "cost_mean": 12.5, "sealed_share": 0.0,
        "n_before_cutoff": float(i % 3), "tier": 1 if i < n_configs // 2 else 2,
        "n_separated": i % 4}
        for i in range(n_configs)], columns=list(LEADERBOARD_COLUMNS))
    private = pd.DataFrame([{
        "config": f"Configuration with a long name {i}", "model": f"model-{i}",
        "training_cutoff": "2025-03", "n_tasks": 24, "n_scored": 23, "raw_mean": 0.1,
        "ci_low": 0.05, "ci_high": 0.15, "above_chance_share": 0.2, "p_vs_random": 0.01,
        "p_holm": 0.04, "cost_mean": 3.5, "sealed_share": 0.5, "n_before_cutoff": float(i % 2)}
        for i in range(n_configs)], columns=list(PRIVATE_COLUMNS))
    page = tmp_path / "page.html"
    page.write_text(leaderboard_html(table, private=private).replace(
        "</body>", CELL_BOXES + "</body>"))
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
         f"--user-data-dir={tmp_path}/profile", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=300, check=True)
    found = re.search(r'<pre id="spu-cells">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-500:]
    boxes = json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<")
                       .replace("&gt;", ">"))
    assert len(boxes) == (n_configs + 1) * (len(LEADERBOARD_COLUMNS) + len(PRIVATE_COLUMNS) + 2)
    tol = 0.5
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            w = min(a[2], b[2]) - max(a[0], b[0])
            h = min(a[3], b[3]) - max(a[1], b[1])
            assert w <= tol or h <= tol, f"{a[4]!r} overlaps {b[4]!r}"


def test_sealed_share_counts_runs_graded_later_from_their_seal(tmp_path: Path) -> None:
    """Of A's four runs one is still sealed and one was graded from its seal: 0.5."""
    from spu.report.leaderboard import leaderboard_table
    from spu.stats.runs_table import check_runs_table
    from tests.stats.conftest import run_row

    rows = [run_row(c, f"t{t}", 0.1 * t, model=c.lower(), graded_from_seal=(c, t) == ("A", 1))
            for c in "AB" for t in range(4)]
    rows[0].update(outcome="sealed", scored=False, score_recovered=-1.0, score_strict=-1.0)
    board = leaderboard_table(check_runs_table(pd.DataFrame(rows)), resamples=50,
                              cutoffs={}).set_index("config")
    assert board.loc["A", "sealed_share"] == pytest.approx(0.5)
    assert board.loc["B", "sealed_share"] == 0.0


def test_a_regraded_sealed_run_is_tagged_graded_from_seal() -> None:
    from spu.schema import Outcome, PastGrade, RunRecord, SandboxInfo
    from spu.tracking.store import run_tags

    record = RunRecord(run_key="k", task_id="t", task_version="1", model="m", harness="h",
                       effort="none", outcome=Outcome.valid, sandbox=SandboxInfo(backend="local"))
    assert run_tags(record)["graded_from_seal"] == "false"
    past = PastGrade(score_strict=-1.0, score_recovered=-1.0, outcome="sealed", scored=False,
                     threshold=None, grade=None, replaced_at="2026-01-01T00:00:00+00:00")
    assert run_tags(record.model_copy(update={"grade_history": [past]}))[
        "graded_from_seal"] == "true"
