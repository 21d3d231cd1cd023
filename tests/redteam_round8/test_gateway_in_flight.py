"""Round eight: the agent's own unstreamed generations, in flight when it exits.

An unstreamed generation sends nothing until it is whole, and how long that takes is the
agent's to choose (``verdict.unstreamed_timeout``). When the agent exits, the runner stops
the gateway, which waits 10 s (``SHUTDOWN_TIMEOUT_S``) for requests in flight and then
closes its upstream client: a request still waiting for its answer's headers then fails
in ``_forward`` as ``httpx`` reports the closed client, and is recorded as
``gateway.upstream_unreachable`` (502), the provider's failure. Two such requests after
the file, and an exit, make the run ``infra_error`` (the first one is cancelled without a
line; the others are written as 502s).

The pool:

Round six made a request that finds all 64 upstream connections carrying the run's own
answers a ``gateway.too_busy`` (the agent's doing), and kept connections held by requests
the upstream never answered as ``gateway.upstream_unreachable`` (a hung provider). An
unstreamed generation sends nothing until it is whole, and how long that takes is the
agent's to choose (``verdict.unstreamed_timeout``): 64 of them asking a few thousand
tokens each hold the pool for a minute with no answer started, so the 65th request waits
out the pool and fails as the provider's; the agent exits before the 64 end (the gateway
waits 10 s for them at its stop). The upstream here is a provider that generates each
unstreamed answer for 14 s; a 1 s connect window stands for 30 s.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from spu.config import ModelGatewayConfig
from spu.gateway.server import UPSTREAM_CONNECTIONS
from spu.gateway.verdict import gateway_verdict, read_requests
from spu.schema import GatewayRequest
from tests.gateway_doubles import (
    ANSWER,
    JsonProvider,
    gateway_before,
    post_stream,
    stand_in,
    wait_for_record,
)


class _LongUnstreamed(JsonProvider):
    """Answers a request whose ``max_tokens`` is over 1,000 after ``hold`` seconds (a long
    unstreamed generation), a short one at once."""

    hold: ClassVar[float] = 14.0

    def reply(self, body: bytes) -> None:
        if (json.loads(body).get("max_tokens") or 0) > 1_000:
            time.sleep(self.hold)
        self.send_json(ANSWER)


LONG_ASK = json.dumps({"model": "m", "max_tokens": 4_096, "messages": [
    {"role": "user", "content": "Write 3,000 words on ranking."}]}).encode()


def _send_unstreamed(port: int, token: str) -> socket.socket:
    agent = socket.create_connection(("127.0.0.1", port))
    agent.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  + f"x-api-key: {token}\r\ncontent-length: {len(LONG_ASK)}\r\n\r\n".encode()
                  + LONG_ASK)
    return agent


@pytest.mark.slow  # more than a few seconds (waits out the gateway's timings)
def test_unstreamed_generations_in_flight_when_the_agent_exits_are_no_provider_failure(
        tmp_path: Path) -> None:
    """Fixed: each request the gateway's stop cut (its answer not begun) has its line,
    ``gateway.run_ended``, no provider failure; the record is whole when stop returns."""
    ask = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Rank."}]}
    provider = _LongUnstreamed.counted()
    with stand_in(provider, backlog=128) as upstream, gateway_before(
            tmp_path / "model", upstream) as gw:
        with httpx.Client(trust_env=False, timeout=10) as client:
            assert client.post(gw.url() + "/v1/messages", headers={"x-api-key": gw.token},
                               json=ask).status_code == 200  # the file's answer
        held = [_send_unstreamed(gw.port, gw.token) for _ in range(2)]
        provider.wait_arrivals(1 + 2)  # the file's answer; both with the provider, generating
        for agent in held:  # the agent exits; the runner stops the gateway
            agent.close()
    entries = read_requests(gw.requests_path)
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None, [(e.status, e.error_type) for e in entries]
    assert len(entries) == 3  # the file's answer and both cut ones, none lost
    assert [e.error_type for e in entries[1:]] == ["gateway.run_ended"] * 2
    assert all(e.max_tokens == 4_096 and e.latency_s >= 10 for e in entries[1:])


def _hold_the_pool(tmp_path: Path) -> tuple[int, list[GatewayRequest]]:
    ask = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Rank."}]}
    held: list[socket.socket] = []
    provider = _LongUnstreamed.counted()
    with stand_in(provider, backlog=128) as upstream, gateway_before(
            tmp_path / "model", upstream,
            cfg=ModelGatewayConfig(connect_timeout_s=1.0, read_timeout_s=60.0)) as gw:
        with httpx.Client(trust_env=False, timeout=10) as client:
            headers = {"x-api-key": gw.token}
            assert client.post(gw.url() + "/v1/messages", headers=headers,
                               json=ask).status_code == 200  # the file's answer
            held += [_send_unstreamed(gw.port, gw.token) for _ in range(UPSTREAM_CONNECTIONS)]
            provider.wait_arrivals(1 + UPSTREAM_CONNECTIONS)  # and all 64 with the provider
            status = client.post(gw.url() + "/v1/messages", headers=headers,
                                 json=ask).status_code
        for agent in held:  # the agent exits
            with contextlib.suppress(OSError):
                agent.close()
    return status, read_requests(gw.requests_path)


@pytest.mark.slow
def test_a_pool_held_by_the_agents_long_unstreamed_generations_is_its_doing(
        tmp_path: Path) -> None:
    """Fixed: unstreamed generations waiting no longer than their ``max_tokens`` take at
    20 tokens/s hold their connections by the agent's choice: the 65th request's wait is
    ``gateway.too_busy`` (429), and the 64 cut at the stop are ``gateway.run_ended``."""
    status, entries = _hold_the_pool(tmp_path)
    assert status == 429
    assert sum(e.error_type == "gateway.too_busy" for e in entries) == 1
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None, (verdict.infra_error,
                                         [(e.status, e.error_type) for e in entries])


class _Hung(JsonProvider):
    """Takes a request and answers nothing for a long time; with ``first``, sends the
    answer's headers and first event, then nothing."""

    first: ClassVar[bool] = False

    def reply(self, body: bytes) -> None:
        if self.first:
            self.start_stream(b'event: message_start\ndata: {"type": "message_start", '
                              b'"message": {"id": "m1", "usage": {"input_tokens": 3}}}\n\n')
        time.sleep(30)


