"""Issue 41, E1-E3 and "Partial": what the model is sent reaches the screen, and the counts.

A red team sent the task's DOI to the model, through the real gateway, in every place the
screen did not read: a tool result past 65,536 characters, an Anthropic ``document`` block
(text, or a PDF as base64, as Claude Code's Read sends one), a ``search_result`` title, user
and system text, halves in two calls, base64, zero-width spaces, soft hyphens, homoglyphs;
and after ``tool_results.jsonl`` reached its cap, with no note. The control (the DOI in
plain text) was flagged each time. Each attack is replayed here as an agent sends it, for
each of the three APIs where it applies, through the real gateway in front of a stand-in
provider, then screened as the runner screens a run (:func:`_screen`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from spu.analysis.exposure import detect_in_sequence
from spu.config import ModelGatewayConfig
from spu.gateway.inputs import SentReader, read_calls
from spu.schema import SourceRecord
from spu.tools.egress import count_shell_downloads
from tests.gateway.sent_documents import DOI, PDF, tiny_pdf
from tests.gateway_doubles import JsonProvider, gateway_before, stand_in

SOURCE = SourceRecord(doi=DOI, title="Predicting reaction performance in C-N cross-coupling "
                                     "using machine learning")


MESSAGES, RESPONSES, CHAT = "/v1/messages", "/v1/responses", "/v1/chat/completions"


def anthropic(*content: Any, system: Any = None, results: int = 0) -> dict[str, Any]:
    """A Messages body whose last user turn holds ``content`` (after a tool call)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Rank the experiments."}]
    if content:
        messages += [{"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{k}", "name": "Bash", "input": {"command": "ls"}}
            for k in range(max(results, 1))]},
            {"role": "user", "content": list(content)}]
    body: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": messages,
                            "tools": [{"name": "Bash", "description": "Run a command.",
                                       "input_schema": {"type": "object"}}]}
    if system is not None:
        body["system"] = system
    return body


def result(content: Any, call: str = "t0") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call, "content": content}


def zero_width(text: str) -> str:
    return "\u200b".join(text)


ATTACKS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "control: the DOI in plain text": [(MESSAGES, anthropic(result(f"see doi:{DOI}")))],
    "a tool result past 65,536 characters": [(MESSAGES, anthropic(result(
        "x" * 70_000 + f" doi:{DOI} " + "y" * 1000)))],
    "a document block of text": [(MESSAGES, anthropic({"type": "document", "source": {
        "type": "text", "media_type": "text/plain", "data": f"Methods. doi {DOI}"}}))],
    "a document block of content": [(MESSAGES, anthropic({"type": "document", "source": {
        "type": "content", "content": [{"type": "text", "text": f"doi {DOI}"}]}}))],
    "a PDF in a tool result (Claude Code's Read)": [(MESSAGES, anthropic(result([
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": PDF}}])))],
    "a PDF document block": [(MESSAGES, anthropic({"type": "document", "title": "SI",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}))],
    "a search_result title": [(MESSAGES, anthropic({
        "type": "search_result", "source": "https://example.org/p", "title": f"doi:{DOI}",
        "content": [{"type": "text", "text": "An abstract."}]}))],
    "user text": [(MESSAGES, {"model": "m", "max_tokens": 64, "messages": [
        {"role": "user", "content": f"The study is doi {DOI}; rank it."}]})],
    "system text": [(MESSAGES, anthropic(system=[{"type": "text", "text": f"Source {DOI}"}]))],
    "halves in two calls": [
        (MESSAGES, anthropic(result("doi 10.1126/scie"))),
        (MESSAGES, anthropic(result("doi 10.1126/scie"), result("nce.aar5169", "t1"),
                             results=2))],
    "base64": [(MESSAGES, anthropic(result(base64.b64encode(
        f"the source: {DOI}".encode()).decode())))],
    "zero-width spaces": [(MESSAGES, anthropic(result(zero_width(DOI))))],
    "soft hyphens": [(MESSAGES, anthropic(result("\u00ad".join(DOI))))],
    "homoglyphs": [(MESSAGES, anthropic(result(
        "10.1126/\u0455\u0441i\u0435n\u0441\u0435.\u0430\u0430r5169")))],
    "Responses: instructions": [(RESPONSES, {"model": "m", "instructions": f"doi {DOI}",
                                             "input": "Rank."})],
    "Responses: a PDF input_file": [(RESPONSES, {"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_file", "filename": "si.pdf",
                                      "file_data": "data:application/pdf;base64," + PDF}]}]})],
    "Responses: a function call's output parts": [(RESPONSES, {"model": "m", "input": [
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_text", "text": zero_width(DOI)}]}]})],
    "Chat: a developer message": [(CHAT, {"model": "m", "messages": [
        {"role": "developer", "content": [{"type": "text", "text": f"doi {DOI}"}]},
        {"role": "user", "content": "Rank."}]})],
    "Chat: a PDF file part": [(CHAT, {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "file", "file": {"filename": "si.pdf",
                                  "file_data": "data:application/pdf;base64," + PDF}}]}]})],
    "Chat: a tool message": [(CHAT, {"model": "m", "messages": [
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "\u00ad".join(DOI)}]})],
}


