"""The scripted model server speaks both APIs, plays its script and logs the usage it reports."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from spu.cli import main as spu_main
from spu.schema import Usage
from spu.scripted import ScriptedModelServer, ScriptError, load_script, reported_usage
from spu.scripted.script import (
    SIDE_USAGE,
    Script,
    ScriptedTurn,
    default_script,
    refusal_script,
    scripted_usage,
)

BASH = [{"name": "Bash", "input_schema": {"type": "object"}}]
EXEC = [{"type": "function", "name": "exec_command", "parameters": {}}]


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json",
                                              "x-api-key": "secret-key"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read(), answer.headers["content-type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["content-type"]


def sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in data.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def anthropic_conversation(tool_results: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "rank the experiments"}]
    for k in range(tool_results):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{k}", "name": "Bash", "input": {}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{k}", "content": "ok"}]})
    return messages


def test_scripted_usage_differs_in_every_bucket_and_turn() -> None:
    """A parser that swaps two buckets or counts a response twice must get a wrong total."""
    seen = set()
    for turn in range(4):
        usage = scripted_usage(turn)
        values = (usage.input, usage.cache_read, usage.cache_write, usage.cache_write_1h,
                  usage.output)
        assert len(set(values)) == 5
        seen.update(values)
    assert len(seen) == 20
    # turn 1 by hand: 101 + 10, 2003 + 100, 305 + 20, 41 + 2, 57 + 7
    assert scripted_usage(1) == Usage(input=111, cache_read=2103, cache_write=325,
                                      cache_write_1h=43, output=64)


def test_anthropic_stream_plays_the_turn_of_the_conversation(tmp_path: Path) -> None:
    """The log holds an answer once the client has it (a CLI may exit on its last answer)."""
    log = tmp_path / "server.jsonl"
    with ScriptedModelServer(log_path=log) as server:
        status, data, kind = post(server.url + "/v1/messages?beta=true", {
            "model": "m", "stream": True, "tools": BASH,
            "messages": anthropic_conversation(1)})
        assert len(log.read_text().splitlines()) == 1
    assert status == 200 and kind == "text/event-stream"
    events = sse(data)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    start, delta = events[0][1], events[-2][1]
    # message_start carries the input usage with output_tokens 1, message_delta the final.
    assert start["message"]["usage"]["output_tokens"] == 1
    assert delta["usage"]["output_tokens"] == scripted_usage(1).output
    assert start["message"]["usage"]["input_tokens"] == scripted_usage(1).input
    assert start["message"]["usage"]["cache_creation"]["ephemeral_1h_input_tokens"] == 43
    tool = [d for n, d in events if n == "content_block_start"
            and d["content_block"]["type"] == "tool_use"]
    assert tool[0]["content_block"]["name"] == "Bash"
    assert delta["delta"]["stop_reason"] == "tool_use"
    line = json.loads(log.read_text())
    assert line["kind"] == "script" and line["turn"] == 1
    assert line["usage"] == scripted_usage(1).model_dump()
    assert "secret-key" not in log.read_text()


def test_anthropic_final_turn_refusal_side_request_and_count_tokens(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ScriptedModelServer(refusal_script("bio"), log_path=log) as server:
        _, data, _ = post(server.url + "/v1/messages", {
            "model": "m", "stream": True, "tools": BASH,
            "messages": anthropic_conversation(1)})
        refusal = sse(data)
        _, side, _ = post(server.url + "/v1/messages", {
            "model": "m", "stream": False, "messages": anthropic_conversation(0)})
        _, count, _ = post(server.url + "/v1/messages/count_tokens", {
            "model": "m", "messages": anthropic_conversation(0)})
        kinds = [r.kind for r in server.responses]
    total = reported_usage(log)
    delta = refusal[-2][1]["delta"]
    assert delta["stop_reason"] == "refusal"
    assert delta["stop_details"]["category"] == "bio"
    assert json.loads(side)["content"][0]["text"] == "Scripted."
    assert json.loads(count) == {"input_tokens": scripted_usage(0).input}
    assert kinds == ["script", "side", "count_tokens"]
    # The refusal is not billed; the side answer is.
    assert total == SIDE_USAGE


def test_responses_api_reports_inclusive_input_and_a_shell_call(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ScriptedModelServer(log_path=log) as server:
        status, data, _ = post(server.url + "/v1/responses", {
            "model": "m", "stream": True, "tools": EXEC,
            "input": [{"type": "message", "role": "user", "content": []}]})
    assert status == 200
    events = sse(data)
    completed = events[-1][1]["response"]
    usage = scripted_usage(0)
    # input_tokens includes the cached tokens and the cache writes (API convention).
    assert completed["usage"]["input_tokens"] == usage.input + usage.cache_read + usage.cache_write
    assert completed["usage"]["input_tokens_details"] == {
        "cached_tokens": usage.cache_read, "cache_write_tokens": usage.cache_write}
    call = [i for i in completed["output"] if i["type"] == "function_call"][0]
    assert call["name"] == "exec_command"
    assert json.loads(call["arguments"])["cmd"] == default_script().turns[0].command
    reasoning = [i for i in completed["output"] if i["type"] == "reasoning"][0]
    assert reasoning["summary"][0]["text"] == default_script().turns[0].reasoning
    # No 1-hour cache writes exist in this API: the log says what was actually sent.
    assert reported_usage(log) == usage.model_copy(update={"cache_write_1h": 0})


def test_responses_api_refusal_is_a_failed_response_with_the_policy_code() -> None:
    with ScriptedModelServer(refusal_script("bio")) as server:
        _, data, _ = post(server.url + "/v1/responses", {
            "model": "m", "stream": True, "tools": EXEC,
            "input": [{"type": "function_call_output", "call_id": "c", "output": "ok"}]})
    name, payload = sse(data)[-1]
    assert name == "response.failed"
    assert payload["response"]["error"]["code"] == "bio_policy"


def test_scripted_http_error_is_answered_and_logged(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ScriptedModelServer(load_script("api_error"), log_path=log) as server:
        status, data, _ = post(server.url + "/v1/messages", {
            "model": "m", "stream": True, "tools": BASH,
            "messages": anthropic_conversation(1)})
    assert status == 400
    assert json.loads(data)["error"]["type"] == "invalid_request_error"
    assert json.loads(log.read_text())["kind"] == "error"


def test_script_file_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"turns": [{"text": "a"}, {"comand": "ls"}]}))
    with pytest.raises(ScriptError, match=r"bad\.json: turns\[1\] has unknown key 'comand'"):
        load_script(bad)
    bad.write_text(json.dumps({"turns": [{"http_error": "500"}]}))
    with pytest.raises(ScriptError, match=r"turns\[0\]\.http_error must be an integer"):
        load_script(bad)
    bad.write_text(json.dumps({"turns": [{"text": "a", "as_generated": "yes"}]}))
    with pytest.raises(ScriptError, match=r"turns\[0\]\.as_generated must be true or false"):
        load_script(bad)
    bad.write_text(json.dumps({"turns": [{"text": "a", "bytes_per_s": -1}]}))
    with pytest.raises(ScriptError, match=r"turns\[0\]\.bytes_per_s must be a number"):
        load_script(bad)
    bad.write_text("{not json")
    with pytest.raises(ScriptError, match="bad.json: not a readable JSON file"):
        load_script(bad)
    with pytest.raises(ScriptError, match="no such script file"):
        load_script(tmp_path / "missing.json")


def test_script_file_is_played(tmp_path: Path) -> None:
    path = tmp_path / "two.json"
    path.write_text(json.dumps({"name": "two", "turns": [
        {"text": "look", "command": "ls /"}, {"text": "done"}]}))
    script = load_script(path)
    assert script.name == "two"
    assert script.turn(0).command == "ls /"
    assert script.turn(1).is_final
    assert script.turn(7).text == "Done."


def test_cli_rejects_an_unreadable_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    assert spu_main(["scripted-server", "--script", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: no such script file" in capsys.readouterr().err


def test_a_tool_turn_calls_the_offered_mcp_tool_in_both_apis() -> None:
    """Claude Code offers ``mcp__spu__search``; Codex offers ``search`` in the namespace
    ``mcp__spu`` and must be answered with the namespace field (a flat name is refused)."""
    script = Script(name="t", turns=(
        ScriptedTurn(text="s", tool="search", arguments={"query": "q"}),))
    with ScriptedModelServer(script) as server:
        _, data, _ = post(server.url + "/v1/messages", {
            "model": "m", "stream": False, "messages": anthropic_conversation(0),
            "tools": BASH + [{"name": "mcp__spu__search", "input_schema": {}}]})
        _, stream, _ = post(server.url + "/v1/responses", {
            "model": "m", "stream": True, "input": [],
            "tools": EXEC + [{"type": "namespace", "name": "mcp__spu", "tools": [
                {"type": "function", "name": "search", "parameters": {}}]}]})
        # A request without the tool: the turn runs a shell command that says so.
        _, missing, _ = post(server.url + "/v1/messages", {
            "model": "m", "stream": False, "messages": anthropic_conversation(0),
            "tools": BASH})
    (use,) = [b for b in json.loads(data)["content"] if b["type"] == "tool_use"]
    assert (use["name"], use["input"]) == ("mcp__spu__search", {"query": "q"})
    output = sse(stream)[-1][1]["response"]["output"]
    (call,) = [i for i in output if i["type"] == "function_call"]
    assert (call["name"], call["namespace"]) == ("search", "mcp__spu")
    (fallback,) = [b for b in json.loads(missing)["content"] if b["type"] == "tool_use"]
    assert fallback["name"] == "Bash"
    assert fallback["input"]["command"] == "echo '[scripted] tool search is not offered'"
