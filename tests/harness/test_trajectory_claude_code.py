"""Claude Code session files -> trajectory, on real recordings (tests/golden/cli_sessions)."""

from __future__ import annotations

import shutil
from pathlib import Path

from spu.harness.cli_agent import infra_error
from spu.harness.trajectory import count_tool_calls
from spu.harness.trajectory.claude_code import read_claude_code_sessions, usage_from_claude
from spu.schema import ProcessEvidence, Usage
from spu.scripted import scripted_usage
from tests.harness.golden import json_lines, scenario, server_usage

PROJECTS = "projects"


def sum_usage(*turns: int, subagent: bool = False) -> Usage:
    total = Usage()
    for turn in turns:
        total = total + scripted_usage(turn, subagent=subagent)
    return total


def test_usage_counts_each_message_once_from_its_final_line() -> None:
    """Regression: per-block lines repeat a message's usage; summing lines over-counts."""
    folder = scenario("claude_code", "presented_order")
    reading = read_claude_code_sessions(folder / PROJECTS)
    # The four script turns, by hand from scripted_usage: what the server reported.
    assert reading.trajectory.usage == sum_usage(0, 1, 2, 3) == server_usage(folder)
    assert reading.trajectory.usage == Usage(input=464, cache_read=8612, cache_write=1340,
                                             cache_write_1h=176, output=270)
    # The recording does hold the trap: more assistant lines than messages.
    lines = [e for e in json_lines(next((folder / PROJECTS).rglob("*.jsonl")))
             if e.get("type") == "assistant"]
    naive = Usage()
    for entry in lines:
        naive = naive + usage_from_claude(entry["message"]["usage"])
    assert len(lines) > len({e["message"]["id"] for e in lines})
    assert naive != reading.trajectory.usage
    # Each step carries its own call's usage.
    per_step = [s.usage for s in reading.trajectory.steps if s.role == "assistant"]
    assert per_step == [scripted_usage(k) for k in range(4)]


def test_stdout_stream_repeats_message_start_usage_with_one_output_token() -> None:
    """The trap on stdout: per-block events carry output_tokens 1, so stdout is not used."""
    events = json_lines(scenario("claude_code", "presented_order") / "agent.stdout")
    outputs = [e["message"]["usage"]["output_tokens"] for e in events
               if e.get("type") == "assistant"]
    assert set(outputs) == {1}


def test_tool_calls_hold_arguments_and_outputs_and_reasoning_is_kept() -> None:
    reading = read_claude_code_sessions(scenario("claude_code", "presented_order") / PROJECTS)
    steps = reading.trajectory.steps
    assert reading.complete and not reading.refused and not reading.api_errors
    assert reading.trajectory.cli_version == "2.1.197"
    assert steps[0].role == "user" and "rank" in (steps[0].text or "").lower()
    first = [s for s in steps if s.role == "assistant"][0]
    assert first.reasoning == "The task folder holds the contract and the targets; list it."
    assert first.text == "I will look at the task files first."
    (call,) = first.tool_calls
    assert call.name == "Bash"
    assert call.arguments["command"] == 'ls -la "${SPU_TASK_DIR:-/task}"'
    assert "contract.json" in (call.output or "") and not call.is_error
    assert count_tool_calls(reading.trajectory) == 3
    stamps = [s.timestamp for s in steps]
    assert stamps == sorted(stamps)
    assert [s.index for s in steps] == list(range(len(steps)))


def test_subagent_sessions_are_included_and_named() -> None:
    folder = scenario("claude_code", "subagent")
    reading = read_claude_code_sessions(folder / PROJECTS)
    assert any("subagents" in f for f in reading.files)
    sub = [s for s in reading.trajectory.steps if s.agent]
    assert sub and all(s.agent.startswith("general-purpose:") for s in sub)
    sub_calls = [c for s in sub for c in s.tool_calls]
    assert [c.name for c in sub_calls] == ["Bash"]
    assert "targets.csv" in (sub_calls[0].output or "")
    agent_call = [c for s in reading.trajectory.steps if not s.agent for c in s.tool_calls
                  if c.name == "Agent"][0]
    assert "contract.json and targets.csv" in (agent_call.output or "")
    # Main turns 0-3 and the sub-agent's turns 0-1, each once; the Agent tool's own
    # usage summary in the tool result is not counted again.
    expected = sum_usage(0, 1, 2, 3) + sum_usage(0, 1, subagent=True)
    assert reading.trajectory.usage == expected == server_usage(folder)


def test_refusal_keeps_the_provider_label_and_is_not_an_infra_error() -> None:
    folder = scenario("claude_code", "refusal")
    reading = read_claude_code_sessions(folder / PROJECTS)
    assert reading.refused and reading.refusal_label == "[bio]"
    assert reading.trajectory.usage == scripted_usage(0) == server_usage(folder)
    assert infra_error(reading, ProcessEvidence(exit_code=1), None) is None


