"""Round seven: round six's rate-limit rules against an honest run and a shaped burst.

``own_rate_limits`` counts a 429 as the run's own doing when its own use in the 60 s
before reaches a stated per-minute limit: output tokens with running requests (and the
429 itself) at their ``max_tokens``, requests without usage (the 429) at their body's
size. These tests build the gateway's record as Claude Code's requests leave it
(``max_tokens`` 32000, subagents running at once, a long cached context) and check
which 429s of an organisation's other runs the rules now take for the run's own, and
whether a burst the agent shapes inside the minute still reads as the provider's (no
longer: ``request_burst`` weighs the seconds before a 429 too, and the tests after the
finding check both sides of it).
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from spu.gateway.verdict import BURST_FLOOR, gateway_verdict, own_rate_limits, read_requests
from spu.schema import GatewayRequest, Usage
from tests.gateway_doubles import (
    ANSWER,
    JsonProvider,
    answered,
    at,
    gateway_before,
    rate_limited,
    stand_in,
)

_at = at


def _answer(s: float, latency: float = 5.0, **update: object) -> GatewayRequest:
    return answered(s, latency, **update)


def _busy(s: float, **update: object) -> GatewayRequest:
    """A 429 the organisation's other runs brought on (the run's own use far below)."""
    return rate_limited(s, 0.2, **update)


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


def test_a_burst_within_one_second_under_the_minutes_limit_is_the_agents_doing() -> None:
    limit = {"rate_limit_requests": 60}
    entries = [_answer(0, latency=2.0, **limit)]
    entries += [_answer(100 + k * 0.1, latency=3.0, **limit) for k in range(7)]
    entries.append(_busy(100.75, **limit))
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None and verdict.agent_caused
    # The note names the window that made it the agent's.
    assert "8 of its requests (the 429 among them) came within 0.750 s" \
        in verdict.agent_caused[0]


# The burst rule (``request_burst``) from both sides: a burst the agent shapes within the
# minute's limit is its own; what honest CLIs send together, and any steady rate at or under
# the stated one, leave the organisation's 429 the provider's.

SIXTY = {"rate_limit_requests": 60}


def _side(s: float, **update: object) -> GatewayRequest:
    """Claude Code's short side request (a title, a quota check), pinned to the model."""
    return _answer(s, latency=0.6, max_tokens=512, bytes_in=1_500,
                   usage=Usage(input=300, output=12), stop_reason="end_turn", **update)


def _count_tokens(s: float, **update: object) -> GatewayRequest:
    base = GatewayRequest(time=_at(s), endpoint="count_tokens", status=200, complete=True,
                          bytes_in=4_000, latency_s=0.1)
    return base.model_copy(update=update)


def _is_the_providers(entries: list[GatewayRequest]) -> None:
    verdict = gateway_verdict(sorted(entries, key=lambda e: e.time))
    assert verdict.infra_error is not None and "HTTP 429" in verdict.infra_error
    assert verdict.agent_caused == ()


def _is_the_agents(entries: list[GatewayRequest]) -> str:
    verdict = gateway_verdict(sorted(entries, key=lambda e: e.time))
    assert verdict.infra_error is None
    assert verdict.agent_caused and all("a burst" in said for said in verdict.agent_caused)
    return verdict.agent_caused[-1]


@pytest.mark.parametrize("at_once", [2, 3])
def test_a_few_requests_within_a_second_at_60_a_minute_leave_a_429_the_providers(
        at_once: int) -> None:
    """Honest: the main loop and a subagent or two at once (the 429 one of them)."""
    entries = [_answer(0, **SIXTY)]
    entries += [_answer(100 + k * 0.3, latency=4.0, **SIXTY) for k in range(at_once - 1)]
    entries.append(_busy(100 + (at_once - 1) * 0.3, **SIXTY))
    _is_the_providers(entries)


def test_a_steady_request_every_two_seconds_leaves_a_429_the_providers() -> None:
    entries = [_answer(2.0 * k, latency=1.5, **SIXTY) for k in range(90)]
    entries.append(_busy(180, **SIXTY))
    _is_the_providers(entries)


def test_a_run_at_exactly_the_stated_rate_leaves_a_429_the_providers() -> None:
    """One a second at 60 a minute: any w seconds hold w + 1 of them, under 4 + w."""
    entries = [_answer(float(k), latency=0.8, **SIXTY) for k in range(59)]
    entries.append(_busy(59, **SIXTY))
    _is_the_providers(entries)


