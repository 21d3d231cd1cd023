"""``spu regrade``: stored submissions of finished runs graded again, agents not re-run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spu.cli import main
from spu.config import EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
from spu.grading.rules import GRADER_VERSION
from spu.runner import RunSpec, run_one
from spu.schema import GradeStatus, Outcome, RunRecord
from spu.tracking.regrade import regrade_runs
from tests.conftest import EXAMPLE_TWO_GROUPS
from tests.grading.test_cli import BEST, G1, G2, TASK_ID

# After the key fix below (G2 reversed: E904 61, E668 48, E486 31, E264 31), the measured
# order of the original key scores 0.6 * 1 + 0.4 * -0.9486833 = 0.2205267 (worked in test_cli).
FIXED = 0.6 - 0.4 * 4.5 / 22.5 ** 0.5

AGENT = """#!{python}
import json, os
with open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "rankings.json"), "w") as f:
    json.dump({submission}, f)
"""


@pytest.fixture
def task_root(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    shutil.copytree(EXAMPLE_TWO_GROUPS, root / TASK_ID)
    return root


def finished_run(tmp_path: Path, task_root: Path, submission: object, name: str) -> RunRecord:
    """A real finished run: a command agent that writes ``submission``, graded in isolation."""
    import sys

    agent = tmp_path / f"{name}.py"
    agent.write_text(AGENT.format(python=sys.executable, submission=json.dumps(submission)))
    agent.chmod(0o755)
    return run_one(RunSpec(
        model=ModelConfig(name=name, provider="baseline"),
        harness=HarnessConfig(name="command", entrypoint=str(agent)),
        effort=EffortConfig(name="none"),
        task_dir=task_root / TASK_ID,
        output_root=tmp_path / "outputs",
        sandbox=SandboxConfig(name="subprocess", allow_unisolated=True),
    ))


def fixed_key_root(tmp_path: Path) -> Path:
    key = json.loads((EXAMPLE_TWO_GROUPS / "hidden" / "answers.json").read_text())
    key["groups"]["G2"] = {"E904": 61.0, "E668": 48.0, "E486": 31.0, "E264": 31.0}
    root = tmp_path / "answer-keys"
    (root / TASK_ID).mkdir(parents=True)
    (root / TASK_ID / "answers.json").write_text(json.dumps(key))
    return root


def load(tmp_path: Path, record: RunRecord) -> tuple[RunRecord, dict]:
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    return (RunRecord.model_validate_json((run_dir / "run.json").read_text()),
            json.loads((run_dir / "grade.json").read_text()))


CANONICAL = {"task_id": TASK_ID, "rankings": [{"group_id": "G1", "order": G1},
                                              {"group_id": "G2", "order": G2}]}


@pytest.mark.slow
def test_regrade_after_an_answer_key_fix_keeps_the_old_grade(tmp_path, task_root) -> None:
    before = finished_run(tmp_path, task_root, CANONICAL, "agent-a")
    assert before.score_recovered == pytest.approx(BEST, abs=1e-12)
    keys = fixed_key_root(tmp_path)

    results = regrade_runs(tmp_path / "outputs", task_root, answers_root=keys,
                           reason="G2 values were swapped")
    assert [r.status for r in results] == ["regraded"]
    assert results[0].new_score == pytest.approx(FIXED, abs=1e-12)
    assert results[0].grader_version == GRADER_VERSION

    after, grades = load(tmp_path, before)
    assert after.score_recovered == pytest.approx(FIXED, abs=1e-12)
    assert after.score_strict == pytest.approx(FIXED, abs=1e-12)
    assert after.grade.grader_version == GRADER_VERSION and after.grade.isolation
    assert after.outcome.value == "valid" and after.scored
    [past] = after.grade_history
    assert past.score_recovered == pytest.approx(BEST, abs=1e-12)
    assert past.grade.grader_version == GRADER_VERSION and past.reason == "G2 values were swapped"
    assert grades["recovered"]["score"] == pytest.approx(FIXED, abs=1e-12)
    assert grades["history"][0]["recovered"]["score"] == pytest.approx(BEST, abs=1e-12)
    assert after.run_key == before.run_key and after.runtime_s == before.runtime_s

    again = regrade_runs(tmp_path / "outputs", task_root, answers_root=keys)
    assert [r.status for r in again] == ["unchanged"], "regrading twice changes nothing"
    assert len(load(tmp_path, before)[0].grade_history) == 1


@pytest.mark.slow
def test_regrade_fixes_a_grade_made_by_an_older_grader(tmp_path, task_root) -> None:
    """A run graded by a faulty older grader (here: written as rejected at -1 by version 0.9)
    gets the current grader's grade and outcome; the old grade and its version are kept."""
    record = finished_run(tmp_path, task_root, CANONICAL, "agent-b")
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    old_grade = record.grade.model_copy(update={"grader_version": "0.9", "score": -1.0,
                                                "status": GradeStatus.invalid})
    stale = record.model_copy(update={"outcome": Outcome.rejected, "scored": False,
                                      "score_strict": -1.0, "score_recovered": -1.0,
                                      "grade": old_grade})
    (run_dir / "run.json").write_text(stale.model_dump_json())
    grades = json.loads((run_dir / "grade.json").read_text())
    grades["strict"]["grader_version"] = grades["recovered"]["grader_version"] = "0.9"
    (run_dir / "grade.json").write_text(json.dumps(grades))

    [result] = regrade_runs(tmp_path / "outputs", task_root)
    assert (result.status, result.old_outcome, result.new_outcome) == \
        ("regraded", "rejected", "valid")
    after, grades = load(tmp_path, record)
    assert after.scored and after.score_recovered == pytest.approx(BEST, abs=1e-12)
    assert after.grade_history[0].grade.grader_version == "0.9"
    assert grades["history"][0]["strict"]["grader_version"] == "0.9"
    assert grades["recovered"]["grader_version"] == GRADER_VERSION


