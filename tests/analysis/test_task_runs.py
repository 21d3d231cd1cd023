"""``spu analyze --task ID``: every scored run on a task examined in detail (Figure 21a)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from spu.cli import main
from spu.testing.corpus import make_corpus

TASKS = Path(__file__).resolve().parents[2] / "tasks"


def test_task_runs_for_the_named_task_only(tmp_path, capsys) -> None:
    make_corpus(tmp_path / "corpus", n_runs=14, task_root=TASKS, calls=6, seed=1)
    features_of = {}
    for run in (tmp_path / "corpus" / "runs").iterdir():
        record = json.loads((run / "run.json").read_text())
        features_of.setdefault(record["task_id"], []).append(record["run_key"])
    task = sorted(features_of)[0]
    out = tmp_path / "analysis"
    assert main(["analyze", str(tmp_path / "corpus"), "--out", str(out), "--resamples", "20",
                 "--trees", "5", "--jobs", "1", "--no-figures", "--task", task,
                 "--task", "no-such-task"]) == 0
    table = pd.read_csv(out / "task_runs.csv")
    assert set(table["task_id"]) == {task}
    assert sorted(table["run_key"]) == sorted(features_of[task])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["outputs"]["task_runs.csv"]["section"] == "Figure 21a"
    assert any("no-such-task" in n for n in manifest.get("notes", [])) or \
        "no-such-task" in capsys.readouterr().out


def test_without_task_no_file(tmp_path) -> None:
    make_corpus(tmp_path / "corpus", n_runs=7, task_root=TASKS, calls=6, seed=2)
    out = tmp_path / "analysis"
    assert main(["analyze", str(tmp_path / "corpus"), "--out", str(out), "--resamples", "20",
                 "--trees", "5", "--jobs", "1", "--no-figures"]) == 0
    assert not (out / "task_runs.csv").exists()
