"""Round eight: the burst rule (``request_burst``, then ``BURST_FLOOR = 4``) from both sides.

A provider 429 is the run's own doing when a window holding it, from at most a minute
before it to its answer, holds more than ``4 + L * max(w, 1 s) / 60`` of the run's
requests: the 429, the requests the provider took, and refused ones sent before any
refusal of the window came back. The record lines are built as the gateway writes them
(as in ``tests/redteam_round7/test_rate_windows.py``). The agent's side: requests the
gateway refuses itself, token counts, the provider's fast 400s, a sequential barrage;
the honest side: Claude Code's fan-out with its SDK's backoff and ``retry-after``, Codex.

What a provider's bucket does is modelled by :class:`_Bucket`, which answers a request
sequence as a token bucket of ``capacity`` refilled at ``per_minute / 60`` a second.
"""

from __future__ import annotations

import random

import pytest

from spu.gateway.verdict import BURST_FLOOR, gateway_verdict, own_rate_limits
from spu.schema import GatewayRequest
from tests.gateway_doubles import answered, at, rate_limited

_at, _answer, _busy = at, answered, rate_limited


def _invalid(s: float, **update: object) -> GatewayRequest:
    """The provider's fast 400 to a body of the agent's (``max_tokens: -1``)."""
    base = GatewayRequest(time=_at(s), endpoint="messages", status=400, bytes_in=200,
                          latency_s=0.02, error_type="invalid_request_error",
                          error="max_tokens: must be greater than or equal to 1")
    return base.model_copy(update=update)


def _gateways_own(s: float, error_type: str, status: int, **update: object) -> GatewayRequest:
    base = GatewayRequest(time=_at(s), endpoint="messages", status=status, bytes_in=300,
                          latency_s=0.001, error_type=error_type, error="refused")
    return base.model_copy(update=update)


def _count_tokens(s: float, status: int = 200, **update: object) -> GatewayRequest:
    base = GatewayRequest(time=_at(s), endpoint="count_tokens", status=status,
                          complete=status == 200, bytes_in=4_000, latency_s=0.05)
    return base.model_copy(update=update)


SIXTY = {"rate_limit_requests": 60}
FIFTY = {"rate_limit_requests": 50}  # Anthropic's tier 1


class _Bucket:
    """A provider's token bucket: ``capacity`` at once, refilled at ``per_minute / 60``/s."""

    def __init__(self, capacity: float, per_minute: int) -> None:
        self.capacity, self.rate = capacity, per_minute / 60
        self.left: float = capacity
        self.then: float | None = None

    def take(self, s: float) -> bool:
        if self.then is not None:
            self.left = min(self.capacity, self.left + (s - self.then) * self.rate)
        self.then = s
        if self.left >= 1:
            self.left -= 1
            return True
        return False


def _sorted(entries: list[GatewayRequest]) -> list[GatewayRequest]:
    """By arrival, as round seven orders them (the 429 last: no answer after it)."""
    return sorted(entries, key=lambda e: e.time)


def _is_the_providers(entries: list[GatewayRequest]) -> None:
    verdict = gateway_verdict(_sorted(entries))
    assert verdict.infra_error is not None and "HTTP 429" in verdict.infra_error
    assert verdict.agent_caused == ()


def _is_the_agents(entries: list[GatewayRequest]) -> None:
    verdict = gateway_verdict(_sorted(entries))
    assert verdict.infra_error is None, verdict.infra_error
    assert verdict.agent_caused


# ---------------------------------------------------------------- the agent's side


def test_the_providers_fast_400s_among_a_burst_are_counted_whole() -> None:
    """Eight requests at once against a bucket of five (past the floor: a 429 needs six),
    each preceded by a body the provider answers 400 in 20 ms. Those 400s came back
    before the next requests were sent: were they refusals that came back, they would
    make the burst read as retries the provider paced. A 400 answers the agent's own body:
    it is counted as a request the provider took, and the burst stays the agent's."""
    bucket, entries = _Bucket(5, 60), [_answer(0, **SIXTY)]
    bucket.take(0)
    at = 100.0
    for _ in range(8):
        entries.append(_invalid(at, **SIXTY))
        at += 0.03  # its 400 came back
        entries.append(_answer(at, **SIXTY) if bucket.take(at) else _busy(at, latency=0.3,
                                                                          **SIXTY))
        at += 0.001
    assert sum(e.status == 429 for e in entries) == 3
    _is_the_agents(entries)


def test_a_bucket_drained_by_the_providers_400s_then_a_429_is_the_agents() -> None:
    """A provider that counts the requests it answers 400 (OpenAI: unsuccessful requests
    count toward the per-minute limit): six bad bodies one after another, each sent when
    the last 400 came back, drain its bucket of five; the next request gets a 429. Fixed:
    the 400s count as taken, 7 within 0.2 s, past 4 + 1 (before, sent after a refusal came
    back, only the first counted, and the 429 was the provider's)."""
    entries = [_answer(0, **SIXTY)]
    entries += [_invalid(100 + 0.03 * k, **SIXTY) for k in range(6)]
    entries.append(_busy(100.2, **SIXTY))
    _is_the_agents(entries)