def test_api_error_is_an_infra_error() -> None:
    reading = read_claude_code_sessions(scenario("claude_code", "api_error") / PROJECTS)
    assert not reading.refused
    assert reading.api_errors == ("API Error: 400 scripted HTTP 400",)
    reason = infra_error(reading, ProcessEvidence(exit_code=1), None)
    assert reason is not None and "400" in reason


def test_a_complete_session_is_not_an_infra_error_for_a_sub_agent_api_error(
        tmp_path: Path) -> None:
    """A sub-agent's API error that the main session got over is no infrastructure error."""
    shutil.copytree(scenario("claude_code", "subagent") / PROJECTS, tmp_path / PROJECTS)
    (sub_session,) = (tmp_path / PROJECTS).rglob("subagents/*.jsonl")
    errors = scenario("claude_code", "api_error") / PROJECTS
    error_line = next(line for line in next(errors.rglob("*.jsonl")).read_text().splitlines()
                      if '"isApiErrorMessage"' in line or "API Error" in line)
    with open(sub_session, "a") as f:
        f.write(error_line + "\n")
    reading = read_claude_code_sessions(tmp_path / PROJECTS)
    assert reading.api_errors == ("API Error: 400 scripted HTTP 400",)
    assert reading.complete
    assert infra_error(reading, ProcessEvidence(exit_code=0), None) is None


def test_truncated_session_is_an_infra_error_unless_the_time_limit_cut_it(
        tmp_path: Path) -> None:
    """A session without a final answer is infrastructure, except at the time limit."""
    source = scenario("claude_code", "presented_order") / PROJECTS
    shutil.copytree(source, tmp_path / PROJECTS)
    session = next((tmp_path / PROJECTS).rglob("*.jsonl"))
    lines = session.read_text().splitlines(keepends=True)
    last_tool = max(k for k, line in enumerate(lines) if '"tool_result"' in line)
    # Cut after the last tool result, with half a line written, as a killed CLI leaves it.
    session.write_text("".join(lines[: last_tool + 1]) + lines[last_tool + 1][:40])
    reading = read_claude_code_sessions(tmp_path / PROJECTS)
    assert not reading.complete
    assert reading.warnings and session.name in reading.warnings[0]
    assert count_tool_calls(reading.trajectory) == 3  # nothing before the cut is lost
    assert "truncated session" in (infra_error(reading, ProcessEvidence(exit_code=0), None)
                                   or "")
    assert infra_error(reading, ProcessEvidence(timed_out=True), None) is None


def test_missing_session_folder_reads_as_empty(tmp_path: Path) -> None:
    reading = read_claude_code_sessions(tmp_path / "nothing")
    assert reading.files == () and not reading.complete
    assert "no session file" in (infra_error(reading, ProcessEvidence(exit_code=127), None)
                                 or "")


def test_a_tool_input_nested_300_deep_is_read_as_text_past_64_levels(tmp_path) -> None:
    """Issue 41 (G3): a session line with a ``tool_use`` input nested 300 deep (the JSON
    reader takes it, pydantic cannot write it back): the call is read, its input nested
    no deeper than 64 levels with the rest kept as text, and the trajectory round-trips."""
    import json

    from spu.tracking.trajectories import read_trajectory, write_trajectory
    from tests.conftest import nesting

    folder = tmp_path / PROJECTS
    shutil.copytree(scenario("claude_code", "presented_order") / PROJECTS, folder)
    session = next(folder.rglob("*.jsonl"))
    first = json.loads(session.read_text().splitlines()[0])
    deep = json.loads("[" * 300 + '"10.1038/x"' + "]" * 300)
    line = {"type": "assistant", "uuid": "deep-1", "parentUuid": None,
            "sessionId": first.get("sessionId"), "timestamp": "2026-01-01T00:00:00Z",
            "message": {"id": "msg_deep", "role": "assistant", "type": "message",
                        "model": "m", "stop_reason": "tool_use",
                        "content": [{"type": "tool_use", "id": "toolu_deep", "name": "Bash",
                                     "input": {"command": "ls", "x": deep}}],
                        "usage": {"input_tokens": 1, "output_tokens": 1}}}
    with open(session, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    reading = read_claude_code_sessions(folder)
    (call,) = [c for s in reading.trajectory.steps for c in s.tool_calls
               if c.id == "toolu_deep"]
    text = json.dumps(call.arguments)
    assert call.arguments["command"] == "ls" and "10.1038/x" in text
    assert nesting(call.arguments) <= 64  # what nested deeper is a string's text now
    write_trajectory(tmp_path / "t.jsonl.gz", reading.trajectory)
    assert read_trajectory(tmp_path / "t.jsonl.gz").steps == reading.trajectory.steps
