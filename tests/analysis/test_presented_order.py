"""One input order: ``targets.csv``'s rows, for the builder, the baseline, stats and analyze.

Paper 3.7, 4.2, E.4, E.7: "differs from the input order", "the presented order". The
builder shuffles the rows and each group's contract items independently, so the two can
differ (they do on ``tasks/spu-5fgx``); every consumer takes the rows' order.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from spu.analysis.rankings import RankingTracker, is_complete_ranking
from spu.analysis.runs import read_run
from spu.grading.rules import GradingKey
from spu.schema import ComparisonGroup, Contract, Trajectory, TrajectoryStep
from spu.stats.exposure import presented_orders as stats_presented_orders
from spu.stats.submissions import TaskInfo
from spu.tasks.package import load_answers, load_task
from spu.tasks.threshold import presented_order_score, presented_orders
from spu.tracking.trajectories import write_trajectory

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "spu-5fgx"
AGENT = REPO / "spu" / "harness" / "agents" / "baseline_agent.py"


def _baseline_rank(task_dir: Path) -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("baseline_agent", AGENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    submission = module.rank("presented_order", 0, str(task_dir))
    return {r["group_id"]: r["order"] for r in submission["rankings"]}


def test_hand_worked_presented_orders() -> None:
    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="A", endpoint="y", weight=0.5, items=["a1", "a2", "a3"]),
        ComparisonGroup(group_id="B", endpoint="y", weight=0.5, items=["b1", "b2"])])
    # rows: b2 a3 a1 b1 (a2 missing: kept at the end)
    assert presented_orders(contract, ["b2", "a3", "a1", "b1"]) == {
        "A": ["a3", "a1", "a2"], "B": ["b2", "b1"]}


def test_shipped_task_has_two_orders_and_every_consumer_takes_the_rows() -> None:
    task = load_task(TASK)
    rows = [r.experiment_id for r in task.targets()]
    presented = presented_orders(task.contract, rows)
    contract_order = {g.group_id: list(g.items) for g in task.contract.groups}
    assert presented != contract_order  # the case the issue saw
    assert _baseline_rank(TASK) == presented
    info = TaskInfo(package=task, answers=load_answers(task.answers_path()))
    assert stats_presented_orders(info) == presented
    key = GradingKey.build(task.contract, load_answers(task.answers_path()))
    assert presented_order_score(task.contract, load_answers(task.answers_path()), rows) \
        == key.score_orders(presented)
    # analyze: the presented order is no complete ranking; the contract's order is one
    assert not is_complete_ranking(presented, task.contract, presented)
    assert is_complete_ranking(contract_order, task.contract, presented)


def _run_with_task(tmp_path: Path, submitted: dict[str, list[str]]) -> Path:
    run = tmp_path / "run"
    shutil.copytree(TASK, run / "task", ignore=shutil.ignore_patterns("hidden"))
    (run / "output").mkdir()
    task = load_task(TASK)
    body = {"task_id": task.contract.task_id, "task_version": task.contract.task_version,
            "rankings": [{"group_id": g, "order": o} for g, o in submitted.items()]}
    (run / "output" / "rankings.json").write_text(json.dumps(body))
    (run / "run.json").write_text(json.dumps({
        "run_key": "r", "task_id": task.contract.task_id, "model": "baseline",
        "effort": "none", "harness": "baseline", "scored": True, "score_recovered": 0.0,
        "runtime_s": 10}))
    steps = [TrajectoryStep(index=0, timestamp="2026-11-01T00:00:00Z", text="start"),
             TrajectoryStep(index=1, timestamp="2026-11-01T00:00:10Z",
                            text=f"Submitting:\n{json.dumps(body)}")]
    write_trajectory(run / "trajectory.jsonl.gz", Trajectory(harness="claude_code", steps=steps))
    return run


def test_analyze_counts_no_first_draft_for_a_run_that_submits_the_presented_order(
        tmp_path) -> None:
    presented = _baseline_rank(TASK)
    f = read_run(_run_with_task(tmp_path, presented)).features
    assert f["first_complete_source"] is None  # the run on spu-5fgx: a draft before


def test_analyze_counts_the_contract_order_as_a_draft(tmp_path) -> None:
    task = load_task(TASK)
    contract_order = {g.group_id: list(g.items) for g in task.contract.groups}
    f = read_run(_run_with_task(tmp_path, contract_order)).features
    assert f["first_complete_source"] == "model_text"


def test_tracker_takes_the_given_presented_order() -> None:
    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["a", "b", "c"])])
    text = json.dumps({"rankings": [{"group_id": "G", "order": ["c", "a", "b"]}]})
    shown = RankingTracker(contract, {"G": ["c", "a", "b"]}, {"G": ["c", "a", "b"]})
    shown.feed(0, 0.1, "model_text", text)
    assert shown.finish().first_draft is None
    default = RankingTracker(contract, {"G": ["c", "a", "b"]})  # no targets: contract order
    default.feed(0, 0.1, "model_text", text)
    assert default.finish().first_draft == {"G": ["c", "a", "b"]}
