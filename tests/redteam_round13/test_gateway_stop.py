"""A run's gateway process asked to stop while the agent trickles bodies on many connections.

Attack: the agent keeps 100 requests open, each sending its body a byte at a time, so
that at the run's end the gateway has requests in flight that never finish. Holds if the
gateway still stops by itself (not killed by its driver), and each of those requests has
its line in the record.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from spu.config import ModelConfig
from spu.gateway import read_requests
from spu.gateway.session import GatewaySession
from spu.sandbox.base import RunLimits

OPEN = 100


@pytest.mark.slow  # ten seconds and more (the quick tier stays under 5 minutes)
def test_a_gateway_with_bodies_trickling_in_stops_by_itself_and_records_them(
        tmp_path: Path) -> None:
    session = GatewaySession(ModelConfig(name="scripted", provider="scripted"), "anthropic",
                             tmp_path / "run", limits=RunLimits(time_s=60, memory_gb=1, cpus=1))
    session.start()
    held: list[socket.socket] = []
    try:
        gateway = session.gateway
        head = (f"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: {gateway.token}\r\n"
                f"content-type: application/json\r\ncontent-length: 100000\r\n\r\n"
                '{"model": "presented_order", "messages": [').encode()
        for _ in range(OPEN):
            connection = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
            connection.sendall(head)
            held.append(connection)
        for _ in range(3):  # a byte each, now and then: never done, never quite silent
            time.sleep(0.5)
            for connection in held:
                connection.send(b" ")
        session.close()  # the run ends with all of them in flight
        notes = session.notes()
    finally:
        for connection in held:
            connection.close()
        session.close()
    assert not any("was killed" in n for n in notes), notes
    entries = read_requests(tmp_path / "run" / "model" / "requests.jsonl")
    assert len(entries) == OPEN, [e.error_type for e in entries][:5]
