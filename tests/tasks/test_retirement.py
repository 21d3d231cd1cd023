"""Retirement (SPEC 15): a retired task leaves ``task='glob(*)'`` and the official statistics,
keeps its runs, and is listed in ``retired.csv``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from spu.cli import main
from spu.stats.analysis import StatsOptions, analyze
from spu.stats.runs_table import check_runs_table
from spu.tasks.package import TaskLoadError, load_meta, select_tasks
from tests.conftest import EXAMPLE_TASK

RETIRED = "retired:\n  date: 2026-11-30\n  reason: 'contamination: source recalled'\n"


def _root(tmp_path: Path, names: tuple[str, ...] = ("t-kept", "t-old")) -> Path:
    root = tmp_path / "tasks"
    for name in names:
        dest = root / name
        shutil.copytree(EXAMPLE_TASK, dest)
        for file in ("task.yaml", "contract.json", "hidden/answers.json"):
            path = dest / file
            path.write_text(path.read_text().replace(EXAMPLE_TASK.name, name))
    with open(root / "t-old" / "task.yaml", "a", encoding="utf-8") as f:
        f.write(RETIRED)
    return root


def test_retired_reads_and_bad_input_is_one_line_naming_file_and_key(tmp_path) -> None:
    root = _root(tmp_path)
    meta = load_meta(root / "t-old")
    assert meta.retired is not None and meta.retired.reason.startswith("contamination")
    bad = root / "t-kept" / "task.yaml"
    bad.write_text(bad.read_text() + "retired:\n  date: soon\n  reason: old\n  by: me\n")
    with pytest.raises(TaskLoadError) as caught:
        load_meta(root / "t-kept")
    message = str(caught.value)
    assert "\n" not in message and str(bad) in message
    assert "retired.date:" in message and "retired.by: Extra inputs are not permitted" in message


def test_a_retired_task_drops_out_of_a_glob_sweep_but_not_out_of_task_id(tmp_path,
                                                                         monkeypatch) -> None:
    from spu.plan import plan_command

    root = _root(tmp_path)
    monkeypatch.setenv("SPU_TASK_ROOT", str(root))
    common = ["model=random", f"task_root={root}", f"output_root={tmp_path / 'out'}",
              "dry_run=true"]
    plan = plan_command(["-m", *common, "task=glob(*)"])
    assert [job.task for job in plan.jobs] == ["t-kept"]
    alone = plan_command([*common, "task=t-old"])
    assert [job.task for job in alone.jobs] == ["t-old"]
    assert [t.path.name for t in select_tasks(root)] == ["t-kept"]
    assert [t.path.name for t in select_tasks(root, include_retired=True)] == ["t-kept",
                                                                                 "t-old"]


def test_task_list_leaves_retired_tasks_out_unless_asked(tmp_path, capsys) -> None:
    root = _root(tmp_path)
    assert main(["task", "list", "--task-root", str(root), "--format", "hydra"]) == 0
    assert capsys.readouterr().out.strip() == "t-kept"
    assert main(["task", "list", "--task-root", str(root), "--include-retired"]) == 0
    assert "[retired 2026-11-30]" in capsys.readouterr().out


def _runs() -> pd.DataFrame:
    """Two configurations on three tasks, t-old among them (retired)."""
    rows = []
    scores = {("A", "t-kept"): 0.6, ("A", "t-other"): 0.4, ("A", "t-old"): 0.9,
              ("B", "t-kept"): 0.2, ("B", "t-other"): 0.1, ("B", "t-old"): 0.8}
    for i, ((config, task), score) in enumerate(scores.items()):
        rows.append({"run_id": f"r{i}", "config": config, "model": config, "harness": "h",
                     "effort": "e", "task_id": task, "discipline": "chemistry",
                     "subfield": "s", "visibility": "public", "repeat": 0, "outcome": "valid",
                     "score_strict": score, "score_recovered": score, "scored": True,
                     "threshold": 0.5, "n_items": 8, "cost_usd": 1.0, "runtime_s": 60})
    return check_runs_table(pd.DataFrame(rows))


def test_a_retired_task_drops_out_of_configs_csv_and_stays_in_retired_csv(tmp_path) -> None:
    root = _root(tmp_path)
    result = analyze(_runs(), StatsOptions(resamples=50, simulations=20, null_draws=20,
                                           task_roots=(root,)))
    configs = result.tables["configs.csv"].set_index("config")
    # Hand-worked: A's official runs are t-kept 0.6 and t-other 0.4 (t-old's 0.9 is out).
    assert configs.loc["A", "n_runs"] == 2 and configs.loc["A", "raw_mean"] == pytest.approx(0.5)
    assert configs.loc["B", "raw_mean"] == pytest.approx(0.15)
    retired = result.tables["retired.csv"]
    assert retired.to_dict("records") == [{
        "task_id": "t-old", "retired_date": "2026-11-30",
        "reason": "contamination: source recalled", "n_runs": 2, "n_configs": 2,
        "n_scored": 2, "raw_mean": pytest.approx(0.85)}]
    assert "t-old" not in set(result.runs["task_id"])
    assert result.manifest["outputs"]["retired.csv"]["written"]
    assert any("retired task" in note for note in result.notes)


def test_a_retired_column_of_the_runs_table_retires_too() -> None:
    runs = _runs().drop(columns=["retired"])
    runs["retired"] = runs["task_id"].eq("t-other").map({True: "true", False: "false"})
    result = analyze(check_runs_table(runs), StatsOptions(resamples=50, simulations=20,
                                                          null_draws=20))
    assert list(result.tables["retired.csv"]["task_id"]) == ["t-other"]
    assert result.tables["configs.csv"].set_index("config").loc["A", "n_runs"] == 2


def test_the_leaderboard_leaves_retired_tasks_out_too(tmp_path) -> None:
    root = _root(tmp_path)
    table = tmp_path / "runs.csv"
    _runs().to_csv(table, index=False)
    out = tmp_path / "board"
    assert main(["leaderboard", str(table), "--out", str(out), "--resamples", "50",
                 "--tasks", str(root)]) == 0
    board = pd.read_csv(out / "leaderboard.csv").set_index("config")
    assert board.loc["A", "n_tasks"] == 2  # t-kept and t-other; t-old is retired


def test_spu_task_retire_appends_the_block_and_needs_no_review_after(tmp_path, capsys) -> None:
    """``spu task retire`` keeps task.yaml's lines; the stale review of a retired task is no
    error (it is out of the benchmark)."""
    from spu.tasks.validate import validate_task

    task = tmp_path / "spu-bhpt"
    shutil.copytree(EXAMPLE_TASK.parent / "spu-bhpt", task)
    before = (task / "task.yaml").read_text()
    assert main(["task", "retire", str(task), "--reason", "source recalled", "--date",
                 "2026-11-30"]) == 0
    after = (task / "task.yaml").read_text()
    assert after.startswith(before) and "retired:\n  date: '2026-11-30'" in after
    meta = load_meta(task)
    assert meta.retired is not None and meta.retired.reason == "source recalled"
    assert validate_task(task, strict=True).ok
    assert main(["task", "retire", str(task), "--reason", "again"]) == 1
    assert "retired already on 2026-11-30" in capsys.readouterr().err
    assert main(["task", "retire", str(tmp_path / "spu-bhpt"), "--reason", " "]) == 1
