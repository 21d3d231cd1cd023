"""Round six: request bodies that broke the gateway before it forwarded them.

Between reserving a generation's bound on the spend cap and forwarding it, the gateway
keeps the request's tool results for the exposure screen (and now reads the run's
file). A body whose ``messages`` is not a list, or a tool result holding a lone UTF-16
surrogate (``"\\ud83d"``: what a CLI sends when it truncates its tool output in the middle
of an emoji, which JSON allows), raised there: the agent got a 500, the request had no
line in the record, and its bound stayed held, so that under a spend cap every later
generation waited for ever (a run hung by one tool output). A lone surrogate as the
model's name lost the 403's line the same way. The upstream stands in for the provider;
the gateway is the real one, with a spend cap and list prices.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from spu.config import PriceConfig
from spu.gateway.verdict import read_requests
from tests.gateway_doubles import JsonProvider, gateway_before, stand_in


def _tool_result(content: str, call_id: str = "t1") -> str:
    return json.dumps({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call_id, "content": content}]})


BODIES = [
    # No max_tokens: the bound held is the whole cap (the request then runs alone).
    '{"model": "m", "messages": 5}',
    '{"model": "m", "messages": {"role": "user"}}',
    '{"model": "m", "messages": [' + _tool_result("cut mid-emoji: \\ud83d") + ']}',
    '{"model": "m", "messages": [' + _tool_result("x", call_id="\\udc00") + ']}',
    '{"model": "\\ud800", "max_tokens": 5, "messages": []}',
]


def test_hostile_bodies_are_recorded_and_release_the_spend_cap(tmp_path: Path) -> None:
    statuses = []
    with stand_in(JsonProvider) as upstream, gateway_before(
            tmp_path / "model", upstream, prices=PriceConfig(input=3.0, output=15.0),
            max_cost_usd=5.0) as gateway:
        for body in [*BODIES, '{"model": "m", "max_tokens": 5, "messages": []}']:
            with httpx.Client(trust_env=False, timeout=10) as client:
                statuses.append(client.post(
                    gateway.url() + "/v1/messages", content=body.encode(),
                    headers={"x-api-key": gateway.token,
                             "content-type": "application/json"}).status_code)
    assert 500 not in statuses, statuses
    assert statuses[-1] == 200  # the cap's bounds were given back: the last one ran
    entries = read_requests(gateway.requests_path)
    assert len(entries) == len(BODIES) + 1
    kept = [json.loads(line) for line in gateway.tool_results_path.read_text().splitlines()]
    assert any(k["text"].startswith("cut mid-emoji") for k in kept)  # still screened
