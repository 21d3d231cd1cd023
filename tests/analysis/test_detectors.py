"""The typed-table and recollection detectors against their labelled cases (3.7, 4.2, 4.3).

The precision and recall printed in ``docs/trajectories.md`` are the ones computed here:
a change of a detector or of a case that moves them fails until the page says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from spu.analysis.associations import (
    BEHAVIOR_FEATURES,
    METHOD_FEATURES,
    derived_features,
    feature_associations,
)
from spu.analysis.detectors import discloses_recollection, typed_table

CASES = Path(__file__).parent / "detector_cases"
DOC = Path(__file__).resolve().parents[2] / "docs" / "trajectories.md"
DETECTORS: dict[str, Callable[[str | None], bool]] = {
    "typed_table": typed_table, "recollection": discloses_recollection}


def _scores(name: str) -> tuple[int, int, int, int]:
    tp = fp = fn = tn = 0
    for line in (CASES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        said, truth = DETECTORS[name](case["text"]), bool(case["label"])
        tp += said and truth
        fp += said and not truth
        fn += truth and not said
        tn += not said and not truth
    return tp, fp, fn, tn


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_precision_and_recall_are_the_documented_ones(name) -> None:
    tp, fp, fn, tn = _scores(name)
    assert tp + fn >= 12 and fp + tn >= 12  # both classes labelled
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert precision >= 0.9 and recall >= 0.85
    cells = r" \| ".join([r"(\d+)"] * 4 + [r"([\d.]+)"] * 2)
    row = re.search(rf"^ *\| `{name}` \| {cells} \|", DOC.read_text(encoding="utf-8"),
                    re.MULTILINE)
    assert row is not None, f"docs/trajectories.md: no row for {name}"
    assert tuple(int(x) for x in row.groups()[:4]) == (tp, fp, fn, tn)
    assert (row.group(5), row.group(6)) == (f"{precision:.2f}", f"{recall:.2f}")


def test_hand_worked_cases() -> None:
    assert typed_table("t = [\n (1, 2.5),\n (2, 3.5),\n (3, 4.5),\n]\n")
    assert not typed_table("a = (1, 2)\nb = (3, 4)\nc = (5, 6)\n")  # three literals, no table
    assert not typed_table(None) and not discloses_recollection("")
    assert discloses_recollection("Ranked by a proxy.\n\nFrom memory, the study found B > A.")
    assert not discloses_recollection("I do not remember this study. No recollection of it.")


def test_the_paper_has_16_method_and_8_behavioral_features() -> None:
    """Paper E.7: Holm within the 16 method features and within the 8 behavioral ones."""
    assert len(METHOD_FEATURES) == 16 and len(set(METHOD_FEATURES)) == 16
    assert len(BEHAVIOR_FEATURES) == 8 and len(set(BEHAVIOR_FEATURES)) == 8
    assert {"typed_table", "fetched_literature"} <= set(METHOD_FEATURES)
    assert "disclosed_recollection" in BEHAVIOR_FEATURES


def _features(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = [{"task_id": f"t{t}", "config": c, "harness": "claude_code", "scored": True}
            for t in range(10) for c in "pqr"]
    f = pd.DataFrame(rows)
    n = len(f)
    for name in METHOD_FEATURES:
        if name.startswith("family_") or name in ("used_gpu", "gpu_confirmed"):
            f[name] = rng.random(n) < 0.4
    for name in ("typed_table", "fetched_literature", "fetched_database",
                 "disclosed_recollection", "subagent", "background_jobs"):
        f[name] = rng.random(n) < 0.4
    f["n_searches"] = rng.integers(0, 3, n)
    f["n_fetches"] = 0
    f["first_complete_t"] = rng.random(n)
    f["stated_expected_rho"] = np.where(rng.random(n) < 0.3, 0.5, np.nan)
    f["first_install_t"] = np.where(rng.random(n) < 0.3, 0.2, np.nan)
    f["revisions"] = rng.integers(0, 2, n)
    f["n_families"] = rng.integers(0, 5, n)
    f["score"] = rng.normal(0.3, 0.1, n) + 0.1 * f["typed_table"]
    return f


def test_holm_runs_within_each_family_of_the_paper() -> None:
    """p_holm is statsmodels' Holm over the 16 method and over the 8 behavioral P values."""
    f = _features()
    assert set(derived_features(f).columns) == {*METHOD_FEATURES, *BEHAVIOR_FEATURES}
    table = feature_associations(f, resamples=200, seed=2)
    for family, names in (("method", METHOD_FEATURES), ("behavior", BEHAVIOR_FEATURES)):
        part = table[table["family"] == family].set_index("feature")
        tested = part[part["p_value"].notna()]
        assert set(part.index) <= set(names)
        expected = multipletests(tested["p_value"].to_numpy(), method="holm")[1]
        assert tested["p_holm"].to_numpy() == pytest.approx(expected)
    assert len(table[table["family"] == "method"]) == 16
    assert len(table[table["family"] == "behavior"]) == 8


def test_read_run_sets_both_features(tmp_path) -> None:
    from spu.analysis.runs import read_run
    from spu.schema import ToolCall
    from tests.analysis.test_rankings import FINAL, make_run, step

    table = "prior = [\n  [1.0, 2.0],\n  [3.0, 4.0],\n  [5.0, 6.0],\n]\n"
    steps = [step(0, "start"),
             step(1, None, [ToolCall(name="Write", arguments={
                 "file_path": "/workspace/prior.py", "content": table})]),
             step(2, None, [ToolCall(name="mcp__spu__search", arguments={
                 "query": "1.0, 2.0\n3.0, 4.0\n5.0, 6.0"}, output="[]")]), step(3)]
    run = make_run(tmp_path, steps, FINAL)
    (run / "output" / "report.md").write_text("# Report\n\nI recall the study's results.\n")
    f = read_run(run).features
    assert f["typed_table"] is True and f["disclosed_recollection"] is True
    plain = make_run(tmp_path / "b", [step(0, "start"), step(1, None, [ToolCall(
        name="mcp__spu__search", arguments={"query": "1.0, 2.0\n3.0, 4.0\n5.0, 6.0"},
        output="[]")])], FINAL)
    (plain / "output" / "report.md").write_text("# Report\n\nNo recollection of the study.\n")
    g = read_run(plain).features
    assert g["typed_table"] is False and g["disclosed_recollection"] is False
