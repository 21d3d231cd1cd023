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
    assert sorted(board["config"]) == sorted(configs["config"])
    # Ranked by the mean on the tasks every ranked configuration scored (Figure 1), the
    # numbers beside it spu stats' own.
    ranked = board[board["ranked"]]
    assert list(ranked["rank"]) == list(range(1, len(ranked) + 1))
    assert (ranked["shared_mean"].diff().dropna() <= 0).all()
    board = board.set_index("config").loc[configs["config"]].reset_index()
    pd.testing.assert_series_equal(board["adjusted_mean"], configs["adjusted_mean"])
    pd.testing.assert_series_equal(board["ci_low"], configs["adjusted_ci_low"], check_names=False)
    pd.testing.assert_series_equal(board["ci_high"], configs["adjusted_ci_high"],
                                   check_names=False)
    pd.testing.assert_series_equal(board["above_chance_share"], configs["above_chance_share"])
    assert board["cost_mean"].to_numpy() == pytest.approx(
        costs.loc[board["config"], "cost_mean"].to_numpy(), nan_ok=True)
    assert board["sealed_share"].isna().all()  # a runs table alone does not show the seals
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
    unranked = int((~board["ranked"]).sum())
    assert page.count("<tr>") == (n_configs + 1 + bool(unranked) + len(private) + 1) \
        and "<script" not in page
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


def _page_boxes(page: Path, tmp_path: Path, width: int = 1280) -> dict:
    import json
    import re
    import subprocess

    from tests.report.browser import find_browser

    browser = find_browser()
    if browser is None:
        pytest.skip("no headless Chromium (Debian package chromium-headless-shell)")
    page.write_text(page.read_text().replace("</body>", CELL_BOXES + "</body>"))
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900",
         f"--user-data-dir={tmp_path}/profile", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=300, check=True)
    found = re.search(r'<pre id="spu-cells">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-500:]
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


def _board(n_configs: int) -> pd.DataFrame:
    return pd.DataFrame([{
        "config": f"Configuration with a long name {i}", "model": f"model-{i}",
        "training_cutoff": "unknown" if i % 2 else "2025-03", "n_tasks": 100,
        "coverage": 0.97 if i % 3 else 0.1, "adjusted_mean": 0.3 - i / 100, "ci_low": 0.25,
        "ci_high": 0.35, "above_chance_share": 0.4, "cost_mean": 12.5,
        "sealed_share": 1.0 if i % 2 else float("nan"), "n_before_cutoff": float(i % 3),
        "tier": 1 if i < n_configs // 2 else 2, "n_separated": i % 4,
        "rank": float(i + 1) if i % 3 else float("nan"), "ranked": bool(i % 3),
        "n_shared_tasks": 27, "shared_mean": 0.4 - i / 100, "shared_ci_low": 0.3,
        "shared_ci_high": 0.5, "n_scored": 97, "raw_mean": 0.31, "raw_ci_low": 0.2,
        "raw_ci_high": 0.4}
        for i in range(n_configs)], columns=list(LEADERBOARD_COLUMNS))


@pytest.mark.parametrize("n_configs", [2, 20])
def test_the_page_renders_without_overlapping_text(n_configs: int, tmp_path: Path) -> None:
    """In headless Chromium at a laptop's width, no two cells' texts intersect."""
    from spu.report.leaderboard import PRIVATE, RANKED, UNRANKED, leaderboard_html

    table = _board(n_configs)
    private = pd.DataFrame([{
        "config": f"Configuration with a long name {i}", "model": f"model-{i}",
        "training_cutoff": "2025-03", "n_tasks": 24, "n_scored": 23, "raw_mean": 0.1,
        "ci_low": 0.05, "ci_high": 0.15, "above_chance_share": 0.2, "p_vs_random": 0.01,
        "p_holm": 0.04, "cost_mean": 3.5, "sealed_share": 0.5, "n_before_cutoff": float(i % 2)}
        for i in range(n_configs)], columns=list(PRIVATE_COLUMNS))
    page = tmp_path / "page.html"
    page.write_text(leaderboard_html(table, private=private))
    boxes = _page_boxes(page, tmp_path)
    ranked = int(table["ranked"].sum())
    assert len(boxes) == ((ranked + 1) * len(RANKED) + (n_configs - ranked + 1) * len(UNRANKED)
                          * bool(n_configs - ranked) + (n_configs + 1) * len(PRIVATE))
    tol = 0.5
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            w = min(a[2], b[2]) - max(a[0], b[0])
            h = min(a[3], b[3]) - max(a[1], b[1])
            assert w <= tol or h <= tol, f"{a[4]!r} overlaps {b[4]!r}"


SCROLL = r"""
<script>
(function () {
  const pre = document.createElement('pre'); pre.id = 'spu-scroll';
  pre.textContent = JSON.stringify({page: document.documentElement.scrollWidth,
    view: window.innerWidth,
    boxes: [...document.querySelectorAll('.wrap')].map((w) => [w.id, w.scrollWidth,
                                                               w.clientWidth])});
  document.body.appendChild(pre);
})();
</script>
"""


def test_a_configuration_scored_on_one_task_is_listed_unranked(tmp_path: Path) -> None:
    """Issue 40, item 6: a configuration scored on 1 of 23 tasks (coverage 0.043) ranked
    first on its one lucky score. As Figure 1's hatched bars, the ranked configurations
    are those scored on at least a quarter of the tasks, placed by their mean on the tasks
    they all scored; the other is listed below, unranked, beside its own mean; the page
    states the rule and the threshold, and --min-coverage changes it.

    By hand: A and B are scored on all 23 tasks (A 0.3, B 0.5 everywhere); C on t0 only
    (0.9). Ranked: B (0.5), A (0.3); C unranked, own mean 0.9. With --min-coverage 0.04, C
    is ranked too, and the shared task is t0 alone: C (0.9), B, A."""
    from tests.stats.conftest import run_row

    rows = [run_row(c, f"t{t:02d}", {"A": 0.3, "B": 0.5}[c], model=c.lower())
            for c in "AB" for t in range(23)]
    rows += [run_row("C", "t00", 0.9, model="c")]
    rows += [run_row("C", f"t{t:02d}", None, model="c", outcome="refusal")
             for t in range(1, 23)]
    runs_csv = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(runs_csv, index=False)
    assert spu_main(["leaderboard", str(runs_csv), "--out", str(tmp_path / "site"),
                     "--resamples", "50"]) == 0
    board = pd.read_csv(tmp_path / "site" / "leaderboard.csv").set_index("config")
    assert list(board.index) == ["B", "A", "C"]
    assert board["rank"].tolist()[:2] == [1.0, 2.0] and np.isnan(board.loc["C", "rank"])
    assert board.loc["C", "coverage"] == pytest.approx(1 / 23)
    assert board.loc["C", "raw_mean"] == pytest.approx(0.9)
    assert board.loc["B", "shared_mean"] == pytest.approx(0.5)
    assert board.loc["B", "n_shared_tasks"] == 23
    page = (tmp_path / "site" / "index.html").read_text()
    assert "Not ranked: coverage below 25%" in page
    assert "fewer than 25% of the public tasks" in page and "--min-coverage" in page
    assert page.index(">B<") < page.index(">A<") < page.index(">C<")
    assert spu_main(["leaderboard", str(runs_csv), "--out", str(tmp_path / "all"),
                     "--resamples", "50", "--min-coverage", "0.04"]) == 0
    every = pd.read_csv(tmp_path / "all" / "leaderboard.csv").set_index("config")
    assert list(every.index) == ["C", "B", "A"] and every["ranked"].all()
    assert every.loc["C", "n_shared_tasks"] == 1


def test_the_table_scrolls_inside_the_page(tmp_path: Path) -> None:
    """Issue 40, item 6: at 1400 px the page itself never scrolls sideways (the table was
    cut there); the wide table scrolls inside its own box."""
    import json
    import re
    import subprocess

    from spu.report.leaderboard import leaderboard_html
    from tests.report.browser import find_browser

    browser = find_browser()
    if browser is None:
        pytest.skip("no headless Chromium (Debian package chromium-headless-shell)")
    table = _board(6).assign(config=lambda t: t["config"] + " " + "x" * 80)
    page = tmp_path / "page.html"
    page.write_text(leaderboard_html(table).replace("</body>", SCROLL + "</body>"))
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
         f"--user-data-dir={tmp_path}/profile", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=300, check=True)
    found = json.loads(re.search(r'<pre id="spu-scroll">(.*?)</pre>', proc.stdout,
                                 re.S).group(1))
    assert found["page"] <= found["view"], found
    ranked = {name: (scroll, client) for name, scroll, client in found["boxes"]}["ranked"]
    assert ranked[0] > ranked[1], found  # wider than its box: it scrolls there


