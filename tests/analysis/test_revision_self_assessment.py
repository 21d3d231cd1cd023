"""Paper 4.3 *Revision* and *Self-assessment*: the populations, intervals and tests.

Each against scipy (``binomtest``, ``wilcoxon``, ``spearmanr``) or a value worked by hand,
and the paper's rule as the default: the revisions are the runs whose submission differs
from the first draft (not those that changed the draft at some point, nor those whose
score changed), the sign test is two-sided with ties left out, the intervals resample
tasks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.analysis.builtin import ranking_revisions, self_assessments
from spu.analysis.rankings import differs_from_draft
from spu.analysis.runs import read_run
from spu.analysis.trajectory_analysis import (
    REVISION_RULE,
    SELF_ASSESSMENT_RULE,
    AnalyzeOptions,
    TrajectoryInputs,
    revision_intervals,
    revision_rule,
    revision_tests,
    revisions,
    self_assessment,
    self_assessment_tests,
)
from spu.grading.rules import GradingKey
from tests.analysis.test_rankings import (
    ANSWERS,
    CONTRACT,
    DRAFT,
    FINAL,
    ITEMS,
    bash,
    make_run,
    ranking,
    step,
)


def _stats(rows: list[dict]) -> dict[str, float]:
    return {r["statistic"]: r["value"] for r in rows}


def _features(n: int, seed: int) -> pd.DataFrame:
    """``n`` scored runs with a draft in the trajectory, on 13 tasks, seeded."""
    rng = np.random.default_rng(seed)
    draft = np.round(rng.uniform(0, 1, n), 2)
    change = np.round(rng.normal(0.02, 0.2, n), 2)
    return pd.DataFrame({
        "run_key": [f"r{i}" for i in range(n)], "config": ["A", "B"] * (n // 2),
        "task_id": [f"t{i % 13}" for i in range(n)], "first_complete_source": "tool_output",
        "first_complete_t": 0.3, "first_draft_score": draft, "score": draft + change,
        "submission_differs": True, "revisions": 1, "pairs_flipped": 1,
        "flipped_into_measured": np.nan, "flipped_expected_share": np.nan,
        "scored": True})


def test_the_population_is_the_runs_whose_submission_differs_from_the_draft() -> None:
    """4.3's 317: a run that revised and went back to its draft is out (it has
    revisions), a different submission scoring the same as the draft is in (a tie, left
    out of the sign test only), a draft only in the file is none (not in the trajectory);
    the sign test is scipy's two-sided binomial test of gains against losses."""
    f = _features(40, seed=5)
    f.loc[0:2, "submission_differs"] = False  # revised, then restored: revisions 2
    f.loc[0:2, "revisions"] = 2
    f.loc[0:2, "score"] = f.loc[0:2, "first_draft_score"]
    f.loc[3, "score"] = f.loc[3, "first_draft_score"]  # differs, same score: a tie
    f.loc[4, "first_complete_source"] = "file_only"
    f.loc[4, ["submission_differs", "revisions"]] = [False, 0]
    f.loc[4, "score"] = f.loc[4, "first_draft_score"]
    rev = revisions(f)
    assert rev["submission_differs"].tolist() == [False] * 3 + [True] + [False] + [True] * 35
    got = _stats(revision_tests(rev, resamples=500))
    differs = (rev["score"] - rev["first_draft_score"])[rev["submission_differs"]]
    up, down = int((differs > 1e-12).sum()), int((differs < -1e-12).sum())
    assert got["revision_runs_with_draft"] == 39 and got["revision_runs_differing"] == 36
    assert (got["revision_gains"], got["revision_losses"], got["revision_ties"]) == (
        up, down, 36 - up - down)
    assert got["revision_ties"] >= 1
    assert got["revision_mean_change"] == pytest.approx(differs.mean())
    assert got["revision_sign_test_p"] == pytest.approx(
        sps.binomtest(up, up + down, 0.5, alternative="two-sided").pvalue)
    assert got["revision_mean_change_ci_low"] <= got["revision_mean_change"] <= got[
        "revision_mean_change_ci_high"]


def test_sign_test_by_hand() -> None:
    """Nine gains, one loss, one tie: P = 2 (1 + 10) / 2^10 = 0.021484375."""
    rev = pd.DataFrame({"task_id": [f"t{i}" for i in range(11)],
                        "first_complete_source": "model_text", "submission_differs": True,
                        "change": [0.1] * 9 + [-0.3, 0.0]})
    got = _stats(revision_tests(rev, resamples=100))
    assert (got["revision_gains"], got["revision_losses"], got["revision_ties"]) == (9, 1, 1)
    assert got["revision_sign_test_p"] == pytest.approx(22 / 1024, abs=1e-15)


