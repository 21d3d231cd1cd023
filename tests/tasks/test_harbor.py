"""Harbor interchange (SPEC 10): export follows Harbor's task format; the round trip loses nothing.

The exported verifier is run here as a process with ``python -I -S`` (no site-packages:
the standard library only, as in the container); tests/sandbox/test_harbor_verifier.py
runs it with ``bash tests/test.sh`` in a container of the project's image.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from spu.grading.rules import grade_submission
from spu.grading.submission import read_submission_file
from spu.tasks.harbor import (
    HARBOR_VERSION,
    TASK_SCHEMA_VERSION,
    VENDORED_GRADER,
    HarborError,
    export_harbor,
    import_harbor,
)
from spu.tasks.package import PUBLIC_PATHS, discover_tasks, load_answers, load_task
from spu.tasks.validate import validate_task
from tests.conftest import EXAMPLE_TWO_GROUPS, REPO, TASKS, run_module
from tests.tasks.submissions import fixture_submissions

SHIPPED = discover_tasks(TASKS)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _public(task: Path) -> dict[str, bytes]:
    return {rel: data for rel, data in _files(task).items()
            if rel.split("/")[0] in PUBLIC_PATHS}


def run_verifier(harbor_task: Path, submission: bytes | None, work: Path) -> dict:
    """Run ``tests/verify.py`` on ``submission`` with no site-packages; its reward and grade."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "rankings.json"
    path.unlink(missing_ok=True)
    if submission is not None:
        path.write_bytes(submission)
    logs = work / "logs"
    done = subprocess.run([sys.executable, "-I", "-S", str(harbor_task / "tests" / "verify.py"),
                           "--submission", str(path), "--logs", str(logs)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    reward_text = (logs / "reward.txt").read_text()
    return {"reward": float(reward_text), "reward_text": reward_text,
            **json.loads((logs / "grade.json").read_text())}


def test_export_follows_harbors_task_format(tmp_path) -> None:
    """task.toml (Harbor 0.26.0, schema 1.4), instruction.md, environment/, tests/."""
    out = export_harbor(TASKS / "spu-bhpt", tmp_path / "spu-bhpt").path
    config = tomllib.loads((out / "task.toml").read_text())
    assert config["schema_version"] == TASK_SCHEMA_VERSION
    assert config["task"]["name"] == "spu/spu-bhpt" and config["task"]["version"] == "1.0"
    assert config["metadata"]["harbor_version"] == HARBOR_VERSION
    assert config["metadata"]["spu_task_id"] == "spu-bhpt"
    # Paper 2.1 / SPEC 4 defaults: 8 hours, 8 CPUs, 16 GiB, one GPU; connected (paper 3.7).
    assert config["agent"]["timeout_sec"] == 28800.0
    env = config["environment"]
    assert (env["cpus"], env["memory_mb"], env["gpus"], env["network_mode"]) == \
        (8, 16384, 1, "public")
    assert env["env"] == {"SPU_TOOLS_URL": "${SPU_TOOLS_URL:-}"}
    # Grading in its own container without network, fed the agent's /output (paper 2.5).
    assert config["verifier"]["environment_mode"] == "separate"
    assert config["verifier"]["environment"]["network_mode"] == "no-network"
    assert config["artifacts"] == ["/output"]

    assert (out / "instruction.md").read_bytes() == (TASKS / "spu-bhpt" / "instruction.md") \
        .read_bytes()
    dockerfile = (out / "environment" / "Dockerfile").read_text()
    assert "COPY task/ /task/" in dockerfile and "SPU_OUTPUT_DIR=/output" in dockerfile
    assert "FROM debian:bookworm-slim" in dockerfile and "{" not in dockerfile
    assert _files(out / "environment" / "task") == _public(TASKS / "spu-bhpt")
    assert (out / "tests" / "test.sh").stat().st_mode & 0o111
    for rel in VENDORED_GRADER:  # the grading rules, unchanged
        assert (out / "tests" / "grader" / rel).read_bytes() == (REPO / rel).read_bytes()


def test_answers_are_only_under_tests(tmp_path) -> None:
    """The answer key and its values are in tests/ and nowhere the agent's container sees."""
    out = export_harbor(EXAMPLE_TWO_GROUPS, tmp_path / "h").path
    key = (EXAMPLE_TWO_GROUPS / "hidden" / "answers.json").read_bytes()
    holders = [rel for rel, data in _files(out).items() if data == key]
    assert holders == ["tests/answers.json"]
    assert not any(rel.startswith(("environment/", "solution/")) and "answers" in rel
                   for rel in _files(out))
    assert not (out / "environment" / "task" / "hidden").exists()
    # The public copy passes the leak screens without the key beside it.
    assert validate_task(out / "environment" / "task", out / "tests" / "answers.json").ok


def test_example_round_trip_and_verifier(tmp_path) -> None:
    """Quick round trip of a two-group task: same files, same grades, same reward."""
    harbor = export_harbor(EXAMPLE_TWO_GROUPS, tmp_path / "harbor").path
    back = import_harbor(harbor, tmp_path / "back" / EXAMPLE_TWO_GROUPS.name).path
    assert _files(back) == _files(EXAMPLE_TWO_GROUPS)
    _same_grades(EXAMPLE_TWO_GROUPS, back, harbor, tmp_path / "v",
                 names=["measured", "shuffle-1", "group-absent", "keyed-by-group", "not-json",
                        "no-file"])


def _same_grades(original: Path, back: Path, harbor: Path, work: Path,
                 names: list[str] | None = None) -> None:
    task, again = load_task(original), load_task(back)
    key, key_again = load_answers(task.answers_path()), load_answers(again.answers_path())
    fixtures = fixture_submissions(original)
    for name in names or list(fixtures):
        data = fixtures[name]
        for recover in (False, True):
            one = grade_submission(task.contract, key, data, recover=recover)
            two = grade_submission(again.contract, key_again, data, recover=recover)
            assert one == two, (original.name, name, recover)
        verified = run_verifier(harbor, data, work / name)
        # What the runner reads (at most 1 MiB + 1 byte), as the verifier does.
        read = read_submission_file(work / name / "rankings.json")
        strict = grade_submission(task.contract, key, read)
        recovered = grade_submission(task.contract, key, read, recover=True)
        assert verified["reward"] == strict.score, (original.name, name)
        assert verified["reward_text"] == repr(strict.score) + "\n"
        assert verified["grade"] == strict.public_json(), (original.name, name)
        assert verified["score_recovered"] == recovered.score
        assert verified["recovered"]["recovered_departures"] == recovered.recovered_departures


@pytest.mark.slow
@pytest.mark.parametrize("task_dir", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_task_round_trips(task_dir, tmp_path) -> None:
    """Export then import: the same package, the same --strict validation, the same grade of
    every fixture submission, and a verifier whose reward is the strict task score."""
    harbor = export_harbor(task_dir, tmp_path / "harbor" / task_dir.name).path
    back = import_harbor(harbor, tmp_path / "back" / task_dir.name).path
    assert _files(back) == _files(task_dir)
    before = validate_task(task_dir, strict=True)
    after = validate_task(back, strict=True)
    assert [(f.code, f.file, f.message) for f in after.findings] == \
        [(f.code, f.file, f.message) for f in before.findings]
    assert after.ok == before.ok
    _same_grades(task_dir, back, harbor, tmp_path / "verify")


def test_cli_export_and_import(tmp_path) -> None:
    harbor = tmp_path / "harbor" / "spu-bhpt"
    out = run_module(["spu", "task", "export", str(TASKS / "spu-bhpt"), "--format", "harbor",
                      "--out", str(harbor)])
    assert out.returncode == 0, out.stderr
    assert "Harbor 0.26.0 task format" in out.stdout
    again = run_module(["spu", "task", "export", str(TASKS / "spu-bhpt"), "--format",
                        "harbor", "--out", str(harbor)])
    assert again.returncode == 1 and "--force" in again.stderr
    back = tmp_path / "back" / "spu-bhpt"
    imported = run_module(["spu", "task", "import", str(harbor), "--from", "harbor", "--out",
                           str(back)])
    assert imported.returncode == 0, imported.stderr
    assert validate_task(back, strict=True).ok
    wrong = run_module(["spu", "task", "export", str(TASKS / "spu-bhpt"), "--format", "zip",
                        "--out", str(tmp_path / "z")])
    assert wrong.returncode == 2 and "harbor" in wrong.stderr


def test_import_refuses_a_harbor_task_that_is_not_spu(tmp_path) -> None:
    """A Terminal-Bench-like task has no contract or answer key: a one-line error, no output."""
    plain = tmp_path / "hello"
    (plain / "tests").mkdir(parents=True)
    (plain / "task.toml").write_text('schema_version = "1.4"\n[agent]\ntimeout_sec = 60.0\n')
    (plain / "instruction.md").write_text("Print hello.\n")
    (plain / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    with pytest.raises(HarborError, match=r"task.toml: \[metadata\].spu_task_id is missing"):
        import_harbor(plain, tmp_path / "out")
    (plain / "task.toml").write_text("schema_version = \n")
    with pytest.raises(HarborError, match="task.toml: not valid TOML"):
        import_harbor(plain, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_import_refuses_copies_that_disagree_and_links(tmp_path) -> None:
    harbor = export_harbor(EXAMPLE_TWO_GROUPS, tmp_path / "h").path
    contract = harbor / "tests" / "contract.json"
    original = contract.read_bytes()
    contract.write_bytes(original.replace(b'"weight": 0.6', b'"weight": 0.5'))
    with pytest.raises(HarborError, match="tests/contract.json: differs from"):
        import_harbor(harbor, tmp_path / "out")
    contract.write_bytes(original)
    (harbor / "environment" / "task" / "files").mkdir()
    (harbor / "environment" / "task" / "files" / "key.json").symlink_to(
        harbor / "tests" / "answers.json")
    with pytest.raises(HarborError, match="key.json: not a regular file"):
        import_harbor(harbor, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["h"]  # no staging folder left


def test_import_notes_resources_it_does_not_carry_over(tmp_path) -> None:
    harbor = export_harbor(EXAMPLE_TWO_GROUPS, tmp_path / "h").path
    toml = harbor / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 28800.0", "timeout_sec = 3600.0"))
    result = import_harbor(harbor, tmp_path / "back" / EXAMPLE_TWO_GROUPS.name)
    assert any("[agent].timeout_sec is 3600.0, the package states 28800" in n
               for n in result.notes)
    assert _files(result.path) == _files(EXAMPLE_TWO_GROUPS)


def test_export_refuses_a_broken_task(make_task, tmp_path) -> None:
    task = make_task(contract={"task_id": "spu-test", "task_version": "1.0", "groups": [
        {"group_id": "G1", "endpoint": "y", "weight": 1.0, "items": ["E417", "E902"]}]})
    with pytest.raises(HarborError, match="fails validation"):
        export_harbor(task, tmp_path / "h")
    assert not (tmp_path / "h").exists()


def test_export_honours_task_limits(make_task, tmp_path) -> None:
    task = make_task(meta={"id": "spu-test", "version": "1.0", "title": "Ranking tests",
                           "discipline": "chemistry", "subfield": "testing",
                           "limits": {"time_s": 3600, "cpus": 2, "memory_gb": 4, "gpus": 0}})
    out = export_harbor(task, tmp_path / "h").path
    config = tomllib.loads((out / "task.toml").read_text())
    assert config["agent"]["timeout_sec"] == 3600.0
    env = config["environment"]
    assert (env["cpus"], env["memory_mb"], env["gpus"]) == (2, 4096, 0)
    assert "SPU_TIME_LIMIT_S=3600 " in (out / "environment" / "Dockerfile").read_text()


def test_verifier_exits_2_on_a_broken_answer_key(tmp_path) -> None:
    harbor = export_harbor(EXAMPLE_TWO_GROUPS, tmp_path / "h").path
    (harbor / "tests" / "answers.json").write_text('{"task_id": "x", "groups": []}')
    done = subprocess.run([sys.executable, "-I", "-S", str(harbor / "tests" / "verify.py"),
                           "--submission", str(tmp_path / "none.json"),
                           "--logs", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "answers.json: malformed" in done.stderr
    assert not (tmp_path / "logs" / "reward.txt").exists()


def test_export_takes_an_answer_key_kept_apart(tmp_path) -> None:
    """Private tasks keep keys outside the task tree (SPEC 1): --answers names the key."""
    import shutil

    task = tmp_path / "tasks" / EXAMPLE_TWO_GROUPS.name
    shutil.copytree(EXAMPLE_TWO_GROUPS, task, ignore=shutil.ignore_patterns("hidden"))
    key = tmp_path / "keys" / "answers.json"
    key.parent.mkdir()
    shutil.copyfile(EXAMPLE_TWO_GROUPS / "hidden" / "answers.json", key)
    with pytest.raises(HarborError, match="answer key is missing"):
        export_harbor(task, tmp_path / "h")
    out = export_harbor(task, tmp_path / "h", answers=key).path
    assert (out / "tests" / "answers.json").read_bytes() == key.read_bytes()
    back = import_harbor(out, tmp_path / "back" / task.name).path
    assert (back / "hidden" / "answers.json").read_bytes() == key.read_bytes()
