"""Definitions of paper sections 3.6, 3.7, 4 and E that the statistics follow by default
(issue 26): each against a hand-worked value or scipy, and the paper's rule as default."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from spu.stats.analysis import StatsOptions, analyze
from spu.stats.disciplines import PERMUTATIONS
from spu.stats.inputs import StatsInputs
from spu.stats.interaction import (
    BLOCK_RULE,
    NULL_DRAWS,
    largest_common_block,
    variance_decomposition,
)
from spu.stats.private import NULL_DRAWS as PRIVATE_NULL_DRAWS
from spu.stats.runs_table import check_runs_table
from tests.stats.conftest import run_row


def _brute_force_block(matrix: pd.DataFrame) -> tuple[int, int]:
    """(cells, configurations) of the best block, trying every subset."""
    best = (0, 0)
    cols = list(matrix.columns)
    for k in range(2, len(cols) + 1):
        for subset in itertools.combinations(cols, k):
            tasks = int(matrix[list(subset)].notna().all(axis=1).sum())
            if tasks >= 2:
                best = max(best, (k * tasks, k))
    return best


def test_largest_common_block_is_the_most_scores_of_any_subset() -> None:
    """Every subset tried by hand agrees with the search, and the block is complete."""
    rng = np.random.default_rng(3)
    for _ in range(5):
        values = rng.uniform(size=(30, 7))
        values[rng.uniform(size=values.shape) < rng.uniform(0.05, 0.4, size=7)] = np.nan
        matrix = pd.DataFrame(values, index=[f"t{i:02d}" for i in range(30)],
                              columns=list("ABCDEFG"))
        block = largest_common_block(matrix)
        assert (block.cells, len(block.configs)) == _brute_force_block(matrix)
        assert not matrix.loc[list(block.tasks), list(block.configs)].isna().any().any()
        assert block.rule == BLOCK_RULE


def test_largest_common_block_beyond_the_exact_search_is_complete() -> None:
    """Past 16 configurations the greedy search still finds the planted complete block."""
    values = np.ones((20, 18))
    values[:8, 15:] = np.nan  # three sparse configurations: dropping them keeps 20 tasks
    matrix = pd.DataFrame(values, index=[f"t{i:02d}" for i in range(20)],
                          columns=[f"c{j:02d}" for j in range(18)])
    block = largest_common_block(matrix)
    assert block.configs == tuple(f"c{j:02d}" for j in range(15)) and len(block.tasks) == 20


def _block_runs(repeats: list[float]) -> pd.DataFrame:
    """The 3 x 2 block of the docstring, with repeats of A on t1."""
    rows = [run_row(c, t, s) for c, t, s in [
        ("A", "t1", 0.35), ("A", "t2", 0.65), ("A", "t3", 0.8),
        ("B", "t1", 0.25), ("B", "t2", 0.35), ("B", "t3", 0.6)]]
    rows += [run_row("A", "t1", s, repeat=r + 1) for r, s in enumerate(repeats)]
    return check_runs_table(pd.DataFrame(rows))


def test_noise_is_the_repeats_variance_and_the_interaction_is_truncated() -> None:
    """Hand-worked: MS_resid 0.005; repeats 0.2, 0.4 have variance 0.02, more than it.

    The noise stays 0.02 (not capped at 0.005), the interaction is 0.005 - 0.02 < 0,
    truncated to 0, and the output says so. Components: task (0.08 - 0.005) / 2 = 0.0375,
    configuration (0.06 - 0.005) / 3 = 0.018333, in all 0.075833.
    """
    table, summary = variance_decomposition(_block_runs([0.2, 0.4]), ["A", "B"],
                                            resamples=50)
    got = table.set_index("component")
    total = 0.0375 + 0.055 / 3 + 0.02
    assert got.loc["run_noise", "variance"] == pytest.approx(0.02)
    assert got.loc["interaction", "variance"] == 0.0
    assert got.loc["task", "share"] == pytest.approx(0.0375 / total)
    assert got.loc["run_noise", "share"] == pytest.approx(0.02 / total)
    assert bool(got.loc["interaction", "truncated"]) and not got.loc["task", "truncated"]
    rows = {r["statistic"]: r["value"] for r in summary}
    assert rows["interaction_truncated"] is True
    assert rows["interaction_before_truncation"] == pytest.approx(0.005 - 0.02)


def test_noise_below_the_residuals_leaves_the_interaction_untruncated() -> None:
    """Repeats 0.3, 0.4: variance 0.005 / 2 = 0.0025, interaction 0.005 - 0.0025."""
    table, summary = variance_decomposition(_block_runs([0.3, 0.4]), ["A", "B"],
                                            resamples=50)
    got = table.set_index("component")["variance"]
    assert got["run_noise"] == pytest.approx(0.005)
    assert got["interaction"] == pytest.approx(0.0)
    table, summary = variance_decomposition(_block_runs([0.3, 0.35]), ["A", "B"],
                                            resamples=50)
    got = table.set_index("component")["variance"]
    assert got["run_noise"] == pytest.approx(0.00125)
    assert got["interaction"] == pytest.approx(0.005 - 0.00125)
    assert {r["statistic"]: r["value"] for r in summary}["interaction_truncated"] is False


def _coverage_runs() -> pd.DataFrame:
    """A, B, C on four tasks; D only on two: the block is A, B, C on four (12 scores)."""
    rng = np.random.default_rng(0)
    rows = [run_row(c, f"t{t}", float(rng.uniform(-0.5, 0.9)),
                    discipline=["chemistry", "biology"][t % 2])
            for c in "ABC" for t in range(4)]
    rows += [run_row("D", f"t{t}", float(rng.uniform(-0.5, 0.9)),
                     discipline=["chemistry", "biology"][t % 2]) for t in range(2)]
    rows += [run_row("D", f"t{t}", None, outcome="refusal") for t in (2, 3)]
    return check_runs_table(pd.DataFrame(rows))


FAST = {"resamples": 30, "simulations": 30, "null_draws": 30}


def test_decomposition_default_is_the_largest_block_and_the_manifest_names_it() -> None:
    runs = _coverage_runs()
    result = analyze(runs, StatsOptions(**FAST))
    rule = result.manifest["outputs"]["variance.csv"]["rule"]
    assert rule.startswith(BLOCK_RULE) and "on 4 tasks" in rule
    named = rule.split("3 configurations (")[1].split(")")[0]
    assert sorted(named.split(", ")) == ["A", "B", "C"]
    rows = result.summary.set_index("statistic")["value"]
    assert (rows["block_configs"], rows["block_tasks"]) == (3, 4)
    chosen = analyze(runs, StatsOptions(**FAST, decomposition_configs=("A", "D")))
    rule = chosen.manifest["outputs"]["variance.csv"]["rule"]
    assert rule.startswith("--decomposition-configs") and "on 2 tasks" in rule
    assert chosen.manifest["decomposition_configs"] == ["A", "D"]


def test_null_draws_do_not_shrink_with_resamples() -> None:
    """Paper E.9 and E.10: 2,000 simulated tables and 5,000 permutations by default."""
    runs = _coverage_runs()
    inputs = StatsInputs(runs, StatsOptions(resamples=100))
    assert (inputs.null_draws, inputs.permutations, inputs.private_null_draws) == (
        NULL_DRAWS, PERMUTATIONS, PRIVATE_NULL_DRAWS) == (2000, 5000, 40_000)
    inputs = StatsInputs(runs, StatsOptions(resamples=100, null_draws=7))
    assert (inputs.null_draws, inputs.permutations, inputs.private_null_draws) == (7, 7, 7)
    manifest = inputs.manifest()
    assert (manifest["simulated_null_draws"], manifest["discipline_permutations"]) == (7, 7)


def _effort_runs(with_columns: bool) -> pd.DataFrame:
    """Astra Medium and Astra Max official on three tasks, Max repeated twice on two."""
    medium = {"t1": 0.5, "t2": 0.2, "t3": 0.7}
    maximum = {"t1": 0.4, "t2": 0.3, "t3": 0.1}
    repeats = {"t1": [0.1, 0.3], "t2": [0.6, 0.4]}
    extra = ({"model": "astra", "harness": "codex"} if with_columns else {})
    rows = [run_row("Astra Medium", t, s, **extra, **({"effort": "medium"} if with_columns
                                                       else {}))
            for t, s in medium.items()]
    rows += [run_row("Astra Max", t, s, **extra, **({"effort": "max"} if with_columns
                                                     else {}))
             for t, s in maximum.items()]
    rows += [run_row("Astra Max", t, s, repeat=r + 1, **extra,
                     **({"effort": "max"} if with_columns else {}))
             for t, scores in repeats.items() for r, s in enumerate(scores)]
    rows += [run_row("Opus 5", t, 0.3, **({"model": "opus5", "harness": "cc",
                                            "effort": "max"} if with_columns else {}))
             for t in medium]
    return check_runs_table(pd.DataFrame(rows))


@pytest.mark.parametrize("with_columns", [True, False])
def test_medium_official_against_the_max_repeats_pairs_by_the_model(with_columns) -> None:
    """4.5: Medium's official score minus the mean of the Max repeats, hand-worked.

    t1: 0.5 - 0.2 = 0.3; t2: 0.2 - 0.5 = -0.3; mean 0.0 over two tasks. Without model,
    harness and effort columns the model comes from the labels ("Astra").
    """
    result = analyze(_effort_runs(with_columns), StatsOptions(**FAST))
    assert "effort.csv" in result.tables
    row = result.summary.set_index("statistic").loc[
        "official Astra Medium minus repeats mean Astra Max"]
    assert row["value"] == pytest.approx(0.0) and row["n"] == 2
    effort = result.tables["effort.csv"].set_index("way")
    assert effort.loc["official", "diff"] == pytest.approx((0.1 - 0.1 + 0.6) / 3)
    rule = result.manifest["outputs"]["effort.csv"]["rule"]
    assert "Astra Medium / Astra Max" in rule


def test_discipline_groups_default_to_the_papers_rule() -> None:
    """4.6, E.10: the leading six less those without a run in every discipline, against
    the trailing configurations the paired tests separate from the leading six."""
    from spu.stats.disciplines import default_groups

    names = list("ABCDEFGHIJKLM")
    means = [0.478, 0.431, 0.424, 0.421, 0.409, 0.393, 0.315, 0.308, 0.296, 0.254, 0.245,
             0.239, 0.227]
    configs = pd.DataFrame({"config": names, "adjusted_mean": means})
    # Every trailing configuration but G is separated from some leading one (by F, which
    # itself is not eligible: the paper's "separate from the leading six").
    rows = [{"config_a": a, "config_b": b, "significant": a == "F" and b != "G"}
            for a, b in itertools.combinations(names, 2)]
    eligible = [c for c in names if c not in ("E", "F")]
    top, bottom = default_groups(configs, pd.DataFrame(rows), eligible)
    assert (top, bottom) == (list("ABCD"), list("HIJKLM"))


def test_configs_with_a_run_in_every_discipline_need_no_coverage() -> None:
    """E.10: a configuration scored on one task of each discipline is in the comparison."""
    from spu.stats.disciplines import all_discipline_configs

    rows = [run_row(c, f"t{t}", 0.3, discipline=["chemistry", "biology"][t % 2])
            for c in "AB" for t in range(10)]
    rows += [run_row("C", f"t{t}", 0.3 if t < 2 else None,
                     discipline=["chemistry", "biology"][t % 2],
                     outcome="valid" if t < 2 else "refusal") for t in range(10)]
    runs = check_runs_table(pd.DataFrame(rows))
    assert all_discipline_configs(runs, list("ABC")) == list("ABC")
    assert all_discipline_configs(runs, list("ABC"), low_coverage=0.5) == list("AB")


def test_named_discipline_groups_and_the_gap_by_hand() -> None:
    """--discipline-groups: the named groups; the gap per discipline, hand-worked.

    Chemistry tasks t0, t2: A - mean(B, C) = 0.6 - 0.3 and 0.5 - 0.2, mean 0.3;
    biology t1, t3: 0.4 - 0.3 and 0.2 - 0.3, mean 0.0; widest minus narrowest 0.3.
    """
    scores = {"A": [0.6, 0.4, 0.5, 0.2], "B": [0.4, 0.2, 0.3, 0.4], "C": [0.2, 0.4, 0.1, 0.2]}
    rows = [run_row(c, f"t{t}", s, discipline=["chemistry", "biology"][t % 2])
            for c, values in scores.items() for t, s in enumerate(values)]
    runs = check_runs_table(pd.DataFrame(rows))
    result = analyze(runs, StatsOptions(**FAST, discipline_groups="A; B, C"))
    gap = result.tables["discipline_gap.csv"].set_index("discipline")
    assert gap.loc["chemistry", "diff"] == pytest.approx(0.3)
    assert gap.loc["biology", "diff"] == pytest.approx(0.0)
    assert gap["leading"].iloc[0] == "A" and gap["trailing"].iloc[0] == "B, C"
    rule = result.manifest["outputs"]["discipline_gap.csv"]["rule"]
    assert rule.startswith("--discipline-groups A; B, C: leading A; trailing B, C")
    test = result.tables["tests.csv"].set_index("test").loc["discipline_gap_range"]
    assert test["statistic"] == pytest.approx(0.3)
    default = analyze(runs, StatsOptions(**FAST))
    from spu.stats.disciplines import GROUP_RULE
    assert default.manifest["outputs"]["discipline_gap.csv"]["rule"].startswith(GROUP_RULE)


def test_doi_share_over_runs_whose_task_has_one_in_audited_output(tmp_path) -> None:
    """3.7, Figure 13c: of the scored runs whose task has a DOI, those where an audited
    tool returned it. A: t1 by fetch (counts), t2 by a shell command (does not), t3's task
    has no DOI (left out): 1 of 2. B: no hit on t1 or t2: 0 of 2."""
    import json

    from tests.stats.conftest import write_task

    tasks = tmp_path / "tasks"
    for t in ("t1", "t2", "t3"):
        folder = write_task(tasks, t, {"G": {"e1": 1.0, "e2": 2.0, "e3": 3.0}})
        answers = json.loads((folder / "hidden" / "answers.json").read_text())
        answers["source"] = {"title": "A study"} | ({"doi": f"10.1/{t}"} if t != "t3" else {})
        (folder / "hidden" / "answers.json").write_text(json.dumps(answers))
    hits = {("A", "t1"): [{"kind": "doi", "identifier": "10.1/t1", "step": 3,
                           "tool": "mcp__spu__fetch"}],
            ("A", "t2"): [{"kind": "doi", "identifier": "10.1/t2", "step": 4, "tool": "Bash"},
                          {"kind": "title", "identifier": "A study", "step": 5,
                           "tool": "mcp__spu__search"}],
            ("A", "t3"): [{"kind": "doi", "identifier": "x", "step": 1, "tool": "mcp__spu__fetch"}]}
    rows, outputs = [], tmp_path / "outputs" / "runs"
    for c in "AB":
        for t in ("t1", "t2", "t3"):
            found = hits.get((c, t), [])
            rows.append(run_row(c, t, 0.5 if c == "A" else 0.1, run_key=f"{c}-{t}",
                                flagged_exposure=bool(found),
                                exposure_kinds=",".join(sorted({h["kind"] for h in found}))))
            (outputs / f"{c}-{t}").mkdir(parents=True)
            (outputs / f"{c}-{t}" / "run.json").write_text(json.dumps(
                {"run_key": f"{c}-{t}", "exposure_hits": found}))
    runs = check_runs_table(pd.DataFrame(rows))
    result = analyze(runs, StatsOptions(**FAST, task_roots=(tasks,),
                                        runs_dir=tmp_path / "outputs"))
    table = result.tables["exposure_indicators.csv"].set_index("config")
    assert table.loc["A", "doi_share"] == pytest.approx(0.5)
    assert table.loc["B", "doi_share"] == 0.0
    assert table.loc["A", "n_doi_runs"] == 2 and table.loc["A", "n_doi_audited_known"] == 2
    from spu.stats.exposure import DOI_RULE, DOI_SIDES_RULE
    assert result.manifest["outputs"]["exposure_indicators.csv"]["rule"] == \
        f"{DOI_RULE}; {DOI_SIDES_RULE}"
    # Without the task packages and records: any tool's DOI over every scored run (3 of 3).
    plain = analyze(runs, StatsOptions(**FAST))
    assert plain.tables["exposure_indicators.csv"].set_index("config").loc[
        "A", "doi_share"] == 1.0
    assert "over every scored run" in plain.manifest["outputs"]["exposure_indicators.csv"][
        "rule"]


def test_same_model_pair_is_tested_against_the_other_pairs(paper_runs) -> None:
    """4.4: Astra Medium / Astra Max (one model, two efforts, found from the configs) is
    the tested pair; its r is scipy's Pearson r; the others give median and maximum."""
    from scipy import stats as sps

    from spu.stats.builtin import pair_correlations
    from spu.stats.runs_table import official, score_matrix

    inputs = StatsInputs(paper_runs, StatsOptions(resamples=50, null_draws=200))
    result = pair_correlations(inputs)
    table = result.tables["pair_correlations.csv"]
    same = table[table["same_model"]]
    assert len(same) == 1 and {same["config_a"].iloc[0], same["config_b"].iloc[0]} == {
        "Astra Medium", "Astra Max"}
    public = official(paper_runs)
    m = score_matrix(public[public["scored"]], ["Astra Medium", "Astra Max"]).dropna()
    assert same["r"].iloc[0] == pytest.approx(
        sps.pearsonr(m["Astra Medium"], m["Astra Max"]).statistic)
    tests = {t["test"]: t for t in result.tests}
    name = f"pair_correlation {same['config_a'].iloc[0]} / {same['config_b'].iloc[0]}"
    assert tests[name]["p_value"] == pytest.approx(same["p_sim"].iloc[0])
    rows = {r["statistic"]: r["value"] for r in result.summary}
    others = table[~table["same_model"]]["r"]
    assert rows["pair_r_others_median"] == pytest.approx(others.median())
    assert rows["pair_r_others_max"] == pytest.approx(others.max())
    assert "same-model pairs" in result.rules["pair_correlations.csv"]