def _output_root(tmp_path: Path, runs: pd.DataFrame, sealed: set[str]) -> Path:
    """Run folders with seal.json for the keys in ``sealed`` and a ledger naming them."""
    import hashlib
    import json

    root = tmp_path / "outputs"
    lines = []
    for seq, key in enumerate(runs["run_key"], start=1):
        folder = root / "runs" / key
        folder.mkdir(parents=True)
        if key in sealed:
            body = json.dumps({"run_key": key}).encode()
            (folder / "seal.json").write_bytes(body)
            lines.append(json.dumps({"seq": seq, "run_key": key,
                                     "manifest_sha256": hashlib.sha256(body).hexdigest()}))
    (root / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_sealed_share_counts_every_run_sealed_before_grading(tmp_path: Path) -> None:
    """Issue 40, item 6: sealed_share read 0.000 for every configuration while spu seal
    verify said every run was sealed. A run is sealed when its seal.json is in the ledger:
    graded right after (A's t0-t2), or after waiting sealed for its key (A's t3, graded
    from its seal); B's t0 seal was changed after sealing, B's t1 never sealed: 0.5."""
    from spu.report.leaderboard import leaderboard_table, sealed_run_keys
    from spu.stats.runs_table import check_runs_table
    from tests.stats.conftest import run_row

    rows = [run_row(c, f"t{t}", 0.1 * t, model=c.lower(), graded_from_seal=(c, t) == ("A", 3),
                    run_key=f"{c}{t}") for c in "AB" for t in range(4)]
    runs = check_runs_table(pd.DataFrame(rows))
    root = _output_root(tmp_path, runs, {"A0", "A1", "A2", "A3", "B0", "B2", "B3"})
    (root / "runs" / "B0" / "seal.json").write_text("{}")  # not the sealed bytes
    assert sealed_run_keys(root) == {"A0", "A1", "A2", "A3", "B2", "B3"}
    board = leaderboard_table(runs, resamples=50, cutoffs={},
                              sealed=sealed_run_keys(root)).set_index("config")
    assert board.loc["A", "sealed_share"] == 1.0
    assert board.loc["B", "sealed_share"] == pytest.approx(0.5)
    without = leaderboard_table(runs, resamples=50, cutoffs={}).set_index("config")
    assert without["sealed_share"].isna().all()


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
