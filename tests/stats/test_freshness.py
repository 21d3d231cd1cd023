"""Freshness: tasks published before a model's training cutoff, in runs and in ``spu stats``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from spu.config import ModelConfig
from spu.runner import run_one
from spu.schema import AnswerKey, Outcome, RunRecord
from spu.stats.analysis import StatsOptions, analyze
from spu.stats.freshness import FRESHNESS_RULE
from spu.stats.runs_table import RunsTableError, check_runs_table
from spu.tasks.freshness import DateError, period, published_before_cutoff
from spu.tracking.regrade import regrade_run
from tests.conftest import EXAMPLE_TASK
from tests.seal.conftest import seal_spec
from tests.stats.conftest import run_row


@pytest.mark.parametrize(("published", "cutoff", "expected"), [
    ("2019", "2025-03", True), ("2025-03-31", "2025-03", True), ("2025-04-01", "2025-03", False),
    ("2025", "2025-03", None), ("2025", "2025", True), (None, "2025", None), ("2019", None, None),
])
def test_the_rule_compares_periods(published: str | None, cutoff: str | None,
                                   expected: bool | None) -> None:
    assert published_before_cutoff(published, cutoff) is expected


def test_a_source_date_that_is_no_date_is_refused_naming_the_key() -> None:
    with pytest.raises(DateError):
        period("2025-13")
    with pytest.raises(ValueError, match="published"):
        AnswerKey.model_validate({"task_id": "t", "task_version": "1", "groups": {},
                                  "source": {"published": "March 2019"}})


def _table() -> pd.DataFrame:
    """A and B on four tasks: A better by 0.4 where the task came before its cutoff."""
    rows = []
    for t, fresh in enumerate(["true", "true", "false", "false"]):
        rows.append(run_row("A", f"t{t}", 0.7 if fresh == "true" else 0.3,
                            published_before_cutoff=fresh))
        rows.append(run_row("B", f"t{t}", 0.3, published_before_cutoff="unknown"))
    return check_runs_table(pd.DataFrame(rows))


def test_spu_stats_writes_the_fresh_difference_with_its_rule() -> None:
    """A: relative scores 0.4, 0.4 before the cutoff, 0.0, 0.0 fresh: a difference of 0.4.

    B's runs are of unknown freshness: left out (they still count as A's comparison).
    """
    result = analyze(_table(), StatsOptions(resamples=50, simulations=30, null_draws=30))
    table = result.tables["freshness.csv"].set_index("config")
    assert list(table.index) == ["A"]
    assert table.loc["A", "diff"] == pytest.approx(0.4)
    assert (table.loc["A", "n_before_cutoff"], table.loc["A", "n_fresh"]) == (2, 2)
    assert result.manifest["outputs"]["freshness.csv"]["rule"] == FRESHNESS_RULE
    assert "training_cutoff" in FRESHNESS_RULE
    tests = result.tables["tests.csv"].set_index("test")
    assert tests.loc["freshness_pooled_difference", "statistic"] == pytest.approx(0.4)


def test_a_freshness_value_that_is_none_of_the_three_names_the_row() -> None:
    rows = [run_row("A", "t", 0.5, published_before_cutoff="maybe")]
    with pytest.raises(RunsTableError, match="published_before_cutoff.*not true, false"):
        check_runs_table(pd.DataFrame(rows))


def _dated_task(tmp_path: Path, published: str) -> Path:
    task = tmp_path / "tasks" / EXAMPLE_TASK.name
    shutil.copytree(EXAMPLE_TASK, task)
    key = task / "hidden" / "answers.json"
    data = json.loads(key.read_text())
    data["source"]["published"] = published
    key.write_text(json.dumps(data))
    return task


def test_a_run_records_whether_its_task_came_before_the_cutoff(tmp_path: Path) -> None:
    task = _dated_task(tmp_path, "2019")
    spec = seal_spec(task, tmp_path / "outputs")
    spec = type(spec)(**{**spec.__dict__, "model": ModelConfig(
        name="random", provider="baseline", training_cutoff="2025-03")})
    record = run_one(spec)
    stored = RunRecord.model_validate_json(
        (tmp_path / "outputs" / "runs" / record.run_key / "run.json").read_bytes())
    assert (stored.training_cutoff, stored.task_published) == ("2025-03", "2019")
    assert stored.published_before_cutoff is True
    unknown = run_one(seal_spec(task, tmp_path / "outputs", model="presented_order"))
    assert unknown.published_before_cutoff is None  # the model states no cutoff


def test_a_sealed_run_learns_its_freshness_when_the_key_arrives(tmp_path: Path) -> None:
    task = _dated_task(tmp_path, "2026-01")
    keys = tmp_path / "keys" / task.name
    keys.mkdir(parents=True)
    (task / "hidden" / "answers.json").rename(keys / "answers.json")
    with open(task / "task.yaml", "a") as f:
        f.write("answers: pending\n")
    spec = seal_spec(task, tmp_path / "outputs")
    spec = type(spec)(**{**spec.__dict__, "model": ModelConfig(
        name="random", provider="baseline", training_cutoff="2025-03")})
    record = run_one(spec)
    assert record.outcome is Outcome.sealed and record.published_before_cutoff is None
    _, new = regrade_run(tmp_path / "outputs" / "runs" / record.run_key, tmp_path / "tasks",
                         answers_root=tmp_path / "keys")
    assert new is not None and new.task_published == "2026-01"
    assert new.published_before_cutoff is False  # fresh: published after the cutoff
