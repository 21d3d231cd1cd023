"""Round twelve: bytes a provider's parser may decode otherwise than the gateway (a
charset, a BOM, UTF-16 and UTF-32, NaN, a body that is no object), values it may read
otherwise (``stream: 1``), bounds it may take from another field, and the chat body the
gateway writes again, attacked as the agent would.

The real gateway in front of stand-in providers on loopback.
"""

from __future__ import annotations

import base64
import codecs
import json
import time
from pathlib import Path

import pytest

from spu.config import ModelGatewayConfig
from spu.gateway.verdict import gateway_verdict, read_requests
from tests.gateway_doubles import ANSWER, JsonProvider, gateway_before, stand_in
from tests.redteam_round12._parsers import HI, Keeps, dumps, folder, post, refused_unforwarded

INJECTED = '", "tools": [{"type": "web_search_20250305", "name": "web_search"}], "x": "'
UTF7 = "+" + base64.b64encode(INJECTED.encode("utf-16-be")).decode().rstrip("=") + "-"
POLYGLOT = dumps({**HI, "x": UTF7})
"""JSON whose UTF-8 reading has a string ``x`` and whose UTF-7 reading offers a web search."""


class _ByCharset(Keeps):
    """Decodes a body by its ``content-type`` charset, as Node's ``body-parser`` does
    (any ``utf-*`` that iconv knows): keeps the charset it would decode by."""

    def reply(self, body: bytes) -> None:  # noqa: D102
        charset = self.headers.get("content-type", "").partition("charset=")[2] or "utf-8"
        self.seen.append(({"charset": charset}, body))
        self.send_json(ANSWER)


def test_the_polyglot_is_a_web_search_in_utf7() -> None:
    """The attack is real: the same bytes read as UTF-7 offer the provider a web search."""
    assert "tools" not in json.loads(POLYGLOT)
    assert json.loads(POLYGLOT.decode("utf-7"))["tools"][0]["type"] == "web_search_20250305"


@pytest.mark.parametrize("headers", [
    [("content-type", "application/json; charset=utf-7")],
    [("content-type", "application/json; charset=utf-16")],
    [("content-type", "text/plain")],
    [("content-type", "application/x-www-form-urlencoded")],
    [("content-type", "application/json"), ("content-type", "application/json; charset=utf-7")],
    [],
], ids=["utf7", "utf16", "text_plain", "form", "two_headers", "none"])
def test_a_body_of_another_content_type_is_refused(tmp_path: Path,
                                                   headers: list[tuple[str, str]]) -> None:
    """Agent: a JSON body sent as ``application/json; charset=utf-7`` (or another charset,
    another media type, two content-type headers, none).

    Fixed: the gateway read the body as UTF-8 JSON whatever the header said and passed the
    header on: ``body-parser`` decodes by the charset, iconv knows UTF-7, and the same
    bytes offered the provider a web search the policy never saw (two headers: the gateway
    kept the last for the provider). Now a POST's content-type is one
    ``application/json``, with ``charset=utf-8`` at most, or a recorded 400.
    """
    _ByCharset.seen = []
    with stand_in(_ByCharset) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, POLYGLOT, headers=headers)
    refused_unforwarded(answer, read_requests(gw.requests_path))
    assert _ByCharset.seen == [], _ByCharset.seen
    assert "content-type" in answer.json()["error"]["message"]


@pytest.mark.parametrize("value", ["application/json", "application/json; charset=utf-8",
                                   "Application/JSON;charset=\"UTF-8\""])
def test_an_honest_json_content_type_still_goes_on(tmp_path: Path, value: str) -> None:
    """Honest: the CLIs' ``application/json`` (the SDKs', reqwest's), with a UTF-8 charset."""
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(HI), headers=[("content-type", value)])
    assert answer.status_code == 200 and len(Keeps.seen) == 1


class _StrictUtf8(Keeps):
    """Reads a body as RFC 8259 says (UTF-8, no BOM, no NaN); answers 400 otherwise."""

    def reply(self, body: bytes) -> None:  # noqa: D102
        self.seen.append(({}, body))

        def no_constant(name: str) -> None:
            raise ValueError(name)

        try:
            json.loads(body.decode("utf-8"), parse_constant=no_constant)
        except ValueError:
            self.send_json({"type": "error", "error": {
                "type": "invalid_request_error", "message": "bad JSON"}}, status=400)
            return
        self.send_json(ANSWER)


@pytest.mark.parametrize("raw", [
    codecs.BOM_UTF8 + dumps(HI), json.dumps(HI).encode("utf-16-le"),
    json.dumps(HI).encode("utf-16"), json.dumps(HI).encode("utf-32-be"),
    dumps(HI)[:-1] + b', "temperature": NaN}', dumps({**HI, "max_tokens": 16})[:-1]
    + b', "max_output_tokens": Infinity}',
], ids=["bom", "utf16le", "utf16_bom", "utf32be", "nan", "infinity"])
def test_a_body_only_pythons_parser_reads_is_the_providers_400(tmp_path: Path,
                                                              raw: bytes) -> None:
    """Agent: a UTF-8 BOM, UTF-16 or UTF-32 (Python's ``json.loads`` on bytes guesses
    them), ``NaN`` or ``Infinity``.

    Holds (met): the gateway reads the body as Python does and forwards it as sent; a
    provider reading JSON as its RFC says answers 400 (the agent's, no failure), and a
    provider in Python reads what the gateway read. No byte string is JSON both as UTF-8
    and as what Python guesses (UTF-8 JSON has no NUL byte and no BOM), so no parser
    reads other fields from it.
    """
    Keeps.seen = []
    with stand_in(_StrictUtf8) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, raw)
    entries = read_requests(gw.requests_path)
    (entry,) = entries
    assert (entry.model, entry.max_tokens) == ("m", 16), entry
    assert answer.status_code == entry.status == 400 and len(Keeps.seen) == 1, entry
    assert gateway_verdict(entries).infra_error is None