def test_the_summary_interval_is_revision_intervals_row_all() -> None:
    """One interval for 4.3's mean change in summary.csv and in revision_intervals.csv
    (Figure 17c's last row); with two tasks of one run each, the resampled means are the
    two values and their midpoint, so the interval is the two values (worked by hand)."""
    f = _features(40, seed=2)
    rev = revisions(f)
    intervals = revision_intervals(rev, seed=3, resamples=400).set_index(["config", "quantity"])
    row = intervals.loc[("all", "submission minus first draft")]
    got = _stats(revision_tests(rev, seed=3, resamples=400))
    assert (got["revision_mean_change"], got["revision_mean_change_ci_low"],
            got["revision_mean_change_ci_high"]) == (row["mean"], row["ci_low"], row["ci_high"])
    assert row["n_runs"] == got["revision_runs_differing"]
    two = pd.DataFrame({"task_id": ["a", "b"], "first_complete_source": "tool_call",
                        "submission_differs": True, "change": [-0.2, 0.4]})
    got = _stats(revision_tests(two, resamples=2000))
    assert got["revision_mean_change"] == pytest.approx(0.1)
    assert (got["revision_mean_change_ci_low"], got["revision_mean_change_ci_high"]) == (
        pytest.approx(-0.2), pytest.approx(0.4))


def test_revision_intervals_take_the_same_population() -> None:
    """Figure 17c's per-configuration means are over the runs whose submission differs,
    ties included (a change of zero), not over the runs whose score changed."""
    rev = pd.DataFrame({"config": ["A", "A", "A", "B"], "task_id": ["t1", "t1", "t2", "t2"],
                        "submission_differs": [True, True, False, True],
                        "change": [0.1, 0.0, 0.3, -0.2],
                        "flipped_into_measured": np.nan, "flipped_expected_share": np.nan})
    t = revision_intervals(rev, resamples=200).set_index(["config", "quantity"])
    a = t.loc[("A", "submission minus first draft")]
    assert a["n_runs"] == 2 and a["mean"] == pytest.approx(0.05)
    assert t.loc[("all", "submission minus first draft"), "n_runs"] == 3


def test_a_restored_draft_is_no_different_submission(tmp_path) -> None:
    """Draft, a revision, then the draft submitted: two revisions, the same submission."""
    steps = [step(0, "start"), step(1, f"Draft:\n{ranking(DRAFT)}"),
             step(2, f"Revised:\n{ranking(FINAL)}"),
             step(3, None, [bash("python3 final.py > /output/rankings.json")]), step(4)]
    f = read_run(make_run(tmp_path, steps, DRAFT),
                 {"t": GradingKey.build(CONTRACT, ANSWERS)}).features
    assert f["revisions"] == 2 and f["submission_differs"] is False


def test_a_submission_back_in_the_input_order_differs_from_the_draft(tmp_path) -> None:
    """The input order is no complete ranking, but a draft submitted as it is changed."""
    steps = [step(0, "start"), step(1, f"Draft:\n{ranking(DRAFT)}"),
             step(2, None, [bash("python3 final.py > /output/rankings.json")]), step(3)]
    f = read_run(make_run(tmp_path, steps, ITEMS),
                 {"t": GradingKey.build(CONTRACT, ANSWERS)}).features
    assert f["submission_differs"] is True
    assert differs_from_draft({"G1": ITEMS}, {"G1": DRAFT}, CONTRACT)


def test_a_draft_only_in_the_file_is_the_submission(tmp_path) -> None:
    steps = [step(0, "start"), step(1, None, [bash("python3 rank.py > /output/rankings.json")]),
             step(2, "done")]
    f = read_run(make_run(tmp_path, steps, FINAL)).features
    assert f["first_complete_source"] == "file_only" and f["submission_differs"] is False


def _sa() -> pd.DataFrame:
    features = pd.DataFrame({
        "run_key": list("abcdefgh"), "config": "A",
        "task_id": ["a", "a", "b", "c", "d", "e", "f", "g"],
        "stated_expected_rho": [0.6, 0.7, 0.5, 0.8, 0.65, 0.4, np.nan, 0.9],
        "score": [0.3, 0.75, 0.2, 0.5, 0.1, 0.45, 0.5, np.nan], "scored": True})
    return self_assessment(features)