def post(gateway: Any, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.url() + path, json=body, timeout=30, headers={
        "x-api-key": gateway.token, "authorization": f"Bearer {gateway.token}"})


def _screen(folder: Path) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The hits and the screen's notes, as :func:`spu.runner.screen` reads the record."""
    reader = SentReader(folder)
    try:
        hits = detect_in_sequence(SOURCE, ((t.label, t.text, t.after_gap)
                                           for t in reader.texts()))
    finally:
        reader.close()
    return [(h.kind, h.tool) for h in hits], reader.notes


def replay(tmp_path: Path, requests: list[tuple[str, dict[str, Any]]],
           provider: type[JsonProvider] = JsonProvider, expect: tuple[int, ...] | None = None,
           **options: Any) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Send ``requests`` through a run's gateway (each answered with the status of
    ``expect``, 200 by default), then screen its record."""
    folder = tmp_path / "model"
    statuses = expect or (200,) * len(requests)
    with stand_in(provider) as upstream, gateway_before(folder, upstream, **options) as gw:
        for (path, body), status in zip(requests, statuses, strict=True):
            assert post(gw, path, body).status_code == status, (path, body)
    return _screen(folder)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_source_sent_to_the_model_is_flagged(tmp_path: Path, attack: str) -> None:
    """The DOI reaching the model by any of these ways flags the run; the screen saw all."""
    hits, notes = replay(tmp_path, ATTACKS[attack])
    assert "doi" in {kind for kind, _ in hits}, (attack, hits)
    assert notes == [], notes


def test_the_models_own_turns_are_not_what_it_was_sent(tmp_path: Path) -> None:
    """The model's own words (its text, a tool call's input) are no exposure."""
    body = {"model": "m", "max_tokens": 64, "messages": [
        {"role": "user", "content": "Rank."},
        {"role": "assistant", "content": [{"type": "text", "text": f"I recall {DOI}."},
                                          {"type": "tool_use", "id": "t0", "name": "Bash",
                                           "input": {"command": f"echo {DOI}"}}]},
        {"role": "user", "content": [result("ok")]}]}
    assert replay(tmp_path, [(MESSAGES, body)]) == ([], [])


def test_a_long_text_is_kept_head_and_tail_and_says_so(tmp_path: Path) -> None:
    """Past ``tool_result_chars`` from each end the middle is not kept: a DOI at the end is
    still found, and the screen says it is incomplete (E1's cut, no longer silent)."""
    cfg = ModelGatewayConfig(tool_result_chars=1000)
    hits, notes = replay(tmp_path, [(MESSAGES, anthropic(result("x" * 5000 + f" {DOI}")))],
                         cfg=cfg)
    assert hits == [("doi", "model_input")]
    assert len(notes) == 1 and "head and tail" in notes[0]
    hits, notes = replay(tmp_path / "middle", [(MESSAGES, anthropic(result(
        "x" * 5000 + f" {DOI} " + "y" * 5000)))], cfg=cfg)
    assert hits == [] and "head and tail" in notes[0]


def test_a_full_record_says_the_screen_is_incomplete(tmp_path: Path) -> None:
    """E3: after the record's cap, what the model is sent is not kept, and the screen says
    so instead of passing it silently."""
    cfg = ModelGatewayConfig(tool_results_mb=4096 / 2**20)
    filler = [result("z" * 1900), result("w" * 1900, "t1")]
    hits, notes = replay(tmp_path, [
        (MESSAGES, anthropic(*filler, results=2)),
        (MESSAGES, anthropic(*filler, result(f"doi {DOI}" + " " * 400, "t2"), results=3))],
        cfg=cfg)
    assert hits == []
    assert len(notes) == 1 and "reached its cap" in notes[0], notes
    kept = (tmp_path / "model" / "tool_results.jsonl").read_text().splitlines()
    assert sum('"kind": "cap"' in line for line in kept) == 1


def test_an_unreadable_pdf_is_a_note(tmp_path: Path) -> None:
    """A PDF that cannot be parsed is a note of the screen, never a crash."""
    broken = base64.b64encode(b"%PDF-1.4 " + bytes(range(256)) * 40).decode()
    hits, notes = replay(tmp_path, [(MESSAGES, anthropic({"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf", "data": broken}}))])
    assert hits == [] and len(notes) == 1 and "PDF" in notes[0], notes


