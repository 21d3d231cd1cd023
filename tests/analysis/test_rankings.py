"""The first-draft finder and the flipped pairs (paper 4.2, 4.3, E.7)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spu.analysis.rankings import RankingTracker, flip_shares, rankings_in_text
from spu.analysis.runs import read_run
from spu.grading.rules import GradingKey
from spu.schema import AnswerKey, ComparisonGroup, Contract, ToolCall, Trajectory, TrajectoryStep
from spu.tracking.trajectories import write_trajectory

ITEMS = ["E11", "E22", "E33", "E44"]
CONTRACT = Contract(task_id="t", task_version="1", groups=[
    ComparisonGroup(group_id="G1", endpoint="y", weight=1.0, items=ITEMS)])
ANSWERS = AnswerKey(task_id="t", task_version="1",
                    groups={"G1": {"E11": 4.0, "E22": 1.0, "E33": 3.0, "E44": 2.0}})
DRAFT = ["E22", "E33", "E44", "E11"]
FINAL = ["E22", "E44", "E33", "E11"]  # one flip, into the measured order


def ranking(order: list[str]) -> str:
    return json.dumps({"task_id": "t", "rankings": [{"group_id": "G1", "order": order}]})


def step(i: int, text: str | None = None, calls: list[ToolCall] | None = None) -> TrajectoryStep:
    return TrajectoryStep(index=i, timestamp=f"2026-11-01T00:00:{10 * i:02d}Z", text=text,
                          tool_calls=calls or [])


def make_run(tmp_path: Path, steps: list[TrajectoryStep], final: list[str]) -> Path:
    run = tmp_path / "runs" / "r1"
    (run / "task").mkdir(parents=True)
    (run / "output").mkdir()
    (run / "task" / "contract.json").write_text(CONTRACT.model_dump_json())
    (run / "output" / "rankings.json").write_text(ranking(final))
    (run / "run.json").write_text(json.dumps({
        "run_key": "r1", "task_id": "t", "model": "m", "effort": "max", "harness": "claude_code",
        "scored": True, "score_recovered": GradingKey.build(CONTRACT, ANSWERS).score_orders(
            {"G1": final}), "runtime_s": 60}))
    write_trajectory(run / "trajectory.jsonl.gz", Trajectory(harness="claude_code", steps=steps))
    return run


def bash(command: str, output: str = "") -> ToolCall:
    return ToolCall(name="Bash", arguments={"command": command}, output=output)


PLACES = {
    "model_text": [step(0, "start"), step(1, f"My ranking:\n{ranking(DRAFT)}"),
                   step(2, None, [bash("python3 final.py > /output/rankings.json")]), step(3)],
    "tool_call": [step(0, "start"),
                  step(1, None, [ToolCall(name="Write", arguments={
                      "file_path": "/workspace/draft.json", "content": ranking(DRAFT)})]),
                  step(2, None, [bash("python3 final.py > /output/rankings.json")]), step(3)],
    "tool_output": [step(0, "start"), step(1, None, [bash("python3 rank.py", ranking(DRAFT))]),
                    step(2, None, [bash("python3 final.py > /output/rankings.json")]), step(3)],
}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_first_draft_found_where_it_first_appears(tmp_path, place) -> None:
    run = make_run(tmp_path, PLACES[place], FINAL)
    key = {"t": GradingKey.build(CONTRACT, ANSWERS)}
    f = read_run(run, key).features
    assert f["first_complete_source"] == place
    assert f["first_complete_step"] == 1
    assert f["first_complete_t"] == pytest.approx(10 / 30)
    assert f["first_draft_score"] == pytest.approx(key["t"].score_orders({"G1": DRAFT}))
    assert f["revisions"] == 1 and f["pairs_flipped"] == 1
    # Draft E22 E33 E44 E11 against measured E22 < E44 < E33 < E11: flipping (E33, E44) fixes
    # the one wrong pair; of the three pairs at distance 1, one is wrong.
    assert f["flipped_into_measured"] == 1.0
    assert f["flipped_expected_share"] == pytest.approx(1 / 3)


def test_first_draft_only_in_the_file(tmp_path) -> None:
    """A program wrote the ranking and nothing printed it: the draft is the file."""
    steps = [step(0, "start"), step(1, None, [bash("python3 rank.py")]),
             step(2, None, [bash("python3 -c 'import json; json.dump(r, open(\"/output/"
                                 "rankings.json\", \"w\"))'")]), step(3, "done")]
    run = make_run(tmp_path, steps, FINAL)
    reading = read_run(run, {"t": GradingKey.build(CONTRACT, ANSWERS)})
    f = reading.features
    assert f["first_complete_source"] == "file_only"
    assert f["first_complete_step"] == 2
    assert f["revisions"] == 0
    assert reading.group_sources == {"G1": "file_only"}


def test_group_order_first_appearance_in_model_text(tmp_path) -> None:
    steps = [step(0, f"I expect {' < '.join(FINAL)} from the mechanism."),
             step(1, None, [bash("python3 rank.py", ", ".join(FINAL))]), step(2)]
    reading = read_run(make_run(tmp_path, steps, FINAL))
    assert reading.group_sources == {"G1": "model_text"}


def test_input_order_is_no_draft() -> None:
    tracker = RankingTracker(CONTRACT, {"G1": ITEMS})
    tracker.feed(0, 0.0, "model_text", ranking(ITEMS))
    result = tracker.finish()
    assert result.first_draft is None and result.group_sources == {}


def test_whole_tokens_only() -> None:
    """E11 inside E110 is not an appearance of E11."""
    tracker = RankingTracker(CONTRACT, {"G1": FINAL})
    tracker.feed(0, 0.0, "model_text", "E220 E440 E330 E110")
    assert tracker.finish().group_sources == {"G1": "file_only"}


def test_rankings_in_text_reads_departures_and_skips_literals() -> None:
    text = 'a {"rankings": {"G1": ["E11", "E22"]}} b {"rankings": "x"} {\'rankings\': []}'
    assert rankings_in_text(text) == [{"G1": ["E11", "E22"]}]


def test_flip_shares_hand_worked() -> None:
    # measured order a < b < c < d; draft d c b a (all wrong); final c d a b flips
    # (d, c)? no: final keeps... computed by hand: pairs flipped = (d,c) and (b,a), both fixed.
    measured = {"G": {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}}
    shares = flip_shares({"G": ["d", "c", "b", "a"]}, {"G": ["c", "d", "a", "b"]}, measured)
    assert shares.flipped == 2 and shares.into_measured == 2
    assert shares.expected_share == 1.0  # every pair of the draft is the wrong way


def test_stream_of_a_large_output_is_not_kept(tmp_path) -> None:
    """A tool output of many megabytes is read and dropped; the reading keeps labels only."""
    big = "x" * 5_000_000
    steps = [step(0, "start"), step(1, None, [bash("python3 a.py", big)]), step(2)]
    reading = read_run(make_run(tmp_path, steps, FINAL))
    assert len(reading.calls) == 1
    assert all(len(str(v)) < 1000 for v in reading.features.values())


def test_copy_of_contract_is_the_staged_one(tmp_path) -> None:
    run = make_run(tmp_path, [step(0)], FINAL)
    shutil.rmtree(run / "task")
    reading = read_run(run)
    assert any("contract.json" in n for n in reading.notes)
