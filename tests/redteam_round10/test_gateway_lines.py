"""Round ten: record lines an agent can keep from being written.

The gateway writes one line per request it read, whatever befell it (round nine's "no
request read is left without a line"). Here the agent's own bytes (a header, a body) or
its model's own output (a tool call's input, which an agent with a shell asks for on
its own requests) raise where no handler waits: the line is never written. The real
gateway in front of stand-in providers on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from spu.gateway.verdict import read_requests
from tests.gateway.conftest import SCRIPTED_PRICES
from tests.gateway_doubles import JsonProvider, gateway_before, send_raw, stand_in

HI = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]}


class _Counts(JsonProvider):
    """Answers at once and counts the requests it was sent (what it bills)."""

    seen: ClassVar[list[bytes]] = []

    def reply(self, body: bytes) -> None:
        self.seen.append(body)
        super().reply(body)



class _Headers(JsonProvider):
    """Answers at once and keeps the ``x-stainless-lang`` header of each request."""

    seen: ClassVar[list[str | None]] = []

    def reply(self, body: bytes) -> None:
        self.seen.append(self.headers.get("x-stainless-lang"))
        super().reply(body)


def test_a_header_past_ascii_still_leaves_its_line(tmp_path: Path) -> None:
    """Agent: a generation with a header value httpx cannot encode as text.

    Fixed (round ten): was (low): a header value with a byte past ASCII (h11 allows
    obs-text; ``x-stainless-lang: caf\\xe9``) passed the allowlist and made httpx's
    ``build_request`` raise UnicodeEncodeError outside any handler: a bare 500, a
    traceback in the host's log, no line. Header values now go on as the bytes sent
    (what a client sent is the provider's to judge), and a request httpx cannot build is
    a recorded 400 (``gateway.bad_request``).
    """
    _Headers.seen = []
    with stand_in(_Headers) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        status = send_raw(gw.port, f"x-api-key: {gw.token}\r\n".encode()
                       + b"x-stainless-lang: caf\xe9\r\n", json.dumps(HI).encode())
    assert status.startswith(b"HTTP/1.1 200"), status
    assert _Headers.seen == ["caf\xe9"]  # the byte as sent (http.server reads latin-1)
    (entry,) = read_requests(gw.requests_path)
    assert entry.status == 200 and entry.error_type is None, entry


@pytest.mark.parametrize("body", [
    b'{"model": "m", "max_tokens": ' + b"1" * 5000 + b', "messages": []}',
    b'{"model": "m", "max_tokens": 16, "metadata": ' + b"[" * 2000 + b"]" * 2000 + b"}"],
    ids=["long_integer", "deep_nesting"])
def test_a_body_json_cannot_read_still_leaves_its_line(tmp_path: Path, body: bytes) -> None:
    """Agent: a body that is JSON, but not one Python's ``json`` reads.

    Fixed (round ten): was (low: nothing is forwarded): a body json.loads cannot read
    for a reason other than a syntax error (an integer of 5000 digits: ValueError, the
    int limit; nesting 2000 deep: RecursionError) passes `except (JSONDecodeError,
    UnicodeDecodeError)` in handle: a bare 500, no line. Fix: catch ValueError and
    RecursionError there (the body then is no JSON object: forwarded as sent, or refused
    with a recorded 400)
    """
    with stand_in(_Counts) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        status = send_raw(gw.port, f"x-api-key: {gw.token}\r\n".encode(), body)
    assert len(read_requests(gw.requests_path)) == 1, status


class _DeepToolInput(JsonProvider):
    """An unstreamed Messages answer whose tool call's input is what the model wrote:
    ``depth`` objects one in another, or an integer of 5000 digits (``depth`` 0); billed
    30,000 input and 4,000 output tokens."""

    depth: ClassVar[int] = 2000

    def reply(self, body: bytes) -> None:
        tool_input = ('{"a": ' * self.depth + "1" + "}" * self.depth if self.depth
                      else '{"n": ' + "7" * 5000 + "}")
        data = ('{"id": "m1", "type": "message", "role": "assistant", "model": "m", '
                '"content": [{"type": "tool_use", "id": "t1", "name": "Rank", "input": '
                + tool_input + '}], "stop_reason": "tool_use", '
                '"usage": {"input_tokens": 30000, "output_tokens": 4000}}').encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.parametrize("depth", [2000, 0], ids=["deep_nesting", "long_integer"])
def test_an_answer_json_cannot_read_still_has_its_line_and_cost(
        tmp_path: Path, depth: int) -> None:
    """Agent: an unstreamed request of its own whose answer's tool input it shaped.

    Fixed (round ten): was (medium: where the provider returns the nesting, or the
    integer, its model wrote): an unstreamed answer whose tool_use input nests past
    Python's recursion limit (~1000 levels, a few thousand output tokens the agent asks
    its model for with a tool schema of its own, on a request of its own) or holds an
    integer past 4300 digits makes _finish's json.loads raise RecursionError/ValueError
    (only JSONDecodeError and UnicodeDecodeError are caught), in the pump's finally: the
    line is never written, its usage never counted (the provider billed it; spent_usd
    stays 0, so the spend cap does not see it), its bound on the cap is never given
    back, and the agent has the whole answer (its stream never ends, but every byte
    arrived). Fix: catch ValueError and RecursionError at every json.loads of a body or
    an event (_finish, AnswerReader._event, handle), and write the line and release the
    bound in a finally of their own, whatever the reading raised (a
    gateway.unreadable_answer at worst)
    """
    provider = type("Deep", (_DeepToolInput,), {"depth": depth})
    got = b""
    with stand_in(provider) as upstream, gateway_before(
            tmp_path / "model", upstream, prices=SCRIPTED_PRICES, max_cost_usd=100.0) as gw:
        try:
            with httpx.Client(trust_env=False, timeout=3) as client, client.stream(
                    "POST", gw.url() + "/v1/messages", headers={"x-api-key": gw.token},
                    json={**HI, "max_tokens": 4096}) as answer:
                for chunk in answer.iter_bytes():
                    got += chunk
        except httpx.HTTPError:
            pass  # its answer does not end; all its bytes came
        spent = gw.spent_usd
    assert got.endswith(b'"output_tokens": 4000}}')  # the agent has its whole answer
    entries = read_requests(gw.requests_path)
    assert [e.usage.output for e in entries] == [4000], entries
    assert spent > 0


class _EchoesTools(JsonProvider):
    """A streamed OpenAI Responses answer whose ``response.completed`` echoes the request's
    tools (as OpenAI's response object does), here a function whose parameters schema
    nests 2000 deep, as the agent sent it; billed 30,000 input and 4,000 output tokens."""

    def reply(self, body: bytes) -> None:
        schema = '{"type": "object", "properties": {"a": ' * 2000 + "{}" + "}}" * 2000
        completed = ('{"type": "response.completed", "response": {"id": "resp_1", '
                     '"status": "completed", "output": [], "tools": [{"type": "function", '
                     '"name": "f", "parameters": ' + schema + '}], "usage": {"input_tokens": '
                     '30000, "output_tokens": 4000}}}')
        try:
            self.start_stream(b'event: response.created\ndata: {"type": "response.created", '
                              b'"response": {"id": "resp_1", "status": "in_progress"}}\n\n'
                              b'event: response.output_text.delta\ndata: {"type": '
                              b'"response.output_text.delta", "delta": "Ranked."}\n\n')
            self.wfile.write(b"event: response.completed\ndata: " + completed.encode()
                             + b"\n\n")
            self.wfile.flush()
        except OSError:
            pass


def test_a_streamed_event_json_cannot_read_still_counts_its_usage(tmp_path: Path) -> None:
    """Agent: a streamed Responses request of its own with a deeply nested tool schema.

    Fixed (round ten): was (medium: where the provider echoes the agent's nesting, as
    OpenAI's response object echoes the request's tools): a response.completed event
    that Python's json cannot read (a tool schema of the agent's, 2000 deep, echoed)
    makes the reader's json.loads raise RecursionError in the pump (AnswerReader._event
    catches only JSONDecodeError and UnicodeDecodeError): the line is written from what
    was read before, usage 0 (the provider billed 30,000 in and 4,000 out), no error, so
    neither an answer nor a failure, and the agent's stream never ends. Fix: catch
    ValueError and RecursionError in _event (and wherever json.loads reads a body), and
    end the pump's reading in a handler that records an unreadable answer
    """
    with stand_in(_EchoesTools) as upstream, gateway_before(
            tmp_path / "model", upstream) as gw:
        try:
            with httpx.Client(trust_env=False, timeout=3) as client:
                client.post(gw.url() + "/v1/responses", headers={"x-api-key": gw.token},
                            json={"model": "m", "stream": True, "input": "Rank."})
        except httpx.HTTPError:
            pass  # its stream does not end
    (entry,) = read_requests(gw.requests_path)
    assert entry.usage.output == 4000, entry


class _EchoesTag(JsonProvider):
    """Answers 400 with a message that echoes the block type the agent sent (as
    Anthropic's validation errors do: "Input tag '...' found using 'type' does not match"),
    a lone surrogate escaped as Python's json.dumps writes it."""

    def reply(self, body: bytes) -> None:
        tag = json.loads(body)["messages"][0]["content"][0]["type"]
        self.send_json({"type": "error", "error": {
            "type": "invalid_request_error",
            "message": f"messages.0.content.0: Input tag '{tag}' found using 'type' does not "
                       f"match any of the expected tags"}}, status=400)


def test_a_provider_message_echoing_a_lone_surrogate_still_leaves_its_line(
        tmp_path: Path) -> None:
    """Agent: a content block whose type is a lone surrogate, echoed in the 400.

    Fixed (round ten): was (low: a 400 bills nothing and is no failure): a provider's
    error message that echoes a lone surrogate the agent sent (JSON allows \ud800;
    Python's json writes it escaped) lands in entry.error as is, and _write's
    model_dump_json raises PydanticSerializationError (surrogates not allowed): the line
    is never written, the pump dies before the cap's bound is given back, and the
    agent's answer never ends. Fix: pass every string the provider sends through
    well_formed before it is recorded (error, error_type, stop_reason, refusal_label,
    request_id), as the model name is
    """
    body = {**HI, "messages": [{"role": "user", "content": [{"type": "\ud800",
                                                              "text": "Hi."}]}]}
    with stand_in(_EchoesTag) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        try:
            with httpx.Client(trust_env=False, timeout=3) as client:
                client.post(gw.url() + "/v1/messages", headers={"x-api-key": gw.token},
                            content=json.dumps(body).encode())
        except httpx.HTTPError:
            pass  # its answer does not end
    assert [e.status for e in read_requests(gw.requests_path)] == [400]
