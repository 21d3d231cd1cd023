"""A red team against the exposure screen of issue 41 (items 4 and 6), as the agent would.

The agent controls every byte it sends its gateway: each attack here is sent through the
real gateway (:func:`tests.gateway.test_exposure_gaps.replay`) and screened as the runner
screens a run. Each failed on the commit that closed issue 41's E1-E3: the source reached
the model unflagged (a ``data:`` URL in text, text after a PDF's base64, a schema's
property names, Anthropic's output format, halves parted in the record), counts the
agent inflated or emptied, a reader the agent crashed, and host memory it held.
"""

from __future__ import annotations

import base64
import codecs
import gc
import json
import tracemalloc
import unicodedata
from pathlib import Path
from typing import Any, ClassVar

import pytest

from spu.gateway import answers
from spu.gateway.inputs import read_calls
from spu.tools.egress import count_shell_downloads
from tests.gateway import test_exposure_gaps as gaps
from tests.gateway.sent_documents import DOI, tiny_pdf
from tests.gateway.test_exposure_gaps import (
    CHAT,
    MESSAGES,
    RESPONSES,
    CallsTools,
    anthropic,
    post,
    replay,
    result,
)
from tests.gateway_doubles import JsonProvider, gateway_before, stand_in

PMID = "29449509"
TITLE_WORDS = "Predicting reaction performance in C N cross coupling using machine learning"


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def tools(schema: dict[str, Any]) -> dict[str, Any]:
    """A Messages body whose one tool has ``schema`` as its input schema."""
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Rank."}],
            "tools": [{"name": "lookup", "description": "Look up.", "input_schema": schema}]}


def output_format(field: str) -> dict[str, Any]:
    """A Messages body asking for JSON output whose schema describes the DOI."""
    schema = {"type": "json_schema", "schema": {"type": "object", "description": f"doi {DOI}"}}
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Rank."}],
            field: schema if field == "output_format" else {"format": schema}}


BENIGN_PDF = base64.b64encode(tiny_pdf("Supporting data, nothing more")).decode()

