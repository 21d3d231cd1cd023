"""Round nine: the silence that made a request cut at the run's end (or hung up on) the
provider's failure, attacked as the agent would and weighed for honest runs.

Round eight's fix first judged an upstream silent ``HUNG_AFTER_S`` (180 s) at the run's
end, or when the agent hung up mid-answer, a provider that hung. This round showed the
agent can ask for such a silence (a long reasoning, streamed or not) and have a wait at
the spend cap counted as one; the lead removed the rule: a request cut by the run's end is
``gateway.run_ended`` whatever its silence, and a hang is the gateway's read timeout's to
find while the run goes on. The tests ran against the rule with ``HUNG_AFTER_S`` patched
to 1 s; they now hold without it. The real gateway in front of stand-in providers,
``SHUTDOWN_TIMEOUT_S`` patched to seconds so that each test stays short.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from spu.gateway.verdict import gateway_verdict, read_requests
from tests.gateway.conftest import SCRIPTED_PRICES
from tests.gateway_doubles import ANSWER, JsonProvider, gateway_before, stand_in


class _FirstHoldsTheCap(JsonProvider):
    """Answers a request asking no ``max_tokens`` after ``first_s`` (it held the spend
    cap meanwhile); any other one after ``other_s`` (a provider still generating)."""

    first_s: ClassVar[float] = 1.6
    other_s: ClassVar[float] = 30.0

    def reply(self, body: bytes) -> None:
        time.sleep(self.first_s if "max_tokens" not in json.loads(body) else self.other_s)
        self.send_json(ANSWER)


def _raw_post(port: int, token: str, path: str, body: dict[str, object]) -> socket.socket:
    data = json.dumps(body).encode()
    agent = socket.create_connection(("127.0.0.1", port))
    agent.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  f"x-api-key: {token}\r\ncontent-length: {len(data)}\r\n\r\n".encode() + data)
    return agent


def _hold_the_cap(port: int, token: str) -> None:
    """The agent's first generation: no ``max_tokens``, so its bound is the whole cap."""
    with httpx.Client(trust_env=False, timeout=30) as client:
        client.post(f"http://127.0.0.1:{port}/v1/messages", headers={"x-api-key": token},
                    json={"model": "m", "messages": [{"role": "user", "content": "Rank."}]})


