"""``spu report OUTPUT_ROOT``: the whole report from what an output root holds (issue 40).

The README's ``spu stats`` and ``spu report`` commands left out ``--runs-dir`` and
``--tasks``, so the report said in ten notes that its analyses were incomplete. Given the
output root, the report finds the runs table (its store, else its run records), the
submitted orders and trajectories (its run folders) and the task packages (the task root
each launch's Hydra configuration names), and says where each came from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from spu.stats.simulate import PAPER_CONFIGS, SimulationParameters, simulate_study
from tests.conftest import run_module


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A simulated study whose outputs/ looks like a launch's: run folders, and the Hydra
    configuration of the sweep naming its task root (relative to where it ran)."""
    root = tmp_path_factory.mktemp("study")
    simulate_study(root, SimulationParameters(configs=PAPER_CONFIGS[:4], repeats=0), seed=4)
    job = root / "outputs" / "multirun" / "2026-01-01_00-00-00" / "0" / ".hydra"
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("task_root: tasks\nanswers_root: null\n"
                                     "output_root: outputs\n")
    (job / "hydra.yaml").write_text(f"hydra:\n  runtime:\n    cwd: {root}\n")
    return root


@pytest.mark.slow  # ten seconds and more (the quick tier stays under 5 minutes)
def test_spu_report_of_an_output_root_builds_the_whole_report(study, tmp_path) -> None:
    out = tmp_path / "report"
    done = run_module(["spu", "report", str(study / "outputs"), "--out", str(out),
                       "--resamples", "100", "--simulations", "100"], timeout=900)
    assert done.returncode == 0, done.stderr
    said = done.stdout
    assert f"runs table from the run records under {study / 'outputs' / 'runs'}" in said
    assert f"task packages from {(study / 'tasks').resolve()}" in said
    assert (out / "runs.csv").is_file() and (out / "analysis" / "calls.csv").is_file()
    figures = {p.stem for p in (out / "figures").glob("*.png")}
    assert {"fig14a_activity_time", "figure_28", "figure_27"} <= figures, figures
    page = (out / "report.html").read_text()
    for missing in ("no --runs-dir", "no --tasks"):
        assert missing not in page and missing not in said, missing
    table = pd.read_csv(out / "runs.csv")
    assert len(table) and table["scored"].all()


def test_spu_leaderboard_of_an_output_root_reads_its_seals(study, tmp_path) -> None:
    """The study's runs carry no seal: every sealed_share is 0, read (not unknown)."""
    done = run_module(["spu", "leaderboard", str(study / "outputs"), "--out",
                       str(tmp_path / "site"), "--resamples", "50"], timeout=600)
    assert done.returncode == 0, done.stderr
    board = pd.read_csv(tmp_path / "site" / "leaderboard.csv")
    assert (board["sealed_share"] == 0).all() and board["ranked"].any()


def test_a_folder_that_is_no_output_root_is_one_line(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    for command in ("report", "leaderboard"):
        done = run_module(["spu", command, str(tmp_path / "empty"), "--out",
                           str(tmp_path / "out")])
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "no runs/ folder, so not an output root" in lines[0]
        assert not (tmp_path / "out").exists()


def test_the_task_roots_of_each_launch_are_found(tmp_path) -> None:
    """Each launch's task_root, relative to the folder it ran in; one that no longer
    exists is said, not used."""
    from spu.report.inputs import launch_roots

    (tmp_path / "tasks").mkdir()
    outputs = tmp_path / "outputs"
    for name, root in (("hydra/a", "tasks"), ("hydra/b", "/nowhere/tasks")):
        job = outputs / name / ".hydra"
        job.mkdir(parents=True)
        (job / "config.yaml").write_text(f"task_root: {root}\n")
        (job / "hydra.yaml").write_text(json.dumps({"hydra": {"runtime": {
            "cwd": str(tmp_path)}}}))
    found = launch_roots(outputs)
    assert found.task_roots == ((tmp_path / "tasks").resolve(),)
    assert found.notes == ("task_root /nowhere/tasks of a launch no longer exists",)


def test_two_launches_naming_one_task_read_it_from_one_root(tmp_path) -> None:
    """README.md's launches: a run over the whole task root, a sweep over a root holding
    one of its tasks; each task is read once (the statistics refuse a task in two roots),
    from the larger root, and the other root is said to be left out."""
    from spu.report.inputs import launch_roots

    outputs = tmp_path / "outputs"
    for root, tasks in (("all", ("t1", "t2", "t3")), ("small", ("t1",))):
        for task in tasks:
            (tmp_path / root / task).mkdir(parents=True)
            (tmp_path / root / task / "task.yaml").write_text(f"id: {task}\n")
        job = outputs / "multirun" / root / "0" / ".hydra"
        job.mkdir(parents=True)
        (job / "config.yaml").write_text(f"task_root: {root}\n")
        (job / "hydra.yaml").write_text(json.dumps({"hydra": {"runtime": {
            "cwd": str(tmp_path)}}}))
    found = launch_roots(outputs)
    assert found.task_roots == ((tmp_path / "all").resolve(),)
    assert found.notes == (f"task_root {(tmp_path / 'small').resolve()} of a launch is not "
                           f"read: its tasks are also under {(tmp_path / 'all').resolve()}, "
                           "read instead",)