def test_repeat_spread_counts_and_the_three_repeat_rule(paper_runs) -> None:
    """4.4: tasks where the configurations spread more than the repeats (F > 1) and the
    median ratio; the repeat advantage uses only tasks with at least three repeats."""
    from spu.stats.builtin import interaction, pair_correlations

    inputs = StatsInputs(paper_runs, StatsOptions(resamples=50, null_draws=200))
    result = interaction(inputs)
    table = result.tables["interaction_tasks.csv"]
    rows = {r["statistic"]: r for r in result.summary}
    exceed = rows["tasks_configs_exceed_repeats Astra Max"]
    assert exceed["value"] == int((table["F"] > 1).sum()) and exceed["n"] == len(table)
    assert rows["median_spread_ratio Astra Max"]["value"] == pytest.approx(
        float(np.median(table["F"])))
    # Keep two repeats on five of the repeated tasks: they leave the advantage test.
    repeated = paper_runs[(paper_runs["repeat"] >= 1) & paper_runs["scored"]]
    counts = repeated.groupby("task_id").size()
    five = list(counts[counts >= 3].index[:5])
    drop = paper_runs["task_id"].isin(five) & (paper_runs["repeat"] >= 3)
    before = {t["test"]: t for t in pair_correlations(inputs).tests}
    after_inputs = StatsInputs(paper_runs[~drop], StatsOptions(resamples=50, null_draws=200))
    after = {t["test"]: t for t in pair_correlations(after_inputs).tests}
    key = "repeat_advantage_correlation Astra Max"
    assert after[key]["n"] == before[key]["n"] - 5


