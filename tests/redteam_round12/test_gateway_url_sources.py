"""Content the provider fetches from a URL (found by the helper that attacked the pool's
rule): an image or a document given by URL is read by the provider from the web for the
agent, outside the run's audited tools and its egress record, as the provider's own web
fetch (a server tool, refused since round four) would. The real gateway in front of a
stand-in provider on loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spu.gateway.verdict import gateway_verdict, read_requests
from tests.gateway_doubles import gateway_before, stand_in
from tests.redteam_round12._parsers import Keeps, dumps, folder, post, refused_unforwarded

PAPER = "https://example.org/paper.pdf"


def _anthropic(block: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": [block, {"type": "text", "text": "Rank."}]}]}


def _responses(part: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_output_tokens": 16, "input": [
        {"role": "user", "content": [part, {"type": "input_text", "text": "Rank."}]}]}


def _chat(part: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": [part, {"type": "text", "text": "Rank."}]}]}


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/messages", _anthropic({"type": "document",
                                 "source": {"type": "url", "url": PAPER}})),
    ("/v1/messages", _anthropic({"type": "image", "source": {
        "type": "url", "url": "https://example.org/figure.png"}})),
    ("/v1/messages/count_tokens", _anthropic({"type": "document",
                                              "source": {"type": "url", "url": PAPER}})),
    ("/v1/responses", _responses({"type": "input_file", "file_url": PAPER})),
    ("/v1/responses", _responses({"type": "input_image",
                                  "image_url": "https://example.org/figure.png"})),
    ("/v1/chat/completions", _chat({"type": "image_url",
                                    "image_url": {"url": "http://example.org/figure.png"}})),
    ("/v1/messages", _anthropic({"type": "document",
                                 "Source": {"Type": "URL", "url": PAPER}})),
    ("/v1/messages", _anthropic({"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=",
        "Type": "url", "URL": "https://example.org/figure.png"}})),
    ("/v1/chat/completions", _chat({"type": "file", "file": {"filename": "p.pdf",
                                                             "file_data": PAPER}})),
], ids=["document", "image", "count_tokens", "input_file", "input_image", "chat_image_url",
        "other_letters", "second_spelling", "router_file_data"])
def test_content_the_provider_would_fetch_from_a_url_is_refused(
        tmp_path: Path, path: str, body: dict[str, Any]) -> None:
    """Agent: a paper or a figure given by its URL, for the provider to read (also in other
    letters, as a second spelling beside inline content that a router keeping the last
    key reads, and as a router's ``file_data``, which OpenRouter fetches).

    Fixed: such a request went on, and the provider read the page for the agent. Now it is
    a recorded refusal (403, ``gateway.url_source_refused``, the agent's doing), never
    forwarded; the answer names the URL."""
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(body), path=path)
    entries = read_requests(gw.requests_path)
    refused_unforwarded(answer, entries, error_type="gateway.url_source_refused", status=403)
    assert "example.org" in answer.text
    assert gateway_verdict(entries).infra_error is None


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/messages", _anthropic({"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})),
    ("/v1/messages", _anthropic({"type": "document", "source": {
        "type": "text", "media_type": "text/plain", "data": f"notes from {PAPER}"}})),
    ("/v1/responses", _responses({"type": "input_image",
                                  "image_url": "data:image/png;base64,iVBORw0KGgo="})),
    ("/v1/messages", {**_anthropic({"type": "text", "text": "Fetch it."}), "messages": [
        {"role": "user", "content": "Read the paper."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                           "name": "mcp__spu__fetch",
                                           "input": {"url": PAPER, "image_url": PAPER}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": f'{{"image_url": "{PAPER}"}}'}]}]}),
    ("/v1/responses", {**_responses({"type": "input_text", "text": "Rank."}), "text": {
        "format": {"type": "json_schema", "name": "r", "schema": {
            "type": "object", "examples": [{"image_url": PAPER}]}}}}),
], ids=["base64_image", "text_document", "data_url_image", "tool_call_arguments",
        "output_schema"])
def test_inline_content_still_goes_on(tmp_path: Path, path: str, body: dict[str, Any]) -> None:
    """Honest: an image the CLI read from a file (base64, a ``data:`` URL), a text document
    naming a URL, a tool call's arguments and its result naming one (the model's words and
    the tool's output: the provider fetches neither), an output schema's example: forwarded
    as sent (an uploaded file's id is content stored at the provider:
    ``test_gateway_stored_content.py``)."""
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(body), path=path)
    assert answer.status_code == 200, answer.text
    assert [sent for _, sent in Keeps.seen] == [dumps(body)]


@pytest.mark.parametrize(("extra", "error_type"), [
    ({"plugins": [{"id": "web"}]}, "gateway.server_tool_refused"),
    ({"models": ["m", "other/model:online"]}, "gateway.model_refused"),
    ({"Plugins": [{"id": "web"}]}, "gateway.bad_request"),
], ids=["plugins", "fallback_models", "Plugins"])
def test_a_routers_web_plugin_and_fallback_models_are_refused(
        tmp_path: Path, extra: dict[str, Any], error_type: str) -> None:
    """Agent, with a router as the provider (OpenRouter): its ``web`` plugin searches the
    web for the agent; its ``models`` list answers from another model when the first fails.

    Fixed (found with the URL sources): both went on. Now a recorded refusal, never
    forwarded; a fallback list naming only the run's model goes on."""
    Keeps.seen = []
    body = {**_chat({"type": "text", "text": "Rank."}), **extra}
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(body), path="/v1/chat/completions")
        status = 403 if error_type != "gateway.bad_request" else 400
        refused_unforwarded(answer, read_requests(gw.requests_path), error_type=error_type,
                            status=status)
        Keeps.seen = []
        only = post(gw, dumps({**_chat({"type": "text", "text": "Rank."}), "models": ["m"]}),
                    path="/v1/chat/completions")
    assert only.status_code == 200, only.text