def test_a_wait_at_the_spend_cap_is_no_upstream_silence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent, with ``limits.max_cost_usd`` set: a generation asking no ``max_tokens`` holds
    the whole cap for a second; a short one waits behind it,
    is forwarded when it ends, and the agent exits at once. The upstream was silent on the
    short one for ``SHUTDOWN_TIMEOUT_S`` (0.4 s) only: the run's end cut it."""
    from spu.gateway import server

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 0.4)
    provider = _FirstHoldsTheCap.counted()
    with stand_in(provider) as upstream, gateway_before(
            tmp_path / "model", upstream, prices=SCRIPTED_PRICES, max_cost_usd=1.0) as gw:
        first = threading.Thread(target=_hold_the_cap, args=(gw.port, gw.token))
        first.start()
        provider.wait_arrivals(1)  # the first holds the cap (it was reserved before it went)
        short = _raw_post(gw.port, gw.token, "/v1/messages", {
            "model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]})
        first.join()
        time.sleep(0.1)  # the short one is forwarded now; the agent exits
        short.close()
    entries = read_requests(gw.requests_path)
    short_entry = next(e for e in entries if e.max_tokens == 16)
    assert short_entry.error_type == "gateway.run_ended", short_entry
    assert gateway_verdict(entries).infra_error is None


class _SlowFirst(_FirstHoldsTheCap):
    first_s: ClassVar[float] = 30.0


def test_a_request_waiting_at_the_spend_cap_when_the_run_ends_has_its_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: the run ends while a second generation waits at the cap behind the first."""
    from spu.gateway import server

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 0.4)
    provider = _SlowFirst.counted()
    with stand_in(provider) as upstream, gateway_before(
            tmp_path / "model", upstream, prices=SCRIPTED_PRICES, max_cost_usd=1.0) as gw:
        first = _raw_post(gw.port, gw.token, "/v1/messages", {
            "model": "m", "messages": [{"role": "user", "content": "Rank."}]})
        provider.wait_arrivals(1)  # the first holds the cap
        second = _raw_post(gw.port, gw.token, "/v1/messages", {
            "model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]})
        time.sleep(0.2)
        first.close()
        second.close()
    entries = read_requests(gw.requests_path)
    assert len(entries) == 2, [(e.max_tokens, e.error_type) for e in entries]


class _Reasoning(JsonProvider):
    """An OpenAI Responses stream of a reasoning model: ``response.created``, then
    nothing while it reasons (no summary asked, so no event), as OpenAI's stream does;
    with ``late``, nothing at all, headers included, until it has reasoned (as a Chat
    Completions stream, which has no reasoning events, may)."""

    late: ClassVar[bool] = False

    def reply(self, body: bytes) -> None:
        if self.late:
            time.sleep(30)
        self.start_stream(b'event: response.created\ndata: {"type": "response.created", '
                          b'"response": {"id": "resp_1", "status": "in_progress"}}\n\n')
        time.sleep(30)


@pytest.mark.parametrize("late", [False, True])
def test_a_streamed_reasoning_silence_the_agent_asked_for_is_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, late: bool) -> None:
    """Agent: a streamed Responses request asking a long reasoning; the provider is silent
    as it reasons, mid-answer or before its headers; the agent hangs up and exits (the run
    ends)."""
    from spu.gateway import server

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 0.4)
    provider = type("Reasoning", (_Reasoning,), {"late": late})
    with stand_in(provider) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        agent = _raw_post(gw.port, gw.token, "/v1/responses", {
            "model": "m", "stream": True, "max_output_tokens": 100_000,
            "reasoning": {"effort": "high"}, "input": "Rank the methods."})
        time.sleep(1.4)
        agent.close()
        time.sleep(0.2)
    (entry,) = read_requests(gw.requests_path)
    assert entry.max_tokens == 100_000, entry
    assert gateway_verdict([entry]).infra_error is None, entry


class _PingsOnly(JsonProvider):
    """A provider that hung mid-answer yet keeps its connection alive: the answer's first
    event, then Anthropic's ``ping`` every 0.2 s and nothing else."""

    def reply(self, body: bytes) -> None:
        self.start_stream(b'event: message_start\ndata: {"type": "message_start", '
                          b'"message": {"id": "m1", "usage": {"input_tokens": 3}}}\n\n')
        for _ in range(150):
            self.wfile.write(b'event: ping\ndata: {"type": "ping"}\n\n')
            self.wfile.flush()
            time.sleep(0.2)


@pytest.mark.xfail(strict=True, reason=(
    "BROKEN (low, honest side): a provider that hung mid-answer but sends Anthropic's "
    "keep-alive pings defeats every read timeout (the SDK's and the gateway's: pings are "
    "bytes), so the CLI waits to the run's time limit and the cut is gateway.run_ended: no "
    "provider failure, the honest run is not retried. Fix: a read window on events other "
    "than ping (the reader finds event names), a stream_dropped past it"))
def test_a_provider_hung_mid_answer_that_only_pings_is_still_the_providers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Honest: the CLI waits on a stream that sends only pings until the run's time limit
    ends it."""
    from spu.gateway import server

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 0.4)
    with stand_in(_PingsOnly) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        agent = _raw_post(gw.port, gw.token, "/v1/messages", {
            "model": "m", "stream": True, "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Rank."}]})
        time.sleep(1.5)  # the run's time limit: the runner stops the gateway, agent alive
    agent.close()
    (entry,) = read_requests(gw.requests_path)
    assert gateway_verdict([entry]).infra_error is not None, entry


class _Quick(JsonProvider):
    def reply(self, body: bytes) -> None:
        self.send_json(ANSWER)


def test_a_request_sent_on_a_kept_alive_connection_during_the_stop_is_not_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: a race at the stop. A first request answered on a kept-alive connection,
    a second sent on it while the gateway waits out ``SHUTDOWN_TIMEOUT_S`` with a third
    in flight: the second is either answered and recorded, or never read (the connection
    closed); no request the gateway read is left without a line."""
    from spu.gateway import server

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 1.0)
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]}
    with stand_in(_Quick) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        with httpx.Client(trust_env=False, timeout=5) as client:
            url = f"http://127.0.0.1:{gw.port}/v1/messages"
            assert client.post(url, headers={"x-api-key": gw.token}, json=body).status_code \
                == 200
            stopper = threading.Thread(target=gw.stop)
            stopper.start()
            time.sleep(0.2)
            try:
                second = client.post(url, headers={"x-api-key": gw.token}, json=body)
                answered = second.status_code
            except httpx.HTTPError:
                answered = None
            stopper.join()
    entries = read_requests(gw.requests_path)
    assert len(entries) == (2 if answered is not None else 1), (answered, entries)