def test_self_assessment_against_scipy() -> None:
    """Stated minus achieved over the reports that state one (both known): medians, mean,
    overpredicting count, scipy's two-sided Wilcoxon signed-rank P and Spearman r."""
    sa = _sa()
    assert len(sa) == 6
    got = _stats(self_assessment_tests(sa, resamples=500))
    over = sa["stated_expected_rho"] - sa["score"]
    assert got["self_assessment_reports"] == 6 and got["self_assessment_tasks"] == 5
    assert got["self_assessment_mean_overestimate"] == pytest.approx(over.mean())
    assert got["self_assessment_wilcoxon_p"] == pytest.approx(
        sps.wilcoxon(over, alternative="two-sided").pvalue)
    assert got["self_assessment_spearman"] == pytest.approx(
        sps.spearmanr(sa["stated_expected_rho"], sa["score"]).statistic)
    assert (got["self_assessment_stated_median"], got["self_assessment_achieved_median"]) == (
        pytest.approx(0.625), pytest.approx(0.375))
    assert got["self_assessment_overpredicting"] == 4
    assert (got["self_assessment_overestimate_ci_low"] <= got[
        "self_assessment_mean_overestimate"] <= got["self_assessment_overestimate_ci_high"])


def test_self_assessment_by_hand() -> None:
    """Overestimates 0.3, 0.1, -0.05 on three tasks: signed ranks 3, 2, -1, W = 1, exact
    two-sided P = 2 * 2 / 8 = 0.5; stated 0.6, 0.5, 0.7 against 0.3, 0.4, 0.75 rank alike
    (r = 0.5: ranks 2 1 3 against 1 2 3)."""
    sa = pd.DataFrame({"task_id": ["a", "b", "c"], "stated_expected_rho": [0.6, 0.5, 0.7],
                       "score": [0.3, 0.4, 0.75]})
    sa["overestimate"] = sa["stated_expected_rho"] - sa["score"]
    got = _stats(self_assessment_tests(sa, resamples=100))
    assert got["self_assessment_wilcoxon_p"] == pytest.approx(0.5)
    assert got["self_assessment_spearman"] == pytest.approx(0.5)
    assert got["self_assessment_mean_overestimate"] == pytest.approx(0.35 / 3)


def test_the_paper_rules_are_the_defaults_and_the_manifest_says_them() -> None:
    """With default options the registered analyses take the paper's populations and
    name the rule of each file."""
    f = _features(20, seed=1)
    f.loc[0, "submission_differs"] = False
    f = f.assign(stated_expected_rho=0.5)
    inputs = TrajectoryInputs(readings=[], calls=pd.DataFrame(), scored=f,
                              options=AnalyzeOptions())
    result = ranking_revisions(inputs)
    assert result.rules["revisions.csv"].text == REVISION_RULE
    assert result.rules["revision_intervals.csv"].text == revision_rule("pairs")
    assert {r.basis for r in result.rules.values()} == {"paper"}
    assert AnalyzeOptions().flip_share == "pairs" and "pooled" in revision_rule()
    for words in ("differ from their first draft", "resampling tasks", "two-sided",
                  "ties"):
        assert words in REVISION_RULE
    row = result.tables["revision_intervals.csv"].set_index(["config", "quantity"]).loc[
        ("all", "submission minus first draft")]
    assert row["n_runs"] == 19
    sa = self_assessments(inputs)
    assert sa.rules["self_assessment.csv"] == SELF_ASSESSMENT_RULE
    assert "Wilcoxon" in SELF_ASSESSMENT_RULE and "Spearman" in SELF_ASSESSMENT_RULE
    assert len(sa.tables["self_assessment.csv"]) == 20