def _spread_table() -> pd.DataFrame:
    """Three configurations on three tasks, and repeats of A (hand-worked below).

    Official scores (tasks t, u, v by configurations A, B, C)::

        t: 0.8 0.2 0.5    u: 0.3 0.5 0.7    v: 0.4 0.2 0.0

    Task means 0.5, 0.5, 0.2; configuration means 0.5, 0.3, 0.4; grand mean 0.4. The
    additive fit of a complete table is the double centring, so the residuals are
    t: 0.2 -0.2 0.0, u: -0.3 0.1 0.2, v: 0.1 0.1 -0.2 (sums of squares 0.08, 0.14, 0.06).
    Residual df 9 - 3 - 3 + 1 = 4, each task's share (3 - 1) * 4 / 6 = 4/3: mean squares
    0.06, 0.105, 0.045. Repeats of A: t 0.5 0.6 0.7 (variance 0.01), u 0.25 0.4 0.55
    (0.0225), v 0.1 0.5 0.9 plus one unscored (0.16), so F = 6, 4.667, 0.28125. The
    configurations' SDs are 0.3, 0.2, 0.2 and the repeats' 0.1, 0.15, 0.4: SD ratios 3,
    1.333, 0.5. B has two repeats on t: below three, not a repeated task.
    """
    official = {"t": (0.8, 0.2, 0.5), "u": (0.3, 0.5, 0.7), "v": (0.4, 0.2, 0.0)}
    rows = [run_row(c, t, s) for t, scores in official.items()
            for c, s in zip("ABC", scores, strict=True)]
    repeats = {"t": (0.5, 0.6, 0.7), "u": (0.25, 0.4, 0.55), "v": (0.1, 0.5, 0.9, None)}
    rows += [run_row("A", t, s, repeat=i + 1) for t, scores in repeats.items()
             for i, s in enumerate(scores)]
    rows += [run_row("B", "t", s, repeat=i + 1) for i, s in enumerate((0.1, 0.3))]
    return check_runs_table(pd.DataFrame(rows))


