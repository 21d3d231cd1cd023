"""A run's identity is what ran (issue 24, SPEC section 12), through the real command line.

Each test runs ``python -m spu.main`` in a subprocess, offline, on a copy of the example
task in a temporary task root, with ``sandbox=subprocess`` (no isolation needed: the
agents are ours) and reads the job's ``result.json``. Before run identity, the first two
were silent failures: a second agent of one's own printed ``skipped`` with the first
one's score, and an edited task kept its old runs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLE_TASK, REPO, run_module

MY_AGENT = REPO / "docs" / "examples" / "my_agent.py"
LEGACY_STORE = REPO / "tests" / "golden" / "legacy_store"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A task root holding a copy of the example task, and the two agents."""
    shutil.copytree(EXAMPLE_TASK, tmp_path / "tasks" / EXAMPLE_TASK.name)
    shutil.copy(MY_AGENT, tmp_path / "my_agent.py")
    write_reverse_agent(tmp_path / "rev_agent.py")
    return tmp_path


def write_reverse_agent(path: Path) -> None:
    """A copy of ``docs/examples/my_agent.py`` that ranks every group in reverse."""
    text = MY_AGENT.read_text()
    ranked = "return sorted(group_items, key=position.__getitem__)"
    assert ranked in text
    path.write_text(text.replace(ranked, ranked[:-1] + ", reverse=True)"))


def spu_run(root: Path, name: str, *overrides: str, tracking: str = "none") -> dict[str, Any]:
    """Run one job; its ``result.json``, with what the command printed under ``"log"``."""
    hydra_dir = root / "hydra" / name
    proc = run_module(["spu.main", "experiment=single", f"task={EXAMPLE_TASK.name}",
                       f"task_root={root / 'tasks'}", f"output_root={root / 'outputs'}",
                       "sandbox=subprocess", "sandbox.allow_unisolated=true",
                       f"tracking={tracking}",
                       f"hydra.run.dir={hydra_dir}", *overrides], cwd=root)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    result: dict[str, Any] = json.loads((hydra_dir / "result.json").read_text())
    result["log"] = proc.stdout + proc.stderr
    return result


def command_agent(path: Path) -> list[str]:
    return ["harness=command", f"harness.entrypoint={path}"]


@pytest.mark.slow  # ten seconds and more (the quick tier stays under 5 minutes)
def test_a_second_agent_runs_and_scores_its_own(workdir: Path) -> None:
    """Two entrypoints are two configurations: the second is never ``skipped`` with the
    first one's score, and each is labelled by its entrypoint's name."""
    first = spu_run(workdir, "first", *command_agent(workdir / "my_agent.py"))
    second = spu_run(workdir, "second", *command_agent(workdir / "rev_agent.py"))
    assert first["status"] == second["status"] == "ran"
    # The example task's one group, ranked in targets.csv order and in reverse.
    assert first["score"] == pytest.approx(0.619, abs=1e-3)
    assert second["score"] == pytest.approx(-first["score"], abs=1e-12)
    assert first["run_key"] != second["run_key"]
    assert (first["config"], second["config"]) == ("random-none-my_agent",
                                                   "random-none-rev_agent")
    labelled = spu_run(workdir, "labelled", *command_agent(workdir / "rev_agent.py"),
                       "harness.label=reverse")
    # The label is display only: the same agent on the same task is the same run.
    assert labelled["status"] == "skipped" and labelled["run_key"] == second["run_key"]
    record = json.loads((workdir / "outputs" / "runs" / second["run_key"] / "run.json")
                        .read_text())
    assert record["identity"]["config"]["entrypoint_sha256"] == hashlib.sha256(
        (workdir / "rev_agent.py").read_bytes()).hexdigest()
    assert record["identity"]["config"]["harness"] == "command"


def test_an_edited_task_runs_again(workdir: Path) -> None:
    """A change to a public file is another task digest: the baseline runs again and
    scores the edited task, not the stored score of the old one."""
    before = spu_run(workdir, "before", "model=presented_order")
    assert before["status"] == "ran"
    targets = workdir / "tasks" / EXAMPLE_TASK.name / "targets.csv"
    header, *rows = targets.read_text().splitlines()
    # Reordered rows: a valid package whose presented order ranks differently.
    targets.write_text("\n".join([header, *reversed(rows)]) + "\n")
    check = run_module(["spu", "task", "validate", str(targets.parent)])
    assert check.returncode == 0, check.stdout + check.stderr
    after = spu_run(workdir, "after", "model=presented_order")
    assert after["status"] == "ran" and after["run_key"] != before["run_key"]
    assert after["score"] == pytest.approx(-before["score"], abs=1e-12)
    again = spu_run(workdir, "again", "model=presented_order")
    assert again["status"] == "skipped" and again["run_key"] == after["run_key"]