def test_claude_codes_main_call_token_count_and_subagents_leave_a_429_the_providers() -> None:
    """The main loop's answer starts two subagents: each counts its tokens and asks, a side
    request goes with them; the second subagent's request gets the organisation's 429.
    Four generations at once (the floor), token counts not among them."""
    entries = [_answer(0, **SIXTY), _answer(30, latency=8.0, **SIXTY),
               _count_tokens(38.1), _answer(38.2, latency=6.0, **SIXTY), _side(38.3, **SIXTY),
               _count_tokens(38.35), _busy(38.4, **SIXTY)]
    _is_the_providers(entries)


@pytest.mark.parametrize(("per_minute", "at_once"), [(12, 5), (60, 6), (600, 15)])
def test_the_floor_at_once_is_the_providers_and_one_more_the_agents(
        per_minute: int, at_once: int) -> None:
    """The floor: five requests at once (the 429 among them) and a second's share of the
    limit more are the provider's, at a configured 12 a minute as at 600; one more is a
    burst, and the note names its window and bound."""
    limit = {"rate_limit_requests": per_minute}
    entries = [_answer(100, latency=3.0, **limit) for _ in range(at_once - 1)]
    entries.append(_busy(100, **limit))
    _is_the_providers(entries)
    said = _is_the_agents([_answer(100, latency=3.0, **limit), *entries])
    assert f"{at_once + 1} of its requests (the 429 among them) came within 0.000 s" in said
    bound = BURST_FLOOR + per_minute / 60
    assert f"past {bound:.2f}: the {BURST_FLOOR} a provider is taken to admit at once plus " \
        f"its stated limit of {per_minute} requests per minute over 1.000 s (a second at " \
        "least)" in said


@pytest.mark.parametrize("seconds", [1, 5])
def test_a_window_exactly_at_the_bound_is_the_providers_and_one_more_the_agents(
        seconds: int) -> None:
    """5 + w requests over exactly w seconds at 60 a minute are at the bound, not past it;
    one more request in those seconds passes it, and the note names the window."""
    n = BURST_FLOOR + seconds
    entries = [_answer(100 + seconds * k / (n - 1), latency=3.0, **SIXTY) for k in range(n - 1)]
    entries.append(_busy(100 + seconds, **SIXTY))
    _is_the_providers(entries)
    said = _is_the_agents([*entries, _answer(100 + seconds / 2, latency=3.0, **SIXTY)])
    assert f"{n + 1} of its requests (the 429 among them) came within {seconds:.3f} s" \
        in said


def test_an_honest_fan_out_retrying_the_organisations_429s_is_still_infra_error() -> None:
    """Six subagents start at once and every request of theirs finds the organisation's
    limit spent. Their first 429s are a burst (six at once), but Claude Code retries each
    with backoff (0.5 s doubling to 32 s, up to a quarter more at random, ten times): its
    later 429s, spread out, stay the provider's, and the run is retried."""
    rng = random.Random(7)
    entries = [_answer(0, **SIXTY), _answer(10, latency=5.0, **SIXTY)]
    for agent in range(6):
        at = 15.0 + agent * 0.05
        for attempt in range(11):
            entries.append(_busy(at, **SIXTY))
            delay = min(0.5 * 2**attempt, 32.0)
            at += delay * (1 + 0.25 * rng.random())
    verdict = gateway_verdict(sorted(entries, key=lambda e: e.time))
    assert verdict.infra_error is not None and "HTTP 429" in verdict.infra_error
    # An agent that fires seven at once and exits at their 429s keeps its outcome.
    _is_the_agents(entries[:2] + [_busy(15.0 + agent * 0.01, **SIXTY) for agent in range(7)])


def test_a_burst_under_the_token_limits_alone_stays_the_providers() -> None:
    """The burst rule weighs requests: tokens are weighed over the minute only (a single
    request holds far more than a second's share of a token limit, and the provider admits
    it; round seven's honest subagents ask 64k output tokens at once under 80k)."""
    limit = {"rate_limit_tokens": 400_000, "rate_limit_output_tokens": 400_000}
    entries = [_answer(0, **limit)]
    entries += [_answer(100 + k * 0.1, latency=3.0, max_tokens=1_000, **limit) for k in range(7)]
    entries.append(_busy(100.75, max_tokens=1_000, **limit))
    _is_the_providers(entries)


