"""Codex rollout files -> trajectory, on real recordings (tests/golden/cli_sessions)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from spu.harness.cli_agent import infra_error
from spu.harness.trajectory import count_tool_calls
from spu.harness.trajectory.codex import read_codex_sessions, usage_from_codex
from spu.schema import ProcessEvidence, Usage
from spu.scripted import scripted_usage
from tests.harness.golden import json_lines, scenario, server_usage

SESSIONS = "sessions"


def expected(*turns: int) -> Usage:
    total = Usage()
    for turn in turns:
        # The Responses API has no 1-hour cache writes.
        total = total + scripted_usage(turn).model_copy(update={"cache_write_1h": 0})
    return total


def test_usage_per_response_in_four_buckets() -> None:
    folder = scenario("codex", "presented_order")
    reading = read_codex_sessions(folder / SESSIONS)
    assert reading.trajectory.usage == expected(0, 1, 2, 3) == server_usage(folder)
    steps = [s for s in reading.trajectory.steps if s.role == "assistant"]
    assert [s.usage for s in steps] == [expected(k) for k in range(4)]


def test_cumulative_token_count_totals_are_differenced(tmp_path: Path) -> None:
    """Regression: token_count totals are cumulative; summing them over-counts.

    The recording is rewritten as an older Codex writes it: no token_usage_record
    lines, and each token_count repeated (a repeated total must add nothing).
    """
    source = scenario("codex", "presented_order") / SESSIONS
    rollout = next(source.rglob("rollout-*.jsonl"))
    lines = []
    for entry in json_lines(rollout):
        if entry["type"] == "token_usage_record":
            continue
        lines.append(entry)
        if entry["type"] == "event_msg" and entry["payload"]["type"] == "token_count":
            lines.append(entry)
    dest = tmp_path / SESSIONS / rollout.relative_to(source)
    dest.parent.mkdir(parents=True)
    dest.write_text("".join(json.dumps(e) + "\n" for e in lines))
    reading = read_codex_sessions(tmp_path / SESSIONS)
    assert reading.trajectory.usage == expected(0, 1, 2, 3)
    counts = [usage_from_codex(e["payload"]["info"]["total_token_usage"]) for e in lines
              if e["type"] == "event_msg" and e["payload"]["type"] == "token_count"]
    naive = Usage()
    for usage in counts:
        naive = naive + usage
    assert naive != reading.trajectory.usage


def test_input_tokens_include_cached_tokens_and_cache_writes() -> None:
    # 2409 input tokens = 101 uncached + 2003 cached + 305 written (turn 0, by hand)
    usage = usage_from_codex({"input_tokens": 2409, "cached_input_tokens": 2003,
                              "cache_write_input_tokens": 305, "output_tokens": 57,
                              "reasoning_output_tokens": 19})
    assert usage == Usage(input=101, cache_read=2003, cache_write=305, output=57)


def test_tool_calls_hold_arguments_and_outputs_and_reasoning_is_kept() -> None:
    reading = read_codex_sessions(scenario("codex", "presented_order") / SESSIONS)
    assert reading.complete and not reading.refused and not reading.api_errors
    assert reading.trajectory.cli_version == "0.171.0"
    first = [s for s in reading.trajectory.steps if s.role == "assistant"][0]
    assert first.reasoning == "The task folder holds the contract and the targets; list it."
    assert first.text == "I will look at the task files first."
    (call,) = first.tool_calls
    assert call.name == "exec_command"
    assert call.arguments == {"cmd": 'ls -la "${SPU_TASK_DIR:-/task}"'}
    assert "contract.json" in (call.output or "")
    assert count_tool_calls(reading.trajectory) == 3
    assert any(s.role == "user" and "rankings.json" in (s.text or "")
               for s in reading.trajectory.steps)


def test_bio_policy_error_is_a_refusal_with_its_label() -> None:
    folder = scenario("codex", "refusal")
    reading = read_codex_sessions(folder / SESSIONS)
    assert reading.refused and reading.refusal_label == "[bio]"
    assert reading.trajectory.usage == expected(0) == server_usage(folder)
    assert infra_error(reading, ProcessEvidence(exit_code=1), None) is None


def test_api_error_is_an_infra_error() -> None:
    reading = read_codex_sessions(scenario("codex", "api_error") / SESSIONS)
    assert not reading.refused and not reading.complete
    assert "scripted HTTP 400" in reading.api_errors[0]
    assert "API error" in (infra_error(reading, ProcessEvidence(exit_code=1), None) or "")


def test_truncated_rollout_is_incomplete(tmp_path: Path) -> None:
    source = scenario("codex", "presented_order") / SESSIONS
    shutil.copytree(source, tmp_path / SESSIONS)
    rollout = next((tmp_path / SESSIONS).rglob("rollout-*.jsonl"))
    lines = rollout.read_text().splitlines(keepends=True)
    done = max(k for k, line in enumerate(lines) if '"task_complete"' in line)
    rollout.write_text("".join(lines[:done]))
    reading = read_codex_sessions(tmp_path / SESSIONS)
    assert not reading.complete
    assert "truncated session" in (infra_error(reading, ProcessEvidence(exit_code=0), None)
                                   or "")


def test_an_mcp_call_is_named_with_its_namespace_and_its_output_read(tmp_path) -> None:
    """Codex records an MCP call as ``search`` in the namespace ``mcp__spu``; it must read
    as ``mcp__spu__search`` (what it is), with the text of its ``input_text`` blocks."""
    import json as _json

    from spu.harness.trajectory.codex import read_codex_sessions

    lines = [
        {"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "t"}},
        {"timestamp": "2026-01-01T00:00:01Z", "type": "response_item", "payload": {
            "type": "function_call", "name": "search", "namespace": "mcp__spu",
            "arguments": '{"query": "q"}', "call_id": "c1"}},
        {"timestamp": "2026-01-01T00:00:02Z", "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "c1", "output": [
                {"type": "input_text", "text": "Wall time: 0.1 seconds\nOutput:"},
                {"type": "input_text", "text": '[{"url": "u"}]'}]}},
    ]
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "rollout-1.jsonl").write_text("".join(_json.dumps(x) + "\n" for x in lines))
    (call,) = [c for s in read_codex_sessions(folder).trajectory.steps for c in s.tool_calls]
    assert (call.name, call.arguments) == ("mcp__spu__search", {"query": "q"})
    assert call.output == 'Wall time: 0.1 seconds\nOutput:\n[{"url": "u"}]'


def test_arguments_and_lines_nested_past_64_levels_are_read_as_text(tmp_path) -> None:
    """Issue 41 (G3): a rollout the agent wrote with a tool call's arguments nested 300
    deep (as a JSON string, and as a value of its own line, 1,500 deep past what Python
    parses): every call is read, nothing deeper than 64 levels, the deep part kept as its
    text, and the trajectory is written and read back."""
    import json as _json

    from spu.harness.trajectory.codex import read_codex_sessions
    from spu.tracking.trajectories import read_trajectory, write_trajectory
    from tests.conftest import nesting

    deep = "[" * 300 + '"10.1038/x"' + "]" * 300
    lines = [
        {"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "t"}},
        {"timestamp": "2026-01-01T00:00:01Z", "type": "response_item", "payload": {
            "type": "function_call", "name": "exec_command", "call_id": "c1",
            "arguments": '{"cmd": ' + deep + "}"}},
        {"timestamp": "2026-01-01T00:00:02Z", "type": "response_item", "payload": {
            "type": "custom_tool_call", "name": "apply_patch", "call_id": "c2",
            "input": _json.loads(deep)}},
    ]
    text = "".join(_json.dumps(x) + "\n" for x in lines)
    text += ('{"timestamp": "2026-01-01T00:00:03Z", "type": "response_item", "payload": '
             '{"type": "function_call", "name": "exec_command", "call_id": "c3", '
             '"arguments": {"cmd": ' + "[" * 1500 + '"1500"' + "]" * 1500 + "}}}\n")
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "rollout-1.jsonl").write_text(text)
    reading = read_codex_sessions(folder)
    calls = [c for s in reading.trajectory.steps for c in s.tool_calls]
    assert [c.id for c in calls] == ["c1", "c2", "c3"] and not reading.warnings
    assert all(nesting(c.arguments) <= 64 for c in calls)
    assert "10.1038/x" in _json.dumps(calls[0].arguments)
    assert "10.1038/x" in _json.dumps(calls[1].arguments)
    assert '\\"1500\\"' in _json.dumps(calls[2].arguments)
    write_trajectory(tmp_path / "t.jsonl.gz", reading.trajectory)
    assert read_trajectory(tmp_path / "t.jsonl.gz").steps == reading.trajectory.steps