@pytest.mark.parametrize("first", [False, True])
def test_an_honest_run_on_a_provider_that_hung_is_still_the_providers(
        tmp_path: Path, first: bool) -> None:
    """Honest (round eight's fix must not blame it): the provider takes a request and goes
    silent, before its answer or mid-answer. The gateway's own read timeout
    (``read_timeout_s``, 1 s here for 900 s) finds the hang while the run goes on: the
    provider's failure (``upstream_timeout``, ``stream_dropped``), the run ``infra_error``.
    (Round nine: a silence found only at the run's end is ``run_ended``, whatever its
    length, since the agent may have asked for it.)"""
    provider = type("Hung", (_Hung,), {"first": first})
    with stand_in(provider) as upstream, gateway_before(
            tmp_path / "model", upstream, cfg=ModelGatewayConfig(read_timeout_s=1.0)) as gw:
        agent = _send_unstreamed(gw.port, gw.token)
        wait_for_record(gw, 30)  # the read timeout's line, written while the run goes on
        agent.close()
    (entry,) = read_requests(gw.requests_path)
    assert entry.error_type == ("gateway.stream_dropped" if first
                                else "gateway.upstream_timeout"), entry
    streamed = entry.model_copy(update={"stream": True})
    assert gateway_verdict([streamed]).infra_error is not None


def test_a_request_cut_by_the_runs_end_is_no_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same silent provider, the run ending within the read window: the run's end cut
    it (``run_ended``), whatever the request asked; a short request too."""
    from spu.gateway import server

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 1.0)
    provider = _Hung.counted()
    with stand_in(provider) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        agent = _send_unstreamed(gw.port, gw.token)
        provider.wait_arrivals(1)  # the provider holds it, silent
        agent.close()
    (entry,) = read_requests(gw.requests_path)
    assert entry.error_type == "gateway.run_ended"
    assert gateway_verdict([entry.model_copy(update={"stream": True, "max_tokens": 16})]
                           ).infra_error is None


def test_an_agent_that_stops_reading_then_hangs_up_is_no_provider_silence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent leaves a long streamed answer unread, then hangs up: the gateway was
    waiting on the agent, not on the upstream: no provider failure."""
    from spu.gateway import server
    from spu.scripted import Script, ScriptedModelServer, ScriptedTurn

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 1.0)
    long = Script(name="long", turns=(ScriptedTurn(text="word " * 2_000_000, delta_chars=64,
                                                   as_generated=True),))
    body = {"model": "m", "stream": True, "max_tokens": 100,
            "messages": [{"role": "user", "content": "Rank."}],
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}
    with ScriptedModelServer(long) as provider, \
            gateway_before(tmp_path / "model", provider.url) as gw:
        agent = post_stream(gw, body)
        time.sleep(1.5)  # reads nothing: the gateway's queue and the buffers fill
        agent.close()
        # The gateway tells the hang-up at its next write, not before the run's end on a
        # busy machine: the record is awaited while the run goes on.
        (entry,) = wait_for_record(gw)
    assert entry.error_type in ("gateway.client_disconnected", "gateway.client_stalled"), entry
    assert gateway_verdict([entry]).infra_error is None