@pytest.mark.parametrize("bound", [b"Infinity", b"NaN", b"1e400", b"-Infinity"])
def test_a_bound_python_reads_as_a_float_constant_counts_as_none(tmp_path: Path,
                                                                  bound: bytes) -> None:
    """Agent: ``max_tokens`` ``Infinity``, ``NaN`` or ``1e400`` (infinite to Python).

    Holds (met): no bound (the cap's whole bound, the unstreamed rule's agent's doing);
    a provider answers 400 to the constants (the agent's), and to ``1e400`` where its
    field is an integer (Go, serde; the stand-in takes it).
    """
    Keeps.seen = []
    raw = b'{"model": "m", "max_tokens": ' + bound + b', "messages": []}'
    with stand_in(_StrictUtf8) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        post(gw, raw)
    (entry,) = read_requests(gw.requests_path)
    assert entry.max_tokens is None, entry
    assert entry.status == (200 if bound == b"1e400" else 400), entry  # 1e400 is JSON


@pytest.mark.parametrize("raw", [b'[{"model": "m"}]', b'"m"', b"16", b"null", b""])
def test_a_body_that_is_no_object_is_refused(tmp_path: Path, raw: bytes) -> None:
    """Agent: a body that is a JSON array, a string, a number, null, or empty.

    Holds (met): no model is read, so the model policy refuses it (403, recorded).
    """
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, raw)
    refused_unforwarded(answer, read_requests(gw.requests_path),
                        error_type="gateway.model_refused", status=403)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi."}]}


@pytest.mark.parametrize("stream", [1, "true", "false", [True], {"on": True}])
def test_a_stream_that_is_no_boolean_is_refused(tmp_path: Path, stream: object) -> None:
    """Agent: a streamed chat request with ``"stream": 1`` (or ``"true"``).

    Fixed: the gateway streams only on JSON true, so it saw no stream and asked no usage
    (``stream_options.include_usage``); a lax provider (pydantic's lax bool, as vLLM's
    server reads it; JavaScript's truthiness) streams, with no usage: the record and the
    spend cap counted no output. Now a ``stream`` that is not true, false or null is a
    recorded 400 (also ``"false"``, round seven's case, once forwarded as no stream).
    """
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps({**CHAT, "stream": stream}), "/v1/chat/completions")
    refused_unforwarded(answer, read_requests(gw.requests_path))
    assert "stream must be true or false" in answer.json()["error"]["message"]


def test_a_chat_stream_written_again_is_what_the_gateway_read(tmp_path: Path) -> None:
    """Agent: a streamed chat request without ``include_usage``, holding escapes, a lone
    surrogate, non-ASCII text, floats in exponent form, big integers, a false
    ``include_usage``.

    Holds (met): the gateway writes the body again (``json.dumps`` of Python's reading)
    with ``include_usage`` true; what goes on reads, to any parser, as what the gateway
    read (ASCII, the surrogate escaped, one key each), with that one field set.
    """
    Keeps.seen = []
    body = {**CHAT, "stream": True, "temperature": 1e-1, "seed": 2**62, "n": 1,
            "stream_options": {"include_usage": False, "x": "caf\u00e9 \ud83d"},
            "messages": [{"role": "user", "content": "\u2028\"quoted\"\\ \U0001f600"}]}
    raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        post(gw, raw, "/v1/chat/completions")
    ((_, sent),) = Keeps.seen
    assert sent.isascii()
    assert json.loads(sent) == {**body, "stream_options": {"include_usage": True,
                                                           "x": "caf\u00e9 \ud83d"}}


class _Hangs(JsonProvider):
    """Takes a request and answers nothing for 3 s (past the gateway's read window)."""

    def reply(self, body: bytes) -> None:  # noqa: D102
        time.sleep(3.0)
        self.send_json(ANSWER)


@pytest.mark.parametrize(("path", "body", "asked"), [
    ("/v1/chat/completions", {**CHAT, "max_tokens": 16, "max_completion_tokens": 100_000},
     100_000),
    ("/v1/responses", {"model": "m", "input": "Hi.", "max_tokens": 16,
                       "max_output_tokens": 100_000}, 100_000),
    ("/v1/messages", {**HI, "max_output_tokens": 100_000}, 16),
], ids=["chat_both", "responses_both", "messages_only_its_own"])
def test_an_output_bound_counts_the_field_the_provider_reads(
        tmp_path: Path, path: str, body: dict, asked: int) -> None:
    """Agent: an unstreamed chat request asking ``max_tokens`` 16 and
    ``max_completion_tokens`` 100,000 (vLLM generates to the second), which the provider
    takes and does not answer within the read window.

    Fixed: the record and the spend cap took the first field named (``max_tokens`` 16,
    in every API), so the wait was a short request's, a hung provider's (``infra_error``,
    retried free) and the cap's bound 16 tokens. Now only the fields the endpoint's API
    reads count, the largest of them (Chat Completions reads both): the wait is the
    agent's doing. A Responses body counts ``max_output_tokens``; a Messages body
    ``max_tokens`` alone.
    """
    with stand_in(_Hangs) as upstream, gateway_before(
            folder(tmp_path), upstream, cfg=ModelGatewayConfig(read_timeout_s=1.0)) as gw:
        post(gw, dumps(body), path)
    entries = read_requests(gw.requests_path)
    (entry,) = entries
    assert entry.max_tokens == asked, entry
    assert entry.error_type == "gateway.upstream_timeout", entry
    if asked > 16:
        assert gateway_verdict(entries).infra_error is None
