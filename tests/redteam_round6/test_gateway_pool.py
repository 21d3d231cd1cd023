"""Round six: the gateway's own connection pool, filled by the agent's concurrent answers.

The gateway reaches the upstream through one pool of at most 64 connections; a request
that finds them all busy waits ``model_gateway.connect_timeout_s`` for one and then fails
with ``httpx.PoolTimeout``. Round five recorded every timeout but a read timeout as
``gateway.upstream_unreachable``, the provider's failure: an agent that had written a file
it disliked opened 64 long streamed answers, asked once more, and hung up the 64; with no
answer after the pool's timeout the run was ``infra_error`` (excluded, retried). The
upstream here stands in for a provider whose answers take a while (a long generation);
the gateway is the real one, with a 1 s connect window standing for 30 s.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from spu.config import ModelGatewayConfig
from spu.gateway.server import UPSTREAM_CONNECTIONS, ModelGateway
from spu.gateway.verdict import gateway_verdict, read_requests


class _SlowStreams(BaseHTTPRequestHandler):
    """A streamed answer that takes ``hold`` seconds, or one that never starts."""

    protocol_version = "HTTP/1.1"
    hold = 10.0
    hang = False

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.taken()
        if self.hang:
            time.sleep(self.hold)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        start = {"type": "message_start", "message": {
            "id": "m1", "type": "message", "role": "assistant", "model": "m", "content": [],
            "usage": {"input_tokens": 3, "output_tokens": 1}}}
        delta = {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": "x"}}
        try:
            for name, data in [("message_start", start), *[("content_block_delta", delta)] * 8]:
                piece = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
                time.sleep(self.hold / 8)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 64 connections at once: none waits on the backlog

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.arrived = 0
        self._lock = threading.Lock()

    def taken(self) -> None:
        """A request's body was read: it holds one of the gateway's connections."""
        with self._lock:
            self.arrived += 1

    def wait_for(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.arrived < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.arrived >= count


def _crowded_run(tmp_path: Path, handler: type) -> tuple[int, list]:
    upstream = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = ModelGateway(
        tmp_path / "model", upstream=f"http://127.0.0.1:{upstream.server_address[1]}",
        api="anthropic", api_model="m", api_key="sk-provider-rt6",
        cfg=ModelGatewayConfig(connect_timeout_s=1.0, read_timeout_s=30.0)).start()
    ask = {"model": "m", "max_tokens": 100, "stream": True,
           "messages": [{"role": "user", "content": "Rank."}]}
    headers = {"x-api-key": gateway.token}
    done = threading.Event()

    def hold_one(answering: threading.Event) -> None:
        with httpx.Client(trust_env=False, timeout=30) as client, \
                client.stream("POST", gateway.url() + "/v1/messages", headers=headers,
                              json=ask) as answer:
            next(answer.iter_bytes())
            answering.set()
            done.wait(30)  # then hang up

    try:
        for _ in range(UPSTREAM_CONNECTIONS):  # one after the other: each answer started
            answering = threading.Event()
            threading.Thread(target=hold_one, args=(answering,), daemon=True).start()
            if not handler.hang:
                assert answering.wait(10)
        # Every connection of the pool holds a request (however loaded the machine: the
        # hung ones were sent without waiting for an answer), then the one more.
        assert upstream.wait_for(UPSTREAM_CONNECTIONS, 60), upstream.arrived
        time.sleep(0.5)
        with httpx.Client(trust_env=False, timeout=30) as client:
            status = client.post(gateway.url() + "/v1/messages", headers=headers,
                                 json=ask).status_code
        done.set()
        deadline = time.monotonic() + 30
        while len(read_requests(gateway.requests_path)) < UPSTREAM_CONNECTIONS + 1 \
                and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        done.set()
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
    return status, read_requests(gateway.requests_path)


@pytest.mark.slow
def test_a_pool_the_agents_own_answers_fill_is_no_provider_failure(tmp_path: Path) -> None:
    status, entries = _crowded_run(tmp_path, _SlowStreams)
    assert status == 429  # answered at once by the gateway's own policy
    assert entries[0].error_type == "gateway.too_busy", entries[0]
    assert all(e.error_type == "gateway.client_disconnected" for e in entries[1:])
    assert len(entries) == UPSTREAM_CONNECTIONS + 1
    assert gateway_verdict(entries).infra_error is None


@pytest.mark.slow
def test_a_pool_full_of_requests_the_provider_never_answers_is_its_failure(
        tmp_path: Path) -> None:
    """Honest runs: connections held by a provider that takes requests and never starts
    its answers are no doing of the agent's; the pool's timeout stays the provider's."""
    hung = type("Hung", (_SlowStreams,), {"hang": True, "hold": 8.0})
    status, entries = _crowded_run(tmp_path, hung)
    assert status == 504, sorted((e.time, e.status, e.error_type) for e in entries)[:3]
    assert entries[0].error_type == "gateway.upstream_unreachable", entries[0]
    assert gateway_verdict(entries[:1]).infra_error is not None
