"""Refusals after a valid file: the paper's rule by default, visible, and an option to score.

Paper 3.1 and Table 6's note ("five runs wrote a valid file and then refused, so all five
runs are excluded as refusals"), while the grader still scored their files for the "mean at
-1" column. An agent can provoke a real refusal after a file it dislikes: an accepted policy
residual, counted in ``outcomes.csv`` and scored with ``--refusals-after-file=score``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from spu.stats.analysis import apply_refusal_rule
from spu.stats.outcomes import outcome_table
from spu.stats.simulate import simulate_runs
from tests.conftest import run_module


def _runs() -> pd.DataFrame:
    """One configuration: a valid run, a refusal after a valid file, a refusal without one."""
    return pd.DataFrame({
        "config": ["A"] * 3, "outcome": ["valid", "refusal", "refusal"],
        "scored": [True, False, False], "refusal_after_file": [False, True, False],
        "score_strict": [0.6, 0.2, -1.0], "score_recovered": [0.6, 0.2, -1.0]})


def test_the_default_excludes_them_and_counts_them_apart() -> None:
    """Worked by hand: two refusals (one after its file), the file's score in mean at -1."""
    row = outcome_table(apply_refusal_rule(_runs(), "exclude"), ["A"]).iloc[0]
    assert (row["refusal"], row["refusal_after_file"], row["n_scored"]) == (2, 1, 1)
    assert row["mean_at_minus1"] == pytest.approx((0.6 + 0.2 - 1.0) / 3)
    assert row["scored_mean"] == pytest.approx(0.6)


def test_the_option_scores_them() -> None:
    """``score``: the refusal after a file counts with its file's grade; outcome unchanged."""
    runs = apply_refusal_rule(_runs(), "score")
    assert runs["scored"].tolist() == [True, True, False]
    assert runs["outcome"].tolist() == ["valid", "refusal", "refusal"]
    row = outcome_table(runs, ["A"]).iloc[0]
    assert (row["refusal"], row["refusal_after_file"], row["n_scored"]) == (1, 1, 2)
    assert row["scored_mean"] == pytest.approx((0.6 + 0.2) / 2)
    assert row["mean_at_minus1"] == pytest.approx((0.6 + 0.2 - 1.0) / 3)


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="'keep' is not one of exclude, score"):
        apply_refusal_rule(_runs(), "keep")


def test_the_parser_offers_the_rules_of_the_outcome_module() -> None:
    """``spu stats`` spells its choices out (no import of the rules at ``--help``)."""
    from spu.cli import build_parser
    from spu.grading.outcome import REFUSALS_AFTER_FILE_RULES

    for command in ("stats", "report"):
        args = build_parser().parse_args([command, "runs.csv", "--out", "out"])
        assert args.refusals_after_file == REFUSALS_AFTER_FILE_RULES[0] == "exclude"
        action = next(a for a in build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
                      .choices[command]._actions if a.dest == "refusals_after_file")
        assert tuple(action.choices) == REFUSALS_AFTER_FILE_RULES


@pytest.mark.slow  # more than a few seconds
def test_spu_stats_names_the_rule_and_scores_on_request(tmp_path: Path) -> None:
    """End to end on a simulated study whose refusals all left a valid file."""
    runs = simulate_runs(seed=3)
    refused = runs["outcome"] == "refusal"
    assert refused.sum() > 0
    runs["refusal_after_file"] = refused
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    tables = {}
    for rule in ("exclude", "score"):
        out = tmp_path / rule
        done = run_module(["spu", "stats", str(path), "--out", str(out), "--resamples", "30",
                           "--simulations", "30", "--null-draws", "30",
                           *([] if rule == "exclude" else ["--refusals-after-file", rule])])
        assert done.returncode == 0, done.stderr
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["refusals_after_file"] == rule
        assert "paper" in manifest["refusals_after_file_rule"]
        tables[rule] = pd.read_csv(out / "outcomes.csv").set_index("config")
    public = runs[(runs["visibility"] == "public") & (runs["repeat"] == 0)]
    flagged = public[public["refusal_after_file"]].groupby("config").size()
    exclude, score = tables["exclude"], tables["score"]
    for config, n in flagged.items():
        assert exclude.loc[config, "refusal_after_file"] == n == score.loc[config,
                                                                           "refusal_after_file"]
        assert score.loc[config, "n_scored"] == exclude.loc[config, "n_scored"] + n
        assert score.loc[config, "refusal"] == exclude.loc[config, "refusal"] - n
    pd.testing.assert_series_equal(exclude["mean_at_minus1"].sort_index(),
                                   score["mean_at_minus1"].sort_index())