class _Keeps(JsonProvider):
    """Keeps the bodies it is sent; answers at once."""

    bodies: ClassVar[list[bytes]] = []

    def reply(self, body: bytes) -> None:
        self.bodies.append(body)
        self.send_json(ANSWER)


@pytest.mark.parametrize("raw", [
    b'{"model": "m", "max_tokens": 64000, "messages": [{"role": "user", '
    b'"content": "Write 40,000 words."}], "max_tokens": 16}',
    # Python keeps "custom" (allowed), a first-keeping provider the server-side search
    b'{"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Rank."}], '
    b'"tools": [{"type": "web_search_20250305", "name": "web_search", "type": "custom", '
    b'"input_schema": {"type": "object"}}]}',
], ids=["max_tokens", "tool_type"])
def test_a_body_naming_a_key_twice_is_not_forwarded(tmp_path: Path, raw: bytes) -> None:
    """Agent: a body naming ``max_tokens`` (or a tool's ``type``) twice, which the record
    and a provider whose parser keeps the first value would read differently.

    Fixed (a strict xfail before): such a body was forwarded as sent, the record keeping
    the last value. Now it is a recorded 400 (``gateway.bad_request``, the agent's), never
    forwarded.
    """
    _Keeps.bodies = []
    with stand_in(_Keeps) as upstream, gateway_before(tmp_path / "model", upstream) as gw, \
            httpx.Client(trust_env=False, timeout=10) as client:
        answer = client.post(f"http://127.0.0.1:{gw.port}/v1/messages", content=raw,
                             headers={"x-api-key": gw.token, "content-type": "application/json"})
    (entry,) = read_requests(gw.requests_path)
    assert (answer.status_code, entry.status, entry.error_type) == (
        400, 400, "gateway.bad_request"), entry
    assert "twice" in answer.json()["error"]["message"]
    assert entry.max_tokens == 16
    assert _Keeps.bodies == []
    assert gateway_verdict([entry]).infra_error is None


class _Prefill(JsonProvider):
    """Sends a streamed answer's headers only after ``prefill_s`` for a long prompt (the
    provider reading it before the first token); answers a short one at once."""

    prefill_s: ClassVar[float] = 8.0

    def reply(self, body: bytes) -> None:
        if len(body) > 100_000:
            time.sleep(self.prefill_s)
        self.send_json(ANSWER)


