"""Round seven: fields of its own requests the agent sets so that the rules misread them.

Round six's rules trust two fields of the agent's body: ``stream`` (an unstreamed wait
past the read window is the agent's doing, a streamed one the provider's) and the asked
output (``max_tokens``: the unstreamed rule and the output-tokens rate limit). A provider
that reads its JSON laxly (as pydantic's lax mode does: ``"false"`` a false, ``32000.0``
an integer) takes values the gateway read otherwise. The upstreams stand in for such a
provider; the gateway is the real one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from spu.config import ModelGatewayConfig
from spu.gateway.server import asked_output_tokens
from spu.gateway.verdict import gateway_verdict, read_requests
from spu.schema import GatewayRequest
from tests.gateway_doubles import ANSWER, JsonProvider, gateway_before, stand_in

ASK = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Rank."}]}


def _lax_true(value: object) -> bool:
    """How a lax provider reads a boolean field."""
    return value is True or (isinstance(value, str) and value.lower() in ("true", "1"))


class _LaxSlowProvider(JsonProvider):
    """Answers the first request; then an unstreamed one (``stream`` read laxly) that asks
    many tokens takes 3 s to generate, and a streamed one over its output limit answers
    429."""

    output_limit = 50_000
    count = [0]

    def reply(self, body: bytes) -> None:  # noqa: D102 - see the class
        ask = json.loads(body)
        self.count[0] += 1
        wanted = ask.get("max_tokens")
        wanted = int(wanted) if isinstance(wanted, int | float) else 0
        if self.count[0] > 1 and wanted > self.output_limit and _lax_true(ask.get("stream")):
            self.send_json({"type": "error", "error": {"type": "rate_limit_error",
                                                       "message": "output tokens"}}, 429,
                           {"anthropic-ratelimit-output-tokens-limit": str(self.output_limit)})
            return
        if self.count[0] > 1 and not _lax_true(ask.get("stream")) and wanted > 10_000:
            time.sleep(3)
        self.send_json(ANSWER, headers={
            "anthropic-ratelimit-output-tokens-limit": str(self.output_limit)})


def _run(tmp_path: Path, second: dict[str, object]) -> list[GatewayRequest]:
    handler = type("Lax", (_LaxSlowProvider,), {"count": [0]})
    with stand_in(handler) as url, \
            gateway_before(tmp_path / "model", url,
                           cfg=ModelGatewayConfig(read_timeout_s=1.0)) as gateway, \
            httpx.Client(trust_env=False, timeout=30) as client:
        for body in (ASK, second):
            client.post(gateway.url() + "/v1/messages",
                        headers={"x-api-key": gateway.token}, json=body)
        time.sleep(0.3)
        return read_requests(gateway.requests_path)


def test_a_stream_field_a_lax_provider_reads_as_false_is_no_provider_hang(
        tmp_path: Path) -> None:
    """Attack: after the file, an unstreamed request asking 128k tokens with
    ``"stream": "false"``; the gateway read ``bool("false")``, a stream, so its wait past
    the read window was the provider's (infra_error, retried). Fixed (server.py): only a
    JSON ``true`` streams; the wait is the agent's (``unstreamed_timeout``). Round twelve:
    a ``stream`` that is no JSON boolean is a recorded 400 (``gateway.bad_request``, the
    agent's), never forwarded: a lax provider streams on ``"true"`` or ``1``."""
    entries = _run(tmp_path, {**ASK, "max_tokens": 128_000, "stream": "false"})
    assert [e.error_type for e in entries] == [None, "gateway.bad_request"]
    assert entries[1].stream is False and entries[1].status == 400
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None


def test_a_float_max_tokens_is_counted_at_its_value(tmp_path: Path) -> None:
    """Attack: ``"max_tokens": 64000.0`` past the stated output-tokens limit; the gateway
    read no bound (0 output tokens for the rate rule), so the 429 was the provider's.
    Fixed (``asked_output_tokens``): an integral float or a string of digits counts at
    its value; a fraction or a bool, which providers refuse (400), count as no bound."""
    entries = _run(tmp_path, {**ASK, "max_tokens": 64000.0, "stream": True})
    assert [e.status for e in entries] == [200, 429]
    assert entries[1].max_tokens == 64_000
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None
    assert "output tokens" in verdict.agent_caused[0]
    assert [asked_output_tokens({"max_tokens": v}) for v in (1.5, " 64000", True, -1, "1e5")] \
        == [None, 64_000, None, -1, None]


def test_a_float_max_tokens_unstreamed_past_the_window_is_the_agents(tmp_path: Path) -> None:
    """The unstreamed rule with a float bound: counted at 20000, the agent's doing."""
    entries = _run(tmp_path, {**ASK, "max_tokens": 20_000.0})
    assert entries[1].error_type == "gateway.upstream_timeout"
    assert entries[1].max_tokens == 20_000
    assert gateway_verdict(entries).infra_error is None
