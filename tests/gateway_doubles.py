"""Stand-in providers for the model gateway's tests, and the agent's side of a raw request.

The red-team rounds put the real gateway (:class:`spu.gateway.server.ModelGateway`) in
front of a small HTTP server that behaves as a provider might (slow, cutting, rate
limiting, refusing); these are the parts every such test shares.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Self

from spu.gateway.server import ModelGateway
from spu.gateway.verdict import read_requests
from spu.schema import GatewayRequest, Usage

ANSWER: dict[str, Any] = {
    "id": "m1", "type": "message", "role": "assistant", "model": "m",
    "content": [{"type": "text", "text": "Ranked."}], "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 2}}
"""A whole Anthropic Messages answer."""


class JsonProvider(BaseHTTPRequestHandler):
    """Answers every POST with :attr:`answer` as JSON; subclasses set it or :meth:`reply`."""

    answer: ClassVar[dict[str, Any]] = ANSWER
    arrivals: ClassVar[threading.Semaphore | None] = None
    """Released once per request taken, in a class made by :meth:`counted`."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.arrivals is not None:
            self.arrivals.release()
        self.reply(body)

    @classmethod
    def counted(cls) -> type[Self]:
        """This provider as a new class that counts the requests it takes, for
        :meth:`wait_arrivals`: a test waits for the provider to hold its requests instead
        of sleeping for a time a loaded machine may not keep."""
        return type(cls.__name__, (cls,), {"arrivals": threading.Semaphore(0)})

    @classmethod
    def wait_arrivals(cls, count: int, timeout_s: float = 30.0) -> None:
        """Return once ``count`` more requests have reached the provider since the last
        wait (fails after ``timeout_s``); only for a class made by :meth:`counted`."""
        assert cls.arrivals is not None, "wait_arrivals needs a provider made by counted()"
        deadline = time.monotonic() + timeout_s
        for _ in range(count):
            left = max(0.0, deadline - time.monotonic())
            assert cls.arrivals.acquire(timeout=left), (
                f"{count} requests did not reach the provider in {timeout_s:g} s")

    def reply(self, body: bytes) -> None:
        """Answer the request whose body is ``body`` (here: :attr:`answer`, 200)."""
        self.send_json(self.answer)

    def send_json(self, payload: dict[str, Any], status: int = 200,
                  headers: dict[str, str] | None = None) -> None:
        """Send ``payload`` as the whole JSON answer; a client gone meanwhile is ignored."""
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def start_stream(self, first_event: bytes) -> None:
        """Send a streamed answer's headers and ``first_event`` (whole SSE lines), at once."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(first_event)
        self.wfile.flush()

    def log_message(self, *args: object) -> None:  # noqa: D102 - quiet
        return


MESSAGE_START = (b'event: message_start\ndata: {"type": "message_start", "message": {"id": '
                 b'"m1", "usage": {"input_tokens": 3, "output_tokens": 1}}}\n\n')
"""An Anthropic stream's first event: input 3, output 1 (all the usage it states)."""
TOKEN_DELTA = (b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
               b'"delta": {"type": "text_delta", "text": " word"}}\n\n')
"""One output token of an Anthropic stream (the provider bills each it generated)."""


class Generates(JsonProvider):
    """A long streamed generation, billed as it goes: :attr:`start`, then :attr:`delta`
    every 20 ms for up to 30 s (a 128k-token answer takes half an hour)."""

    start: ClassVar[bytes] = MESSAGE_START
    delta: ClassVar[bytes] = TOKEN_DELTA

    def reply(self, body: bytes) -> None:  # noqa: D102
        try:
            self.start_stream(self.start)
            for _ in range(1500):
                self.wfile.write(self.delta)
                self.wfile.flush()
                time.sleep(0.02)
        except OSError:
            pass