def test_a_limits_change_does_not_run_again_but_says_so(workdir: Path) -> None:
    """Limits and the sandbox backend are settings, not identity: the run is skipped,
    with one line naming what was recorded and what the command asks."""
    first = spu_run(workdir, "first")
    assert first["status"] == "ran"
    same = spu_run(workdir, "same")
    assert same["status"] == "skipped" and "not part of its identity" not in same["log"]
    changed = spu_run(workdir, "changed", "limits.time_s=600")
    assert changed["status"] == "skipped" and changed["run_key"] == first["run_key"]
    notices = [line for line in changed["log"].splitlines()
               if "not part of its identity" in line]
    assert len(notices) == 1, changed["log"]
    assert "limits.time_s=28800 (this command: 600)" in notices[0]


@pytest.mark.slow  # more than a few seconds (MLflow)
def test_a_store_written_with_the_first_key_scheme_resumes(tmp_path: Path) -> None:
    """Runs recorded before run identity are found under their old keys and skipped with
    their stored scores, into a fresh MLflow store; another agent, or an edited task,
    still runs."""
    shutil.copytree(LEGACY_STORE, tmp_path, dirs_exist_ok=True)
    old_keys = {"random-none-command": "a2e8630eb98759a8", "random-none": "c7bd14949c66d11b"}
    plan = run_module(["spu.main", "experiment=single", f"task={EXAMPLE_TASK.name}",
                       f"task_root={tmp_path / 'tasks'}", f"output_root={tmp_path / 'outputs'}",
                       *command_agent(tmp_path / "my_agent.py"), "dry_run=true"], cwd=tmp_path)
    assert plan.returncode == 0 and "0 of 1 jobs would run, 1 skipped" in plan.stdout, plan
    mine = spu_run(tmp_path, "mine", *command_agent(tmp_path / "my_agent.py"),
                   tracking="mlflow")
    assert mine["status"] == "skipped", mine
    assert (mine["run_key"], mine["config"]) == (old_keys["random-none-command"],
                                                 "random-none-command")
    assert mine["score"] == pytest.approx(0.619, abs=1e-3)
    assert mine["mlflow_run_id"], "the old record is logged to the new store"
    baseline = spu_run(tmp_path, "baseline", tracking="mlflow")
    assert baseline["status"] == "skipped" and baseline["run_key"] == old_keys["random-none"]
    write_reverse_agent(tmp_path / "rev_agent.py")
    other = spu_run(tmp_path, "other", *command_agent(tmp_path / "rev_agent.py"))
    assert other["status"] == "ran" and other["score"] == pytest.approx(-mine["score"])
    instruction = tmp_path / "tasks" / EXAMPLE_TASK.name / "instruction.md"
    instruction.write_text(instruction.read_text() + "\nOne more sentence.\n")
    edited = spu_run(tmp_path, "edited")
    assert edited["status"] == "ran" and edited["run_key"] not in old_keys.values()
    assert json.loads((tmp_path / "outputs" / "runs" / edited["run_key"] / "run.json")
                      .read_text())["identity"]["task"]["id"] == EXAMPLE_TASK.name


def test_what_a_plugin_changes_runs_again(workdir: Path) -> None:
    """Issue 42, item 2: a relaunch with another ``harness.env``, or after a note of a
    corpus folder changed, runs again (it used to be skipped as the same run); the same
    command again is skipped."""
    pytest.importorskip("spu_example_plugin", reason="the example plugin is not installed")
    notes = workdir / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("Amine boranes\ncopper arylation\n")
    agent = [*command_agent(workdir / "my_agent.py"), "tools.provider=example",
             f"tools.corpus={notes}"]
    first = spu_run(workdir, "first", *agent)
    assert first["status"] == "ran"
    env = spu_run(workdir, "env", *agent, "+harness.env.MY_AGENT_MODE=careful")
    assert env["status"] == "ran" and env["run_key"] != first["run_key"]
    (notes / "a.txt").write_text("Amine boranes\ncopper arylation, revised\n")
    edited = spu_run(workdir, "edited", *agent)
    assert edited["status"] == "ran" and edited["run_key"] not in (first["run_key"],
                                                                  env["run_key"])
    again = spu_run(workdir, "again", *agent)
    assert again["status"] == "skipped" and again["run_key"] == edited["run_key"]
    record = json.loads((workdir / "outputs" / "runs" / env["run_key"] / "run.json")
                        .read_text())
    assert record["identity"]["config"]["env"] == {"MY_AGENT_MODE": "careful"}


def test_a_result_neutral_option_does_not_run_again(workdir: Path) -> None:
    """An option its plugin declares result-neutral (the example harness's log level) is
    left out of the identity: skipped; the option that changes the ranking runs again."""
    pytest.importorskip("spu_example_plugin", reason="the example plugin is not installed")
    first = spu_run(workdir, "first", "harness=example")
    assert first["status"] == "ran"
    quiet = spu_run(workdir, "quiet", "harness=example", "harness.options.log_level=debug")
    assert quiet["status"] == "skipped" and quiet["run_key"] == first["run_key"]
    ranked = spu_run(workdir, "ranked", "harness=example",
                     "harness.options.strategy=monotone_prior")
    assert ranked["status"] == "ran" and ranked["run_key"] != first["run_key"]
    record = json.loads((workdir / "outputs" / "runs" / ranked["run_key"] / "run.json")
                        .read_text())
    assert record["identity"]["config"]["options"] == {"strategy": "monotone_prior"}
