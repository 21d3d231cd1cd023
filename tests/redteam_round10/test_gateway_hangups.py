"""Round ten: the pump's hang-up outcome and the run's end, attacked as the agent would.

Since e9b0942 an answer the agent hung up on, read on to the drain's bounds
(``DRAIN_AFTER_HANGUP_S``, ``DRAIN_AFTER_HANGUP_BYTES``), ends as ``client``
(``gateway.client_disconnected``); a request still going when the run ends is
``gateway.run_ended`` wherever it waits (the cap, the upstream pool, the headers, the
answer). The real gateway in front of stand-in providers, the bounds patched to seconds.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from spu.gateway.verdict import RUN_ENDED, gateway_verdict, read_requests
from spu.schema import GatewayRequest
from tests.gateway_doubles import (
    MESSAGE_START,
    TOKEN_DELTA,
    Generates,
    gateway_before,
    hang_up_on_a_long_answer,
    post_stream,
    stand_in,
    wait_for_record,
)

START, DELTA = MESSAGE_START, TOKEN_DELTA


def test_an_answer_hung_up_on_past_the_drain_still_counts_what_was_generated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: a long streamed generation, hung up on at once.

    Fixed (round ten): was (medium: cost recorded lower than billed, past the spend
    cap): an agent that asks for a streamed answer longer than DRAIN_AFTER_HANGUP_S (300
    s: 128k tokens take half an hour) and hangs up at once leaves the gateway to read it
    for 300 s and then close it (outcome 'client'): the provider bills the tokens it
    generated meanwhile (about 18k at 60 tokens/s), the record counts the
    message_start's usage only (output 1), so spent_usd, the spend cap and the run's
    cost miss them. 64 at a time, again every 300 s. Fix: where an answer ends without
    its final usage (drained to the bound, cut, run_ended), count its output as read
    (the output deltas, at least a token each) or, for the cap, at its max_tokens; or
    keep reading past the drain's bounds for a generation the agent hung up on (up to
    its max_tokens)
    """
    from spu.gateway import relay

    monkeypatch.setattr(relay, "DRAIN_AFTER_HANGUP_S", 1.0)
    with stand_in(Generates) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        hang_up_on_a_long_answer(gw)
        (entry,) = wait_for_record(gw, 20)
    assert entry.error_type == "gateway.client_disconnected", entry  # the agent's: held
    generated = (entry.bytes_out - len(START)) // len(DELTA)
    assert generated > 10, entry
    assert entry.usage.output >= generated, (entry.usage, generated)


def _cut_at_the_run_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[GatewayRequest]:
    """One answer being read (the agent alive, reading), one request waiting in the
    upstream pool behind it (one connection here), then the run ends: the record."""
    from spu.gateway import relay, server

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 0.5)
    monkeypatch.setattr(relay, "UPSTREAM_CONNECTIONS", 1)
    body = {"model": "m", "stream": True, "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Write."}]}
    agents: list[socket.socket] = []
    with stand_in(Generates) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        agents.append(post_stream(gw, body))
        time.sleep(0.5)
        agents.append(post_stream(gw, body))  # waits in the pool
        time.sleep(0.5)
        agents[0].settimeout(0.2)
        for _ in range(3):  # the agent reads on: alive when the run ends
            try:
                agents[0].recv(65536)
            except OSError:
                break
    for agent in agents:
        agent.close()
    return read_requests(gw.requests_path)


def test_requests_cut_by_the_run_end_anywhere_have_one_line_each_and_no_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: an answer it reads and a request waiting in the pool when the run ends.
    Held: one line each (none written twice, none lost), no provider failure; the one in
    the pool is ``gateway.run_ended``."""
    entries = _cut_at_the_run_end(tmp_path, monkeypatch)
    assert len(entries) == 2, entries
    assert gateway_verdict(entries).infra_error is None
    waiting = next(e for e in entries if e.status == 499)
    assert waiting.error_type == RUN_ENDED, waiting


def test_an_answer_being_read_when_the_run_ends_is_run_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent (honest too): the run's end cuts an answer the agent is reading.

    Fixed (round ten): was (low: the label only; both are no failure and count as
    taken): an answer the agent is still reading when the run ends is recorded
    gateway.client_disconnected ('the agent closed the connection'), not run_ended: the
    server's shutdown cancels the request tasks before the pumps, so the relay's finally
    sets client_gone first and the pump's CancelledError takes outcome 'client'; the
    'mid-answer' run_ended branch is reached only when the relay is already gone. Fix:
    in the pump's CancelledError, decide by self.stopping (and whether client_gone was
    set before the stop) rather than client_gone alone, or cancel the pumps before the
    request tasks
    """
    entries = _cut_at_the_run_end(tmp_path, monkeypatch)
    read = next(e for e in entries if e.status == 200)
    assert read.error_type == RUN_ENDED, read
