"""Fixtures of the round-four red team: a recording upstream behind a real gateway."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from spu.gateway.server import ModelGateway

collect_ignore = ["agents"]  # scripts run inside sandboxes, not test modules

PROVIDER_KEY = "sk-provider-secret-rt4"
"""The provider key the gateway puts on upstream requests (never the agent's)."""


class Recorder(ThreadingHTTPServer):
    """An upstream that answers every request 200 and records method, path and key."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        self.seen: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        """The upstream's base URL."""
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RecordingHandler(BaseHTTPRequestHandler):
    server: Recorder

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append({"method": self.command, "path": self.path,
                                 "key": self.headers.get("x-api-key")
                                 or self.headers.get("authorization") or "",
                                 "headers": json.dumps({k.lower(): v for k, v
                                                        in self.headers.items()}),
                                 "body": body.decode("utf-8", "replace")})
        data = json.dumps({"data": []}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def recorded_gateway(tmp_path: Path) -> Iterator[tuple[Recorder, ModelGateway]]:
    """A gateway (with a provider key) in front of a recording upstream."""
    upstream = Recorder()
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    gateway = ModelGateway(tmp_path / "model", upstream=upstream.url + "/v1",
                           api="openai-responses", api_model="gpt-rt4",
                           api_key=PROVIDER_KEY).start()
    try:
        yield upstream, gateway
    finally:
        gateway.stop()
        upstream.shutdown()
        upstream.server_close()
from tests.sandbox.conftest import docker_engine  # noqa: E402,F401