def test_section_4_reads_the_public_tasks_by_default(tmp_path) -> None:
    """4: "We analyze the 1,155 scored official runs on the public tasks": a run on a
    private task is left out (and said so) unless --include-private."""
    import json
    import shutil

    from spu.analysis.trajectory_analysis import analyze_runs

    steps = [step(0, "start"), step(1, f"Draft:\n{ranking(DRAFT)}"),
             step(2, None, [bash("python3 final.py > /output/rankings.json")]), step(3)]
    root = tmp_path / "out" / "runs"
    for key, visibility in (("pub", "public"), ("priv", "private")):
        run = make_run(tmp_path / key, steps, FINAL)
        record = json.loads((run / "run.json").read_text())
        record.update(run_key=key, visibility=visibility, repeat=0)
        (run / "run.json").write_text(json.dumps(record))
        shutil.copytree(run, root / key)
    options = AnalyzeOptions(resamples=20, trees=5, jobs=1)
    result = analyze_runs(tmp_path / "out", options)
    assert result.tables["runs_features.csv"]["run_key"].tolist() == ["pub"]
    assert result.manifest["private_runs_left_out"] == 1 and result.manifest["public_only"]
    assert any("private tasks left out" in n for n in result.notes)
    both = analyze_runs(tmp_path / "out", AnalyzeOptions(resamples=20, trees=5, jobs=1,
                                                         public_only=False))
    assert sorted(both.tables["runs_features.csv"]["run_key"]) == ["priv", "pub"]


def test_the_flip_counts_are_written_per_run(tmp_path) -> None:
    """24e pools the flipped pairs: read_run writes their count and how many moved into
    the measured order (one flip, into it: see test_rankings)."""
    steps = [step(0, "start"), step(1, f"Draft:\n{ranking(DRAFT)}"),
             step(2, None, [bash("python3 final.py > /output/rankings.json")]), step(3)]
    f = read_run(make_run(tmp_path, steps, FINAL),
                 {"t": GradingKey.build(CONTRACT, ANSWERS)}).features
    assert (f["flips_scored"], f["flips_into_measured"]) == (1, 1)
    rev = revisions(pd.DataFrame([f]))
    assert rev[["flips_scored", "flips_into_measured"]].iloc[0].tolist() == [1, 1]


def test_a_return_to_the_input_order_is_a_revision_in_24e_too(tmp_path) -> None:
    """Issue 43: one population for 4.3 and Figure 24e. The caption's "item pairs flipped
    after the draft" are read as the net flips from the first draft to the submission, over
    4.3's revised runs, a submission back in the input order included.

    By hand, draft E22 E33 E44 E11 to the input order E11 E22 E33 E44 (measured E22 < E44 <
    E33 < E11) flips (E22, E11), (E33, E11) and (E44, E11): none moves into the measured
    order; at distances 3, 2 and 1 in the draft, 0, 0 and 1 of 3 pairs are the wrong way,
    so random flips would fix (0 + 0 + 1/3) / 3 = 1/9. The other run flips (E33, E44) into
    the measured order, 1/3 expected. Pooled: 1 of 4 against (3/9 + 1/3) / 4 = 1/6;
    ``--revised-population ranked`` keeps the second run only: 1 of 1 against 1/3."""
    key = {"t": GradingKey.build(CONTRACT, ANSWERS)}
    steps = [step(0, "start"), step(1, f"Draft:\n{ranking(DRAFT)}"),
             step(2, None, [bash("python3 final.py > /output/rankings.json")]), step(3)]
    back = read_run(make_run(tmp_path / "back", steps, ITEMS), key).features
    assert back["submission_differs"] is True and back["submission_ranked"] is False
    assert (back["flips_scored"], back["flips_into_measured"]) == (3, 0)
    assert back["flipped_expected_share"] == pytest.approx(1 / 9)
    final = read_run(make_run(tmp_path / "final", steps, FINAL), key).features
    assert final["submission_ranked"] is True
    rev = revisions(pd.DataFrame([back, final]).assign(task_id=["t1", "t2"]))

    def shares(population: str) -> tuple[float, float, int]:
        t = revision_intervals(rev, resamples=100, population=population).set_index(
            ["config", "quantity"])
        into = t.loc[("all", "share of flips into the measured order")]
        expected = t.loc[("all", "share expected from random flips"), "mean"]
        change = t.loc[("all", "submission minus first draft"), "n_runs"]
        assert change == into["n_runs"]  # 17c and 24e over the same runs
        return into["mean"], expected, into["n_runs"]

    assert shares("differs") == pytest.approx((1 / 4, 1 / 6, 2))
    assert shares("ranked") == pytest.approx((1.0, 1 / 3, 1))
    differs = _stats(revision_tests(rev, resamples=50))
    ranked = _stats(revision_tests(rev, resamples=50, population="ranked"))
    assert (differs["revision_runs_differing"], ranked["revision_runs_differing"]) == (2, 1)