def test_a_pdf_past_the_page_cap_is_read_in_part(tmp_path: Path) -> None:
    """A PDF's pages are read up to a cap (the work a hostile PDF can cause is bounded:
    bytes, pages, CPU, memory and time); the first pages are still screened."""
    from spu.tools.extract import MAX_PDF_PAGES

    many = base64.b64encode(tiny_pdf(f"doi {DOI}", pages=MAX_PDF_PAGES + 5)).decode()
    hits, notes = replay(tmp_path, [(MESSAGES, anthropic(result([{"type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": many}}])))])
    assert hits == [("doi", "model_input:document")]
    assert len(notes) == 1 and f"the first {MAX_PDF_PAGES} read" in notes[0], notes


TOOL_INPUT = json.dumps({"command": "curl -sO https://downloads.invalid/si.pdf && "
                                    "pip install rdkit"})


class CallsTools(JsonProvider):
    """Answers with one tool call per request, in the shape of the API asked (streamed)."""

    n: ClassVar[int] = 0

    def reply(self, body: bytes) -> None:  # noqa: D102
        CallsTools.n += 1
        call, half = f"call_{CallsTools.n}", len(TOOL_INPUT) // 2
        if self.path.endswith("/messages"):
            events = [("message_start", {"type": "message_start", "message": {
                          "id": "m", "usage": {"input_tokens": 3, "output_tokens": 1}}}),
                      ("content_block_start", {"type": "content_block_start", "index": 0,
                          "content_block": {"type": "tool_use", "id": call, "name": "Bash",
                                            "input": {}}}),
                      *[("content_block_delta", {"type": "content_block_delta", "index": 0,
                          "delta": {"type": "input_json_delta", "partial_json": piece}})
                        for piece in (TOOL_INPUT[:half], TOOL_INPUT[half:])],
                      ("message_delta", {"type": "message_delta", "delta": {
                          "stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
                      ("message_stop", {"type": "message_stop"})]
            self.start_stream(b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                                       for name, data in events))
        elif self.path.endswith("/chat/completions"):
            chunks = [{"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": 0, "id": call, "type": "function",
                "function": {"name": "shell", "arguments": TOOL_INPUT[:half]}}]}}]},
                {"choices": [{"index": 0, "delta": {"tool_calls": [{
                    "index": 0, "function": {"arguments": TOOL_INPUT[half:]}}]}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                 "usage": {"prompt_tokens": 3, "completion_tokens": 9}}]
            self.start_stream(b"".join(b"data: " + json.dumps(c).encode() + b"\n\n"
                                       for c in chunks) + b"data: [DONE]\n\n")
        else:
            self.send_json({"id": "resp_1", "status": "completed", "output": [
                {"type": "function_call", "id": "fc_1", "call_id": call,
                 "name": "exec_command", "arguments": TOOL_INPUT}],
                "usage": {"input_tokens": 3, "output_tokens": 9}})


@pytest.mark.parametrize("path", [MESSAGES, CHAT, RESPONSES])
def test_tool_calls_and_downloads_are_counted_from_the_record(tmp_path: Path,
                                                              path: str) -> None:
    """Partial: the model's tool calls are counted from its answers as the gateway read
    them (a streamed call's input arrives in pieces), and the results it was sent; an
    agent's later edits of its session files change neither."""
    body = {"model": "m", "max_tokens": 64, "stream": path != RESPONSES,
            **({"input": "Rank."} if path == RESPONSES
               else {"messages": [{"role": "user", "content": "Rank."}]})}
    replay(tmp_path, [(path, body), (path, body)], provider=CallsTools)
    calls = read_calls(tmp_path / "model")
    assert calls is not None and calls.complete
    assert len(calls.ids) == 2
    assert count_shell_downloads(calls.shell_commands) == 4  # curl and pip install, twice


def test_a_conversation_the_agent_writes_counts_no_call(tmp_path: Path) -> None:
    """Tool calls shown only in the history the agent sends are not the model's: no count
    (a forged history inflates nothing), nor does a tool result answering one (the agent
    writes both; only the model's answers make calls)."""
    body = anthropic(result("ok"))
    body["messages"][1]["content"].append({"type": "tool_use", "id": "forged", "name": "Bash",
                                           "input": {"command": "wget https://x.invalid"}})
    replay(tmp_path, [(MESSAGES, body)])
    calls = read_calls(tmp_path / "model")
    assert calls is not None and calls.ids == ()
    assert count_shell_downloads(calls.shell_commands) == 0
