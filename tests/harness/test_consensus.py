"""``model=consensus``: the mean rank of the members' official submissions, run like any run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spu.config import ConsensusConfig, EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
from spu.grading.rules import GradingKey, grade_submission
from spu.harness.consensus import consensus_label, consensus_submission
from spu.runner import RunSpec, run_one, spec_run_key
from spu.schema import AnswerKey, ComparisonGroup, Contract, Outcome
from spu.seal.verify import verify_root
from spu.tasks import load_answers, load_task
from tests.conftest import EXAMPLE_TASK
from tests.seal.conftest import seal_spec

CONTRACT = Contract(task_id="t", task_version="1", groups=[
    ComparisonGroup(group_id="G", endpoint="y", weight=0.5, items=["a", "b", "c", "d"]),
    ComparisonGroup(group_id="H", endpoint="y", weight=0.5, items=["x", "y"])])
KEY = AnswerKey(task_id="t", task_version="1",
                groups={"G": {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0},
                        "H": {"x": 2.0, "y": 1.0}})
"""Orders run from the lowest measured value to the highest (SPEC section 2)."""


def _file(**orders: list[str]) -> bytes:
    return json.dumps({"task_id": "t", "task_version": "1", "rankings": [
        {"group_id": g, "order": o} for g, o in orders.items()]}).encode()


MEMBERS = [_file(G=["a", "b", "c", "d"], H=["x", "y"]),
           _file(G=["b", "a", "d", "c"], H=["y", "x"]),
           _file(G=["a", "c", "b", "d"])]  # the third leaves H out


def test_the_consensus_of_a_small_table_is_the_hand_worked_one() -> None:
    """Worked by hand.

    G: mean positions a (0+1+0)/3 = 1/3, b (1+0+2)/3 = 1, c (2+3+1)/3 = 2,
    d (3+2+3)/3 = 8/3: order a, b, c, d, the measured one, rho = 1.
    H: ordered completely by two members only, x and y both at mean 0.5: the tie goes
    to the item id, x before y, against the measured y < x: rho = -1.
    Task score 0.5 x 1 + 0.5 x -1 = 0. The members: 0.5 x 1 + 0.5 x -1 = 0;
    0.5 x (1 - 6 x 4 / 60) + 0.5 x 1 = 0.8; 0.5 x (1 - 6 x 2 / 60) + 0.5 x -1 = -0.1.
    """
    submission = consensus_submission(CONTRACT, MEMBERS)
    assert submission["rankings"] == [{"group_id": "G", "order": ["a", "b", "c", "d"]},
                                      {"group_id": "H", "order": ["x", "y"]}]
    data = json.dumps(submission).encode()
    assert grade_submission(CONTRACT, KEY, data).score == pytest.approx(0.0, abs=1e-12)
    scores = [grade_submission(CONTRACT, KEY, m).score for m in MEMBERS]
    assert scores == pytest.approx([0.0, 0.8, -0.1])
    # G alone (weight 1): the consensus, 1.0, is 0.2 over the members' average
    # (1.0 + 0.6 + 0.8) / 3 = 0.8: the paper's consensus gain (E.8) on this table.
    g_key = GradingKey.build(CONTRACT.model_copy(update={"groups": [
        CONTRACT.groups[0].model_copy(update={"weight": 1.0})]}), KEY)
    g_orders = [{"G": json.loads(m)["rankings"][0]["order"]} for m in MEMBERS]
    assert g_key.score_orders({"G": submission["rankings"][0]["order"]}) == pytest.approx(1.0)
    assert sum(g_key.score_orders(o) for o in g_orders) / 3 == pytest.approx(0.8)


def _consensus_spec(root: Path, members: list[str], leave_out: str | None = None) -> RunSpec:
    return RunSpec(model=ModelConfig(name="consensus", provider="baseline",
                                     default_harness="consensus"),
                   harness=HarnessConfig(name="consensus"), effort=EffortConfig(name="none"),
                   task_dir=EXAMPLE_TASK, output_root=root,
                   sandbox=SandboxConfig(name="subprocess"),
                   consensus=ConsensusConfig(members=members, leave_out=leave_out))


def test_a_consensus_run_is_graded_sealed_and_named_by_its_members(tmp_path: Path) -> None:
    root = tmp_path / "outputs"
    members = {m: run_one(seal_spec(EXAMPLE_TASK, root, model=m))
               for m in ("random", "presented_order", "monotone_prior")}
    labels = [f"{m}-none" for m in members]
    record = run_one(_consensus_spec(root, labels))
    assert record.outcome is Outcome.valid and record.scored
    assert record.config == f"consensus-none-{consensus_label(ConsensusConfig(members=labels))}"
    assert record.config.startswith("consensus-none-3m")
    assert record.identity is not None
    assert record.identity.config.args == sorted(
        f"member={label}:{members[m].run_key}" for label, m in zip(labels, members, strict=True))
    # The members' order changes nothing.
    assert spec_run_key(_consensus_spec(root, labels[::-1]), load_task(EXAMPLE_TASK)) == \
        record.run_key
    run_dir = root / "runs" / record.run_key
    task = load_task(EXAMPLE_TASK)
    submitted = [(root / "runs" / r.run_key / "output" / "rankings.json").read_bytes()
                 for r in members.values()]
    expected = consensus_submission(task.contract, submitted)
    got = json.loads((run_dir / "output" / "rankings.json").read_bytes())
    assert got["rankings"] == expected["rankings"]
    direct = grade_submission(task.contract, load_answers(EXAMPLE_TASK / "hidden" /
                                                          "answers.json"),
                              (run_dir / "output" / "rankings.json").read_bytes())
    assert record.score_strict == direct.score
    assert verify_root(root).ok  # sealed into the ledger like every run

    # Other members, or one left out, are another configuration run: another run key.
    two = run_one(_consensus_spec(root, labels[:2]))
    loo = run_one(_consensus_spec(root, labels, leave_out=labels[2]))
    assert two.run_key != record.run_key
    assert loo.identity is not None and loo.identity.config.args[-1] == f"leave_out={labels[2]}"
    assert loo.run_key not in (record.run_key, two.run_key)
    # A member named by its run key is that run.
    by_key = run_one(_consensus_spec(root, [members["random"].run_key]))
    assert by_key.identity is not None and by_key.identity.config.args == [
        f"member={members['random'].run_key}:{members['random'].run_key}"]
    assert (root / "runs" / by_key.run_key / "output" / "rankings.json").read_bytes() != b""

    # Recorded like any run, it is a configuration of the leaderboard.
    from spu.report.leaderboard import leaderboard_table
    from spu.stats.runs_table import check_runs_table
    from spu.tracking.export import runs_table_from_records

    board = leaderboard_table(check_runs_table(runs_table_from_records(root / "runs")),
                              resamples=50, cutoffs={}).set_index("config")
    assert board.loc[record.config, "model"] == "consensus"
    assert board.loc[record.config, "n_tasks"] == 1
    assert {two.config, loo.config, by_key.config} <= set(board.index)  # four labels apart
    assert len({record.config, two.config, loo.config, by_key.config}) == 4


def test_a_consensus_without_members_is_refused_in_one_line(tmp_path: Path) -> None:
    from spu.runner import RunConfigError, prepare_run

    with pytest.raises(RunConfigError, match="consensus.members"):
        prepare_run(_consensus_spec(tmp_path / "outputs", []))


def test_a_task_no_member_ran_ends_without_a_file(tmp_path: Path) -> None:
    record = run_one(_consensus_spec(tmp_path / "outputs", ["nobody-none"]))
    assert record.outcome is Outcome.no_file and not record.scored
    assert record.identity is not None and record.identity.config.args == []
