"""Issue 41, G3/G4: a run is always recorded, and an attempt's evidence is never deleted.

An agent chose a tool input nested 300 levels deep (the CLI wrote it to its session file):
the trajectory could not be written, ``record`` raised, the run had no ``run.json``, and
the relaunch deleted the folder with the gateway's record of what the attempt cost and
what its model was sent. These run the runner's steps on real folders (the baseline
harness in the ``subprocess`` backend, the seal key of the output root).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from spu.config import EffortConfig, HarnessConfig, ModelConfig, PriceConfig, SandboxConfig
from spu.runner import (
    AgentPhase,
    RunSpec,
    grade,
    prepare_run,
    price,
    record,
    run_one,
    stage,
)
from spu.schema import Outcome, SandboxInfo, ToolCall, Trajectory, TrajectoryStep
from spu.tracking.trajectories import read_trajectory
from tests.conftest import EXAMPLE_TASK, nesting

DOI = "10.1038/s41586-099-01234-5"
"""The made-up source of the example task's key in these tests."""


@pytest.fixture
def spec(tmp_path: Path) -> RunSpec:
    """A baseline run of the example task whose key names a source (a DOI) and whose model
    has list prices (so that a gateway record costs something)."""
    answers = tmp_path / "answers" / EXAMPLE_TASK.name
    answers.mkdir(parents=True)
    key = json.loads((EXAMPLE_TASK / "hidden" / "answers.json").read_text())
    key["source"] = {"doi": DOI, "title": "A made-up source study of the example task"}
    (answers / "answers.json").write_text(json.dumps(key))
    prices = PriceConfig(input=2.0, cache_read=0.2, cache_write_5m=2.5, output=10.0)
    return RunSpec(model=ModelConfig(name="random", provider="baseline", prices=prices),
                   harness=HarnessConfig(name="baseline"), effort=EffortConfig(name="none"),
                   task_dir=EXAMPLE_TASK, output_root=tmp_path / "outputs",
                   answers_root=tmp_path / "answers", sandbox=SandboxConfig(name="subprocess"))


def _deep(depth: int, leaf: str) -> object:
    return json.loads("[" * depth + json.dumps(leaf) + "]" * depth)


def _recorded_with(spec: RunSpec, trajectory: Trajectory):
    """Stage the run, then record it with ``trajectory`` as what its harness read."""
    run = prepare_run(spec)
    staged = stage(run)
    phase = AgentPhase(staged=staged, started="2026-11-01T00:00:00+00:00",
                       sandbox_info=SandboxInfo(backend="subprocess"))
    phase.result.trajectory = trajectory
    return run, record(run, phase, grade(run, None), price(run, phase.result), [])


def test_a_tool_input_nested_300_deep_is_recorded_and_its_trajectory_read_back(spec) -> None:
    """Invariant: arguments nested past what pydantic writes (about 255) or reads (about
    128) cost the run nothing: ``run.json`` is written, the trajectory reads back, and the
    deep part is kept as text (the agent's words are still there)."""
    calls = [ToolCall(id="c1", name="Bash", arguments={"command": _deep(300, "echo " + DOI)})]
    trajectory = Trajectory(harness="baseline", steps=[
        TrajectoryStep(index=0, tool_calls=calls)])
    run, rec = _recorded_with(spec, trajectory)
    assert (run.run_dir / "run.json").is_file() and rec.outcome is Outcome.no_file
    (step,) = read_trajectory(run.run_dir / "trajectory.jsonl.gz").steps
    kept = step.tool_calls[0].arguments
    assert nesting(kept) <= 64 and DOI in json.dumps(kept)


def test_a_trajectory_that_cannot_be_written_leaves_the_run_recorded_with_a_note(spec) -> None:
    """Invariant: whatever stops the trajectory's write (here its scratch file's name is
    taken by a folder), the run is recorded, sealed, and its notes say why."""
    run = prepare_run(spec)
    staged = stage(run)
    (run.run_dir / "trajectory.jsonl.gz.partial").mkdir()
    phase = AgentPhase(staged=staged, started="2026-11-01T00:00:00+00:00",
                       sandbox_info=SandboxInfo(backend="subprocess"))
    phase.result.trajectory = Trajectory(harness="baseline", steps=[TrajectoryStep(index=0)])
    rec = record(run, phase, grade(run, None), price(run, phase.result), [])
    saved = json.loads((run.run_dir / "run.json").read_text())
    assert saved["outcome"] == rec.outcome.value
    assert any(n.startswith("trajectory not written (IsADirectoryError") for n in saved["notes"])
    assert (run.run_dir / "seal.json").is_file()