def test_repeat_spread_ratio_by_hand_and_the_mean_square_reading_is_the_default() -> None:
    """4.4's "25 tasks, by a median ratio of 6.4" read as E.9's comparison: tasks with at
    least three scored repeats, F = residual mean square over the repeats' mean square,
    exceeding where F > 1, median over all those tasks (hand-worked in _spread_table)."""
    from scipy import stats as sps

    from spu.stats.builtin import interaction

    default = interaction(StatsInputs(_spread_table(), StatsOptions()))
    table = default.tables["interaction_tasks.csv"].set_index("task_id")
    assert list(table.index) == ["t", "u", "v"] and set(table["config"]) == {"A"}
    assert table["ms_configs"].tolist() == pytest.approx([0.06, 0.105, 0.045], abs=1e-12)
    assert table["ms_repeats"].tolist() == pytest.approx([0.01, 0.0225, 0.16], abs=1e-12)
    assert table["F"].tolist() == pytest.approx([6.0, 0.105 / 0.0225, 0.28125], rel=1e-9)
    assert table["sd_ratio"].tolist() == pytest.approx([3.0, 0.2 / 0.15, 0.5], rel=1e-9)
    assert table.loc["t", "p_value"] == pytest.approx(sps.f.sf(6.0, 4 / 3, 2), rel=1e-9)
    rows = {r["statistic"]: r for r in default.summary}
    assert rows["repeat_tasks A"]["value"] == 3
    assert (rows["tasks_configs_exceed_repeats A"]["value"],
            rows["tasks_configs_exceed_repeats A"]["n"]) == (2, 3)
    assert rows["median_spread_ratio A"]["value"] == pytest.approx(0.105 / 0.0225)
    assert rows["median_spread_ratio_exceeding A"]["value"] == pytest.approx(
        (6.0 + 0.105 / 0.0225) / 2)
    assert not any(r.endswith(" B") for r in rows)
    assert "--spread-ratio ms" in default.rules["interaction_tasks.csv"].text
    assert StatsOptions().spread_ratio == "ms"

    sd = interaction(StatsInputs(_spread_table(), StatsOptions(spread_ratio="sd")))
    rows = {r["statistic"]: r["value"] for r in sd.summary}
    assert rows["tasks_configs_exceed_repeats A"] == 2
    assert rows["median_spread_ratio A"] == pytest.approx(0.2 / 0.15)
    assert rows["median_spread_ratio_exceeding A"] == pytest.approx((3.0 + 0.2 / 0.15) / 2)
    assert "--spread-ratio sd" in sd.rules["interaction_tasks.csv"].text


