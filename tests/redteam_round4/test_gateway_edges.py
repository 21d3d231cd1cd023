"""Round four: the model gateway attacked from the agent's side of the wall, directly.

Each test drives a real :class:`spu.gateway.server.ModelGateway` over its real socket, as
an agent holding ``SPU_MODEL_URL`` and ``SPU_MODEL_TOKEN`` would. Each attack found was an
``xfail(strict=True)`` test until the gateway met it (``docs/security.md``, round four).
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

from spu.gateway.server import ModelGateway
from spu.gateway.verdict import gateway_verdict, read_requests
from tests.redteam_round4.conftest import PROVIDER_KEY, Recorder


def _raw_get(port: int, path: str, headers: dict[str, str]) -> bytes:
    """Send ``GET path`` as written (an HTTP client would fold its dot segments first)."""
    lines = [f"GET {path} HTTP/1.1", "host: 127.0.0.1", "connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return s.recv(64)


def _client() -> httpx.Client:
    return httpx.Client(trust_env=False, timeout=10)


@pytest.mark.parametrize("path", ["/models/../files", "/models/%2e%2e/batches",
                                  "/v1/x/models/../../chat/completions"])
def test_a_model_list_path_cannot_be_folded_onto_another_upstream_path(
        recorded_gateway: tuple[Recorder, ModelGateway], path: str) -> None:
    upstream, gateway = recorded_gateway
    status = _raw_get(gateway.port, path, {"authorization": f"Bearer {gateway.token}"})
    assert status
    reached = [s for s in upstream.seen if s["key"].endswith(PROVIDER_KEY)]
    assert all(s["path"].split("?")[0].rstrip("/").endswith("/models")
               or "/models/" in s["path"] for s in reached), reached


def test_a_request_without_the_token_never_reaches_the_upstream(
        recorded_gateway: tuple[Recorder, ModelGateway]) -> None:
    """Held: no token, a token in another header, another run's token: 401, nothing sent."""
    upstream, gateway = recorded_gateway
    other = ModelGateway(gateway.folder.parent / "other", upstream=upstream.url,
                         api="openai-responses", api_model="gpt-rt4")
    body = {"model": "gpt-rt4", "input": "hi"}
    with _client() as client:
        for headers in ({}, {"x-token": gateway.token}, {"proxy-authorization": gateway.token},
                        {"authorization": f"Basic {gateway.token}"},
                        {"authorization": f"Bearer {other.token}"},
                        {"x-api-key": "", "authorization": f"Bearer {other.token}"}):
            answer = client.post(gateway.url() + "/v1/responses", json=body, headers=headers)
            assert answer.status_code == 401, headers
    assert upstream.seen == []


def test_another_model_is_refused_whatever_the_path(
        recorded_gateway: tuple[Recorder, ModelGateway]) -> None:
    """Held: the model check follows the endpoint, wherever the path puts it."""
    upstream, gateway = recorded_gateway
    auth = {"authorization": f"Bearer {gateway.token}"}
    with _client() as client:
        for path in ("/v1/responses", "/x/../v1/responses", "/v1/chat/completions",
                     "/v1/messages", "/v1/messages/count_tokens"):
            answer = client.post(gateway.url() + path, json={"model": "gpt-other"},
                                 headers=auth)
            assert answer.status_code == 403, path
    assert upstream.seen == []


def test_a_huge_body_without_the_token_is_refused_before_it_is_read(
        recorded_gateway: tuple[Recorder, ModelGateway]) -> None:
    _, gateway = recorded_gateway
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as s:
        s.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
                  b"\r\ncontent-length: 100000000000\r\n\r\n" + b"{" * 65536)
        s.settimeout(3)
        try:
            first = s.recv(64)
        except TimeoutError:
            first = b""
    assert first.startswith(b"HTTP/1.1 4"), first


