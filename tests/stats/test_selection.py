"""``spu task select``: tasks chosen from pilot runs (paper 2.3, step 4), on a hand-worked table."""

from __future__ import annotations

import csv
import shutil

import pandas as pd
import pytest

from spu.cli import main
from spu.stats.runs_table import check_runs_table
from spu.stats.selection import Candidate, select_tasks_by_pilot
from spu.tasks.review import CHECKLIST
from tests.conftest import EXAMPLE_TASK

# Two pilot configurations; None: the run left no usable file (counts -1).
# task: (subfield, score of X, score of Y, runtime_s)
PILOT = {
    "t-a": ("s1", 0.8, 0.6, 100.0),
    "t-b": ("s1", 0.2, -0.2, 300.0),
    "t-c": ("s2", 0.9, 0.1, 200.0),
    "t-d": ("s2", None, 0.4, 100.0),
    "t-e": ("s3", 0.9, 0.9, 100.0),
}
NO_PILOT = {"t-f": "s3"}

# Worked by hand, weights 0.4, 0.4, 0.2 (demand = runtime min-max scaled, 100..300 s;
# used_gpu and tool_calls are absent from the table, so they are no part of it):
#   task  config means  mean   difficulty spread  demand  composite
#   t-a   0.8, 0.6      0.7    0.15       0.1     0.0     0.06 + 0.04 + 0    = 0.10
#   t-b   0.2, -0.2     0.0    0.5        0.2     1.0     0.2  + 0.08 + 0.2  = 0.48
#   t-c   0.9, 0.1      0.5    0.25       0.4     0.5     0.1  + 0.16 + 0.1  = 0.36
#   t-d   -1, 0.4       -0.3   0.65       0.7     0.0     0.26 + 0.28 + 0    = 0.54
#   t-e   0.9, 0.9      0.9    0.05       0.0     0.0     0.02 + 0    + 0    = 0.02
# Ranks: t-d 1, t-b 2, t-c 3, t-a 4, t-e 5. With --n 3 --per-subfield 1 the best of each
# subfield comes first (t-b, t-d, t-e), so t-c, third by composite, is left.
COMPOSITE = {"t-a": 0.10, "t-b": 0.48, "t-c": 0.36, "t-d": 0.54, "t-e": 0.02}


def _runs() -> pd.DataFrame:
    rows = []
    for task, (subfield, x, y, runtime) in PILOT.items():
        for config, score in (("X", x), ("Y", y)):
            rows.append({"run_id": f"{task}-{config}", "config": config, "task_id": task,
                         "discipline": "chemistry", "subfield": subfield,
                         "visibility": "public", "repeat": 0,
                         "outcome": "valid" if score is not None else "no_file",
                         "score_strict": score if score is not None else -1.0,
                         "score_recovered": score if score is not None else -1.0,
                         "scored": score is not None, "threshold": 0.5,
                         "runtime_s": runtime})
    return check_runs_table(pd.DataFrame(rows))


def _candidates() -> list[Candidate]:
    subfields = {**{t: p[0] for t, p in PILOT.items()}, **NO_PILOT}
    return [Candidate(t, t, "chemistry", s) for t, s in sorted(subfields.items())]


def test_one_per_subfield_then_the_stated_top_scores() -> None:
    selection = select_tasks_by_pilot(_runs(), _candidates(), n=3, per_subfield=1)
    assert selection.chosen == ("t-d", "t-b", "t-e")
    assert selection.sweep_list() == "t-b,t-d,t-e"  # as spu task list --format hydra
    table = selection.table.set_index("task")
    for task, value in COMPOSITE.items():
        assert table.loc[task, "composite"] == pytest.approx(value, abs=1e-12), task
    assert table.loc["t-d", "spread"] == pytest.approx(0.7)
    assert list(selection.table["task"]) == ["t-d", "t-b", "t-c", "t-a", "t-e", "t-f"]
    assert table.loc["t-e", "reason"] == "kept: among the best 1 of subfield 's3'"
    assert table.loc["t-c", "reason"] == "left: composite rank 3 of 5, below the cut of 3 tasks"
    assert table.loc["t-f", "reason"] == "left: no pilot run" and not table.loc["t-f", "kept"]
    assert "composite = 0.4 x difficulty + 0.4 x spread + 0.2 x demand" in selection.rule
    # One more slot goes to the best composite left; fewer slots than subfields keep the
    # best per-subfield picks.
    assert select_tasks_by_pilot(_runs(), _candidates(), n=4).chosen == ("t-d", "t-b", "t-e",
                                                                         "t-c")
    assert select_tasks_by_pilot(_runs(), _candidates(), n=1).chosen == ("t-d",)
    assert select_tasks_by_pilot(_runs(), _candidates(), n=3, per_subfield=0).chosen == \
        ("t-d", "t-b", "t-c")


def test_cli_writes_a_sweep_list_and_a_table(tmp_path, capsys) -> None:
    root = tmp_path / "tasks"
    for task, subfield in {**{t: p[0] for t, p in PILOT.items()}, **NO_PILOT}.items():
        dest = root / task
        shutil.copytree(EXAMPLE_TASK, dest)
        for file in ("contract.json", "hidden/answers.json"):
            path = dest / file
            path.write_text(path.read_text().replace(EXAMPLE_TASK.name, task))
        meta = (dest / "task.yaml").read_text().replace(EXAMPLE_TASK.name, task)
        (dest / "task.yaml").write_text(meta.replace("reaction optimization", subfield))
    runs = tmp_path / "pilot.csv"
    frame = _runs().drop(columns=["used_gpu", "tool_calls", "retired"])
    frame.to_csv(runs, index=False)
    out = tmp_path / "selection"
    assert main(["task", "select", str(runs), "--tasks", str(root), "--n", "3",
                 "--per-subfield", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "rule: composite = 0.4 x difficulty" in printed
    assert (out / "tasks.txt").read_text() == "t-b,t-d,t-e\n"
    with open(out / "selection.csv", newline="") as f:
        rows = {r["task"]: r for r in csv.DictReader(f)}
    assert rows["t-c"]["kept"] == "False" and rows["t-d"]["rank"] == "1"
    assert main(["task", "select", str(runs), "--tasks", str(root), "--weights", "1,2",
                 "--out", str(out)]) == 2
    assert "--weights '1,2'" in capsys.readouterr().err
    # Step 4 after step 3: only t-c has a current review (the others' copied one is stale).
    checks = [f"--check={name}=ok" for name in CHECKLIST]
    assert main(["task", "review", str(root / "t-c"), "--no-input", "--reviewer", "R",
                 "--verdict", "accept", *checks]) == 0
    assert main(["task", "select", str(runs), "--tasks", str(root), "--n", "3",
                 "--reviewed-only", "--out", str(out)]) == 0
    assert (out / "tasks.txt").read_text() == "t-c\n"
    with open(out / "selection.csv", newline="") as f:
        rows = {r["task"]: r for r in csv.DictReader(f)}
    assert rows["t-d"]["reason"] == "left: not reviewed (review-stale)"
