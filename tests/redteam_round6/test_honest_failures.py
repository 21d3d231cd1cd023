"""Round six: round five's rules against honest runs, whose provider fails them.

Round five made three failures the agent's doing: an unstreamed generation past the read
window, a stream cut after the agent left it unread for ``CLIENT_STALL_S``, a 429 the
run's own tokens reach. A genuine provider failure (an overload, a 500, no connection)
must still be ``infra_error`` (excluded, retried: the paper reruns API errors, 3.1); these
tests check that, and where the new rules catch an honest run too. The upstreams stand in
for a failing provider; the gateway is the real one, with short windows.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from spu.config import ModelGatewayConfig
from spu.gateway.server import ModelGateway
from spu.gateway.verdict import gateway_verdict, read_requests
from tests.gateway_doubles import (
    gateway_before,
    post_stream,
    read_to_end,
    stand_in,
    wait_for_record,
)

ANSWER = {"id": "m1", "type": "message", "role": "assistant", "model": "m",
          "content": [{"type": "text", "text": "Ranked."}], "stop_reason": "end_turn",
          "usage": {"input_tokens": 3, "output_tokens": 2}}
ASK = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Rank."}]}


class _FailsAfterFirst(BaseHTTPRequestHandler):
    """Answers the first request, then fails every one with ``status`` (or hangs)."""

    status = 529
    hang_s = 0.0
    count = [0]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.count[0] += 1
        if self.count[0] > 1 and self.hang_s:
            time.sleep(self.hang_s)
        ok = self.count[0] == 1
        data = json.dumps(ANSWER if ok else {"type": "error", "error": {
            "type": "overloaded_error" if self.status == 529 else "api_error",
            "message": "Overloaded" if self.status == 529 else "Internal server error"}})
        try:
            self.send_response(200 if ok else self.status)
            self.send_header("content-type", "application/json")
            # A provider states its limits on every answer, failures included.
            self.send_header("anthropic-ratelimit-input-tokens-limit", "80")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        return


def _run(tmp_path: Path, upstream_url: str | None, handler: type | None = None,
         stream: bool = False, **cfg: float) -> tuple[list[int], list]:
    server = None
    if handler is not None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        upstream_url = f"http://127.0.0.1:{server.server_address[1]}"
    assert upstream_url is not None
    gateway = ModelGateway(tmp_path / "model", upstream=upstream_url, api="anthropic",
                           api_model="m", api_key="sk-provider-rt6",
                           cfg=ModelGatewayConfig(**cfg)).start()
    try:
        with httpx.Client(trust_env=False, timeout=30) as client:
            statuses = [client.post(gateway.url() + "/v1/messages",
                                    headers={"x-api-key": gateway.token},
                                    json={**ASK, "stream": stream}).status_code
                        for _ in range(3)]
    finally:
        gateway.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
    return statuses, read_requests(gateway.requests_path)


@pytest.mark.parametrize("status", [529, 500, 503])
def test_an_overloaded_or_failing_provider_is_still_infra_error(tmp_path: Path,
                                                                status: int) -> None:
    """The 3 failures' own bytes pass the stated limit of 80 tokens a minute: a 429 rule
    that counted them would count a 5xx too. It does not (429s only)."""
    handler = type("Fails", (_FailsAfterFirst,), {"status": status, "count": [0]})
    statuses, entries = _run(tmp_path, None, handler)
    assert statuses == [200, status, status]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is not None and f"HTTP {status}" in verdict.infra_error
    assert verdict.agent_caused == ()


def test_a_provider_that_refuses_connections_is_still_infra_error(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    statuses, entries = _run(tmp_path, f"http://127.0.0.1:{port}")
    assert statuses == [502] * 3
    assert {e.error_type for e in entries} == {"gateway.upstream_unreachable"}
    assert gateway_verdict(entries).infra_error is not None


def test_a_provider_that_never_accepts_is_still_infra_error(tmp_path: Path) -> None:
    """A listening socket whose backlog is full and never accepted: connects time out
    (``ConnectTimeout``), ``gateway.upstream_unreachable``, the provider's."""
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        fillers = []
        for _ in range(8):  # fill the accept queue so that later connects hang
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(s)
        try:
            statuses, entries = _run(tmp_path, f"http://127.0.0.1:{port}",
                                     connect_timeout_s=0.5)
        finally:
            for s in fillers:
                s.close()
    assert all(s in (502, 504) for s in statuses)
    assert {e.error_type for e in entries} == {"gateway.upstream_unreachable"}
    assert gateway_verdict(entries).infra_error is not None


