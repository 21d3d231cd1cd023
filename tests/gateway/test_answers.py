"""Reading providers' answers and summing a record: pure functions on literal answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spu.gateway.answers import ChatReader, reader_for, tool_results
from spu.gateway.verdict import gateway_verdict
from spu.schema import GatewayRequest, Usage
from spu.scripted import ScriptedTurn, scripted_usage
from spu.scripted import anthropic_messages as am
from spu.scripted import openai_responses as oa


def _sse(events: list[tuple[str, dict[str, Any]]], crlf: bool = False) -> bytes:
    text = "".join(f"event: {n}\ndata: {json.dumps(p)}\n\n" for n, p in events)
    return (text.replace("\n", "\r\n") if crlf else text).encode()


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("size", [1, 7, 10_000])
def test_a_stream_reads_the_same_in_chunks_of_any_size(size: int, crlf: bool) -> None:
    """Chunk boundaries (inside a line, a CRLF, an event) do not change what is read."""
    usage = scripted_usage(2)
    turn = ScriptedTurn(text="Ranked.", reasoning="Think.", command="ls")
    data = _sse(am.stream_events(turn, usage, model="m", message_id="msg_1",
                                 tool_use_id="t1"), crlf)
    reader = reader_for("messages")
    for k in range(0, len(data), size):
        reader.feed(data[k:k + size])
    r = reader.reading
    assert r.usage == usage and r.stop_reason == "tool_use" and r.complete
    assert r.calls_tool and not r.final and r.response_id == "msg_1"


def test_responses_usage_is_split_into_the_four_buckets() -> None:
    """Inclusive input counts of the Responses API become the uncached input bucket."""
    usage = scripted_usage(1).model_copy(update={"cache_write_1h": 0})
    ids = {"response": "resp_1", "reasoning": "rs", "message": "m", "call_item": "fc",
           "call": "c"}
    reader = reader_for("responses")
    reader.feed(_sse(oa.stream_events(ScriptedTurn(text="Done."), usage, model="m",
                                      tool="exec_command", ids=ids)))
    assert reader.reading.usage == usage
    assert reader.reading.final and reader.reading.stop_reason == "completed"


def test_responses_refusal_content_and_content_filter_are_refusals() -> None:
    """A ``refusal`` content part, or an answer stopped by the content filter."""
    part = reader_for("responses")
    part.read_body({"id": "r", "status": "completed", "output": [
        {"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}]})
    assert part.reading.refusal and part.reading.final
    filtered = reader_for("responses")
    filtered.read_body({"id": "r", "status": "incomplete",
                        "incomplete_details": {"reason": "content_filter"}})
    assert filtered.reading.refusal and filtered.reading.refusal_label == "content_filter"


def test_chat_completions_stream_and_body() -> None:
    """Chat Completions: usage in the last chunk, ``[DONE]``, refusals by filter or field."""
    chunks = [{"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hi"}}]},
              {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
              {"id": "c1", "choices": [], "usage": {
                  "prompt_tokens": 120, "completion_tokens": 9,
                  "prompt_tokens_details": {"cached_tokens": 100}}}]
    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    reader = ChatReader()
    reader.feed(data.encode())
    assert reader.reading.usage == Usage(input=20, cache_read=100, output=9)
    assert reader.reading.complete and reader.reading.final
    body = ChatReader()
    body.read_body({"id": "c2", "choices": [{"finish_reason": "tool_calls", "message": {
        "tool_calls": [{"id": "x"}]}}], "usage": {"prompt_tokens": 5, "completion_tokens": 1,
                                                  "prompt_cache_hit_tokens": 2}})
    assert body.reading.usage == Usage(input=3, cache_read=2, output=1)
    assert not body.reading.final
    refused = ChatReader()
    refused.read_body({"choices": [{"finish_reason": "stop", "message": {"refusal": "No."}}]})
    assert refused.reading.refusal and refused.reading.final


def test_tool_results_of_chat_requests() -> None:
    """The screen sees tool messages of Chat Completions requests too."""
    body = {"messages": [{"role": "tool", "tool_call_id": "x1",
                          "content": [{"type": "text", "text": "doi:10.1/abc"}]}]}
    assert tool_results("chat_completions", body) == [("x1", "doi:10.1/abc")]


def _entry(**fields: Any) -> GatewayRequest:
    base: dict[str, Any] = {"time": "t", "endpoint": "messages", "status": 200,
                            "complete": True}
    return GatewayRequest(**{**base, **fields})


def test_a_refusal_counts_only_as_the_last_answer() -> None:
    """An answer after a refusal (a sub-agent's, a retry's) decides the verdict."""
    refusal = _entry(refusal=True, refusal_label="cyber", final=True, stop_reason="refusal")
    answer = _entry(final=True, stop_reason="end_turn")
    assert gateway_verdict([answer, refusal]).refusal_label == "[cyber]"
    assert not gateway_verdict([refusal, answer]).refusal


def test_a_hung_up_client_and_policy_answers_are_no_infra_error() -> None:
    """The agent closing its connection, or the gateway's refusals, are not the provider's."""
    entries = [_entry(final=True),
               _entry(complete=False, error_type="gateway.client_disconnected"),
               _entry(status=403, complete=False, error_type="gateway.model_refused",
                      model="other")]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None and verdict.refused_models == ("other",)


def test_an_error_event_mid_stream_is_a_failure() -> None:
    """Anthropic's ``error`` event inside a 200 stream fails the request."""
    reader = reader_for("messages")
    reader.feed(b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error",'
                b' "message": "Overloaded"}}\n\n')
    assert reader.reading.error_type == "overloaded_error" and not reader.reading.final
    verdict = gateway_verdict([_entry(complete=False, error_type="overloaded_error")])
    assert verdict.infra_error is not None


def test_what_the_model_was_sent_is_screened(tmp_path) -> None:
    """The gateway's kept tool results flag a source DOI whatever the session files say."""
    from spu.analysis.exposure import detect_exposure
    from spu.gateway.verdict import GATEWAY_TOOL, model_input_steps
    from spu.schema import SourceRecord

    (tmp_path / "tool_results.jsonl").write_text(
        json.dumps({"call_id": "t1", "text": "see https://doi.org/10.1021/jacs.0c01234"}) + "\n"
        + json.dumps({"call_id": "t2", "text": "nothing here"}) + "\n")
    steps = model_input_steps(tmp_path)
    hits = detect_exposure(SourceRecord(doi="10.1021/jacs.0c01234"), steps)
    assert [(h.kind, h.step, h.tool) for h in hits] == [("doi", 0, GATEWAY_TOOL)]
    assert model_input_steps(tmp_path / "absent") == []
