"""The run split between an agent node and the grading side (no Ray: the two halves in turn).

Invariants: the split run records what ``run_one`` records; what an agent node gets holds
no answer key; what it sends back is written as regular files inside the run folder only.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from spu.config import EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
from spu.grading.isolated import GradingService, grade_isolated
from spu.launch.remote import (
    BundledFile,
    BundleError,
    FileBundle,
    agent_job,
    run_agent_job,
    settle_agent_return,
)
from spu.runner import RunSpec, prepare_run, run_one, stage
from spu.tasks import load_answers, load_task
from tests.conftest import EXAMPLE_TWO_GROUPS, have_bwrap


def spec(tmp_path: Path, out: str, sandbox: str) -> RunSpec:
    return RunSpec(model=ModelConfig(name="random", provider="baseline"),
                   harness=HarnessConfig(name="baseline"), effort=EffortConfig(name="none"),
                   task_dir=EXAMPLE_TWO_GROUPS, output_root=tmp_path / out,
                   sandbox=SandboxConfig(name=sandbox))


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["local", "subprocess"])
def test_a_split_run_records_what_run_one_records(sandbox: str, tmp_path: Path) -> None:
    if sandbox == "local" and not have_bwrap():
        pytest.skip("bubblewrap is not installed (Debian package bubblewrap)")
    whole = run_one(spec(tmp_path, "whole", sandbox))

    run = prepare_run(spec(tmp_path, "split", sandbox), check=False)
    staged = stage(run)
    shipped = FileBundle.of(staged)
    assert not any("hidden" in f.path or f.path.endswith("answers.json") for f in shipped.files)
    job = agent_job(replace(run.spec, answers_root=None, task_dir=Path("x"),
                            output_root=Path(".")), run.key)
    returned = run_agent_job(job, shipped, node="node-a")
    assert {f.path.split("/")[0] for f in returned.files.files} <= {"output", "logs", "tools",
                                                                   "model"}
    with GradingService() as grader:
        record = settle_agent_return(run, staged, returned, grader)
    assert record.run_key == whole.run_key and record.node == "node-a" and whole.node is None
    for field in ("outcome", "score_strict", "score_recovered", "scored", "threshold",
                  "n_items"):
        assert getattr(record, field) == getattr(whole, field), field
    saved = json.loads((run.run_dir / "run.json").read_text())
    assert saved["node"] == "node-a"
    assert (run.run_dir / "output" / "rankings.json").read_bytes() == (
        tmp_path / "whole" / "runs" / whole.run_key / "output" / "rankings.json").read_bytes()


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b", "", ".."])
def test_a_bundle_path_leaving_its_folder_is_refused(path: str, tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="leaves its folder"):
        FileBundle((BundledFile(path, b"x"),)).write(tmp_path / "dest")
    assert not (tmp_path / "escape").exists()


def test_a_bundle_never_follows_links_or_writes_through_them(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "output").mkdir(parents=True)
    (src / "output" / "rankings.json").write_text("{}")
    secret = tmp_path / "secret"
    secret.write_text("key")
    (src / "output" / "link").symlink_to(secret)
    bundle = FileBundle.of(src, ("output",))
    assert [f.path for f in bundle.files] == ["output/rankings.json"]
    dest = tmp_path / "dest" / "output"
    dest.mkdir(parents=True)
    (dest / "rankings.json").symlink_to(secret)
    with pytest.raises(BundleError, match="not a regular file"):
        bundle.write(tmp_path / "dest")
    assert secret.read_text() == "key"


def test_the_grading_service_grades_as_a_grading_process(tmp_path: Path) -> None:
    """One isolated process for many grades gives the grades of a process per grade."""
    task = load_task(EXAMPLE_TWO_GROUPS)
    answers = load_answers(task.answers_path())
    rankings = [{"group_id": g.group_id, "order": list(reversed(g.items))}
                for g in task.contract.groups]
    submissions = [None, b"not json", json.dumps(
        {"task_id": task.id, "task_version": task.version, "rankings": rankings}).encode()]
    with GradingService() as grader:
        for submission in submissions:
            served = grader.grade(task.id, task.contract, answers, submission)
            alone = grade_isolated(task.contract, answers, submission, grader.mode)
            assert served.strict == alone.strict and served.recovered == alone.recovered
            assert served.isolation == alone.isolation == grader.mode