def test_a_streamed_request_the_provider_never_answers_is_still_infra_error(
        tmp_path: Path) -> None:
    handler = type("Hangs", (_FailsAfterFirst,), {"hang_s": 3.0, "count": [0]})
    statuses, entries = _run(tmp_path, None, handler, stream=True, read_timeout_s=1.0)
    assert statuses == [200, 504, 504]
    assert gateway_verdict(entries).infra_error is not None


def test_an_unstreamed_request_the_provider_never_answers_is_still_infra_error(
        tmp_path: Path) -> None:
    handler = type("Hangs", (_FailsAfterFirst,), {"hang_s": 3.0, "count": [0]})
    statuses, entries = _run(tmp_path, None, handler, read_timeout_s=1.0)
    assert statuses == [200, 504, 504]
    assert gateway_verdict(entries).infra_error is not None


class _StallThenCut(BaseHTTPRequestHandler):
    """A stream that starts with a burst (which an agent busy for 3 s leaves unread),
    goes on slowly once the agent reads again, and is cut 3 s later by the provider,
    for reasons of its own (a restart): the stall long over."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(1 << 30))
        self.end_headers()
        start = {"type": "message_start", "message": {
            "id": "m1", "type": "message", "role": "assistant", "model": "m", "content": [],
            "usage": {"input_tokens": 3, "output_tokens": 1}}}

        def delta(text: str) -> bytes:
            data = {"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": text}}
            return f"event: content_block_delta\ndata: {json.dumps(data)}\n\n".encode()

        try:
            self.wfile.write(f"event: message_start\ndata: {json.dumps(start)}\n\n".encode())
            big = delta("x" * 60000)
            for _ in range(600):  # 36 MB: more than the buffers on the way hold
                self.wfile.write(big)
            for _ in range(6):  # the agent reads again; the answer goes on, slowly
                self.wfile.write(delta("y"))
                self.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)  # the provider's own cut
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        return


@pytest.mark.slow
def test_a_provider_cut_long_after_a_short_stall_is_still_its_failure(tmp_path: Path) -> None:
    with stand_in(_StallThenCut) as upstream, gateway_before(
            tmp_path / "model", upstream, cfg=ModelGatewayConfig(read_timeout_s=20.0)) as gateway:
        with post_stream(gateway, {**ASK, "stream": True}) as agent:
            time.sleep(3)  # busy: the answer waits on the agent
            read_to_end(agent)
        wait_for_record(gateway)
    entries = read_requests(gateway.requests_path)
    assert entries, "no record line"
    assert [e.error_type for e in entries] == ["gateway.stream_dropped"], entries[0].error
    assert gateway_verdict(entries).infra_error is not None


@pytest.mark.slow
def test_a_stream_read_at_a_trickle_until_the_provider_cuts_it_is_the_agents_doing(
        tmp_path: Path) -> None:
    """The agent never stops reading (no single wait of its own is long) but reads so
    slowly that a provider which drops slow readers (1 s send timeout) cuts the answer.
    Met: the relay passes what the pump has read in batches of up to 256 KiB, so the
    pump's wait for room is the time the agent takes to read a batch, as long as the
    provider's wait for the gateway to read: the cut is ``gateway.client_stalled``."""
    from tests.redteam_round5.test_gateway_stall import _CutsStalledReaders

    with stand_in(_CutsStalledReaders) as upstream, gateway_before(
            tmp_path / "model", upstream, cfg=ModelGatewayConfig(read_timeout_s=20.0)) as gateway:
        with post_stream(gateway, {**ASK, "stream": True}) as agent:
            agent.settimeout(30)
            trickle = time.monotonic() + 8
            while time.monotonic() < trickle and agent.recv(16384):
                time.sleep(0.25)  # 64 KiB a second: never still for long
            read_to_end(agent)
        wait_for_record(gateway)
    entries = read_requests(gateway.requests_path)
    assert [e.error_type for e in entries] == ["gateway.client_stalled"], entries
    assert gateway_verdict(entries).infra_error is None