class _SlowStream(BaseHTTPRequestHandler):
    """A provider streaming a Messages answer slowly: output tokens only in message_delta."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

        def event(name: str, payload: dict) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        try:
            event("message_start", {"type": "message_start", "message": {
                "id": "msg_rt4", "type": "message", "role": "assistant", "model": "m",
                "content": [], "stop_reason": None,
                "usage": {"input_tokens": 10, "output_tokens": 1}}})
            event("content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}})
            for _ in range(40):
                event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "text_delta", "text": "x" * 50}})
                time.sleep(0.05)
            event("content_block_stop", {"type": "content_block_stop", "index": 0})
            event("message_delta", {"type": "message_delta",
                                    "delta": {"stop_reason": "end_turn"},
                                    "usage": {"output_tokens": 5000}})
            event("message_stop", {"type": "message_stop"})
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        return


def test_hanging_up_mid_stream_does_not_hide_the_output_tokens(tmp_path: Path) -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _SlowStream)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = ModelGateway(tmp_path / "model", upstream=f"http://127.0.0.1:"
                           f"{upstream.server_address[1]}", api="anthropic", api_model="m",
                           api_key=PROVIDER_KEY).start()
    try:
        body = {"model": "m", "stream": True, "max_tokens": 5000,
                "messages": [{"role": "user", "content": "Rank."}]}
        with _client() as client, client.stream(
                "POST", gateway.url() + "/v1/messages", json=body,
                headers={"x-api-key": gateway.token}) as answer:
            for chunk in answer.iter_bytes():
                if b"text_delta" in chunk:
                    break
        time.sleep(3)
    finally:
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
    recorded = gateway_verdict(read_requests(gateway.requests_path)).usage
    assert recorded.output == 5000, recorded


@pytest.mark.slow
def test_a_connection_that_never_finishes_its_request_is_closed(
        recorded_gateway: tuple[Recorder, ModelGateway]) -> None:
    _, gateway = recorded_gateway
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as s:
        s.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\n")
        s.settimeout(20)
        try:
            closed = s.recv(1024) is not None
        except TimeoutError:
            closed = False
    assert closed


class _SlowAnswer(BaseHTTPRequestHandler):
    """A provider that answers every Messages request after 1 s, 1000 output tokens."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        time.sleep(1.0)
        data = json.dumps({"id": "msg_rt4", "type": "message", "role": "assistant",
                           "model": "m", "content": [{"type": "text", "text": "x"}],
                           "stop_reason": "end_turn",
                           "usage": {"input_tokens": 10, "output_tokens": 1000}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


def test_parallel_requests_do_not_overrun_the_spend_cap(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from spu.config import PriceConfig

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _SlowAnswer)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    # 1000 output tokens at 5 USD per million: 0.005 USD a request; the cap is one request.
    gateway = ModelGateway(tmp_path / "model", upstream=f"http://127.0.0.1:"
                           f"{upstream.server_address[1]}", api="anthropic", api_model="m",
                           prices=PriceConfig(input=1.0, output=5.0), max_cost_usd=0.005).start()
    body = {"model": "m", "max_tokens": 1000, "messages": [{"role": "user", "content": "x"}]}

    def ask(_: int) -> int:
        with _client() as client:
            return client.post(gateway.url() + "/v1/messages", json=body,
                               headers={"x-api-key": gateway.token}).status_code

    try:
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(ask, range(16)))
    finally:
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
    assert statuses.count(200) <= 2, statuses
    assert gateway.spent_usd <= 2 * 0.005, gateway.spent_usd


@pytest.mark.parametrize("tool", [{"type": "web_fetch_20250910", "name": "web_fetch"},
                                  {"type": "web_search_20250305", "name": "web_search"}])
def test_provider_side_web_tools_do_not_pass_the_gateway_unrecorded(
        tmp_path: Path, tool: dict[str, str]) -> None:
    upstream = Recorder()
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = ModelGateway(tmp_path / "model", upstream=upstream.url, api="anthropic",
                           api_model="m", api_key=PROVIDER_KEY).start()
    try:
        with _client() as client:
            client.post(gateway.url() + "/v1/messages", headers={"x-api-key": gateway.token},
                        json={"model": "m", "max_tokens": 10, "tools": [tool], "messages": [
                            {"role": "user", "content": "fetch the task's answers"}]})
    finally:
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
    assert not any(tool["type"] in s["body"] for s in upstream.seen), upstream.seen


def test_the_agent_cannot_choose_the_billed_project(
        recorded_gateway: tuple[Recorder, ModelGateway]) -> None:
    upstream, gateway = recorded_gateway
    with _client() as client:
        client.post(gateway.url() + "/v1/responses", json={"model": "gpt-rt4", "input": "x"},
                    headers={"authorization": f"Bearer {gateway.token}",
                             "openai-organization": "org-someone-else",
                             "openai-project": "proj-without-a-budget"})
    assert upstream.seen, "the request was not forwarded"
    sent = json.loads(upstream.seen[0]["headers"])
    assert "openai-organization" not in sent and "openai-project" not in sent, sent


def test_openai_server_tools_and_reaching_betas_are_held_back(
        recorded_gateway: tuple[Recorder, ModelGateway]) -> None:
    """A Responses request with ``web_search`` is a recorded 403; betas that reach out go,
    and OAuth's (the key read as an OAuth token: a 401 the agent would have caused)."""
    upstream, gateway = recorded_gateway
    auth = {"authorization": f"Bearer {gateway.token}"}
    with _client() as client:
        refused = client.post(gateway.url() + "/v1/responses", headers=auth, json={
            "model": "gpt-rt4", "input": "x", "tools": [{"type": "web_search_preview"}]})
        assert refused.status_code == 403
        client.post(gateway.url() + "/v1/responses", json={"model": "gpt-rt4", "input": "x"},
                    headers={**auth, "anthropic-beta": "mcp-client-2025-04-04, "
                             "interleaved-thinking-2025-05-14, oauth-2025-04-20",
                             "x-stainless-lang": "js"})
    assert len(upstream.seen) == 1
    sent = json.loads(upstream.seen[0]["headers"])
    assert sent["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert sent["x-stainless-lang"] == "js"
    entries = read_requests(gateway.requests_path)
    assert entries[0].error_type == "gateway.server_tool_refused"
    assert gateway_verdict(entries).infra_error is None


class _BadRequest(BaseHTTPRequestHandler):
    """A provider that answers every request 400 (the agent's malformed request)."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        data = json.dumps({"type": "error", "error": {
            "type": "invalid_request_error", "message": "max_tokens: must be positive"}}).encode()
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


def test_the_upstreams_400_to_a_bad_request_is_no_provider_failure(tmp_path: Path) -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _BadRequest)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = ModelGateway(tmp_path / "model", upstream=f"http://127.0.0.1:"
                           f"{upstream.server_address[1]}", api="anthropic", api_model="m",
                           api_key=PROVIDER_KEY).start()
    try:
        with _client() as client:
            answer = client.post(gateway.url() + "/v1/messages",
                                 headers={"x-api-key": gateway.token},
                                 json={"model": "m", "max_tokens": -1, "messages": []})
    finally:
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
    assert answer.status_code == 400
    entries = read_requests(gateway.requests_path)
    assert [e.status for e in entries] == [400]
    assert gateway_verdict(entries).infra_error is None


def test_the_record_line_is_written_before_the_answer_ends(
        recorded_gateway: tuple[Recorder, ModelGateway]) -> None:
    """A run that ends as its last answer ends finds that answer in the record."""
    _, gateway = recorded_gateway
    with _client() as client:
        for n in range(20):
            client.post(gateway.url() + "/v1/responses", json={"model": "gpt-rt4", "input": "x"},
                        headers={"authorization": f"Bearer {gateway.token}"})
            assert len(read_requests(gateway.requests_path)) == n + 1