@pytest.mark.slow
def test_outcomes_not_decided_by_the_file_survive(tmp_path, task_root) -> None:
    """A timeout stays a timeout after a regrade; only whether it is scored follows the grade."""
    record = finished_run(tmp_path, task_root, CANONICAL, "agent-c")
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    (run_dir / "run.json").write_text(
        record.model_copy(update={"outcome": Outcome.timeout}).model_dump_json())
    [result] = regrade_runs(tmp_path / "outputs", task_root, answers_root=fixed_key_root(tmp_path))
    assert result.new_outcome == "timeout"
    after, _ = load(tmp_path, record)
    assert after.scored, "a run that timed out after writing a valid file is scored (SPEC 5)"
    assert after.score_recovered == pytest.approx(FIXED, abs=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("marked_by", ["field", "older_note", "scored_rule"])
def test_a_run_excluded_for_rerun_past_a_limit_stays_excluded(tmp_path, task_root,
                                                                marked_by) -> None:
    """A ``disk_limit`` run with a valid file: excluded under the paper's rule
    (``excluded_for_rerun``, or only its note in a record written before that field) stays
    unscored after a regrade; under the default rule (scored as a timeout's) it stays scored."""
    from spu.grading.outcome import RERUN_NOTE

    record = finished_run(tmp_path, task_root, CANONICAL, f"agent-{marked_by}")
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    update: dict[str, object] = {"outcome": Outcome.disk_limit, "scored": marked_by ==
                                 "scored_rule"}
    if marked_by == "field":
        update["excluded_for_rerun"] = True
    if marked_by == "older_note":
        update["notes"] = [*record.notes, RERUN_NOTE.format(outcome="disk_limit")]
    (run_dir / "run.json").write_text(record.model_copy(update=update).model_dump_json())
    [result] = regrade_runs(tmp_path / "outputs", task_root, answers_root=fixed_key_root(tmp_path))
    assert (result.status, result.new_outcome) == ("regraded", "disk_limit")
    after, _ = load(tmp_path, record)
    assert after.score_recovered == pytest.approx(FIXED, abs=1e-12)
    assert after.scored is (marked_by == "scored_rule")
    assert after.excluded_for_rerun is (marked_by != "scored_rule")


@pytest.mark.slow
def test_task_version_change_needs_consent_and_failures_do_not_stop_others(
        tmp_path, task_root, capsys) -> None:
    ok = finished_run(tmp_path, task_root, CANONICAL, "agent-d")
    recovered = finished_run(tmp_path, task_root, {"task_id": TASK_ID,
                                                   "rankings": {"G1": G1, "G2": G2}}, "agent-e")
    assert recovered.outcome.value == "recovered"
    orphan = tmp_path / "outputs" / "runs" / "0000000000000000"
    orphan.mkdir()
    (orphan / "run.json").write_text(ok.model_copy(update={"task_id": "spu-gone",
                                                           "run_key": orphan.name})
                                     .model_dump_json())
    for name in ("task.yaml", "contract.json"):
        path = task_root / TASK_ID / name
        path.write_text(path.read_text().replace("1.0", "1.1"))
    keys = fixed_key_root(tmp_path)
    key = keys / TASK_ID / "answers.json"
    key.write_text(key.read_text().replace('"1.0"', '"1.1"'))

    code = main(["regrade", str(tmp_path / "outputs"), "--task-root", str(task_root),
                 "--answers-root", str(keys)])
    err = capsys.readouterr().err
    assert code == 1
    assert "--accept-version-change" in err and "no task with id 'spu-gone'" in err

    results = {r.run_key: r for r in regrade_runs(
        tmp_path / "outputs", task_root, answers_root=keys, accept_version_change=True)}
    assert results[orphan.name].status == "failed"
    assert results[ok.run_key].status == "regraded"
    assert results[ok.run_key].new_score == pytest.approx(FIXED, abs=1e-12)
    assert results[recovered.run_key].new_outcome == "recovered"
    after, _ = load(tmp_path, ok)
    assert after.task_version == "1.0", "the record keeps the version the agent saw"
    assert any("task version 1.1" in n for n in after.notes)


@pytest.mark.slow
def test_regrade_updates_the_mlflow_run(tmp_path, task_root) -> None:
    from mlflow.tracking import MlflowClient

    from spu.tracking.store import TrackingTarget, log_run

    record = finished_run(tmp_path, task_root, CANONICAL, "agent-f")
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    target = TrackingTarget(uri=uri, artifact_root=(tmp_path / "artifacts").as_uri(),
                            experiment="regrade-test")
    run_id = log_run(record, run_dir, target)

    [result] = regrade_runs(tmp_path / "outputs", task_root,
                            answers_root=fixed_key_root(tmp_path), tracking_uri=uri)
    assert result.tracking_runs == 1 and result.error is None
    client = MlflowClient(tracking_uri=uri)
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "score"))
    assert [s for s, _ in history] == [0, 1]
    assert history[0][1] == pytest.approx(BEST) and history[1][1] == pytest.approx(FIXED)
    run = client.get_run(run_id)
    assert run.data.metrics["score_recovered"] == pytest.approx(FIXED)
    assert run.data.tags["grader_version"] == GRADER_VERSION
    assert run.data.tags["outcome"] == "valid" and "regraded_at" in run.data.tags
