"""An agent that hangs up once it has the whole answer leaves the answer whole in the record.

Seen in CI: the refusal of a non-streamed request reached the agent, which closed the
connection before the upstream's body had formally ended; the record said
``client_disconnected`` and not complete, so the provider's refusal did not count and the
run was ``no_file``. The stand-in provider here sends its JSON answer as one chunk and
ends the body half a second later.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from spu.gateway.verdict import gateway_verdict
from tests.gateway_doubles import (
    JsonProvider,
    gateway_before,
    post_stream,
    stand_in,
    wait_for_record,
)

REFUSAL = {"id": "m1", "type": "message", "role": "assistant", "model": "m", "content": [],
           "stop_reason": "refusal", "usage": {"input_tokens": 3, "output_tokens": 0}}


class _EndsLate(JsonProvider):
    protocol_version = "HTTP/1.1"

    def reply(self, body: bytes) -> None:
        data = json.dumps(REFUSAL).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
        time.sleep(0.5)  # the body's end comes late
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass


def test_a_refusal_the_agent_read_whole_counts_though_it_hung_up_before_the_end(
        tmp_path: Path) -> None:
    with stand_in(_EndsLate) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
        with post_stream(gw, body) as agent:  # unstreamed: "stream" is not in the body
            agent.settimeout(10)
            seen = b""
            while b'"refusal"' not in seen:
                seen += agent.recv(65536)
        entries = wait_for_record(gw)
    assert len(entries) == 1 and entries[0].refusal and entries[0].complete, entries
    assert gateway_verdict(entries).refusal
