"""Content stored at the provider (left open by the URL sources' round, closed here): a
request may name what the provider keeps under the organisation's key (a stored answer and
the whole conversation before it, a conversation, an uploaded file, a code container) and
the provider reads it into the model's context, outside the run's audited tools and its
record. No endpoint that stores such things is forwarded, so only the run's own answers
are its own: the gateway remembers their ids. The real gateway in front of a stand-in
provider on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from spu.gateway.verdict import gateway_verdict, read_requests
from tests.gateway_doubles import JsonProvider, gateway_before, stand_in
from tests.redteam_round12._parsers import Keeps, dumps, folder, post, refused_unforwarded

RESPONSE: dict[str, Any] = {
    "id": "resp_own_1", "object": "response", "status": "completed", "model": "m",
    "output": [
        {"type": "reasoning", "id": "rs_own_1", "summary": []},
        {"type": "message", "id": "msg_own_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Ranked.", "annotations": []}]}],
    "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}
"""A whole Responses answer, with the ids a later request of the run may name."""


class KeepsResponses(JsonProvider):
    """Answers every request with :data:`RESPONSE`; keeps each body it was sent."""

    seen: ClassVar[list[bytes]] = []

    def reply(self, body: bytes) -> None:  # noqa: D102
        self.seen.append(body)
        self.send_json(RESPONSE)


def _responses(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_output_tokens": 16, "store": True,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Rank."}]}],
            **fields}


def _anthropic(block: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": [block, {"type": "text", "text": "Rank."}]}], **fields}


FILE = "file_011CNha8iCJcU1wXNR6q4V8w"


@pytest.mark.parametrize(("path", "body", "named"), [
    ("/v1/responses", _responses(previous_response_id="resp_another_run"),
     "resp_another_run"),
    ("/v1/responses", _responses(conversation="conv_689667905b048191"),
     "conv_689667905b048191"),
    ("/v1/responses", _responses(conversation={"id": "conv_6896"}), "conv_6896"),
    ("/v1/responses", _responses(input=[{"type": "item_reference", "id": "msg_elsewhere"}]),
     "msg_elsewhere"),
    ("/v1/responses", _responses(input=[{"Type": "Item_Reference", "id": "msg_elsewhere"}]),
     "msg_elsewhere"),
    ("/v1/responses", _responses(input=[{"type": "reasoning", "id": "rs_elsewhere",
                                         "summary": []}]), "rs_elsewhere"),
    ("/v1/responses", _responses(input=[{"role": "user", "content": [
        {"type": "input_file", "file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}]}]),
     "file-6F2ksmvXxt4VdoqmHRw6kL"),
    ("/v1/responses", _responses(input=[{"role": "user", "content": [
        {"type": "input_image", "File_ID": "file-img"}]}]), "file-img"),
    ("/v1/chat/completions", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-chat"}}]}]},
     "file-chat"),
    ("/v1/messages", _anthropic({"type": "document",
                                 "source": {"type": "file", "file_id": FILE}}), FILE),
    ("/v1/messages/count_tokens", _anthropic({"type": "document", "source": {
        "type": "file", "file_id": FILE}}), FILE),
    ("/v1/messages", _anthropic({"type": "container_upload", "file_id": FILE}), FILE),
    ("/v1/messages", _anthropic({"type": "text", "text": "Go on."},
                                container="container_011CZ"), "container_011CZ"),
], ids=["previous_response_id", "conversation", "conversation_object", "item_reference",
        "item_reference_other_letters", "stored_reasoning", "input_file_id",
        "input_image_file_id", "chat_file_id", "anthropic_file", "count_tokens_file",
        "container_upload", "container"])
def test_content_stored_at_the_provider_is_refused(tmp_path: Path, path: str,
                                                   body: dict[str, Any], named: str) -> None:
    """Agent: a stored answer of another run (and the context before it), a conversation,
    an item or a reasoning item of one by id alone, a file uploaded to the organisation's
    account (by a maintainer, by another project, by a run of long ago), a code container:
    the provider reads them into the model's context for the agent.

    Fixed: such a request went on. Now a recorded refusal (403,
    ``gateway.stored_content_refused``, the agent's doing), never forwarded; the answer
    names what was asked for."""
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(body), path=path)
    entries = read_requests(gw.requests_path)
    refused_unforwarded(answer, entries, error_type="gateway.stored_content_refused",
                        status=403)
    assert named in answer.text, answer.text
    assert gateway_verdict(entries).infra_error is None


@pytest.mark.parametrize("extra", [
    {"Previous_Response_ID": "resp_another_run"}, {"ſtore": True, "Conversation": "conv_1"},
], ids=["previous_response_id", "conversation"])
def test_a_stored_reference_in_other_letters_is_refused(tmp_path: Path,
                                                        extra: dict[str, Any]) -> None:
    """Agent: the field in other letters, which a router matching names whatever their
    case reads. A recorded 400 (``gateway.bad_request``), as for every field read."""
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps({**_responses(), **extra}), path="/v1/responses")
    refused_unforwarded(answer, read_requests(gw.requests_path))


def test_the_runs_own_stored_answers_may_be_named(tmp_path: Path) -> None:
    """Honest: a client of the Responses API that keeps its conversation at the provider
    names its last answer (``previous_response_id``), or an item and a reasoning item of
    it by id: each is this run's own, and goes on as sent. A made-up id after them does
    not."""
    KeepsResponses.seen = []
    later = [
        _responses(previous_response_id="resp_own_1"),
        _responses(input=[{"type": "item_reference", "id": "msg_own_1"},
                          {"type": "reasoning", "id": "rs_own_1", "summary": []}]),
    ]
    with stand_in(KeepsResponses) as upstream, \
            gateway_before(folder(tmp_path), upstream) as gw:
        first = post(gw, dumps(_responses()), path="/v1/responses")
        assert first.status_code == 200, first.text
        for body in later:
            answer = post(gw, dumps(body), path="/v1/responses")
            assert answer.status_code == 200, answer.text
        made_up = post(gw, dumps(_responses(previous_response_id="resp_own_2")),
                       path="/v1/responses")
    assert made_up.status_code == 403 and "resp_own_2" in made_up.text, made_up.text
    assert KeepsResponses.seen == [dumps(_responses()), *map(dumps, later)]
    entries = read_requests(gw.requests_path)
    assert [e.error_type for e in entries] == [None, None, None,
                                               "gateway.stored_content_refused"]


def test_an_answer_from_another_run_is_not_this_runs(tmp_path: Path) -> None:
    """Agent: two runs' gateways in front of one provider; the second names the first's
    answer. Each gateway knows only its own run's answers: refused."""
    KeepsResponses.seen = []
    with stand_in(KeepsResponses) as upstream:
        with gateway_before(folder(tmp_path / "one"), upstream) as gw:
            assert post(gw, dumps(_responses()), path="/v1/responses").status_code == 200
        with gateway_before(folder(tmp_path / "two"), upstream) as gw:
            answer = post(gw, dumps(_responses(previous_response_id="resp_own_1")),
                          path="/v1/responses")
    assert answer.status_code == 403 and "resp_own_1" in answer.text, answer.text
    assert len(KeepsResponses.seen) == 1


CODEX_INPUT = [
    {"type": "message", "role": "developer", "id": "msg_01a23f51-09d7-7802-a0f7-b15e41ed4ac7",
     "content": [{"type": "input_text", "text": "You are Codex."}]},
    {"type": "message", "role": "user", "id": "msg_01a23f51-09e3-7461-a722-0063602e4e2c",
     "content": [{"type": "input_text", "text": "Rank the groups."}]},
    {"type": "reasoning", "id": "rs_scripted_0001", "summary": [],
     "encrypted_content": "gAAAAABo-inline"},
    {"type": "function_call", "id": "fc_scripted_0001", "call_id": "call_1",
     "name": "exec_command", "arguments": json.dumps({"cmd": "ls", "file_id": "x"})},
    {"type": "function_call_output", "id": "fco_01a23f51-0a2f-7290-83c8-f700cd7afb09",
     "call_id": "call_1", "output": '{"file_id": "file-in-a-tool-output"}'},
]
"""Codex's own input items (as 0.171 sends them, ``store: false``): whole items, each named
by an id Codex makes, reasoning with its ``encrypted_content``."""


def test_whole_items_go_on_whatever_their_ids(tmp_path: Path) -> None:
    """Honest: Codex's request, every item whole and named by an id the provider never
    gave, and a tool's arguments and output naming a ``file_id`` (the model's and the
    tool's words): forwarded as sent."""
    Keeps.seen = []
    body = {**_responses(input=CODEX_INPUT), "store": False,
            "include": ["reasoning.encrypted_content"], "previous_response_id": None}
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(body), path="/v1/responses")
    assert answer.status_code == 200, answer.text
    assert [sent for _, sent in Keeps.seen] == [dumps(body)]