@pytest.mark.slow
def test_a_pool_held_by_the_agents_long_streamed_prompts_is_its_doing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: 64 streamed requests with 200 KB prompts, then a 65th, then exit.

    Fixed (a strict xfail before; low: 64 long prompts at once meet the provider's
    input-token limits first): at a PoolTimeout only answers being read and unstreamed
    generations within their ``max_tokens`` counted as the agent's own, so 64 streamed
    requests whose prompts hold their headers back past the pool timeout (the prompt's
    length is the agent's choice) made the 65th ``gateway.upstream_unreachable``: the
    provider's, retried. A generation waiting for its headers within what its body takes
    to read at ``verdict.SLOW_PREFILL_BYTES_PER_S`` now counts too, streamed or not.
    """
    from spu.config import ModelGatewayConfig
    from spu.gateway import server
    from spu.gateway.server import UPSTREAM_CONNECTIONS

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 0.5)
    long = {"model": "m", "stream": True, "max_tokens": 16,
            "messages": [{"role": "user", "content": "x " * 100_000}]}
    short = {"model": "m", "stream": True, "max_tokens": 16,
             "messages": [{"role": "user", "content": "Rank."}]}
    held: list[socket.socket] = []
    provider = _Prefill.counted()
    with stand_in(provider, backlog=2 * UPSTREAM_CONNECTIONS) as upstream, gateway_before(
            tmp_path / "model", upstream,
            cfg=ModelGatewayConfig(connect_timeout_s=1.0, read_timeout_s=60.0)) as gw:
        held += [_raw_post(gw.port, gw.token, "/v1/messages", long)
                 for _ in range(UPSTREAM_CONNECTIONS)]
        provider.wait_arrivals(UPSTREAM_CONNECTIONS)  # all 64 with it, reading their prompts
        with httpx.Client(trust_env=False, timeout=10) as client:
            status = client.post(gw.url() + "/v1/messages", headers={"x-api-key": gw.token},
                                 json=short).status_code
        for agent in held:
            agent.close()
    entries = read_requests(gw.requests_path)
    assert gateway_verdict(entries).infra_error is None, gateway_verdict(entries).infra_error
    assert status == 429, [(e.status, e.error_type) for e in entries]


class _SlowCount(JsonProvider):
    """A healthy provider whose token count of a long body takes ``count_s`` (tokenising
    it); a generation it answers at once."""

    count_s: ClassVar[float] = 8.0

    def reply(self, body: bytes) -> None:
        if self.path.endswith("count_tokens") and len(body) > 100_000:
            time.sleep(self.count_s)
            self.send_json({"input_tokens": len(body) // 4})
            return
        self.send_json(ANSWER)


@pytest.mark.slow
def test_a_pool_held_by_the_agents_token_counts_of_long_bodies_is_its_doing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: an answer, then 64 token counts of a 200 KB body (free, outside the spend
    cap), then a streamed generation, then exit.

    Found in review of the fix above (a red-team helper): token counts were left out of the
    pool's count of the agent's own requests, so the generation was
    ``gateway.upstream_unreachable`` and the run ``infra_error``, retried. A token count is
    a prompt the provider reads, too (``verdict.READ_ENDPOINTS``).
    """
    from spu.config import ModelGatewayConfig
    from spu.gateway import server
    from spu.gateway.server import UPSTREAM_CONNECTIONS

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 0.5)
    long = {"model": "m", "messages": [{"role": "user", "content": "x " * 100_000}]}
    short = {"model": "m", "stream": True, "max_tokens": 16,
             "messages": [{"role": "user", "content": "Rank."}]}
    provider = _SlowCount.counted()
    with stand_in(provider, backlog=2 * UPSTREAM_CONNECTIONS) as upstream, gateway_before(
            tmp_path / "model", upstream,
            cfg=ModelGatewayConfig(connect_timeout_s=1.0, read_timeout_s=60.0)) as gw, \
            httpx.Client(trust_env=False, timeout=30) as client:
        url, headers = gw.url() + "/v1/messages", {"x-api-key": gw.token}
        assert client.post(url, headers=headers, json={**short, "stream": False}
                           ).status_code == 200
        provider.wait_arrivals(1)
        held = [_raw_post(gw.port, gw.token, "/v1/messages/count_tokens", long)
                for _ in range(UPSTREAM_CONNECTIONS)]
        provider.wait_arrivals(UPSTREAM_CONNECTIONS)  # all 64 with it, being counted
        status = client.post(url, headers=headers, json=short).status_code
        for agent in held:
            agent.close()
    entries = read_requests(gw.requests_path)
    assert gateway_verdict(entries).infra_error is None, gateway_verdict(entries).infra_error
    assert status == 429, [(e.endpoint, e.status, e.error_type) for e in entries]
