"""Runs of tasks without an answer key end ``sealed``; the key's arrival grades them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spu.grading.chance import chance_threshold, chance_threshold_without_ties
from spu.grading.outcome import RunEvidence, judge
from spu.grading.rules import grade_submission
from spu.runner import run_one
from spu.schema import Outcome
from spu.seal.verify import verify_root
from spu.tasks import load_answers, load_task
from spu.tasks.validate import validate_task
from spu.tracking.regrade import regrade_run
from tests.seal.conftest import seal_spec as _spec


def test_the_outcome_rule_seals_a_file_without_a_key() -> None:
    """No grade (no key) and a file: sealed, not scored; no file is still no_file."""
    assert judge(RunEvidence(submitted=True), None).outcome is Outcome.sealed
    assert not judge(RunEvidence(submitted=True), None).scored
    assert judge(RunEvidence(submitted=False), None).outcome is Outcome.no_file
    assert judge(RunEvidence(submitted=True, timed_out=True), None).outcome is Outcome.timeout


def test_a_pending_task_validates_with_a_warning(keyless: tuple[Path, Path]) -> None:
    task, _ = keyless
    report = validate_task(task)
    assert report.ok, [str(f) for f in report.errors]
    assert [f.code for f in report.warnings if f.code == "answers-pending"] == ["answers-pending"]


def test_the_threshold_without_ties_equals_a_tie_free_key(keyless: tuple[Path, Path]) -> None:
    """The example key has no ties, so its threshold is the one computed without it."""
    task, keys = keyless
    contract = load_task(task).contract
    answers = load_answers(keys / task.name / "answers.json")
    assert chance_threshold_without_ties(contract) == pytest.approx(
        chance_threshold(contract, answers), abs=1e-12)


def test_a_sealed_run_is_graded_by_regrade_as_spu_grade_grades_it(
        keyless: tuple[Path, Path], tmp_path: Path) -> None:
    task, keys = keyless
    root = tmp_path / "outputs"
    record = run_one(_spec(task, root, model="presented_order"))
    assert record.outcome is Outcome.sealed and not record.scored and record.grade is None
    run_dir = root / "runs" / record.run_key
    assert verify_root(root).ok
    result, new = regrade_run(run_dir, tmp_path / "tasks", answers_root=keys)
    assert new is not None and new.outcome is Outcome.valid and new.scored
    direct = grade_submission(load_task(task).contract,
                              load_answers(keys / task.name / "answers.json"),
                              (run_dir / "output" / "rankings.json").read_bytes())
    assert new.score_strict == direct.score
    assert verify_root(root).ok, "regrading touches no sealed file"


def test_a_sealed_run_changed_before_grading_ends_seal_broken(
        keyless: tuple[Path, Path], tmp_path: Path) -> None:
    task, keys = keyless
    root = tmp_path / "outputs"
    record = run_one(_spec(task, root, model="presented_order"))
    run_dir = root / "runs" / record.run_key
    path = run_dir / "output" / "rankings.json"
    path.write_bytes(path.read_bytes() + b" ")
    result, new = regrade_run(run_dir, tmp_path / "tasks", answers_root=keys)
    assert new is not None and new.outcome is Outcome.seal_broken and not new.scored
    assert json.loads((run_dir / "run.json").read_text())["outcome"] == "seal_broken"
    assert "output/rankings.json: changed after sealing" in new.notes[-1]