@pytest.mark.parametrize(("error_type", "status"), [
    ("gateway.model_refused", 403), ("gateway.too_busy", 429), ("gateway.bad_token", 401),
    ("gateway.server_tool_refused", 403), ("gateway.cost_limit", 400),
    ("gateway.not_allowed", 404)])
def test_the_gateways_own_answers_among_a_burst_neither_count_nor_pace_it(
        error_type: str, status: int) -> None:
    """Requests the gateway answers itself (another model, its pool full, a bad token, a
    provider-side tool, the spend cap, a path it does not forward) never reach the
    provider and are left out of the window: interleaved with a burst they do not make it
    read as paced retries, and twenty of them beside four generations add nothing."""
    burst = [_answer(0, **SIXTY)]
    at = 100.0
    for _ in range(7):
        burst.append(_gateways_own(at, error_type, status, **SIXTY))
        burst.append(_busy(at + 0.01, latency=0.3, **SIXTY))
        at += 0.02
    burst.append(_answer(100.0, **SIXTY))
    _is_the_agents(burst)
    few = [_answer(0, **SIXTY), *(_answer(100 + 0.01 * k, **SIXTY) for k in range(3))]
    few += [_gateways_own(100 + 0.005 * k, error_type, status, **SIXTY) for k in range(20)]
    few.append(_busy(100.05, **SIXTY))
    _is_the_providers(few)


def test_a_flood_of_token_counts_beside_a_429_leaves_it_the_providers() -> None:
    """Tried: forty token counts within a second (some answered 429 themselves) around
    four generations. Anthropic limits token counting apart from Messages, so they do
    not spend the Messages limit; they are left out of the burst, and a failed count is
    never a failure (round six). Residual: a provider that counted both in one bucket."""
    entries = [_answer(0, **SIXTY), *(_answer(100 + 0.1 * k, **SIXTY) for k in range(3))]
    entries += [_count_tokens(100 + 0.02 * k, status=429 if k % 3 else 200)
                for k in range(40)]
    entries.append(_busy(100.4, **SIXTY))
    _is_the_providers(entries)


def test_a_sequential_barrage_after_draining_a_bucket_of_five_is_the_agents() -> None:
    """Tried: requests one after another, each sent as the last 429 came back (20 ms), so
    that no refused request counts after the first. The requests the provider took while
    its bucket drained still count whole, so every 429 of the barrage, the last included,
    is the agent's; under the minute's limit (59 in all)."""
    bucket, entries, at = _Bucket(BURST_FLOOR + 2, 60), [], 100.0
    for _ in range(58):
        entries.append(_answer(at, latency=0.02, **SIXTY) if bucket.take(at)
                       else _busy(at, latency=0.02, **SIXTY))
        at += 0.021
    assert sum(e.status == 429 for e in entries) >= 50
    _is_the_agents(entries)
    busy = [k for k, e in enumerate(_sorted(entries)) if e.status == 429]
    assert set(busy) <= set(own_rate_limits(_sorted(entries)))


def test_a_429_answered_late_does_not_widen_the_window_for_the_agent() -> None:
    """Tried: requests sent while the 429 is on its way count (the provider may have
    counted them first), and a later answer makes the window longer: a longer window has
    a larger bound, but the requests in it all count, so nothing is gained by a slow 429
    (its latency is the provider's, not the agent's to choose)."""
    entries = [_answer(0, **SIXTY), *(_answer(100 + 0.01 * k, **SIXTY) for k in range(6))]
    entries.append(_busy(100.0, latency=5.0, **SIXTY))
    _is_the_agents(entries)


# ---------------------------------------------------------------- the honest side


def _anthropic_backoff(attempt: int, rng: random.Random) -> float:
    """The Anthropic SDK's wait before retry ``attempt`` (from 0) without ``retry-after``:
    0.5 s doubling to 8 s, less up to a quarter at random."""
    return min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * rng.random())


def test_claude_codes_fan_out_retrying_with_backoff_stays_the_providers() -> None:
    """Honest: the main loop's answer starts three subagents and a side request pinned to
    the run's model (four generations, the floor), each with its token count; the
    organisation's other runs hold the limit, so every request gets a 429 and the SDK
    retries each with its backoff, ten times, then the run gives up."""
    rng = random.Random(8)
    entries = [_answer(0, **SIXTY), _answer(20, latency=6.0, **SIXTY)]
    for agent in range(4):
        at = 26.0 + agent * 0.02
        entries.append(_count_tokens(at - 0.1))
        for attempt in range(11):
            entries.append(_busy(at, latency=0.08, **SIXTY))
            at += 0.08 + _anthropic_backoff(attempt, rng)
    _is_the_providers(entries)


def test_four_requests_retried_in_lockstep_at_retry_after_stay_the_providers() -> None:
    """Honest: four at once (the floor) retried together at the provider's ``retry-after``
    of 2 s (the SDK honours it exactly, no jitter), ten times."""
    entries = [_answer(0, **SIXTY)]
    for attempt in range(11):
        entries += [_busy(30 + attempt * 2.1 + 0.01 * k, latency=0.08, **SIXTY)
                    for k in range(4)]
    _is_the_providers(entries)


