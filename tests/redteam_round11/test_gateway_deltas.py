"""Round eleven: the output counted from the deltas read (round ten, ``deltas_in``).

An answer cut before its final usage (hung up on and drained to the bound, dropped, cut
by the run's end) counts its output as the delta events read, "at least a token each".
The agent chooses what its model writes and when it hangs up; the real gateway in
front of stand-in providers on loopback, the drain's bound patched to a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spu.gateway.answers import AnthropicReader, ResponsesReader
from spu.gateway.verdict import read_requests
from tests.gateway_doubles import (
    MESSAGE_START,
    Generates,
    JsonProvider,
    gateway_before,
    hang_up_on_a_long_answer,
    stand_in,
    wait_for_record,
)

START = MESSAGE_START
TOKENS_PER_DELTA = 40
"""What one delta of a tool call's input holds (real streams send many tokens a delta)."""
DELTA = (b'event: content_block_delta\ndata: ' + json.dumps(
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "input_json_delta",
               "partial_json": " word" * TOKENS_PER_DELTA}}).encode() + b"\n\n")


class _GeneratesMany(Generates):
    """A long streamed tool call, 40 tokens a delta, a delta every 20 ms, billed as it
    goes."""

    delta = DELTA


def test_a_cut_answer_counts_the_tokens_its_deltas_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: a long streamed tool call, hung up on at once, drained to the bound.

    Fixed (round ten): was (medium: cost recorded lower than billed): an answer cut
    before its final usage counts one token a delta event, but a delta holds what the
    provider chose to batch (a tool call's input_json_delta, a long text or thinking
    delta: tens of tokens): an agent that asks for a long tool call and hangs up at once
    is billed for ~40x the output the record, spent_usd and the spend cap count, again
    for each such request. Fix: count a cut answer's output from what its deltas hold
    (the delta payload's characters, e.g. ceil(chars / 3), at least one a delta), or at
    its max_tokens for the cap and the run's cost (an upper bound, flagged).
    """
    from spu.gateway import relay

    monkeypatch.setattr(relay, "DRAIN_AFTER_HANGUP_S", 1.0)
    with stand_in(_GeneratesMany) as upstream, \
            gateway_before(tmp_path / "model", upstream) as gw:
        hang_up_on_a_long_answer(gw, content="Call.")
        (entry,) = wait_for_record(gw, 20)
    deltas = (entry.bytes_out - len(START)) // len(DELTA)
    assert deltas > 10, entry
    assert entry.usage.output >= deltas * TOKENS_PER_DELTA, (entry.usage, deltas)


def test_a_model_quoting_the_marker_is_no_extra_delta() -> None:
    """Agent: a model whose text quotes the Anthropic delta event line.

    Fixed (round ten): was (low: the count is not the lower bound it says):
    AnthropicReader's delta marker b'event: content_block_delta' is not anchored at a
    line's start, so a model whose text (or tool input) quotes it, e.g. an agent
    grepping an SSE log, counts an extra delta per quote; no agent gain (it counts
    more), but a complete answer's reading is not touched, only a cut one's output. Fix:
    count b'\nevent: content_block_delta' (and the marker at a chunk's start after a
    newline), as the Responses marker's trailing newline already anchors it.
    """
    text = "event: content_block_delta\\n"
    quoted = (b"event: content_block_delta\ndata: "
              + json.dumps({"type": "content_block_delta",
                            "delta": {"type": "text_delta", "text": text}}).encode()
              + b"\n\n")
    assert AnthropicReader().deltas_in(quoted)[0] == 1


def test_the_responses_marker_is_not_forged_by_the_text() -> None:
    """Agent: a model that writes the Responses marker in its text, or CRLF line ends.

    Holds: a JSON string cannot hold a raw newline, so ``.delta\\n`` never comes from
    the model's words, and the marker is found with either line end.
    """
    text = "event: response.output_text.delta\\n x.delta"
    crlf = (b"event: response.output_text.delta\r\ndata: "
            + json.dumps({"type": "response.output_text.delta", "delta": text}).encode()
            + b"\r\n\r\n")
    assert ResponsesReader().deltas_in(crlf)[0] == 1
    assert ResponsesReader().deltas_in(crlf.replace(b"\r\n", b"\n"))[0] == 1


CHUNK = (b"data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [
    {"index": 0, "delta": {"content": " word" * TOKENS_PER_DELTA}, "finish_reason": None}]})
    .encode() + b"\n\n")
LAST = (b"data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [
    {"index": 0, "delta": {}, "finish_reason": "stop"}]}).encode() + b"\n\ndata: [DONE]\n\n")


class _ChatWithoutUsage(JsonProvider):
    """A Chat Completions stream as OpenAI (and Anthropic's compatible endpoint) send it
    when the request has no ``stream_options.include_usage``: no usage chunk at all."""

    seen: list[bytes] = []  # noqa: RUF012 - one test at a time

    def reply(self, body: bytes) -> None:
        self.seen.append(body)
        try:
            self.start_stream(CHUNK * 50 + LAST)
        except OSError:
            pass


def test_a_chat_stream_without_include_usage_counts_its_output(tmp_path: Path) -> None:
    """Agent: stream Chat Completions and leave ``include_usage`` out.

    Fixed (round ten): was (high: cost recorded as nothing): a streamed Chat Completions
    request (endpoint forwarded in every run, the run's own model; Anthropic serves it
    too) without stream_options.include_usage gets a stream with no usage chunk: the
    gateway records a complete answer with usage 0 (no error, no flag), so the run's
    cost, spent_usd and the spend cap count none of the 2,000 tokens billed; ChatReader
    has no delta_markers, so round ten's count from deltas does not apply either. Fix:
    forward a streamed chat request only with stream_options.include_usage true (set it
    in the forwarded body, or refuse without it: a recorded 400 of the gateway's
    policy), and count a chat stream's chunks with content (data: lines with a delta) as
    the cut answer's lower bound.
    """
    import httpx

    _ChatWithoutUsage.seen = []
    body = {"model": "m", "stream": True, "max_tokens": 4096,
            "messages": [{"role": "user", "content": "Write."}]}
    with stand_in(_ChatWithoutUsage) as upstream, \
            gateway_before(tmp_path / "model", upstream) as gw:
        with httpx.stream("POST", gw.url() + "/v1/chat/completions", json=body, timeout=20,
                          headers={"authorization": f"Bearer {gw.token}",
                                   "x-api-key": gw.token}) as answer:
            assert answer.status_code == 200
            answer.read()
    (entry,) = read_requests(gw.requests_path)
    assert entry.endpoint == "chat_completions" and entry.status == 200, entry
    forwarded = json.loads(_ChatWithoutUsage.seen[0]) if _ChatWithoutUsage.seen else {}
    asked_usage = (forwarded.get("stream_options") or {}).get("include_usage") is True
    assert asked_usage or entry.usage.output >= 50, (entry.usage, entry.complete)