def test_repeats_that_agree_exactly_give_an_infinite_ratio_that_counts() -> None:
    """Identical repeats: F is infinite (p 0) and counts as exceeding; zero over zero is
    undefined and leaves the count and the median."""
    from spu.stats.interaction import repeat_spread_summary

    runs = _spread_table()
    same = (runs["config"] == "A") & (runs["repeat"] >= 1) & (runs["task_id"] == "u")
    runs.loc[same, ["score_recovered", "score_strict"]] = 0.4
    from spu.stats.builtin import interaction

    result = interaction(StatsInputs(runs, StatsOptions()))
    table = result.tables["interaction_tasks.csv"].set_index("task_id")
    assert table.loc["u", "F"] == np.inf and table.loc["u", "p_value"] == 0.0
    rows = {r["statistic"]: r["value"] for r in result.summary}
    assert rows["tasks_configs_exceed_repeats A"] == 2
    assert rows["median_spread_ratio A"] == pytest.approx(6.0)
    undefined = pd.DataFrame({"config": "A", "F": [np.nan, 2.0, 0.5], "sd_ratio": 1.0,
                              "p_holm": np.nan})
    got = {r["statistic"]: r for r in repeat_spread_summary(undefined)}
    assert got["median_spread_ratio A"]["value"] == pytest.approx(1.25)
    assert got["median_spread_ratio A"]["n"] == 2


def test_share_of_within_task_ss_from_tasks_with_sd_above_0_2() -> None:
    """3.6, hand-worked: t1 repeats 0.1, 0.4, 0.25 (SD 0.15, SS 0.045), t2 0.0, 0.6 (SD
    0.424, SS 0.18), t3 0.4, 0.5 (SS 0.005): one task above 0.2, 0.18 / 0.23."""
    from spu.stats.builtin import repeats

    rows = [run_row("A", t, 0.3) for t in ("t1", "t2", "t3")]
    rows += [run_row("B", t, 0.2) for t in ("t1", "t2", "t3")]
    for t, scores in {"t1": [0.1, 0.4, 0.25], "t2": [0.0, 0.6], "t3": [0.4, 0.5]}.items():
        rows += [run_row("A", t, s, repeat=r + 1) for r, s in enumerate(scores)]
    inputs = StatsInputs(check_runs_table(pd.DataFrame(rows)), StatsOptions(**FAST))
    got = {r["statistic"]: r["value"] for r in repeats(inputs).summary}
    assert got["unstable_tasks A"] == 1
    assert got["unstable_ss_share A"] == pytest.approx(0.18 / 0.23)
