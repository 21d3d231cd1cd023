"""Round eleven: round ten's forwarding (header bytes, raw query, time at the headers,
the run's-end label), attacked as the agent would.

The real gateway in front of stand-in providers on loopback.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from spu.gateway.verdict import RUN_ENDED, gateway_verdict, read_requests
from tests.gateway_doubles import (
    MESSAGE_START,
    TOKEN_DELTA,
    Generates,
    JsonProvider,
    gateway_before,
    hang_up_on_a_long_answer,
    send_raw,
    stand_in,
)

HI = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]}


class _Sees(JsonProvider):
    """Answers at once; keeps each request's target and headers (what it was sent)."""

    seen: ClassVar[list[tuple[str, dict[str, str]]]] = []

    def reply(self, body: bytes) -> None:
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        super().reply(body)


def _raw(port: int, target: bytes, head: bytes, body: bytes) -> bytes:
    return send_raw(port, head, body, target)


@pytest.mark.parametrize("query", [b"a=1#/../files", b"x=@evil.example/", b"%2e%2e=/v1/files",
                                   b"q=caf\xe9", b"?beta=true"])
def test_a_query_stays_a_query_at_the_provider(tmp_path: Path, query: bytes) -> None:
    """Agent: a query holding a fragment, an authority, dot segments or a byte past ASCII.

    Holds: the raw query goes after the endpoint's own path, so the provider's path is
    the endpoint's and its host the upstream's; a query httpx cannot build is a recorded
    400; every request the gateway read has its line (a target byte past ASCII is
    refused by the HTTP server before the gateway reads it: no line, nothing sent).
    """
    _Sees.seen = []
    with stand_in(_Sees) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        status = _raw(gw.port, b"/v1/messages?" + query,
                      f"x-api-key: {gw.token}\r\n".encode(), json.dumps(HI).encode())
    entries = read_requests(gw.requests_path)
    if not entries:  # refused by h11 before the app: not read, not forwarded
        assert status.startswith(b"HTTP/1.1 400") and _Sees.seen == [], status
        return
    (entry,) = entries
    if status.startswith(b"HTTP/1.1 200"):
        (path, _), = _Sees.seen
        assert path.split("?", 1)[0] == "/v1/messages", path
    else:
        assert status.startswith((b"HTTP/1.1 400", b"HTTP/1.1 404")), status
        assert _Sees.seen == [] and entry.status in (400, 404), entry


@pytest.mark.parametrize("value", [b"\xa0web-search-2025-03-05", b"WEB-SEARCH-2025-03-05",
                                   b"x, \tcode-execution-2025-05-22 ,mcp-client-2025-04-04",
                                   b"\x85skills-2025-10-02"])
def test_a_dropped_beta_in_bytes_past_ascii_is_still_dropped(tmp_path: Path,
                                                             value: bytes) -> None:
    """Agent: a dropped ``anthropic-beta`` value behind latin-1 whitespace or in capitals.

    Holds: the filter strips (Unicode whitespace, a superset of what a provider trims)
    and lowers before it matches, and what goes on is the stripped value: no dropped
    beta reaches the provider.
    """
    _Sees.seen = []
    with stand_in(_Sees) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        status = _raw(gw.port, b"/v1/messages", f"x-api-key: {gw.token}\r\n".encode()
                      + b"anthropic-beta: " + value + b"\r\n", json.dumps(HI).encode())
    assert status.startswith(b"HTTP/1.1 200"), status
    (_, headers), = _Sees.seen
    sent = headers.get("anthropic-beta", "").lower()
    assert not any(b in sent for b in ("search", "execution", "mcp", "skills")), sent
    assert len(read_requests(gw.requests_path)) == 1


def test_a_request_that_never_reaches_its_headers_has_its_line(tmp_path: Path) -> None:
    """Agent: a request whose upstream refuses the connection (no headers ever go out).

    Holds: the trace never fires; the line keeps the time taken before the forward, a
    latency of at least zero, and a status.
    """
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with gateway_before(tmp_path / "model", f"http://127.0.0.1:{port}") as gw:
        answer = httpx.post(gw.url() + "/v1/messages", json=HI, timeout=20,
                            headers={"x-api-key": gw.token})
    (entry,) = read_requests(gw.requests_path)
    assert answer.status_code == entry.status and entry.status >= 500, entry
    assert entry.latency_s >= 0 and datetime.fromisoformat(entry.time), entry


class _ClosesQuietly(JsonProvider):
    """Answers keep-alive but closes each connection after its answer (a stale
    connection in the gateway's pool for the next request)."""

    protocol_version = "HTTP/1.1"

    def reply(self, body: bytes) -> None:
        super().reply(body)
        self.close_connection = True


def test_requests_on_stale_keep_alive_connections_each_have_a_line(tmp_path: Path) -> None:
    """Agent: requests one after another to a provider that drops idle connections.

    Holds: each goes on a fresh connection (the pool drops the stale one); one line
    each, in order, every time at or after the one before, each answered.
    """
    with stand_in(_ClosesQuietly) as upstream, \
            gateway_before(tmp_path / "model", upstream) as gw:
        statuses = []
        for _ in range(4):
            statuses.append(httpx.post(gw.url() + "/v1/messages", json=HI, timeout=20,
                                       headers={"x-api-key": gw.token}).status_code)
            time.sleep(0.1)
    entries = read_requests(gw.requests_path)
    assert statuses == [200] * 4 and [e.status for e in entries] == [200] * 4, entries
    times = [datetime.fromisoformat(e.time) for e in entries]
    assert times == sorted(times) and all(e.latency_s >= 0 for e in entries), entries



def test_a_hang_up_before_the_stop_is_not_relabelled_run_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: hang up mid-answer, then let the run end while the gateway drains it.

    Holds: the relay's finally ran at the hang-up (not stopping), so the drained answer
    cut by the stop is the agent's hang-up, not the run's end; either way no provider
    failure, and the output read is counted.
    """
    from spu.gateway import relay, server

    monkeypatch.setattr(server, "SHUTDOWN_TIMEOUT_S", 0.5)
    relayed = threading.Event()  # the relay's finally has run: the hang-up is seen
    answer_stream = relay.Relay.answer_stream

    async def seen_relay(self: relay.Relay, *args: Any) -> AsyncIterator[bytes]:
        try:
            async with contextlib.aclosing(answer_stream(self, *args)) as parts:
                async for part in parts:
                    yield part
        finally:
            relayed.set()

    monkeypatch.setattr(relay.Relay, "answer_stream", seen_relay)
    with stand_in(Generates) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        hang_up_on_a_long_answer(gw, after_s=0.5)
        assert relayed.wait(30)  # draining when the run ends
    (entry,) = read_requests(gw.requests_path)
    assert entry.error_type == "gateway.client_disconnected", entry
    assert entry.error_type != RUN_ENDED and gateway_verdict([entry]).infra_error is None
    tokens_read = (entry.bytes_out - len(MESSAGE_START)) // len(TOKEN_DELTA)
    assert entry.usage.output >= tokens_read > 0, entry