class _BusyOrganisation(BaseHTTPRequestHandler):
    """Answers two requests (usage: a token for every four bytes, as text tokenizes), then
    429s every one: the organisation's other runs spent its limit. The stated limit is
    800k input tokens a minute, which this run's own tokens (450k) do not reach."""

    count = [0]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.count[0] += 1
        ok = self.count[0] <= 2
        data = json.dumps({**ANSWER, "usage": {"input_tokens": len(raw) // 4,
                                               "output_tokens": 2}} if ok else {
            "type": "error", "error": {"type": "rate_limit_error",
                                       "message": "Rate limited"}}).encode()
        self.send_response(200 if ok else 429)
        self.send_header("content-type", "application/json")
        self.send_header("anthropic-ratelimit-input-tokens-limit", "800000")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


def test_an_honest_long_session_retrying_an_organisations_429_is_still_infra_error(
        tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Busy", (_BusyOrganisation,),
                                                        {"count": [0]}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    gateway = ModelGateway(tmp_path / "model",
                           upstream=f"http://127.0.0.1:{server.server_address[1]}",
                           api="anthropic", api_model="m", api_key="sk-provider-rt6").start()
    long_session = {**ASK, "messages": [{"role": "user", "content": "x" * 600_000}]}
    try:
        with httpx.Client(trust_env=False, timeout=30) as client:
            statuses = [client.post(gateway.url() + "/v1/messages",
                                    headers={"x-api-key": gateway.token},
                                    json=long_session).status_code for _ in range(5)]
    finally:
        gateway.stop()
        server.shutdown()
        server.server_close()
    assert statuses == [200, 200, 429, 429, 429]
    entries = read_requests(gateway.requests_path)
    assert sum(e.usage.input for e in entries) < 800_000 * 0.6  # far from the limit
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is not None and "HTTP 429" in verdict.infra_error
    assert verdict.agent_caused == ()


class _HeadersFirst(BaseHTTPRequestHandler):
    """An unstreamed answer whose headers come at once and whose body comes when the
    generation is done (as some routers answer): 3 s for a request asking many tokens."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        data = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.flush()
        try:
            if body.get("max_tokens", 0) > 10_000:
                time.sleep(3)
            self.wfile.write(data)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        return


def test_a_long_unstreamed_answer_whose_headers_came_first_is_no_infra_error(
        tmp_path: Path) -> None:
    """Round five's long unstreamed answer (``max_tokens`` 128k after the file), from a
    provider that sends the headers first: the read window ran out in the body, which
    was recorded as ``gateway.stream_dropped`` (the provider's, infra_error, retried).
    Fixed: a read timeout of an unstreamed answer is ``gateway.upstream_timeout`` wherever
    it comes, so ``unstreamed_timeout`` counts it as the agent's doing."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HeadersFirst)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    gateway = ModelGateway(tmp_path / "model",
                           upstream=f"http://127.0.0.1:{server.server_address[1]}",
                           api="anthropic", api_model="m", api_key="sk-provider-rt6",
                           cfg=ModelGatewayConfig(read_timeout_s=1.0)).start()
    try:
        with httpx.Client(trust_env=False, timeout=30) as client:
            first = client.post(gateway.url() + "/v1/messages",
                                headers={"x-api-key": gateway.token}, json=ASK)
            try:
                client.post(gateway.url() + "/v1/messages",
                            headers={"x-api-key": gateway.token},
                            json={**ASK, "max_tokens": 128_000})
            except httpx.HTTPError:
                pass  # the body is cut: the gateway cannot take back its 200
    finally:
        gateway.stop()
        server.shutdown()
        server.server_close()
    assert first.status_code == 200
    entries = read_requests(gateway.requests_path)
    assert [e.error_type for e in entries] == [None, "gateway.upstream_timeout"]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None and verdict.agent_caused
