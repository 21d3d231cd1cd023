"""Round five: an agent that stops reading its stream until the provider gives up.

The gateway passes a streamed answer to the agent through a bounded queue and waits up to
``model_gateway.read_timeout_s`` for the agent to make room; meanwhile it reads nothing
from the upstream. A provider that cuts a connection whose reader stalls (a send
timeout, shorter than the gateway's window) then cuts the answer. That cut was recorded
as ``gateway.stream_dropped``, the provider's failure, so the run was ``infra_error``
(excluded, retried), though the agent chose it by not reading; it is
``gateway.client_stalled`` now, the agent's doing, when the answer waited on the agent
for ``CLIENT_STALL_S`` or more. The upstream here stands in for such a provider (a 1 s
send timeout); the gateway is the real one.
"""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from spu.config import ModelGatewayConfig
from spu.gateway.verdict import gateway_verdict
from tests.gateway_doubles import (
    gateway_before,
    post_stream,
    read_to_end,
    stand_in,
    wait_for_record,
)


class _CutsStalledReaders(BaseHTTPRequestHandler):
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
        delta = {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": "x" * 60000}}
        self.connection.settimeout(1.0)  # the provider's send timeout
        try:
            self.wfile.write(f"event: message_start\ndata: {json.dumps(start)}\n\n".encode())
            piece = f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n".encode()
            for _ in range(4000):  # 240 MB: more than every buffer on the way holds
                self.wfile.write(piece)
        except OSError:
            pass
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        return


@pytest.mark.slow
def test_a_stream_the_agent_stopped_reading_is_no_provider_failure(tmp_path: Path) -> None:
    body = {"model": "m", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "Rank."}]}
    with stand_in(_CutsStalledReaders) as upstream, gateway_before(
            tmp_path / "model", upstream, cfg=ModelGatewayConfig(read_timeout_s=20.0)) as gateway:
        with post_stream(gateway, body) as agent:
            time.sleep(5)  # the agent stalls; the provider gives up after 1 s
            read_to_end(agent)
        entries = wait_for_record(gateway)
    assert entries, "no record line"
    assert [e.error_type for e in entries] == ["gateway.client_stalled"]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None and verdict.agent_caused
