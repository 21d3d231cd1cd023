"""Round five: a provider failure the agent can choose is no infrastructure error.

The gateway counted ``gateway.upstream_timeout`` (the upstream silent for
``model_gateway.read_timeout_s``, 900 s by default) as the provider's failure: with no
answer after it the run was ``infra_error``, excluded and retried. But a non-streamed
generation sends no byte until it is whole, and how long it takes is the agent's to
choose (``max_tokens``, reasoning effort, a long prompt): an agent that had written a file
it disliked asked for one long non-streamed answer and the run was retried. Likewise a
429 the agent brought on by spending its organisation's tokens per minute itself. Both
are the agent's doing now (``spu.gateway.verdict``: ``unstreamed_timeout``,
``own_rate_limits``); a 429 the run's own tokens did not reach stays the provider's. The
upstreams here stand in for such providers; the gateway is the real one, with a 1 s read
window standing for 900 s.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from spu.config import ModelGatewayConfig
from spu.gateway.server import ModelGateway
from spu.gateway.verdict import gateway_verdict, read_requests

ANSWER = {"id": "m1", "type": "message", "role": "assistant", "model": "m",
          "content": [{"type": "text", "text": "Ranked."}], "stop_reason": "end_turn",
          "usage": {"input_tokens": 3, "output_tokens": 2}}


class _SlowForLongAnswers(BaseHTTPRequestHandler):
    """Answers at once, unless the request asks for many tokens unstreamed: then it is
    silent for 3 s (the time a long answer takes to generate)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        if body.get("max_tokens", 0) > 10_000 and not body.get("stream"):
            time.sleep(3)
        data = json.dumps(ANSWER).encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        return


def test_a_long_unstreamed_answer_the_agent_asked_for_is_no_infra_error(
        tmp_path: Path) -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _SlowForLongAnswers)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = ModelGateway(
        tmp_path / "model", upstream=f"http://127.0.0.1:{upstream.server_address[1]}",
        api="anthropic", api_model="m", api_key="sk-provider-rt5",
        cfg=ModelGatewayConfig(read_timeout_s=1.0)).start()
    try:
        with httpx.Client(trust_env=False, timeout=20) as client:
            ask = {"model": "m", "messages": [{"role": "user", "content": "Rank."}]}
            first = client.post(gateway.url() + "/v1/messages",
                                headers={"x-api-key": gateway.token},
                                json={**ask, "max_tokens": 100})
            chosen = client.post(gateway.url() + "/v1/messages",
                                 headers={"x-api-key": gateway.token},
                                 json={**ask, "max_tokens": 128_000})
    finally:
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
    assert first.status_code == 200 and chosen.status_code == 504  # the attack did its part
    entries = read_requests(gateway.requests_path)
    assert [e.error_type for e in entries][-1] == "gateway.upstream_timeout"
    assert gateway_verdict(entries).infra_error is None


STATED_LIMIT = 80_000
"""Input tokens per minute the upstream states on every answer, as Anthropic's API does."""


class _RateLimited(BaseHTTPRequestHandler):
    """Answers at once, unless the request is large (or asks for ``"busy"``): then 429, as
    a provider answers a run that spent its organisation's input tokens per minute (or
    one whose organisation's other runs spent it)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        limited = len(raw) > 100_000 or b'"busy"' in raw
        data = json.dumps({"type": "error", "error": {
            "type": "rate_limit_error", "message": "input tokens per minute exceeded"}}
            if limited else ANSWER).encode()
        self.send_response(429 if limited else 200)
        self.send_header("content-type", "application/json")
        self.send_header("anthropic-ratelimit-input-tokens-limit", str(STATED_LIMIT))
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


def _rate_limited_run(tmp_path: Path, burst_content: str) -> tuple[list[int], list]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _RateLimited)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = ModelGateway(
        tmp_path / "model", upstream=f"http://127.0.0.1:{upstream.server_address[1]}",
        api="anthropic", api_model="m", api_key="sk-provider-rt5").start()
    try:
        with httpx.Client(trust_env=False, timeout=20) as client:
            ask = {"model": "m", "max_tokens": 100}
            statuses = [client.post(gateway.url() + "/v1/messages",
                                    headers={"x-api-key": gateway.token},
                                    json={**ask, "messages": [{"role": "user",
                                                               "content": content}]}).status_code
                        for content in ["Rank.", *[burst_content] * 3]]
    finally:
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
    return statuses, read_requests(gateway.requests_path)


def test_a_rate_limit_the_agent_spent_itself_is_no_infra_error(tmp_path: Path) -> None:
    statuses, entries = _rate_limited_run(tmp_path, "x " * 200_000)
    assert statuses == [200, 429, 429, 429]  # the attack did its part
    assert {e.rate_limit_tokens for e in entries} == {STATED_LIMIT}
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None
    assert any("429 counted as the run's own doing" in said for said in verdict.agent_caused)


def test_a_rate_limit_the_run_did_not_reach_stays_the_providers(tmp_path: Path) -> None:
    """The same 429s for small requests: the organisation's limit, spent by others."""
    statuses, entries = _rate_limited_run(tmp_path, "busy")
    assert statuses == [200, 429, 429, 429]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is not None and "HTTP 429" in verdict.infra_error
    assert verdict.agent_caused == ()
    # And without a stated limit, a 429 stays the provider's whatever its size.
    unstated = [e.model_copy(update={"rate_limit_tokens": None, "bytes_in": 10**6})
                for e in entries]
    assert gateway_verdict(unstated).infra_error is not None