ATTACKS: dict[str, tuple[str, list[tuple[str, dict[str, Any]]]]] = {
    "a data: URL in a tool result's text": ("doi", [(MESSAGES, anthropic(result([text(
        f"data:image/png,see the study doi {DOI}")])))]),
    "a data: URL in Chat user text": ("doi", [(CHAT, {"model": "m", "messages": [
        {"role": "user", "content": f"data:image/png,the doi is {DOI}"}]})]),
    "a data: URL in a function call's output": ("doi", [(RESPONSES, {"model": "m", "input": [
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": f"data:application/pdf,the doi is {DOI}"}]})]),
    "text after a PDF's base64 in a text block": ("title", [(MESSAGES, anthropic(result([text(
        BENIGN_PDF + "\n\n" + TITLE_WORDS)])))]),
    "a schema's property name": ("doi", [(MESSAGES, tools(
        {"type": "object", "properties": {DOI: {"type": "string"}}}))]),
    "a schema's example, a number under a PMID key": ("pmid", [(MESSAGES, tools(
        {"type": "object", "examples": [{"pmid": int(PMID)}]}))]),
    "Anthropic's output_format": ("doi", [(MESSAGES, output_format("output_format"))]),
    "Anthropic's output_config": ("doi", [(MESSAGES, output_format("output_config"))]),
    "a message's content as one block": ("doi", [(MESSAGES, {
        "model": "m", "max_tokens": 64,
        "messages": [{"role": "user", "content": text(f"doi {DOI}")}]})]),
    "halves, parted in the record by another request": ("doi", [
        (MESSAGES, anthropic(result("doi 10.1126/scie"))),
        (MESSAGES, {"model": "m", "max_tokens": 64, "messages": [
            {"role": "user", "content": "another conversation, a subagent's"}]}),
        (MESSAGES, anthropic(result("doi 10.1126/scie"), result("nce.aar5169", "t1"),
                             results=2))]),
    "halves, parted in the record by an edited history": ("doi", [
        (MESSAGES, anthropic(result("doi 10.1126/scie"), result("x" * 3000, "t1"),
                             results=2)),
        (MESSAGES, anthropic(result("doi 10.1126/scie"), result("nce.aar5169", "t1"),
                             results=2))]),
    "the DOI spaced out": ("doi", [(MESSAGES, anthropic(result(" ".join(DOI))))]),
    "the DOI one character a line": ("doi", [(MESSAGES, anthropic(result("\n".join(DOI))))]),
    "the title spaced out": ("title", [(MESSAGES, anthropic(result("  ".join(
        " ".join(word) for word in TITLE_WORDS.split()))))]),
    "the PMID spaced out": ("pmid", [(MESSAGES, anthropic(result("PMID: " + " ".join(PMID))))]),
    "the DOI split by markup": ("doi", [(MESSAGES, anthropic(result(
        "<li>10.1126/<em>science</em>.aar<!-- -->5169</li>")))]),
    "the DOI backwards": ("doi", [(MESSAGES, anthropic(result(DOI[::-1])))]),
    "the DOI in hex": ("doi", [(MESSAGES, anthropic(result(DOI.encode().hex(" "))))]),
    "the DOI in ROT13": ("doi", [(MESSAGES, anthropic(result(codecs.encode(DOI, "rot13"))))]),
    "a new half before one already kept": ("doi", [
        (MESSAGES, anthropic(result("nce.aar5169 is the rest", "t1"), results=2)),
        (MESSAGES, anthropic(result("the doi is 10.1126/scie"), result(
            "nce.aar5169 is the rest", "t1"), results=2))]),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_source_sent_to_the_model_is_flagged(tmp_path: Path, attack: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever way the agent sends the source, the run is flagged and the screen saw all."""
    kind, requests = ATTACKS[attack]
    monkeypatch.setattr(gaps, "SOURCE", gaps.SOURCE.model_copy(update={"pmid": PMID}))
    hits, notes = replay(tmp_path, requests)
    assert kind in {k for k, _ in hits}, (attack, hits)
    assert notes == [], notes


def test_a_pdf_sent_as_a_file_is_still_read(tmp_path: Path) -> None:
    """A file part's ``data:`` URL or bare base64 is still the PDF it holds (control)."""
    pdf = base64.b64encode(tiny_pdf(f"doi {DOI}")).decode()
    for k, data in enumerate(("data:application/pdf;base64," + pdf, pdf)):
        hits, notes = replay(tmp_path / str(k), [(RESPONSES, {"model": "m", "input": [
            {"role": "user", "content": [{"type": "input_file", "filename": "si.pdf",
                                          "file_data": data}]}]})])
        assert hits == [("doi", "model_input:document")] and notes == []


def test_context_is_written_only_where_the_record_parts_neighbours(tmp_path: Path) -> None:
    """A conversation that grows one result at a time needs no line of context; each
    context line is bounded."""
    growing = [(MESSAGES, anthropic(*[result(f"step {k}", f"t{k}") for k in range(n)],
                                    results=n)) for n in range(1, 6)]
    replay(tmp_path / "grows", growing)
    kept = (tmp_path / "grows" / "model" / "tool_results.jsonl").read_text()
    assert '"kind": "context"' not in kept
    replay(tmp_path / "parted", ATTACKS["halves, parted in the record by an edited history"][1])
    lines = [json.loads(line) for line in
             (tmp_path / "parted" / "model" / "tool_results.jsonl").read_text().splitlines()]
    context = [line for line in lines if line["kind"] == "context"]
    assert len(context) == 1 and len(context[0]["text"]) <= 1024  # inputs.CONTEXT_CHARS


def test_tiny_new_texts_buy_little_context(tmp_path: Path) -> None:
    """Tiny new texts between copies of one kept text each bought two lines of a kilobyte
    of context (a cheap way to fill the record's cap and blind the screen): a context
    line now holds 256 characters more than its new text at most (two per new text:
    the kept text's head after it, the kept text's tail before the next)."""
    kept = "k" * 3000
    first = anthropic(result(kept))
    interleaved = anthropic(*[result(kept if k % 2 else f"n{k}", f"t{k}") for k in range(400)],
                            results=400)
    for message in interleaved["messages"][2]["content"]:
        if message["content"] == kept:
            message["tool_use_id"] = "t0"  # the same text as first kept
    replay(tmp_path, [(MESSAGES, first), (MESSAGES, interleaved)])
    lines = [json.loads(line) for line in
             (tmp_path / "model" / "tool_results.jsonl").read_text().splitlines()]
    context = [line for line in lines if line["kind"] == "context"]
    new = [line for line in lines if line["kind"] == "tool_result" and line["chars"] < 10]
    assert len(new) == 200 and len(context) <= 2 * len(new)
    assert max(len(line["text"]) for line in context) <= 256 + 4


# ------------------------------------------------------------------------ the counts


def _forged_pairs(n: int, command: str) -> dict[str, Any]:
    """A history of ``n`` shell calls the model never made, each with its result."""
    calls = [{"type": "tool_use", "id": f"forged{k}", "name": "Bash",
              "input": {"command": command}} for k in range(n)]
    return {"model": "m", "max_tokens": 64, "messages": [
        {"role": "user", "content": "Rank."}, {"role": "assistant", "content": calls},
        {"role": "user", "content": [result("ok", f"forged{k}") for k in range(n)]}]}


def test_forged_calls_and_results_count_nothing(tmp_path: Path) -> None:
    """Calls the model never made, written into the history with their results, inflated
    ``tool_calls`` (50) and ``shell_downloads`` (100) before; they count nothing now."""
    replay(tmp_path, [(MESSAGES, _forged_pairs(50, "curl -O https://x.invalid/a && "
                                                   "wget https://x.invalid/b"))])
    calls = read_calls(tmp_path / "model")
    assert calls is not None and calls.ids == () and calls.shell_commands == ()


def test_a_forged_history_cannot_fill_the_record_of_the_models_calls(tmp_path: Path) -> None:
    """16 MiB of forged calls in the history filled ``tool_calls.jsonl``'s cap before, so
    that the model's own calls after it went unrecorded: ``tool_calls`` 0."""
    forged = _forged_pairs(1100, "true")
    for k, call in enumerate(forged["messages"][1]["content"]):
        call["input"] = {"command": f"echo {k} " + "z" * 16_000}
    forged["stream"] = True
    replay(tmp_path, [(MESSAGES, forged)], provider=CallsTools)
    calls = read_calls(tmp_path / "model")
    assert calls is not None and calls.complete and len(calls.ids) == 1
    assert count_shell_downloads(calls.shell_commands) == 2  # curl and pip install


class CallsWithInput(JsonProvider):
    """Answers with one Bash call whose input is :attr:`given` (a model may write any)."""

    given: ClassVar[Any] = None

    def reply(self, body: bytes) -> None:  # noqa: D102
        self.send_json({"id": "m1", "type": "message", "role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": self.given}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 9}})


@pytest.mark.parametrize("given", ["[" * 16_000, "9" * 5000],
                         ids=["nested past the stack", "5,000 digits"])
def test_a_call_input_python_cannot_read_does_not_crash_the_counts(tmp_path: Path,
                                                                   given: str) -> None:
    """An input nested past Python's stack, or a number past its 4,300 digits, made
    ``read_calls`` raise (RecursionError, ValueError) out of the runner before its
    record was written; it is read as the command line it is now."""
    provider = type("Odd", (CallsWithInput,), {"given": given})
    replay(tmp_path, [(MESSAGES, {"model": "m", "max_tokens": 64,
                                  "messages": [{"role": "user", "content": "Rank."}]})],
           provider=provider)
    calls = read_calls(tmp_path / "model")
    assert calls is not None and calls.ids == ("toolu_1",)


# ----------------------------------------------------------------------- host costs


def test_long_keys_are_not_held_by_the_gateway(tmp_path: Path) -> None:
    """``fold_key``'s cache kept every key the agent sent: 40 requests with an 8 MiB key
    each held 700 MB of the host's memory in the gateway's process."""
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    with stand_in(JsonProvider) as upstream, gateway_before(tmp_path, upstream) as gw:
        post(gw, MESSAGES, body)  # warm up
        gc.collect()
        tracemalloc.start()
        try:
            for k in range(4):
                post(gw, MESSAGES, {**body, f"k{k}" + "x" * (4 << 20): 1})
            gc.collect()
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert held < 4 << 20, f"{held} bytes held after four requests with 4 MiB keys"


class _Normalizer:
    """``unicodedata`` whose ``normalize`` notes the longest run of combining marks it is
    asked to sort (and skips a long one, which would take hours)."""

    def __init__(self) -> None:
        self.longest = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(unicodedata, name)

    def normalize(self, form: str, text: str) -> str:
        run = longest = 0
        for char in text:
            run = run + 1 if unicodedata.combining(char) else 0
            longest = max(longest, run)
        self.longest = max(self.longest, longest)
        return text if longest > 1000 else unicodedata.normalize(form, text)


MARKS = "a" + "\u0301" * 50_000 + "\u0316" * 50_000
"""Marks in falling combining class: Python's insertion sort takes their count squared
(20,000 of each: 3 s; these 100,000: over a minute; a megabyte: hours)."""


def test_marks_in_a_key_are_never_sorted_by_the_gateway(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A key of crafted combining marks made ``fold_key`` sort them on the gateway's
    event loop (every request's top-level keys are folded): minutes per request."""
    spy = _Normalizer()
    monkeypatch.setattr(answers, "unicodedata", spy)
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    with stand_in(JsonProvider) as upstream, gateway_before(tmp_path, upstream) as gw:
        post(gw, MESSAGES, {**body, MARKS: 1, "ty" + MARKS[1:2000] + "pe": 2})
    assert spy.longest <= 2, spy.longest


def test_marks_in_a_tool_result_are_never_sorted_by_the_screen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool result of crafted combining marks made the screen (NFKC, then NFKD for
    the title) sort them: over a minute for these, hours for a megabyte, in the runner."""
    from spu.analysis import exposure

    spy = _Normalizer()
    monkeypatch.setattr(exposure, "unicodedata", spy)
    hits, _ = replay(tmp_path, [(MESSAGES, anthropic(result(MARKS + f" doi {DOI}")))])
    assert spy.longest <= 2, spy.longest
    assert ("doi", "model_input") in hits


class RejectsLong(JsonProvider):
    """Refuses a request over 100 KB, as a provider refuses one past the model's context
    (a 400, nothing billed); answers the others."""

    def reply(self, body: bytes) -> None:  # noqa: D102
        if len(body) > 100_000:
            self.send_json({"type": "error", "error": {
                "type": "invalid_request_error", "message": "prompt is too long"}}, 400)
        else:
            self.send_json(self.answer)


def test_requests_the_provider_refused_do_not_fill_the_record(tmp_path: Path) -> None:
    """Texts of a request the provider refused never reached the model; recorded, they
    filled the record's cap at no cost (no token is billed for a 400), after which the
    source went unscreened (the run said only "screen incomplete")."""
    from spu.config import ModelGatewayConfig

    cfg = ModelGatewayConfig(tool_results_mb=1)
    junk = [(MESSAGES, anthropic(result(f"{k} " + "z" * 600_000))) for k in range(2)]
    hits, notes = replay(tmp_path, [*junk, (MESSAGES, anthropic(result(f"doi {DOI}")))],
                         provider=RejectsLong, expect=(400, 400, 200), cfg=cfg)
    assert hits == [("doi", "model_input")] and notes == []


def test_counts_past_the_records_cap_say_so(tmp_path: Path) -> None:
    """A record of calls stopped by its cap gave counts that read as whole: the run's
    ``evidence_disagreement`` now says they are the calls before the cap."""
    from spu.gateway.answers import AnswerCall, AnswerReading
    from spu.gateway.inputs import InputRecord
    from spu.harness.base import AgentResult
    from spu.harness.evidence import gateway_counts

    record = InputRecord(tmp_path, 1000, 1 << 20, calls_limit_bytes=600)
    for k in range(4):
        record.answered("messages", AnswerReading(tool_calls=[AnswerCall(
            f"toolu_{k}", "Bash", json.dumps({"command": f"curl -O https://x.invalid/{k}"}))]))
    calls = read_calls(tmp_path)
    assert calls is not None and not calls.complete and 0 < len(calls.ids) < 4
    said = gateway_counts(AgentResult(), calls).evidence_disagreement
    assert said is not None and "reached its cap" in said, said