class _OneASecond(JsonProvider):
    """A provider that states 60 requests a minute and enforces them as one a second."""

    protocol_version = "HTTP/1.1"
    admitted: ClassVar[list[float]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def reply(self, body: bytes) -> None:
        time.sleep(0.5)  # a provider's answer takes its time, a 429 too
        with self.lock:
            now = time.monotonic()
            ok = not [t for t in self.admitted if now - t < 1.0]
            if ok:
                self.admitted.append(now)
        stated = {"anthropic-ratelimit-requests-limit": "60"}
        if ok:
            self.send_json(ANSWER, headers=stated)
        else:
            self.send_json({"type": "error", "error": {"type": "rate_limit_error",
                                                       "message": "rate limit exceeded"}},
                           429, headers=stated)


def _through_the_gateway(tmp_path: Path, at_once: int) -> list[GatewayRequest]:
    provider = type("OneASecond", (_OneASecond,), {"admitted": [], "lock": threading.Lock()})
    ask = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Rank."}]}
    with stand_in(provider) as upstream, \
            gateway_before(tmp_path / "model", upstream) as gateway, \
            httpx.Client(trust_env=False, timeout=20) as client:
        headers = {"x-api-key": gateway.token}
        client.post(gateway.url() + "/v1/messages", headers=headers, json=ask)
        time.sleep(1.1)  # the bucket full again
        start = threading.Barrier(at_once)

        def fire() -> None:
            start.wait()
            client.post(gateway.url() + "/v1/messages", headers=headers, json=ask)

        threads = [threading.Thread(target=fire) for _ in range(at_once)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + 20
        while len(read_requests(gateway.requests_path)) < 1 + at_once \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        return read_requests(gateway.requests_path)


def test_eight_at_once_against_a_provider_enforcing_a_second_are_the_agents_doing(
        tmp_path: Path) -> None:
    """The real gateway's record: eight requests at once after the file, seven answered
    429 by a provider enforcing its 60 a minute as one a second, then the agent exits."""
    entries = _through_the_gateway(tmp_path, 8)
    statuses = sorted(e.status for e in entries)
    assert statuses.count(429) >= 6 and statuses.count(200) >= 2  # the attack did its part
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None
    assert any("a burst" in said for said in verdict.agent_caused)


def test_subagents_retrying_together_at_the_providers_retry_after_stay_the_providers() -> None:
    """Three subagents get the organisation's 429 at once and retry together each time the
    provider's ``retry-after`` (1 s) says, ten times: each retry was sent after a refusal
    came back, so no window adds them up (a provider's bucket keeps no refused request)."""
    entries = [_answer(0, **SIXTY), _answer(10, latency=5.0, **SIXTY)]
    for attempt in range(11):
        entries += [_busy(15.0 + attempt * 1.2 + agent * 0.01, **SIXTY) for agent in range(3)]
    _is_the_providers(entries)


def test_a_burst_then_another_after_the_refusals_came_back_are_both_the_agents() -> None:
    """Eight at once, the provider taking one; ten seconds later eight again; then the
    agent exits. The second burst was sent after refusals came back, but it is a burst
    of its own: its window starts with it."""
    entries = [_answer(0, **SIXTY)]
    for start in (100.0, 110.0):
        entries.append(_answer(start, latency=3.0, **SIXTY))
        entries += [_busy(start + 0.001 * k, **SIXTY) for k in range(1, 8)]
    verdict = gateway_verdict(sorted(entries, key=lambda e: e.time))
    assert verdict.infra_error is None
    assert len(own_rate_limits(sorted(entries, key=lambda e: e.time))) == 14


def test_a_run_sustained_past_the_stated_rate_for_seconds_is_its_own_doing() -> None:
    """Two requests a second for twenty seconds at 60 a minute, 41 in all with the 429:
    under the minute's limit, but its own requests alone outrun the stated rate over
    seconds (the last 5 s hold 11, past 5 + 5), as the minute's rule would count them a
    minute on."""
    entries = [_answer(100 + 0.5 * k, latency=0.4, **SIXTY) for k in range(40)]
    entries.append(_busy(120, **SIXTY))
    said = _is_the_agents(entries)
    assert "11 of its requests (the 429 among them) came within 5.000 s" in said
