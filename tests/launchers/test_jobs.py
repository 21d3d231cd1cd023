"""What a command line runs is what it meant (issue 40, item 1), through the real command line.

- The default experiment's three baselines are a sweep of the baseline harness: one's own
  agent (``harness=command``) swept over the tasks runs once per task, under one label.
- A model without ``harness=`` runs in its own harness (``spu list models``' column).
- A command line with nothing to run says so in one line, exit 2, and writes nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from spu.launch.jobs import ConfigChoices, apply_defaults, job_defaults
from spu.overrides import config_groups
from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS, REPO, run_module
from tests.test_main_cli import one_line_error

MY_AGENT = REPO / "docs" / "examples" / "my_agent.py"


@pytest.fixture
def two_tasks(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    for task in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        shutil.copytree(task, root / task.name)
    return root


def dry_run(*overrides: str, cwd: Path = REPO) -> list[list[str]]:
    """The rows of the dry run's table: task, config, harness (columns 2 to 4).

    Against an empty output root of its own: the checkout's ``outputs/`` (after ``make
    demo``) holds these runs, and a finished run's row says so over more lines.
    """
    with tempfile.TemporaryDirectory(prefix="spu-dry-run-") as out:
        proc = run_module(["spu.main", *overrides, f"output_root={out}", "dry_run=true"],
                          cwd=cwd, env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]]
            for line in proc.stdout.splitlines() if line.startswith("│")]
    return [row[1:4] for row in rows]


def test_ones_own_agent_under_the_default_experiment_runs_once_per_task(two_tasks) -> None:
    """Before: three runs per task (``random-none-my_agent``, ``presented_order-none-...``,
    ``monotone_prior-none-...``) of one agent; now runs = tasks, under one label."""
    rows = dry_run("harness=command", f"harness.entrypoint={MY_AGENT}", "-m",
                   "task=glob(*)", f"task_root={two_tasks}")
    assert sorted(rows) == [[EXAMPLE_TASK.name, "random-none-my_agent", "command"],
                            [EXAMPLE_TWO_GROUPS.name, "random-none-my_agent", "command"]]


def test_the_default_experiment_still_sweeps_the_three_baselines(two_tasks) -> None:
    rows = dry_run(f"task_root={two_tasks}")
    assert sorted(r[1] for r in rows) == sorted(
        [f"{m}-none" for m in ("random", "presented_order", "monotone_prior")] * 2)
    assert {r[2] for r in rows} == {"baseline"}


@pytest.mark.parametrize("experiment", [[], ["experiment=single"]], ids=["default", "single"])
def test_a_model_runs_in_its_own_harness_without_harness(experiment) -> None:
    """``spu list models`` shows ``claude_code`` for opus55: that is what runs (before:
    ``opus55-none-baseline``, the baseline harness of conf/config.yaml)."""
    rows = dry_run(*experiment, "model=opus55", f"task={EXAMPLE_TASK.name}")
    assert rows == [[EXAMPLE_TASK.name, "opus55-none", "claude_code"]]
    listing = run_module(["spu", "list", "models"])
    opus = next(line for line in listing.stdout.splitlines() if "opus55" in line)
    assert "claude_code" in opus


def test_a_typed_harness_or_a_configuration_keeps_its_own() -> None:
    rows = dry_run("model=opus55", "harness=codex", f"task={EXAMPLE_TASK.name}")
    assert rows == [[EXAMPLE_TASK.name, "opus55-none-codex", "codex"]]
    rows = dry_run("+experiment/configuration=astra_max", f"task={EXAMPLE_TASK.name}")
    assert rows == [[EXAMPLE_TASK.name, "astra-max", "codex"]]


def test_the_rules_on_job_overrides() -> None:
    """The two rules, on override lists as the sweeper sees them (real ``conf/``)."""
    with config_groups() as groups:
        choices = ConfigChoices(groups.loader)
        assert job_defaults(["model=opus55", "task=t"], (), choices) == [
            "model=opus55", "task=t", "harness=claude_code"]
        assert job_defaults(["model=random", "task=t"], (), choices) == ["model=random", "task=t"]
        # A configuration chooses the harness: the experiment's model sweep gives way.
        job = ["model=random", "+experiment/configuration=opus5_max", "task=t"]
        assert job_defaults(job, {"model"}, choices) == job[1:]
        # The experiment sweeps both model and harness: its jobs are its own.
        job = ["model=random", "harness=command", "task=t"]
        assert job_defaults(job, {"model", "harness"}, choices) == job
        jobs = [[f"model={m}", "harness=command", f"task={t}"]
                for m in ("random", "presented_order") for t in ("a", "b")]
        assert apply_defaults(jobs, {"model"}, choices) == [
            ["harness=command", "task=a"], ["harness=command", "task=b"]]


@pytest.mark.parametrize("args", [[], ["experiment=single"], ["-m", "repeat=0,1"]],
                         ids=["bare", "single", "sweep"])
def test_nothing_to_run_is_one_line_and_writes_nothing(args, tmp_path) -> None:
    """Before: bare ``python -m spu.main`` in a folder without tasks exited 0, said
    "no finished run under outputs/multirun/..." and left ``outputs/`` behind."""
    line = one_line_error(run_module(["spu.main", *args], cwd=tmp_path))
    assert "nothing was run or written" in line
    assert f"task_root={tmp_path / 'tasks'}" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ones_own_agent_sweep_runs_each_task_once(two_tasks, tmp_path) -> None:
    """The README's sweep of one's own agent, without ``experiment=single``: runs = tasks."""
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", "harness=command", f"harness.entrypoint={MY_AGENT}",
                       "-m", "task=glob(*)", f"task_root={two_tasks}", f"output_root={out}",
                       "sandbox=subprocess", "sandbox.allow_unisolated=true",
                       "tracking=none"], cwd=tmp_path, env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (out / "runs").glob("*/run.json")]
    assert sorted(r["task_id"] for r in records) == sorted(
        json.loads((t / "contract.json").read_text())["task_id"]
        for t in two_tasks.iterdir())
    assert {r["config"] for r in records} == {"random-none-my_agent"}
