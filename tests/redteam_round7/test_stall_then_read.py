"""Round seven: a stall the agent hides by reading steadily afterwards.

Round six counts an upstream cut as the agent's doing (``gateway.client_stalled``) only
when it is found within ``CLIENT_STALL_S`` (2 s) of the end of a wait of 2 s or more on
the agent. A provider that drops a stalled reader closes its side during the stall, but
what it sent before (its send buffer, the gateway's receive buffer: megabytes on a fast
link) is still read before the cut shows. The agent stalls, then reads fast enough that
no single wait reaches 2 s but slowly enough that the buffered megabytes take longer
than 2 s: the cut is found late and read as the provider's. The upstream stands in for
a provider with a 1 s send timeout (round five's); the gateway is the real one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spu.config import ModelGatewayConfig
from spu.gateway.verdict import gateway_verdict, read_requests
from tests.gateway_doubles import gateway_before, post_stream, stand_in, wait_for_record
from tests.redteam_round5.test_gateway_stall import _CutsStalledReaders

ASK = {"model": "m", "max_tokens": 100, "stream": True,
       "messages": [{"role": "user", "content": "Rank."}]}


@pytest.mark.slow
def test_a_stall_followed_by_steady_reading_is_still_the_agents_doing(tmp_path: Path) -> None:
    """Attack: stall 5 s after the file (the provider cuts), then read at about 400 kB/s
    until the end. Before the fix the buffered answer took over 2 s to pass with no wait
    of 2 s, and the cut was ``gateway.stream_dropped`` (infra_error, retried). Fixed
    (server.py ``_pump``): a wait on the agent that begins within ``CLIENT_STALL_S`` of
    a stall's end carries the stall on, so the cut is found within it."""
    with stand_in(_CutsStalledReaders) as upstream, gateway_before(
            tmp_path / "model", upstream, cfg=ModelGatewayConfig(read_timeout_s=20.0)) as gateway:
        with post_stream(gateway, ASK) as agent:
            time.sleep(5)  # the stall: the provider gives up after 1 s
            agent.settimeout(30)
            deadline = time.monotonic() + 25
            got = 0
            while time.monotonic() < deadline:
                try:
                    data = agent.recv(8192)
                except OSError:
                    break
                if not data:
                    break
                got += len(data)
                time.sleep(0.004)  # never still for long: no wait of 2 s
        wait_for_record(gateway)
    entries = read_requests(gateway.requests_path)
    assert got > 1 << 20, got  # megabytes were still on the way after the stall
    assert [e.error_type for e in entries] == ["gateway.client_stalled"], entries[0].error
    assert gateway_verdict(entries).infra_error is None
