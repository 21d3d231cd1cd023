"""Round six: 429s the agent brings on itself past round five's tokens rule.

Round five counts a 429 as the run's own doing when the run's own tokens in the minute
before it reach the tokens-per-minute limit the provider states (``own_rate_limits``).
Providers limit more than input tokens: requests per minute (Anthropic's
``anthropic-ratelimit-requests-limit``, OpenAI's ``x-ratelimit-limit-requests``), output
tokens per minute (``anthropic-ratelimit-output-tokens-limit``), and token counting has
limits of its own; and a request still in flight when the 429 comes is written to the
record after it. The upstream here stands in for a provider that enforces such limits
on what the run itself sent (the organisation's other runs sending nothing); the gateway
is the real one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from spu.config import ModelGatewayConfig
from spu.gateway.server import ModelGateway
from spu.gateway.verdict import gateway_verdict, read_requests
from spu.schema import GatewayRequest

WINDOW_S = 60.0


class _Provider(BaseHTTPRequestHandler):
    """A provider that keeps the minute's requests, input and output tokens (input tokens
    counted as the body's bytes, as ``own_rate_limits`` bounds them) and answers 429 once
    the request would pass ``limits``; every answer states ``stated`` as headers."""

    protocol_version = "HTTP/1.1"
    limits: dict[str, int] = {}
    stated: dict[str, str] = {}
    output_tokens = 2
    counts_max_tokens = False
    """Count a request's output at its ``max_tokens`` (OpenAI's tokens per minute; how
    Anthropic estimates output tokens per minute while a request runs)."""
    slow_over_bytes = 10**9
    seen: list[tuple[float, str, int, int]] = []  # (time, endpoint, input, output)
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        endpoint = "count_tokens" if "count_tokens" in self.path else "messages"
        body = json.loads(raw)
        output = 0 if endpoint == "count_tokens" else self.output_tokens
        if self.counts_max_tokens and endpoint != "count_tokens":
            output = max(output, int(body.get("max_tokens") or 0))
        with self.lock:
            now = time.time()
            recent = [s for s in self.seen if now - s[0] < WINDOW_S]
            same = [s for s in recent if s[1] == endpoint]
            over = (len(same) + 1 > self.limits.get(f"{endpoint}_requests", 10**9)
                    or sum(s[2] for s in recent) + len(raw) > self.limits.get("input", 10**9)
                    or sum(s[3] for s in recent) + output > self.limits.get("output", 10**9))
            if not over:
                self.seen.append((now, endpoint, len(raw), output))
        if over:
            self._json(429, {"type": "error", "error": {
                "type": "rate_limit_error", "message": "rate limit exceeded"}})
        elif endpoint == "count_tokens":
            self._json(200, {"input_tokens": len(raw)})
        elif body.get("stream"):
            self._stream(len(raw), slow=len(raw) > self.slow_over_bytes)
        else:
            self._json(200, {"id": "m1", "type": "message", "role": "assistant", "model": "m",
                             "content": [{"type": "text", "text": "Ranked."}],
                             "stop_reason": "end_turn",
                             "usage": {"input_tokens": len(raw),
                                       "output_tokens": self.output_tokens}})

    def _headers(self, status: int, kind: str, length: int | None) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        for name, value in self.stated.items():
            self.send_header(name, value)
        if length is not None:
            self.send_header("content-length", str(length))
        else:
            self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self._headers(status, "application/json", len(data))
        self.wfile.write(data)

    def _stream(self, input_tokens: int, slow: bool) -> None:
        self._headers(200, "text/event-stream", None)
        events = [
            ("message_start", {"type": "message_start", "message": {
                "id": "m1", "type": "message", "role": "assistant", "model": "m",
                "content": [], "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
            *[("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": "x"}})] * 6,
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                               "usage": {"output_tokens": 7}}),
            ("message_stop", {"type": "message_stop"})]
        try:
            for name, data in events:
                piece = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
                if slow:
                    time.sleep(0.5)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        return


def _provider(limits: dict[str, int], stated: dict[str, str], **more: object) -> type:
    return type("Provider", (_Provider,), {"limits": limits, "stated": stated, "seen": [],
                                           "lock": threading.Lock(), **more})


def _run(tmp_path: Path, provider: type,
         agent: Callable[[httpx.Client, str, dict], list[int]],
         cfg: ModelGatewayConfig | None = None) -> tuple[list[int], list[GatewayRequest]]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), provider)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = ModelGateway(
        tmp_path / "model", upstream=f"http://127.0.0.1:{upstream.server_address[1]}",
        api="anthropic", api_model="m", api_key="sk-provider-rt6", cfg=cfg).start()
    try:
        with httpx.Client(trust_env=False, timeout=20) as client:
            statuses = agent(client, gateway.url(), {"x-api-key": gateway.token})
        deadline = time.monotonic() + 20
        while len(read_requests(gateway.requests_path)) < len(statuses) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
    return statuses, read_requests(gateway.requests_path)


ASK = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "Rank."}]}
STATED = {"anthropic-ratelimit-input-tokens-limit": "80000"}


def _messages(n: int) -> Callable[[httpx.Client, str, dict], list[int]]:
    def agent(client: httpx.Client, url: str, headers: dict) -> list[int]:
        return [client.post(url + "/v1/messages", headers=headers, json=ASK).status_code
                for _ in range(n)]
    return agent


def test_a_burst_past_the_requests_limit_is_the_agents_doing(tmp_path: Path) -> None:
    provider = _provider({"messages_requests": 5},
                         {**STATED, "anthropic-ratelimit-requests-limit": "5"})
    statuses, entries = _run(tmp_path, provider, _messages(8))
    assert statuses == [200] * 5 + [429] * 3  # the attack did its part
    assert gateway_verdict(entries).infra_error is None
    # The same 429 after the run's first request (the organisation's other runs spent the
    # limit) stays the provider's.
    early = [*entries[:1], entries[-1].model_copy(update={"time": entries[0].time})]
    assert gateway_verdict(early).infra_error is not None


def test_a_flood_of_token_counts_is_the_agents_doing(tmp_path: Path) -> None:
    provider = _provider({"count_tokens_requests": 5},
                         {"anthropic-ratelimit-requests-limit": "5"})

    def agent(client: httpx.Client, url: str, headers: dict) -> list[int]:
        said = [client.post(url + "/v1/messages", headers=headers, json=ASK).status_code]
        return said + [client.post(url + "/v1/messages/count_tokens", headers=headers,
                                   json={"model": "m", "messages": ASK["messages"]}).status_code
                       for _ in range(8)]

    statuses, entries = _run(tmp_path, provider, agent)
    assert statuses == [200] * 6 + [429] * 3
    assert gateway_verdict(entries).infra_error is None


def test_answers_past_the_output_tokens_limit_are_the_agents_doing(tmp_path: Path) -> None:
    provider = _provider({"output": 1000},
                         {**STATED, "anthropic-ratelimit-output-tokens-limit": "1000"},
                         output_tokens=600)
    def agent(client: httpx.Client, url: str, headers: dict) -> list[int]:
        # Asking for the 600 tokens it gets: the provider counts a running request so.
        return [client.post(url + "/v1/messages", headers=headers,
                            json={**ASK, "max_tokens": 600}).status_code for _ in range(3)]

    statuses, entries = _run(tmp_path, provider, agent)
    assert statuses == [200, 429, 429]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None
    assert any("output tokens" in said for said in verdict.agent_caused)


def test_a_429_while_the_agents_own_big_requests_are_in_flight_is_its_doing(
        tmp_path: Path) -> None:
    """Two big streamed requests start; while they stream, a small one gets the 429 their
    input tokens brought on; the agent hangs up the big ones. Their lines are written
    after the 429's (a line is written as its answer ends), and round five counted only
    lines before it: the run was infra_error. Fixed: the window is the requests' arrival
    times, whatever order their lines are in."""
    provider = _provider({"input": 100_200},
                         {"anthropic-ratelimit-input-tokens-limit": "100200"},
                         slow_over_bytes=30_000)
    big = {**ASK, "stream": True, "messages": [{"role": "user", "content": "x " * 25_000}]}

    def agent(client: httpx.Client, url: str, headers: dict) -> list[int]:
        started = threading.Barrier(3)
        said: list[int] = []

        def stream_then_hang_up() -> None:
            with client.stream("POST", url + "/v1/messages", headers=headers,
                               json=big) as answer:
                said.append(answer.status_code)
                next(answer.iter_bytes())
                started.wait()
                time.sleep(1.0)  # the small request's 429 comes meanwhile

        threads = [threading.Thread(target=stream_then_hang_up) for _ in range(2)]
        for t in threads:
            t.start()
        started.wait()
        said.append(client.post(url + "/v1/messages", headers=headers, json=ASK).status_code)
        for t in threads:
            t.join()
        return said

    statuses, entries = _run(tmp_path, provider, agent)
    assert statuses == [200, 200, 429]  # the attack did its part
    assert entries[0].status == 429  # written first, though it arrived last
    assert [e.error_type for e in entries[1:]] == ["gateway.client_disconnected"] * 2
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None
    assert any("429 counted as the run's own doing" in said for said in verdict.agent_caused)


def test_a_limit_stated_only_on_the_first_answer_still_counts(tmp_path: Path) -> None:
    """A provider that states its limit on some answers (here the first only, not on its
    429s): the latest stated limit before the 429 is the one a burst is weighed against."""
    class FirstOnly(_provider({"input": 80_000}, STATED)):  # type: ignore[misc]
        def _headers(self, status: int, kind: str, length: int | None) -> None:
            with self.lock:
                self.stated = STATED if status == 200 and len(self.seen) == 1 else {}
            super()._headers(status, kind, length)

    burst = {**ASK, "messages": [{"role": "user", "content": "x " * 45_000}]}

    def agent(client: httpx.Client, url: str, headers: dict) -> list[int]:
        said = [client.post(url + "/v1/messages", headers=headers, json=ASK).status_code]
        return said + [client.post(url + "/v1/messages", headers=headers,
                                   json=burst).status_code for _ in range(3)]

    statuses, entries = _run(tmp_path, FirstOnly, agent)
    assert statuses == [200, 429, 429, 429]
    assert [e.rate_limit_tokens for e in entries] == [80_000, None, None, None]
    assert gateway_verdict(entries).infra_error is None


def test_a_burst_against_a_provider_that_states_no_limit_is_the_agents_doing(
        tmp_path: Path) -> None:
    provider = _provider({"input": 80_000}, {})
    burst = {**ASK, "messages": [{"role": "user", "content": "x " * 45_000}]}

    def agent(client: httpx.Client, url: str, headers: dict) -> list[int]:
        said = [client.post(url + "/v1/messages", headers=headers, json=ASK).status_code]
        return said + [client.post(url + "/v1/messages", headers=headers,
                                   json=burst).status_code for _ in range(3)]

    unconfigured = _run(tmp_path / "a", provider, agent)[1]
    provider.seen.clear()
    statuses, entries = _run(tmp_path / "b", provider, agent,
                             ModelGatewayConfig(rate_limit_input_tokens=80_000))
    assert statuses == [200, 429, 429, 429]
    assert gateway_verdict(entries).infra_error is None
    # Unconfigured, the provider's 429 stays its failure (the paper reruns it).
    assert gateway_verdict(unconfigured).infra_error is not None


def test_requests_asking_for_many_tokens_past_the_limit_are_the_agents_doing(
        tmp_path: Path) -> None:
    provider = _provider({"output": 10_000}, {"x-ratelimit-limit-tokens": "10000"},
                         counts_max_tokens=True)

    def agent(client: httpx.Client, url: str, headers: dict) -> list[int]:
        return [client.post(url + "/v1/messages", headers=headers,
                            json={**ASK, "max_tokens": 4000}).status_code for _ in range(4)]

    statuses, entries = _run(tmp_path, provider, agent)
    assert statuses == [200, 200, 429, 429]
    assert sum(e.usage.output for e in entries) == 4  # the answers were short
    assert gateway_verdict(entries).infra_error is None
