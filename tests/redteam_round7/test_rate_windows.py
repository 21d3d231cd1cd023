"""Round seven: round six's rate-limit rules against an honest run and a shaped burst.

``own_rate_limits`` counts a 429 as the run's own doing when its own use in the 60 s
before reaches a stated per-minute limit: output tokens with running requests (and the
429 itself) at their ``max_tokens``, requests without usage (the 429) at their body's
size. These tests build the gateway's record as Claude Code's requests leave it
(``max_tokens`` 32000, subagents running at once, a long cached context) and check
which 429s of an organisation's other runs the rules now take for the run's own, and
whether a burst the agent shapes inside the minute still reads as the provider's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spu.gateway.verdict import gateway_verdict
from spu.schema import GatewayRequest, Usage

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _at(s: float) -> str:
    return (T0 + timedelta(seconds=s)).isoformat()


def _answer(s: float, latency: float = 5.0, **update: object) -> GatewayRequest:
    base = GatewayRequest(time=_at(s), endpoint="messages", status=200, complete=True,
                          stream=True, bytes_in=4_000, max_tokens=32_000, latency_s=latency,
                          usage=Usage(input=1_000, output=400), stop_reason="tool_use")
    return base.model_copy(update=update)


def _busy(s: float, **update: object) -> GatewayRequest:
    """A 429 the organisation's other runs brought on (the run's own use far below)."""
    base = GatewayRequest(time=_at(s), endpoint="messages", status=429, bytes_in=4_000,
                          stream=True, max_tokens=32_000, latency_s=0.2,
                          error_type="rate_limit_error", error="rate limit exceeded")
    return base.model_copy(update=update)


def test_two_subagents_asking_32k_under_an_80k_output_limit_leave_a_429_the_providers(
) -> None:
    """Honest: the main loop and one subagent stream at once (64k asked, under 80k);
    a 429 of the organisation's other runs is still infra_error."""
    limit = {"rate_limit_output_tokens": 80_000}
    entries = [_answer(0, **limit), _answer(1, latency=60.0, **limit), _busy(10, **limit)]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is not None and verdict.agent_caused == ()


def test_claude_codes_32k_ask_under_a_tier_one_output_limit_leaves_a_429_the_providers(
) -> None:
    limit = {"rate_limit_output_tokens": 8_000}
    entries = [_answer(0, **limit), _answer(20, **limit), _busy(40, **limit)]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is not None and verdict.agent_caused == ()


def test_a_cached_long_context_429_of_the_organisation_stays_the_providers() -> None:
    limit = {"rate_limit_tokens": 100_000, "bytes_in": 600_000}
    cached = Usage(input=20, cache_read=150_000, cache_write=500, output=300)
    entries = [_answer(0, usage=cached, **limit), _answer(30, usage=cached, **limit),
               _busy(45, **limit)]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is not None and verdict.agent_caused == ()


@pytest.mark.xfail(strict=True, reason=(
    "BROKEN (medium, where a provider enforces its minute limit over shorter intervals, "
    "as Anthropic documents: 60 requests a minute may be enforced as one a second): "
    "after the file the agent fires 8 requests within a second at a stated limit of 60 "
    "a minute, gets a 429 and exits; 8 < 60 in the minute, so the 429 is the provider's "
    "and the run is retried. Fix: also weigh the seconds before the 429 (its own "
    "requests in the last w s past limit * w / 60 for w of 1 s and up, with a floor of "
    "a few requests), or count a 429 that followed a burst of the run's own requests "
    "at once as its own."))
def test_a_burst_within_one_second_under_the_minutes_limit_is_the_agents_doing() -> None:
    limit = {"rate_limit_requests": 60}
    entries = [_answer(0, latency=2.0, **limit)]
    entries += [_answer(100 + k * 0.1, latency=3.0, **limit) for k in range(7)]
    entries.append(_busy(100.75, **limit))
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None and verdict.agent_caused