def _interrupted_attempt(run_dir: Path) -> None:
    """What a process killed mid-run leaves: the agent's files and the gateway's record
    (two answered requests; the model was sent a tool result naming the source's DOI)."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs" / "agent.stdout").write_text("working\n")
    model = run_dir / "model"
    model.mkdir(exist_ok=True)
    lines = [{"time": f"2026-11-01T00:00:0{k}+00:00", "endpoint": "messages",
              "model": "m", "status": 200, "complete": True, "final": k == 2,
              "stop_reason": "end_turn" if k == 2 else "tool_use",
              "usage": {"input": 100_000, "output": 10_000}} for k in (1, 2)]
    (model / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (model / "tool_results.jsonl").write_text(json.dumps(
        {"time": "2026-11-01T00:00:01+00:00", "call_id": "t1",
         "text": f"search result: https://doi.org/{DOI}"}) + "\n")


def test_an_attempt_without_its_record_is_recorded_and_archived_never_deleted(spec) -> None:
    """Invariant: a run folder left without ``run.json`` but with evidence (the gateway's
    record) is recorded when its run starts again: ``infra_error``, its cost from that
    record, its exposure from what the model was sent, sealed; then archived under
    ``attempts/``. The new run is the next attempt and says so; the ledger holds both."""
    run_dir = spec.output_root / "runs" / prepare_run(spec).key
    stage(prepare_run(spec))
    _interrupted_attempt(run_dir)
    final = run_one(spec)
    assert final.attempt == 2 and final.outcome is Outcome.valid
    assert any("attempt 1 ended without its record" in n for n in final.notes)
    # The attempt that saw the source counts toward its run's exposure: the retry is flagged.
    assert final.flagged_exposure
    carried = [h for h in final.exposure_hits if DOI in (h.matched or h.identifier)]
    assert carried and all((h.tool or "").startswith("attempt 1") for h in carried)
    lost = json.loads((run_dir / "attempts" / "1" / "run.json").read_text())
    assert lost["attempt"] == 1 and lost["outcome"] == "infra_error"
    assert lost["usage"]["input"] == 200_000 and lost["usage"]["output"] == 20_000
    assert lost["cost_usd"] == pytest.approx(0.2 * 2.0 + 0.02 * 10.0)
    assert lost["flagged_exposure"] and DOI in json.dumps(lost["exposure_hits"])
    assert (run_dir / "attempts" / "1" / "model" / "requests.jsonl").is_file()
    ledger = [json.loads(x) for x in (spec.output_root / "ledger.jsonl").read_text().splitlines()]
    assert [e["run_key"] for e in ledger] == [final.run_key, final.run_key]
    from spu.seal.verify import verify_root

    assert verify_root(spec.output_root).ok


def test_earlier_attempts_survive_a_run_that_stopped_before_its_agent(spec) -> None:
    """Invariant: a folder holding only its staged task and ``attempts/`` (the process
    stopped between staging and the agent) loses its staged task, never ``attempts/``."""
    first = run_one(spec)
    run_dir = spec.output_root / "runs" / first.run_key
    stage(prepare_run(replace(spec, attempt=2)))  # attempt 1 archived, attempt 2 staged
    assert (run_dir / "attempts" / "1" / "run.json").is_file()
    assert not (run_dir / "run.json").exists()
    again = run_one(replace(spec, attempt=2))
    assert again.attempt == 2
    assert json.loads((run_dir / "attempts" / "1" / "run.json").read_text())["attempt"] == 1


def test_an_archive_cut_short_is_finished_not_deleted(spec) -> None:
    """Invariant: the ``.previous`` folder an archive left when its process was killed is
    an attempt: the next run archives it under ``attempts/``."""
    first = run_one(spec)
    run_dir = spec.output_root / "runs" / first.run_key
    run_dir.rename(run_dir.with_name(run_dir.name + ".previous"))
    again = run_one(replace(spec, attempt=2))
    assert again.attempt == 2 and not run_dir.with_name(run_dir.name + ".previous").exists()
    assert json.loads((run_dir / "attempts" / "1" / "run.json").read_text())["attempt"] == 1


def test_an_agent_side_that_raises_is_recorded_as_infra_error(spec, monkeypatch) -> None:
    """Invariant: a harness whose reading of the session raises what the runner does not
    expect (here a ValueError, as pydantic raises on a value it cannot take) leaves the
    run recorded: ``infra_error`` with the error, sealed, never a lost attempt."""
    from spu.harness.base import _REGISTRY
    from spu.harness.baseline import BaselineHarness

    class BrokenReader(BaselineHarness):
        name = "test-broken-reader"

        def parse(self, ctx, evidence):
            raise ValueError("a session line no reader expected")

    # registered for this test only: `spu list harnesses` in a later test of the same
    # process lists the registry
    monkeypatch.setitem(_REGISTRY._classes, BrokenReader.name, BrokenReader)

    rec = run_one(replace(spec, harness=HarnessConfig(name=BrokenReader.name)))
    run_dir = spec.output_root / "runs" / rec.run_key
    saved = json.loads((run_dir / "run.json").read_text())
    assert saved["outcome"] == "infra_error"
    assert "ValueError: a session line no reader expected" in saved["process"]["error"]
    assert (run_dir / "seal.json").is_file()


def test_a_lone_surrogate_in_the_agents_text_costs_nothing(spec) -> None:
    """Invariant: a lone surrogate (``\\ud800`` escaped in a session file, read by Python's
    JSON) in a tool's output stops pydantic's writer; the run is recorded and its
    trajectory written, the surrogate replaced by U+FFFD."""
    calls = [ToolCall(id="c1", name="Bash", arguments={"command": "x\ud800"},
                      output="bad \ud800 text")]
    trajectory = Trajectory(harness="baseline", steps=[
        TrajectoryStep(index=0, text="\udfff", tool_calls=calls)])
    run, rec = _recorded_with(spec, trajectory)
    (step,) = read_trajectory(run.run_dir / "trajectory.jsonl.gz").steps
    assert step.tool_calls[0].output == "bad \ufffd text" and step.text == "\ufffd"
    assert not any("trajectory not written" in n for n in rec.notes)
