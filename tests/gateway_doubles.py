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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from spu.gateway.server import ModelGateway
from spu.gateway.verdict import read_requests
from spu.schema import GatewayRequest

ANSWER: dict[str, Any] = {
    "id": "m1", "type": "message", "role": "assistant", "model": "m",
    "content": [{"type": "text", "text": "Ranked."}], "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 2}}
"""A whole Anthropic Messages answer."""


class JsonProvider(BaseHTTPRequestHandler):
    """Answers every POST with :attr:`answer` as JSON; subclasses set it or :meth:`reply`."""

    answer: ClassVar[dict[str, Any]] = ANSWER

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.reply(body)

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

    def log_message(self, *args: object) -> None:  # noqa: D102 - quiet
        return


@contextlib.contextmanager
def stand_in(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A provider served by ``handler`` on loopback, for the ``with`` block; its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
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


def wait_for_record(gateway: ModelGateway, timeout_s: float = 30) -> list[GatewayRequest]:
    """The gateway's record once it holds a line (or after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not read_requests(gateway.requests_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    return read_requests(gateway.requests_path)
