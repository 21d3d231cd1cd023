"""``spu grade``: the exact JSON object of SPEC section 4 and its exit statuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spu.cli import main
from tests.conftest import EXAMPLE_TWO_GROUPS, run_module

# The example task (tasks/example-electrolytes-and-films): G1 (weight 0.6) measured
# E302 2.1 < E983 4.9 < E160 5.8 < E915 10.7 < E193 11.6 < E878 13.9, no ties: the measured
# order scores rho 1. G2 (weight 0.4) measured E904 31 < E668 48 < E486 = E264 61: ranks
# (1, 2, 3.5, 3.5) against positions (1, 2, 3, 4): centered x (-1.5, -.5, 1, 1), y (-1.5, -.5,
# .5, 1.5): cov = 2.25 + .25 + .5 + 1.5 = 4.5, Sxx = 2.25 + .25 + 1 + 1 = 4.5, Syy = 5,
# rho = 4.5 / sqrt(22.5) = 0.9486833. Task: 0.6 + 0.4 * 0.9486833 = 0.9794733.
G1 = ["E302", "E983", "E160", "E915", "E193", "E878"]
G2 = ["E904", "E668", "E486", "E264"]
BEST = 0.6 + 0.4 * 4.5 / 22.5 ** 0.5
TASK_ID = "example-electrolytes-and-films"


def write(path: Path, obj: object) -> Path:
    path.write_text(json.dumps(obj))
    return path


def grade_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["grade", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_grade_json_prints_exactly_the_spec_object(tmp_path, capsys) -> None:
    sub = write(tmp_path / "rankings.json", {
        "task_id": TASK_ID, "task_version": "1.0",
        "rankings": [{"group_id": "G1", "order": G1}, {"group_id": "G2", "order": G2}]})
    code, out = grade_json(capsys, str(sub), "--task", str(EXAMPLE_TWO_GROUPS))
    assert code == 0
    assert list(out) == ["task_id", "score", "status", "groups", "errors"]
    assert out["task_id"] == TASK_ID and out["status"] == "valid" and out["errors"] == []
    assert out["score"] == pytest.approx(BEST, abs=1e-12)
    assert [list(g) for g in out["groups"]] == [["group_id", "weight", "rho", "error"]] * 2
    assert [(g["group_id"], g["weight"], g["error"]) for g in out["groups"]] == \
        [("G1", 0.6, None), ("G2", 0.4, None)]
    assert out["groups"][0]["rho"] == 1.0
    assert out["groups"][1]["rho"] == pytest.approx(4.5 / 22.5 ** 0.5, abs=1e-12)


def test_recover_flag_gives_the_recovered_score(tmp_path, capsys) -> None:
    sub = write(tmp_path / "rankings.json", {"task_id": TASK_ID,
                                             "rankings": {"G1": G1, "G2": G2}})
    code, strict = grade_json(capsys, str(sub), "--task", str(EXAMPLE_TWO_GROUPS))
    assert code == 0 and strict["status"] == "invalid" and strict["score"] == -1.0
    assert [g["rho"] for g in strict["groups"]] == [-1.0, -1.0]
    code, recovered = grade_json(capsys, str(sub), "--task", str(EXAMPLE_TWO_GROUPS),
                                 "--recover")
    assert code == 0 and recovered["status"] == "recovered"
    assert recovered["score"] == pytest.approx(BEST, abs=1e-12)


def test_missing_submission_exits_zero_with_minus_one(tmp_path, capsys) -> None:
    code, out = grade_json(capsys, str(tmp_path / "absent.json"), "--task",
                           str(EXAMPLE_TWO_GROUPS))
    assert code == 0 and out["score"] == -1.0 and out["status"] == "invalid"
    assert out["errors"][0].startswith("missing file")


def test_answers_option_reads_a_key_kept_apart(tmp_path, capsys) -> None:
    # The same task with G2's key reversed (E904 61, E486 31, E264 31, E668 48): the measured
    # order of the real key now scores 0.6 * 1 + 0.4 * rho, rho worked as in the header with
    # ranks (4, 3, 1.5, 1.5): centered x (1.5, .5, -1, -1) . y (-1.5, -.5, .5, 1.5) = -4.5,
    # rho = -0.9486833.
    key = json.loads((EXAMPLE_TWO_GROUPS / "hidden" / "answers.json").read_text())
    key["groups"]["G2"] = {"E904": 61.0, "E668": 48.0, "E486": 31.0, "E264": 31.0}
    answers = write(tmp_path / "answers.json", key)
    sub = write(tmp_path / "rankings.json", {
        "task_id": TASK_ID, "rankings": [{"group_id": "G1", "order": G1},
                                         {"group_id": "G2", "order": G2}]})
    code, out = grade_json(capsys, str(sub), "--task", str(EXAMPLE_TWO_GROUPS),
                           "--answers", str(answers))
    assert code == 0
    assert out["score"] == pytest.approx(0.6 - 0.4 * 4.5 / 22.5 ** 0.5, abs=1e-12)


def test_unreadable_task_exits_non_zero_naming_the_file(tmp_path, capsys) -> None:
    sub = write(tmp_path / "rankings.json", {})
    assert main(["grade", str(sub), "--task", str(tmp_path / "nowhere"), "--json"]) == 2
    assert "nowhere" in capsys.readouterr().err
    task = tmp_path / "task"
    shutil.copytree(EXAMPLE_TWO_GROUPS, task)
    key = json.loads((task / "hidden" / "answers.json").read_text())
    del key["groups"]["G2"]["E668"]
    write(task / "hidden" / "answers.json", key)
    assert main(["grade", str(sub), "--task", str(task), "--json"]) == 2
    err = capsys.readouterr().err
    assert "answers.json" in err and "groups.G2.E668: experiment is missing" in err


@pytest.mark.slow
def test_console_entry_point(tmp_path) -> None:
    """``python -m spu grade`` (what the ``spu`` script runs) prints one JSON line."""
    sub = write(tmp_path / "rankings.json", {"task_id": TASK_ID, "rankings": []})
    proc = run_module(["spu", "grade", str(sub), "--task", str(EXAMPLE_TWO_GROUPS), "--json"])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["score"] == -1.0 and out["status"] == "valid"
    assert out["errors"] == ["no group is ranked"]


def test_recovered_text_never_follows_the_score_with_a_bare_error(tmp_path, capsys) -> None:
    """Issue 14 item 8: a recovered score and an unqualified "error:" contradict each other.

    The text says the strict rules rejected the file, names what recovery renamed, and
    lists as errors only what is still wrong after recovery.
    """
    sub = write(tmp_path / "rankings.json", {
        "task": TASK_ID, "version": "1.0",
        "rankings": [{"group_id": "G1", "order": G1}, {"group_id": "G2", "order": G2}]})
    assert main(["grade", str(sub), "--task", str(EXAMPLE_TWO_GROUPS), "--recover"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"task {TASK_ID}: score {BEST:.6f} (recovered; strict score "
                        f"-1.000000)")
    assert not any(line.strip().startswith("error:") for line in lines), lines
    assert "  strict rules: file rejected (wrong task identity: task_id is missing)" in lines
    assert any(line.startswith("  recovery: renamed_identity") for line in lines)
