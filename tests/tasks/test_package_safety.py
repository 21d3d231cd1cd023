"""Task packages are data, not instructions: each attack of issue 12 (point 3 and 4) fails,
and nothing else is lost.

Links (to files or folders, inside the package or out), devices and FIFOs are refused when
staging and reported by ``spu task validate``; task ids are one safe pattern; task files are
read as bounded UTF-8 by bounded parsers; validation never prints an answer value.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from spu.schema import TaskMeta
from spu.tasks.package import (
    MAX_YAML_BYTES,
    TaskLoadError,
    TaskPackage,
    load_answers,
    load_meta,
    load_targets,
    load_task,
    path_under,
    read_task_file,
    scan_task_root,
    stage_public_files,
    unsafe_entries,
)
from spu.tasks.validate import validate_task
from tests.conftest import run_module
from tests.tasks.conftest import GROUPS

ANSWER_VALUES = sorted({v for g in GROUPS.values() for v in g["values"].values()})


def _plant(task: Path, kind: str) -> str:
    """Plant one unsafe entry in a valid package; returns its path relative to the task."""
    (task / "files").mkdir(exist_ok=True)
    if kind == "link-to-answers-in-files":
        os.symlink("../hidden/answers.json", task / "files" / "notes.json")
        return "files/notes.json"
    if kind == "required-file-is-a-link":
        (task / "experiment.md").unlink()
        os.symlink("hidden/answers.json", task / "experiment.md")
        return "experiment.md"
    if kind == "link-to-host-file":
        os.symlink("/etc/passwd", task / "files" / "x")
        return "files/x"
    if kind == "link-to-host-folder":
        os.symlink("/etc", task / "files" / "etc")
        return "files/etc"
    if kind == "link-to-own-folder":
        os.symlink(".", task / "files" / "loop")
        return "files/loop"
    if kind == "fifo":
        os.mkfifo(task / "files" / "pipe")
        return "files/pipe"
    if kind == "device":
        try:
            os.mknod(task / "files" / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("creating a device node needs root (CAP_MKNOD)")
        return "files/null"
    raise AssertionError(kind)


UNSAFE = ["link-to-answers-in-files", "required-file-is-a-link", "link-to-host-file",
          "link-to-host-folder", "link-to-own-folder", "fifo", "device"]


@pytest.mark.parametrize("kind", UNSAFE)
def test_staging_refuses_links_devices_and_fifos(make_task, tmp_path, kind) -> None:
    """Invariant: nothing but the package's own regular files reaches ``/task``; an unsafe
    entry refuses the whole package and leaves no staging folder behind."""
    task_dir = make_task()
    rel = _plant(task_dir, kind)
    task = TaskPackage(path=task_dir, meta=load_meta(task_dir),
                       contract=load_task(task_dir).contract)
    dest = tmp_path / "run" / "task"
    started = time.monotonic()
    with pytest.raises(TaskLoadError, match=rf"{rel} is a .*nothing was staged"):
        stage_public_files(task, dest)
    assert time.monotonic() - started < 10  # a FIFO is never opened (no hang)
    assert not dest.exists()
    run = tmp_path / "run"
    assert not run.exists() or list(run.iterdir()) == []  # no half-staged copy either

    report = validate_task(task_dir)
    found = [f for f in report.errors if f.code == "unsafe-file"]
    assert [f.file for f in found] == [rel]
    assert not report.ok


def test_validate_reports_every_unsafe_entry_and_cli_exits_1(make_task) -> None:
    task_dir = make_task()
    planted = {_plant(task_dir, k) for k in ("link-to-host-file", "fifo",
                                             "link-to-host-folder")}
    os.symlink("/etc/shadow", task_dir / "hidden" / "copy")  # outside the public files too
    planted.add("hidden/copy")
    assert {e.path for e in unsafe_entries(task_dir)} == planted
    out = run_module(["spu", "task", "validate", str(task_dir)])
    assert out.returncode == 1
    for rel in planted:
        assert f"error: {rel}: is a " in out.stdout


def test_a_package_of_regular_files_stages_identically(make_task, tmp_path) -> None:
    task_dir = make_task(files={"structure.pdb": b"ATOM\n", "run.sh": b"#!/bin/sh\n"})
    (task_dir / "files" / "run.sh").chmod(0o4755)  # set-uid bit: never staged
    staged = stage_public_files(load_task(task_dir), tmp_path / "task")
    names = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*"))
    assert names == ["contract.json", "experiment.md", "files", "files/run.sh",
                     "files/structure.pdb", "instruction.md", "protocol.json", "targets.csv",
                     "task.yaml"]
    assert (staged / "files" / "structure.pdb").read_bytes() == b"ATOM\n"
    assert stat.S_IMODE((staged / "files" / "run.sh").stat().st_mode) == 0o755
    assert not (staged / "hidden").exists()


# ------------------------------------------------------------------------------ task ids


@pytest.mark.parametrize("bad", ["../x", "a/b", ".", "..", ".hidden", "${oc.env:HOME}",
                                 "a,b", "x=y", "t;touch pwned", "sp ace", "", "é", "a" * 129])
def test_task_ids_are_one_safe_pattern(bad) -> None:
    meta = {"id": bad, "version": "1", "title": "t", "discipline": "chemistry",
            "subfield": "s"}
    with pytest.raises(ValidationError, match="not a safe task id"):
        TaskMeta.model_validate(meta)


def test_paths_built_from_an_id_stay_in_their_root(tmp_path) -> None:
    root = tmp_path / "keys"
    assert path_under(root, "spu-a.1_b", "answers.json") == root / "spu-a.1_b" / "answers.json"
    for bad in ("..", "../hidden", "/etc", "a/../../b"):
        with pytest.raises(TaskLoadError, match="not a safe name"):
            path_under(root, bad, "answers.json")


def test_an_id_with_dots_cannot_reach_an_answer_key_outside_the_root(make_task,
                                                                     tmp_path) -> None:
    """Attack: task id ``../x`` read ``answers_root/../x/answers.json``. The id is refused
    when the package loads, before any path is built from it."""
    task_dir = make_task(meta={"id": "../secret", "version": "1.0", "title": "t",
                               "discipline": "chemistry", "subfield": "s"})
    with pytest.raises(TaskLoadError, match="task.yaml: id: .*not a safe task id"):
        load_task(task_dir)


# ----------------------------------------------------------------------- bounded readers


def test_a_non_utf8_task_yaml_is_one_line_naming_the_file(make_task) -> None:
    task_dir = make_task()
    (task_dir / "task.yaml").write_bytes(b"id: spu-test\ntitle: caf\xe9\n")
    with pytest.raises(TaskLoadError) as err:
        load_meta(task_dir)
    message = str(err.value)
    assert message.startswith(f"{task_dir / 'task.yaml'}: not UTF-8")
    assert "\n" not in message


def test_a_yaml_anchor_bomb_is_refused_at_once(make_task) -> None:
    """Attack: nine nested aliases expand a 1 KB ``task.yaml`` to 10**9 strings."""
    task_dir = make_task()
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (task_dir / "task.yaml").write_text("\n".join(lines) + "\nid: spu-test\n")
    started = time.monotonic()
    with pytest.raises(TaskLoadError, match="anchors and aliases .* are not allowed"):
        load_meta(task_dir)
    assert time.monotonic() - started < 5


def test_a_single_alias_is_refused_too(make_task) -> None:
    task_dir = make_task()
    (task_dir / "task.yaml").write_text("id: &i spu-test\nversion: '1.0'\ntitle: *i\n"
                                        "discipline: chemistry\nsubfield: s\n")
    with pytest.raises(TaskLoadError, match=r"line 1, column 5: anchors and aliases"):
        load_meta(task_dir)


def test_every_task_file_has_a_size_limit(make_task, tmp_path) -> None:
    task_dir = make_task()
    (task_dir / "task.yaml").write_bytes(b"#" * (MAX_YAML_BYTES + 1))
    with pytest.raises(TaskLoadError, match=rf"over the limit of {MAX_YAML_BYTES} bytes"):
        load_meta(task_dir)
    big = tmp_path / "big.json"
    big.write_bytes(b"0" * 11)
    with pytest.raises(TaskLoadError, match="over the limit of 10 bytes"):
        read_task_file(big, 10)


def test_csv_and_json_that_defeat_their_parsers_are_one_line_errors(make_task) -> None:
    task_dir = make_task()
    targets = task_dir / "targets.csv"
    targets.write_text('experiment_id,group_id,x\nE1,G1,"' + "a" * 200_000 + '"\n')
    with pytest.raises(TaskLoadError, match="targets.csv: not valid CSV"):
        load_targets(targets)
    answers = task_dir / "hidden" / "answers.json"
    answers.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TaskLoadError, match="answers.json: not valid strict JSON"):
        load_answers(answers)


def test_the_answer_key_must_be_a_regular_file(make_task, tmp_path) -> None:
    task_dir = make_task()
    outside = tmp_path / "elsewhere.json"
    (task_dir / "hidden" / "answers.json").rename(outside)
    os.symlink(outside, task_dir / "hidden" / "answers.json")
    with pytest.raises(TaskLoadError, match="answers.json: is a link, not a regular file"):
        load_answers(task_dir / "hidden" / "answers.json")


# ------------------------------------------------------------------------ the task root


def test_scan_sorts_broken_folders_from_sound_ones(make_task, tmp_path) -> None:
    root = tmp_path
    make_task()  # spu-test, sound
    weird = root / "a,b=c"
    (root / "spu-test").rename(root / "spu-good")
    from tests.tasks.conftest import write_task

    write_task(root, "spu-good2")
    (root / "spu-good2").rename(weird)
    write_task(root, "spu-bytes")
    (root / "spu-bytes" / "task.yaml").write_bytes(b"\xff\xfe")
    os.symlink(root / "spu-good", root / "spu-linked")
    scan = scan_task_root(root)
    # The good folder's id differs from its name: a warning for validate, still runnable.
    assert sorted(scan.tasks) == ["spu-good"]
    reasons = {b.name: b.reason for b in scan.broken}
    assert set(reasons) == {"a,b=c", "spu-bytes", "spu-linked"}
    assert "is not a safe task name" in reasons["a,b=c"]
    assert "not UTF-8" in reasons["spu-bytes"]
    assert "the task folder is a link" in reasons["spu-linked"]
    assert all("\n" not in r for r in reasons.values())


# ------------------------------------------------------------------ no answer value shown


def test_validate_never_prints_answer_values_or_source_identifiers(make_task) -> None:
    """Invariant: a leaking package's report names the file, the column or group and the
    count of values found, never a value (a validation log may be shared)."""
    g1 = GROUPS["G1"]["values"]
    quoted = "Earlier yields: " + ", ".join(f"{v:.2f}" for v in list(g1.values())[:4]) + ".\n"
    rows = [{"experiment_id": e, "group_id": gid, "yield_pct": str(v)}
            for gid, g in GROUPS.items() for e, v in g["values"].items()]
    task_dir = make_task(experiment=quoted + "See doi 10.1234/example.5678.\n", rows=rows)
    answers = json.loads((task_dir / "hidden" / "answers.json").read_text())
    answers["groups"]["G2"]["E671"] = "0.9"  # a non-number: named by its kind only
    (task_dir / "hidden" / "answers.json").write_text(json.dumps(answers))
    for extra in ([], ["--json"]):
        out = run_module(["spu", "task", "validate", str(task_dir), *extra])
        assert out.returncode == 1
        text = (out.stdout + out.stderr).replace(str(task_dir), "<task>")
        assert "measured value is not a finite number (str)" in text
        for value in ANSWER_VALUES:
            for shown in {f"{value:g}", f"{value:.2f}", repr(value)}:
                # a value as a number of its own: not a digit of an id such as E671
                assert not re.search(rf"(?<![\w.]){re.escape(shown)}(?![\w])", text), shown
        assert "10.1234/example.5678" not in text
    answers["groups"]["G2"]["E671"] = 0.9
    (task_dir / "hidden" / "answers.json").write_text(json.dumps(answers))
    report = validate_task(task_dir)
    messages = [f.message for f in report.errors]
    assert "leak: names the source (its doi)" in messages
    assert any("experiment.md" == f.file and "quotes 4 of the 6 measured values of group G1"
               in f.message for f in report.errors), messages
    assert any("column 'yield_pct' holds the measured values of group" in m for m in messages)


def test_task_list_leaves_a_broken_task_out_in_one_line(make_task, tmp_path) -> None:
    """``spu task list --format hydra`` feeds sweeps: a broken package is left out and named
    on stderr, never fatal to the list of the others."""
    make_task()
    from tests.tasks.conftest import write_task

    write_task(tmp_path, "spu-bytes")
    (tmp_path / "spu-bytes" / "task.yaml").write_bytes(b"id: \xff\n")
    out = run_module(["spu", "task", "list", "--task-root", str(tmp_path), "--format",
                      "hydra"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "spu-test"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "broken task 'spu-bytes' skipped" in lines[0]