def send_raw(port: int, head: bytes, body: bytes, target: bytes = b"/v1/messages") -> bytes:
    """POST ``body`` to ``target`` on the gateway as raw bytes, ``head`` holding header
    lines of the caller's; the status line of the answer (empty if none)."""
    agent = socket.create_connection(("127.0.0.1", port), timeout=10)
    agent.sendall(b"POST " + target + b" HTTP/1.1\r\nhost: x\r\n"
                  b"content-type: application/json\r\n" + head
                  + f"content-length: {len(body)}\r\n\r\n".encode() + body)
    try:
        return agent.recv(4096).split(b"\r\n", 1)[0]
    except OSError:
        return b""
    finally:
        agent.close()


@contextlib.contextmanager
def stand_in(handler: type[BaseHTTPRequestHandler], backlog: int = 5) -> Iterator[str]:
    """A provider served by ``handler`` on loopback, for the ``with`` block; its URL.

    ``backlog``: connections it queues before accepting (more for many at once).
    """
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
    server.request_queue_size = backlog
    server.server_bind()
    server.server_activate()
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def gateway_before(folder: Path, upstream: str, **options: Any) -> Iterator[ModelGateway]:
    """The real gateway of one run in front of ``upstream`` (model ``m``), started."""
    gateway = ModelGateway(folder, upstream=upstream, api="anthropic", api_model="m",
                           api_key="sk-provider-stand-in", **options).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def post_stream(gateway: ModelGateway, body: dict[str, Any]) -> socket.socket:
    """Send a streamed Messages request as an agent with a 4 KiB receive buffer would.

    The caller reads (or does not read) the answer from the returned, connected socket.
    """
    host, port = gateway.url().removeprefix("http://").split(":")[:2]
    data = json.dumps(body).encode()
    agent = socket.socket()
    agent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    agent.connect((host, int(port.split("/")[0])))
    agent.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n"
                  b"content-type: application/json\r\n"
                  + f"x-api-key: {gateway.token}\r\n".encode()
                  + f"content-length: {len(data)}\r\n\r\n".encode() + data)
    return agent


def read_to_end(agent: socket.socket, timeout_s: float = 30) -> None:
    """Read what the gateway sends until it closes the connection."""
    agent.settimeout(timeout_s)
    with contextlib.suppress(OSError):
        while agent.recv(1 << 20):
            pass


def hang_up_on_a_long_answer(gateway: ModelGateway, after_s: float = 0.3,
                             content: str = "Write.") -> None:
    """Ask for a long streamed generation (128k tokens), read nothing, and hang up after
    ``after_s`` seconds."""
    agent = post_stream(gateway, {"model": "m", "stream": True, "max_tokens": 128_000,
                                  "messages": [{"role": "user", "content": content}]})
    time.sleep(after_s)
    agent.close()


def wait_for_record(gateway: ModelGateway, timeout_s: float = 30) -> list[GatewayRequest]:
    """The gateway's record once it holds a line (or after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not read_requests(gateway.requests_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    return read_requests(gateway.requests_path)


# ---------------------------------------------------------------- record lines, as written

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
"""The instant the built record lines count their seconds from."""


def at(s: float) -> str:
    """The record's ``time`` of ``s`` seconds after :data:`T0`."""
    return (T0 + timedelta(seconds=s)).isoformat()


def answered(s: float, latency: float = 3.0, **update: object) -> GatewayRequest:
    """A streamed generation the provider answered whole (a tool call), at ``s``."""
    base = GatewayRequest(time=at(s), endpoint="messages", status=200, complete=True,
                          stream=True, bytes_in=4_000, max_tokens=32_000, latency_s=latency,
                          usage=Usage(input=1_000, output=400), stop_reason="tool_use")
    return base.model_copy(update=update)


def rate_limited(s: float, latency: float = 0.1, **update: object) -> GatewayRequest:
    """A generation the provider answered 429, at ``s``."""
    base = GatewayRequest(time=at(s), endpoint="messages", status=429, bytes_in=4_000,
                          stream=True, max_tokens=32_000, latency_s=latency,
                          error_type="rate_limit_error", error="rate limit exceeded")
    return base.model_copy(update=update)
