"""Round eight: the burst rule's arrival times, as the real gateway records them.

``request_burst`` weighs each request by its ``time`` in the record. The gateway wrote
that time when a request's headers had come (``handle`` before ``_read_body``), while it
forwards the request only once the whole body has come, up to
``model_gateway.request_timeout_s`` (10 s) later: an agent that sent its requests'
headers one after another and their bodies' last bytes together reached the provider in
one burst, while the record spread the burst over seconds. Fixed: the time is taken when
the body is whole.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from spu.gateway.verdict import gateway_verdict, read_requests
from spu.schema import GatewayRequest
from tests.gateway_doubles import ANSWER, JsonProvider, gateway_before, stand_in

ERROR = {"type": "error", "error": {"type": "rate_limit_error", "message": "rate limit"}}


class _BucketOfFive(JsonProvider):
    """A provider stating 60 requests a minute, enforced as a bucket of five refilled at
    one a second: more lenient than the rule's bucket of four, so a 429 needs six at once."""

    level: ClassVar[list[float]] = [5.0, 0.0]  # requests left, when counted
    lock: ClassVar[threading.Lock] = threading.Lock()

    def reply(self, body: bytes) -> None:
        with self.lock:
            now = time.monotonic()
            left, then = self.level
            left = min(5.0, left + (now - then) if then else left)
            ok = left >= 1.0
            self.level[:] = [left - 1.0 if ok else left, now]
        time.sleep(0.05 if ok else 0.5)  # the 429s' lines come last: the run ends on one
        self.send_json(ANSWER if ok else ERROR, 200 if ok else 429,
                       {"anthropic-ratelimit-requests-limit": "60"})


def _raw_request(port: int, token: str, body: bytes, head_at: float, rest_at: float,
                 t0: float) -> None:
    """Send the headers and all but the body's last byte at ``head_at``, the last byte at
    ``rest_at`` (seconds after ``t0``), then read the answer."""
    time.sleep(max(0.0, t0 + head_at - time.monotonic()))
    agent = socket.create_connection(("127.0.0.1", port))
    agent.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  + f"x-api-key: {token}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                  + body[:-1])
    time.sleep(max(0.0, t0 + rest_at - time.monotonic()))
    agent.sendall(body[-1:])
    agent.settimeout(10)
    try:
        while agent.recv(1 << 16):
            pass
    except OSError:
        pass
    finally:
        agent.close()


def _burst(tmp_path: Path, spread_s: float, n: int = 8) -> list[GatewayRequest]:
    provider = type("Bucket", (_BucketOfFive,), {"level": [5.0, 0.0],
                                                 "lock": threading.Lock()})
    body = json.dumps({"model": "m", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "Rank."}]}).encode()
    with stand_in(provider, backlog=64) as upstream, \
            gateway_before(tmp_path / "model", upstream) as gw:
        t0 = time.monotonic()
        last = spread_s + 0.2
        agents = [threading.Thread(target=_raw_request, args=(
            gw.port, gw.token, body, spread_s * k / (n - 1), last, t0)) for k in range(n)]
        for a in agents:
            a.start()
        for a in agents:
            a.join(20)
        deadline = time.monotonic() + 10
        while len(read_requests(gw.requests_path)) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return read_requests(gw.requests_path)


@pytest.mark.parametrize("spread_s", [
    0.0,
    5.0,
])
@pytest.mark.slow  # more than a few seconds (waits out the gateway's timings)
def test_bodies_that_end_together_are_one_burst_however_early_their_headers_came(
        tmp_path: Path, spread_s: float) -> None:
    """Eight requests reach the provider together after the file, two or more answered
    429 by a provider lenient enough that a burst of six is needed; the agent exits."""
    entries = _burst(tmp_path, spread_s)
    statuses = sorted(e.status for e in entries)
    assert statuses.count(429) >= 2 and statuses.count(200) >= 4, statuses  # it did its part
    assert entries[-1].status == 429
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None, [(e.time, e.status) for e in entries]
    assert any("a burst" in said for said in verdict.agent_caused)