def test_codex_retrying_an_organisations_429_with_its_backoff_stays_the_providers() -> None:
    """Honest: Codex (one loop, streamed Responses) retries a 429 after 200 ms doubling,
    0.9 to 1.1 of it at random, five times; a request every few seconds before."""
    rng = random.Random(5)
    entries = [_answer(4.0 * k, latency=3.5, endpoint="responses", **SIXTY) for k in range(10)]
    at = 40.0
    for attempt in range(6):
        entries.append(_busy(at, latency=0.1, endpoint="responses", **SIXTY))
        at += 0.1 + 0.2 * 2**attempt * rng.uniform(0.9, 1.1)
    _is_the_providers(entries)


def test_an_honest_400_beside_a_429_leaves_it_the_providers() -> None:
    """Honest: a prompt too long (400), compacted and sent again, two subagents at once;
    the organisation's 429 stays the provider's though the 400 now counts as taken."""
    entries = [_answer(0, **SIXTY), _invalid(50, latency=0.3, **SIXTY),
               _answer(52, latency=8.0, **SIXTY), _answer(60, **SIXTY),
               _answer(60.05, **SIXTY), _busy(60.1, **SIXTY)]
    _is_the_providers(entries)


@pytest.mark.xfail(strict=True, reason=(
    "BROKEN (medium, at Anthropic's tier 1, 50 requests a minute; none at 1,000 and "
    "more): Claude Code's four subagents and a side request pinned to the run's model, "
    "five at once, are within the floor now (BURST_FLOOR = 5), but each 429 of the "
    "organisation's, retried together at the provider's retry-after (1 s, the SDK honours "
    "it exactly), sits 1.1 s after the five refused before it, all sent before any of "
    "theirs came back: six within 1.1 s, past 5 + 50 x 1.1/60, so the last 429 is a burst "
    "and the honest run keeps its failed outcome. No rule tells a lockstep retry from an "
    "agent's second burst while the record does not say which request retries which; "
    "counting refused requests only when the 429 itself was sent before any refusal of "
    "the window came back would tell them apart where the provider charges no refused "
    "request (OpenAI charges them)"))
def test_claude_codes_five_at_once_retried_at_retry_after_under_tier_one_stay_the_providers(
) -> None:
    entries = [_answer(0, **FIFTY), _answer(20, latency=6.0, **FIFTY)]
    for attempt in range(3):
        entries += [_busy(26 + attempt * 1.1 + 0.01 * k, latency=0.08, **FIFTY)
                    for k in range(5)]
    verdict = gateway_verdict(_sorted(entries))
    assert all("a burst" in said for said in verdict.agent_caused)  # not the minute's rule
    _is_the_providers(entries)


def test_six_subagents_retrying_the_organisations_429s_with_the_sdks_backoff_stay_infra_error(
) -> None:
    """Honest: six subagents whose every request meets the organisation's 429, each
    retried ten times (Claude Code's count) with the Anthropic SDK's backoff (0.5 s
    doubling to 8 s, not Claude Code's 32 s cap of round seven)."""
    rng = random.Random(11)
    entries = [_answer(5.0 * k, latency=4.0, **SIXTY) for k in range(6)]
    for agent in range(6):
        at = 30.0 + agent * 0.3
        for attempt in range(11):
            entries.append(_busy(at, latency=0.08, **SIXTY))
            at += 0.08 + _anthropic_backoff(attempt, rng)
    verdict = gateway_verdict(_sorted(entries))
    assert verdict.infra_error is not None and "HTTP 429" in verdict.infra_error
    # Residual (low): the minute's rule counts every refused request, so the later
    # retries (66 within 60 s) are noted as the run's own doing, though its earlier 429s
    # keep the run infra_error. Were one retry answered after the 72nd second, every
    # failure after it would be noted so, and a run ending there keep its outcome.
    assert any("in the minute before it" in said for said in verdict.agent_caused)


def test_three_subagents_making_quick_calls_under_half_a_tier_one_minute_stay_the_providers(
) -> None:
    """Fixed (found here as a strict xfail): after a 40 s answer of the main loop, three
    subagents make quick tool calls, one request each 2.5 s for 20 s: 26 requests in the
    minute, half the stated 50, but 25 within 20 s, past the floor's bucket refilled at the
    stated rate. Windows are now :data:`BURST_WINDOW_S` (5 s) at most: over longer ones
    the minute's rule decides (Anthropic's bucket refills up to the minute's limit)."""
    entries = [_answer(0, latency=40.0, **FIFTY)]
    for agent in range(3):
        entries += [_answer(40.3 + agent * 0.8 + 2.5 * k, latency=2.3, **FIFTY)
                    for k in range(8)]
    entries.append(_busy(60.1, **FIFTY))
    assert len(entries) == 26
    _is_the_providers(entries)
