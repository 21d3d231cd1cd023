"""Round twelve: keys a provider's parser may read otherwise than the gateway's record
and policy (escaped names, names in other letters, duplicates in bodies Python reads only
pruned), attacked as the agent would, after round nine's fix (a key named twice is a
recorded 400).

The real gateway in front of stand-in providers on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spu.gateway.verdict import gateway_verdict, read_requests
from tests.gateway_doubles import gateway_before, stand_in
from tests.redteam_round12._parsers import HI, Keeps, dumps, folder, post, refused_unforwarded

MESSAGES = '"messages": [{"role": "user", "content": "Hi."}]'


@pytest.mark.parametrize("raw", [
    '{"model": "m", "max_tokens": 16, ' + MESSAGES + ', "max\\u005ftokens": 64000}',
    '{"model": "m", "\\u006dodel": "claude-opus-4-1", "max_tokens": 16, ' + MESSAGES + '}',
    '{"model": "m", "max_tokens": 16, ' + MESSAGES + ', "x": {"\\ud83d\\ude00": 1, '
    '"\U0001f600": 2}}',
    '{"model": "m", "max_tokens": 16, ' + MESSAGES + ', "x": {"\\ud800": 1, "\\ud800": 2}}',
    '{"model": "m", "max_tokens": 16, ' + MESSAGES + ', "tools": [{"name": "Bash", '
    '"input_schema": {}, "name": "web_search", "type": "custom"}]}',
], ids=["escaped_max_tokens", "escaped_model", "surrogate_pair_and_literal",
        "lone_surrogate_twice", "tool_name_twice"])
def test_a_key_named_twice_through_escapes_is_refused(tmp_path: Path, raw: str) -> None:
    """Agent: a key named twice where one spelling is JSON escapes (``max\\u005ftokens``,
    a surrogate pair beside the character itself, a lone surrogate twice).

    Holds (met): escapes are undone before the pairs are compared, as every JSON parser
    undoes them; a recorded 400, never forwarded; the message names the key well formed.
    """
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, raw.encode("utf-8", "surrogatepass"))
    entries = read_requests(gw.requests_path)
    refused_unforwarded(answer, entries)
    assert "twice" in answer.json()["error"]["message"]
    assert gateway_verdict(entries).infra_error is None


CASE_VARIANTS = {
    "MAX_TOKENS": {**HI, "MAX_TOKENS": 64000},
    "Model": {**HI, "Model": "claude-opus-4-1"},
    "Tools": {**HI, "Tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    "tool_Type": {**HI, "tools": [{"type": "custom", "name": "s", "input_schema": {},
                                   "Type": "web_search_20250305"}]},
    "Mcp_Servers": {**HI, "Mcp_Servers": [{"type": "url", "url": "https://x.example/sse",
                                          "name": "x"}]},
    "long_s_stream": {**HI, "stream": False, "\u017ftream": True},
    "kelvin_max_tokens": {**HI, "max_to\u212aens": 64000},
}


@pytest.mark.parametrize("body", list(CASE_VARIANTS.values()), ids=list(CASE_VARIANTS))
def test_a_field_named_in_other_letters_is_refused(tmp_path: Path, body: dict) -> None:
    """Agent: a field the gateway reads named in other letters (``MAX_TOKENS``, ``Model``,
    ``Tools``, a tool's ``Type``, ``ſtream`` with a long s, ``max_toKens`` with the Kelvin
    sign), alone or beside the field itself.

    Fixed: Go's ``encoding/json`` (routers such as one-api, Bifrost in front of a
    provider) matches a struct field's name case-blind, Unicode simple folds included,
    the last match winning: such a body went on with the record's ``max_tokens`` 16 and
    the router's 64000, the policy's model ``m`` and the router's ``claude-opus-4-1``, no
    server tool for the policy and a web search for the router. Now a key that folds
    (``str.casefold``) to a field the gateway reads, at the top level, in a ``tools`` item
    or in ``stream_options``, and is not that field's name, is a recorded 400.
    """
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(body))
    entries = read_requests(gw.requests_path)
    refused_unforwarded(answer, entries)
    assert "by its own name" in answer.json()["error"]["message"]


def test_a_chat_stream_asking_no_usage_in_other_letters_is_refused(tmp_path: Path) -> None:
    """Agent: a streamed chat request with ``stream_options.Include_Usage: false`` (or
    ``Stream_Options``) beside the ``include_usage: true`` the gateway looks for.

    Fixed: the gateway saw ``include_usage`` true and forwarded the body as sent; a Go
    router reads the last match, false, and the stream carries no usage (the record and
    the spend cap count no output). Now a recorded 400.
    """
    Keeps.seen = []
    chat = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Hi."}]}
    bodies = [{**chat, "stream_options": {"include_usage": True, "Include_Usage": False}},
              {**chat, "stream_options": {"include_usage": True},
               "Stream_Options": {"include_usage": False}}]
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answers = [post(gw, dumps(b), "/v1/chat/completions") for b in bodies]
    entries = read_requests(gw.requests_path)
    assert [(a.status_code, e.error_type) for a, e in zip(answers, entries, strict=True)] \
        == [(400, "gateway.bad_request")] * 2
    assert Keeps.seen == []


def test_keys_in_other_letters_the_gateway_does_not_read_still_go_on(tmp_path: Path) -> None:
    """Honest: a tool schema whose properties differ in case (``Type`` and ``type``,
    ``Model``), metadata keys in capitals, a tool result echoing ``{"MAX_TOKENS": 1}``.

    Holds: only the fields the gateway reads are compared; the request goes on as sent.
    """
    Keeps.seen = []
    schema = {"type": "object", "properties": {"Type": {"type": "string"},
                                               "type": {"type": "string"},
                                               "Model": {"type": "string"}}}
    body = {**HI, "metadata": {"User_Id": "u"},
            "tools": [{"name": "Bash", "description": "d", "input_schema": schema}],
            "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1",
                 "content": json.dumps({"MAX_TOKENS": 1, "Tools": []})}]}]}
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(body))
    (entry,) = read_requests(gw.requests_path)
    assert (answer.status_code, entry.status, entry.error_type) == (200, 200, None), entry
    ((_, sent),) = Keeps.seen
    assert sent == dumps(body)


DIGITS = "9" * 5000
DEEP = "[" * 3000 + "]" * 3000


@pytest.mark.parametrize("raw", [
    '{"model": "m", "max_tokens": 64000, "n": ' + DIGITS + ', ' + MESSAGES
    + ', "max_tokens": 16}',
    '{"model": "m", "max_tokens": 64000, "deep": ' + DEEP + ', ' + MESSAGES
    + ', "max_tokens": 16}',
    '{"model": "m", "max_tokens": 16, "deep": ' + DEEP + ', ' + MESSAGES
    + ', "tools": [{"type": "web_search_20250305", "type": "custom", "name": "s"}]}',
    '{"model": "m", "MAX_TOKENS": 64000, "n": ' + DIGITS + ', "max_tokens": 16, '
    + MESSAGES + '}',
], ids=["digits_then_max_tokens_twice", "deep_then_max_tokens_twice",
        "deep_then_tool_type_twice", "digits_then_case_variant"])
def test_a_duplicate_in_a_body_python_reads_only_pruned_is_refused(tmp_path: Path,
                                                                   raw: str) -> None:
    """Agent: a key named twice (or in capitals) in a body Python's parser gives up on
    (a 5,000-digit integer, nesting 3,000 deep), after the part it gives up on.

    Holds (met): the pruned re-read passes the same hook over every object it keeps (all
    but those nested past 64 levels), so the duplicate after the deep part is found; a
    recorded 400, never forwarded (the case variant by this round's fix, on the top level
    the pruned read keeps).
    """
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, raw.encode())
    refused_unforwarded(answer, read_requests(gw.requests_path))


def test_a_duplicate_past_the_pruned_depth_is_read_by_no_policy(tmp_path: Path) -> None:
    """Agent: a key named twice 70 levels deep, after a 5,000-digit integer (so the
    gateway reads the body pruned, the duplicate cut away unseen).

    Holds (met): nothing the record or the policy reads lies past 64 levels (the model,
    the bounds, ``stream``, the tools' types, ``stream_options`` and the tool results all
    lie within 5); the body goes on as sent and its line reads its top level as the
    provider does. A provider keeping the first value there reads other tool input or
    schema text, nothing the gateway weighs.
    """
    Keeps.seen = []
    deep = '{"a": ' * 70 + '{"k": 1, "k": 2}' + "}" * 70
    raw = ('{"model": "m", "max_tokens": 16, "big": ' + DIGITS + ', "x": ' + deep + ', '
           + MESSAGES + '}').encode()
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, raw)
    (entry,) = read_requests(gw.requests_path)
    assert (answer.status_code, entry.model, entry.max_tokens) == (200, "m", 16), entry
    ((_, sent),) = Keeps.seen
    assert sent == raw
