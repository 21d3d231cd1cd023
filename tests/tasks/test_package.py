"""The loader, task selection by discipline and visibility, and the Hydra subset design."""

from __future__ import annotations

import json

import pytest

from spu.tasks.package import (
    TaskLoadError,
    load_protocol,
    load_targets,
    load_task,
    select_tasks,
)
from tests.conftest import TASKS, run_module
from tests.tasks.conftest import write_task


def test_targets_rows_keep_file_order_and_settings(make_task) -> None:
    task = load_task(make_task())
    rows = task.targets()
    assert rows[0].experiment_id == "E233" and rows[0].group_id == "G1"
    assert rows[0].settings == {"solvent": "THF", "temperature_c": "100"}


def test_targets_header_must_start_with_the_ids(tmp_path) -> None:
    path = tmp_path / "targets.csv"
    path.write_text("group_id,experiment_id,x\nG1,E1,3\n")
    with pytest.raises(TaskLoadError, match="targets.csv: the header must start with"):
        load_targets(path)


def test_targets_row_with_a_missing_cell_names_the_line(tmp_path) -> None:
    path = tmp_path / "targets.csv"
    path.write_text("experiment_id,group_id,x\nE1,G1,3\nE2,G1\n")
    with pytest.raises(TaskLoadError, match="line 3 has 2 cells, the header has 3"):
        load_targets(path)


def test_targets_quoted_cells_with_commas_and_newlines(tmp_path) -> None:
    path = tmp_path / "targets.csv"
    path.write_text('experiment_id,group_id,note\nE1,G1,"a, b\nc"\n')
    assert load_targets(path)[0].settings == {"note": "a, b\nc"}


def test_protocol_error_names_file_and_key(tmp_path) -> None:
    path = tmp_path / "protocol.json"
    path.write_text(json.dumps({"groups": [{"group_id": "G1", "endpoint": "y",
                                            "measurement_error": "small"}]}))
    with pytest.raises(TaskLoadError) as err:
        load_protocol(path)
    assert "protocol.json" in str(err.value)
    assert "groups.0.measurement_error" in str(err.value)


def _root_with_disciplines(tmp_path):
    for task_id, discipline, visibility in [("spu-aaaa", "chemistry", "public"),
                                            ("spu-bbbb", "biology", "private"),
                                            ("spu-cccc", "chemistry", "private")]:
        write_task(tmp_path, task_id, meta={
            "id": task_id, "version": "1.0", "title": "t", "discipline": discipline,
            "subfield": "s", "visibility": visibility})
    return tmp_path


def test_select_tasks_filters_case_insensitively(tmp_path) -> None:
    root = _root_with_disciplines(tmp_path)
    assert [t.id for t in select_tasks(root)] == ["spu-aaaa", "spu-bbbb", "spu-cccc"]
    assert [t.id for t in select_tasks(root, discipline="Chemistry")] == ["spu-aaaa",
                                                                         "spu-cccc"]
    assert [t.id for t in select_tasks(root, discipline="chemistry", visibility="private")] \
        == ["spu-cccc"]
    assert select_tasks(root, discipline="medicine") == []


def test_cli_list_hydra_format_and_empty_selection(tmp_path) -> None:
    root = _root_with_disciplines(tmp_path)
    out = run_module(["spu", "task", "list", "--task-root", str(root), "--visibility",
                      "private", "--format", "hydra"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "spu-bbbb,spu-cccc"
    listed = run_module(["spu", "task", "list", "--task-root", str(root), "--format", "json"])
    assert [t["discipline"] for t in json.loads(listed.stdout)] == ["chemistry", "biology",
                                                                    "chemistry"]
    none = run_module(["spu", "task", "list", "--task-root", str(root), "--discipline",
                       "medicine"])
    assert none.returncode == 1 and "no task" in none.stderr


@pytest.mark.parametrize("discipline", ["chemistry", "materials science", "biology",
                                        "medicine"])
def test_each_listed_task_composes_as_a_hydra_option(compose, discipline) -> None:
    out = run_module(["spu", "task", "list", "--discipline", discipline, "--format", "hydra"])
    assert out.returncode == 0, out.stderr
    names = out.stdout.strip().split(",")
    assert len(names) >= 2
    for name in names:
        cfg = compose(f"task={name}")
        assert cfg.task.discipline == discipline
        assert cfg.task.path == str(TASKS / name)


@pytest.mark.slow
def test_a_discipline_subset_sweeps_as_a_multirun(tmp_path) -> None:
    """``-m task=$(spu task list --discipline medicine --format hydra)`` runs just those."""
    listed = run_module(["spu", "task", "list", "--discipline", "medicine", "--format",
                         "hydra"])
    names = listed.stdout.strip()
    out_root = tmp_path / "outputs"
    out = run_module(["spu.main", "-m", f"task={names}", "model=random", "tracking=none",
                      "sandbox=subprocess", f"output_root={out_root}"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (out_root / "runs").glob("*/run.json")]
    assert sorted(r["task_id"] for r in records) == sorted(names.split(","))
    assert {r["discipline"] for r in records} == {"medicine"}
    assert all(r["outcome"] == "valid" for r in records)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"task_id": "spu-test", "task_version": "1.0", "groups": {"G1": {"E1": 1, "E1": 2}}}',
         "duplicate key 'E1'"),
        ('{"task_id": "spu-test", "task_version": "1.0", "groups": {"G1": {"E1": NaN}}}',
         "NaN is not a JSON value"),
        ('{"task_id": "spu-test", "task_version": "1.0", "groups": {"G1": {"E1": "12.5"}}}',
         "valid number"),
        ('{"task_id": "spu-test", "task_version": "1.0", "groups": {"G1": {"E1": true}}}',
         "valid number"),
    ],
)
def test_every_stage_reads_answer_keys_strictly(tmp_path, text, message) -> None:
    """The runner, grader and regrade load keys with load_answers: no value is coerced or merged."""
    from spu.tasks.package import load_answers

    path = tmp_path / "answers.json"
    path.write_text(text)
    with pytest.raises(TaskLoadError, match=message):
        load_answers(path)


def test_hostile_json_in_a_key_is_a_finding_not_a_crash(make_task) -> None:
    """A 5,000-digit integer or deep nesting is reported, never raised out of validate_task."""
    from spu.tasks.validate import validate_task

    huge = '{"task_id": "spu-test", "task_version": "1.0", "groups": {"G1": {"E1": 1' + "0" * 5000
    report = validate_task(make_task(answers=huge + "}}}"))
    assert not report.ok
    deep = "[" * 100_000 + "]" * 100_000
    report = validate_task(make_task(answers=deep))
    assert any(f.file == "hidden/answers.json" for f in report.errors)
