"""A run's model requests summed: usage, cost and what the provider side says of the run.

Pure functions over the gateway's record (``<run_dir>/model/requests.jsonl``): the
outcome rules take :class:`GatewayVerdict` as the provider's word on ``refusal``,
``infra_error`` and ``cost_limit`` (SPEC 11), whatever the agent's session files say.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from spu.config import PriceConfig
from spu.schema import GatewayRequest, ToolCall, TrajectoryStep, Usage

GENERATIONS = frozenset({"messages", "responses", "chat_completions"})

RUN_ENDED = "gateway.run_ended"
"""A request the run's end cut (the gateway's stop, the agent gone): still waiting for its
answer, or its answer still being read, :data:`~spu.gateway.server.SHUTDOWN_TIMEOUT_S`
after the stop. The provider had taken it: it counts against the run's limits."""

POLICY_ERRORS = frozenset({"gateway.bad_token", "gateway.model_refused", "gateway.cost_limit",
                           "gateway.not_allowed", "gateway.too_large", "gateway.too_slow",
                           "gateway.server_tool_refused", "gateway.url_source_refused",
                           "gateway.stored_content_refused", "gateway.client_stalled",
                           "gateway.too_busy", "gateway.bad_request", "gateway.record_full",
                           RUN_ENDED})
"""Answers of the gateway's own policy, a cut the agent caused by not reading its stream
(``gateway.client_stalled``), a request that found every upstream connection carrying
the agent's own answers (``gateway.too_busy``), a request after the record filled up
(``gateway.record_full``) and a request cut by the run's end (:data:`RUN_ENDED`): the
agent's doing, not a provider failure."""

TRANSPORT_ERRORS = frozenset({"gateway.stream_dropped", "gateway.upstream_unreachable",
                              "gateway.upstream_timeout"})
"""The upstream failed on the way: no answer, or part of one."""

PROVIDER_STATUSES = frozenset({401, 429, 529})
"""The 4xx statuses that are the provider's failure, not an answer to the agent's request."""


MAX_LINE_BYTES = 1024 * 1024
"""A record line longer than this is skipped unread (the gateway writes none so long)."""


def iter_requests(path: str | Path) -> Iterator[GatewayRequest]:
    """The lines of a gateway record, one at a time (an absent file: none).

    Read line by line, each at most :data:`MAX_LINE_BYTES` (a longer one is skipped,
    read no further), so that reading a record never holds more than a line of it; a
    torn last line, or one cut inside a character (read with a replacement character),
    is skipped. Each line is parsed and validated in one pass (twice as fast as
    ``json.loads`` then validation: a traced run reads hundreds).
    """
    path = Path(path)
    if not path.is_file():
        return
    with open(path, "rb") as f:
        while line := f.readline(MAX_LINE_BYTES + 1):
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while (rest := f.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass  # the rest of a line too long to read
                continue
            try:
                yield GatewayRequest.model_validate_json(line.decode("utf-8", "replace"))
            except ValueError:  # not JSON, or not a request line
                continue


def read_requests(path: str | Path) -> list[GatewayRequest]:
    """The lines of a gateway record (:func:`iter_requests`), as a list."""
    return list(iter_requests(path))


def is_failure(entry: GatewayRequest) -> bool:
    """True when the provider (or the way to it) failed this request.

    An HTTP error of the upstream that the agent's request cannot cause (5xx, 429 and
    529 rate and load limits, 401 for the key the gateway itself puts on), a stream cut
    or an error event mid-answer, an unreachable upstream. Any other 4xx answers the
    agent's own request (a malformed body, a path the provider does not serve) and is
    not a failure, nor are the gateway's policy answers (bad token, another model, the
    spend cap, a body too large), a client that hung up or stopped reading its stream
    until the upstream cut it, and an unstreamed generation that ran past the read window
    (:func:`unstreamed_timeout`).

    Examples
    --------
    >>> bad = GatewayRequest(time="t", endpoint="messages", status=400,
    ...                      error_type="invalid_request_error", error="max_tokens: -1")
    >>> is_failure(bad), is_failure(bad.model_copy(update={"status": 529}))
    (False, True)
    """
    if entry.error_type in POLICY_ERRORS or entry.error_type == "gateway.client_disconnected":
        return False
    if entry.endpoint not in GENERATIONS:
        # A token count answers nothing a run needs and costs the agent nothing: a flood
        # of them until the provider's limit answers 429 is no provider failure.
        return False
    if unstreamed_timeout(entry):
        return False
    if entry.error_type in TRANSPORT_ERRORS or entry.status in PROVIDER_STATUSES \
            or entry.status >= 500:
        return True
    if entry.status >= 400:
        return False
    return entry.error_type is not None and not entry.refusal


SLOW_TOKENS_PER_S = 20.0
"""A provider's slowest usual generation rate: an unstreamed request whose asked output
takes its wait at this rate could be that slow by the agent's choice."""

SLOW_PREFILL_BYTES_PER_S = 2_500.0
"""A provider's slowest usual rate of reading a prompt before the first byte of its answer:
2,500 tokens a second, at one token a byte (the densest text, digits or random
characters). A request to a model, streamed or not, a token count too, that has waited for
its answer's headers no longer than its body takes at this rate could be waiting by the
agent's choice (the prompt's length and content are its)."""

READ_ENDPOINTS = GENERATIONS | {"count_tokens"}
"""Endpoints whose requests the provider reads as prompts (tokenised before any answer)."""


def waiting_by_choice(entry: GatewayRequest, waited_s: float) -> bool:
    """Whether a request waiting ``waited_s`` for its answer's headers waits by choice.

    The agent's choice while the prompt it sent is still being read
    (:data:`SLOW_PREFILL_BYTES_PER_S`; a generation or a token count) or, for an unstreamed
    generation, the output it asked for still being written (:data:`SLOW_TOKENS_PER_S`; no
    ``max_tokens``: the model's most).

    Examples
    --------
    >>> long = GatewayRequest(time="t", endpoint="messages", status=0, stream=True,
    ...                       bytes_in=200_000, max_tokens=16)
    >>> waiting_by_choice(long, 60.0), waiting_by_choice(long, 100.0)  # 80 s to read
    (True, False)
    >>> short = long.model_copy(update={"bytes_in": 200})
    >>> waiting_by_choice(short, 5.0), waiting_by_choice(
    ...     short.model_copy(update={"stream": False, "max_tokens": 4096}), 5.0)
    (False, True)
    >>> count = long.model_copy(update={"endpoint": "count_tokens", "stream": False})
    >>> waiting_by_choice(count, 5.0), waiting_by_choice(count, 100.0)
    (True, False)
    """
    if entry.endpoint not in READ_ENDPOINTS:
        return False
    if entry.bytes_in >= SLOW_PREFILL_BYTES_PER_S * waited_s:
        return True
    return entry.endpoint in GENERATIONS and not entry.stream and (
        entry.max_tokens is None or entry.max_tokens >= SLOW_TOKENS_PER_S * waited_s)


def unstreamed_timeout(entry: GatewayRequest) -> bool:
    """An unstreamed generation the upstream took but did not answer within the window.

    Such an answer sends no byte until it is whole, and how long it takes is the agent's
    to choose (``max_tokens``, effort, the prompt): the agent's doing, like a 4xx, when
    the output it asked for (:attr:`GatewayRequest.max_tokens`, reasoning included; none
    asked: the model's most) would take the time it waited at :data:`SLOW_TOKENS_PER_S`.
    A short request that waits that long found a provider that hung; a streamed request
    starts its answer at once; an upstream that cannot be reached in time is
    ``gateway.upstream_unreachable``: all stay the provider's failures.

    Examples
    --------
    >>> slow = GatewayRequest(time="t", endpoint="messages", status=504, latency_s=900.0,
    ...                       error_type="gateway.upstream_timeout", max_tokens=128_000)
    >>> unstreamed_timeout(slow), unstreamed_timeout(slow.model_copy(update={"stream": True}))
    (True, False)
    >>> unstreamed_timeout(slow.model_copy(update={"max_tokens": 16}))
    False
    """
    if entry.error_type != "gateway.upstream_timeout" or entry.stream \
            or entry.endpoint not in GENERATIONS:
        return False
    # As much output as it asked for could take the time it waited, at a slow rate.
    return entry.max_tokens is None or entry.max_tokens >= SLOW_TOKENS_PER_S * entry.latency_s


RATE_WINDOW_S = 60.0
"""The window of a provider's tokens-per-minute limit."""


def _seconds(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _reached_upstream(entry: GatewayRequest) -> bool:
    return entry.error_type not in (POLICY_ERRORS - {"gateway.client_stalled", RUN_ENDED}) \
        and entry.error_type != "gateway.upstream_unreachable"


def _refused(entry: GatewayRequest) -> bool:
    """A request the provider refused for its limits or its load, not one it answered.

    A 429, 529, 5xx or 401: a refusal whose answer paces a client's retries
    (:func:`request_burst`). Any other 4xx answers the agent's own body (``max_tokens:
    -1``), fast: counted as a request the provider took, not as a refusal that came back,
    or bad bodies sent one after another would make a burst read as paced retries (and
    drain a provider that counts them, as OpenAI counts unsuccessful requests).
    """
    if entry.error_type == RUN_ENDED:  # taken, and cut by the run's end: no refusal
        return False
    return entry.status in PROVIDER_STATUSES or entry.status >= 500


def own_rate_limits(entries: Sequence[GatewayRequest]) -> dict[int, str]:
    """The 429s the run brought on itself, by index, each with the rule's words.

    A 429 is the run's own doing when the run's own requests in the minute before it (the
    429 included) pass the requests-per-minute limit the provider stated
    (:attr:`GatewayRequest.rate_limit_requests`), or when its own tokens there reach
    the tokens-per-minute limit the provider stated (:attr:`GatewayRequest.rate_limit_tokens`,
    the latest stated up to it): answered requests counted by the provider's usage (all
    but cache reads, which providers leave out of their limits), requests without usage
    (refused ones, the 429 itself) by their body's size (:func:`_tokens_per_byte`). Under
    that rule an agent cannot spend its organisation's limit after a file it dislikes to
    have its run retried. Under every per-minute limit, a 429 is still the run's own doing
    when its own requests came in a burst the provider's shorter intervals refuse
    (:func:`request_burst`). Without a stated limit a 429 stays the provider's (the paper
    reruns API errors, 3.1).

    Examples
    --------
    >>> big = GatewayRequest(time="2026-01-01T00:00:00+00:00", endpoint="messages",
    ...                      status=429, bytes_in=90_000, rate_limit_tokens=80_000)
    >>> own_rate_limits([big])[0][:60]
    "a 429 counted as the run's own doing: its input tokens in th"
    >>> own_rate_limits([big.model_copy(update={"bytes_in": 2_000})])
    {}
    """
    found: dict[int, str] = {}
    stated: dict[str, int] = {}
    ratio = _tokens_per_byte(entries)
    for k, entry in enumerate(entries):
        for kind, value in (("requests", entry.rate_limit_requests),
                            ("input tokens", entry.rate_limit_tokens),
                            ("output tokens", entry.rate_limit_output_tokens),
                            ("tokens", entry.rate_limit_total_tokens)):
            if value:
                stated[kind] = value  # the latest stated up to this request
        if entry.status != 429 or entry.endpoint not in GENERATIONS or not stated:
            continue
        at = _seconds(entry.time)
        if at is None:
            continue
        spent = _spent_in_minute(entries, entry, at, stated, ratio)
        # The 429 itself counts among the requests: past the limit, not at it.
        reached = [kind for kind, limit in stated.items()
                   if spent[kind] > limit or (kind != "requests" and spent[kind] >= limit)]
        if reached:
            kind = reached[0]
            how = ("at their size in bytes" if ratio == 1.0 else
                   f"at {ratio:.3f} tokens a byte of their bodies")
            found[k] = (f"a 429 counted as the run's own doing: its {kind} in the minute "
                        f"before it (about {spent[kind]}; requests without usage {how}) reach "
                        f"the provider's stated limit of {stated[kind]} {kind} per minute")
        elif "requests" in stated and (burst := request_burst(
                [(then - at, then - at + b.latency_s if _refused(b) else None)
                 for b in entries if b is not entry and b.endpoint in GENERATIONS
                 and _reached_upstream(b) and (then := _seconds(b.time)) is not None],
                entry.latency_s, stated["requests"])) is not None:
            n, window = burst
            over = max(window, 1.0)
            allowed = BURST_FLOOR + stated["requests"] * over / RATE_WINDOW_S
            found[k] = (f"a 429 counted as the run's own doing: {n} of its requests (the 429 "
                        f"among them) came within {window:.3f} s by the time the provider "
                        f"answered it, past {allowed:.2f}: the {BURST_FLOOR} a provider is "
                        f"taken to admit at once plus its stated limit of {stated['requests']} "
                        f"requests per minute over {over:.3f} s (a second at least): a burst")
    return found


def _spent_in_minute(entries: Sequence[GatewayRequest], entry: GatewayRequest, at: float,
                     stated: dict[str, int], ratio: float) -> dict[str, int]:
    """The run's requests and tokens in the minute before a 429, by kind of limit.

    ``entry`` is the 429, arriving ``at``; counted as a provider counts them
    (:func:`own_rate_limits`).
    """
    # By arrival time, not line order: a request still in flight at the 429 (a long
    # stream the agent then hangs up) has its line written after the 429's.
    mine = [(before, then) for before in entries if before.endpoint in GENERATIONS
            and _reached_upstream(before) and (then := _seconds(before.time)) is not None
            and at - RATE_WINDOW_S <= then <= at]
    cached = _cached_prefix(entries, at)
    prompt = sum(_prompt_tokens(before, ratio, cached) for before, _ in mine)
    # Output as providers count it: at max_tokens while a request runs (the 429 too,
    # refused for it), at what it wrote once done; OpenAI's tokens at max_tokens always.
    # A provider that answered a request whose max_tokens alone passed its limit does
    # not count max_tokens so: there, what the answers wrote.
    by_asked = {kind: not _answered_past(entries, kind, stated.get(kind), ratio, cached)
                for kind in ("output tokens", "tokens")}
    running = sum(max(b.usage.output, b.max_tokens or 0)
                  if by_asked["output tokens"] and (then + b.latency_s > at or b is entry)
                  else b.usage.output for b, then in mine)
    asked = sum(max(b.usage.output, b.max_tokens or 0) if by_asked["tokens"]
                else b.usage.output for b, _ in mine)
    return {"requests": len(mine), "input tokens": prompt, "output tokens": running,
            "tokens": prompt + asked}


BURST_FLOOR = 5
"""Requests a provider is taken to admit at once beyond its stated rate, whatever its
limit: the bucket of a per-minute requests limit enforced over shorter intervals
(:func:`request_burst`).

Five is what honest CLIs send together: Claude Code's main loop with a side request
(such as a title, pinned to the run's model) and three subagents, or four subagents one
answer starts and a side request (token counts are no generations and do not count);
round eight found five at once at Anthropic's first tier (50 a minute), where four
would have made them a burst. At a limit of 60 a minute six at once pass (a second's
share more); more at once is a burst an agent shapes (round seven's finding fires eight
in a second). A floor of one or two would take an honest fan-out for a burst; one as
high as a CLI's widest fan-out would let that burst of eight through at any low limit."""

BURST_WINDOW_S = 5.0
"""The longest interval a provider is taken to enforce its per-minute limit over (60 a
minute as one a second, Anthropic writes); over longer ones the minute's own rule
decides (Anthropic's bucket refills continuously up to the minute's limit). Round eight:
three subagents making quick calls at half a 50-a-minute limit held 25 requests in 20 s,
past a bucket of the floor refilled at the stated rate, and honest."""


def request_burst(others: Sequence[tuple[float, float | None]], latency_s: float,
                  limit: int) -> tuple[int, float] | None:
    """The burst of a run's requests that passes a per-minute limit enforced over seconds.

    Providers enforce a minute's limit over shorter intervals (Anthropic: a token bucket;
    60 requests a minute may be enforced as one a second), so a 429 under the minute's
    limit can still be the run's own. It is, here, when some window of ``w`` seconds that
    holds the 429 holds more of the run's requests than :data:`BURST_FLOOR` plus
    ``limit * max(w, 1 s) / 60``: more than a bucket of :data:`BURST_FLOOR` requests,
    refilled at the stated rate, admits, with no interval counted as shorter than a second
    (none is known to be enforced so) nor longer than :data:`BURST_WINDOW_S` (beyond it,
    the minute's rule). The window ends by the 429's answer (``latency_s`` after it): a
    request that came while the 429 was on its way was sent before the agent could see
    it, and the provider may have counted it first (the gateway forwards requests at once
    in no fixed order).

    The requests a window holds are the 429, those the provider took (answered, or
    answered with a 4xx to the agent's own body) and those it refused that the run sent
    before any refusal of the window had come back: a burst sent at once counts whole,
    however the provider answered it. A refused request sent after a refusal of the
    window came back is a retry the provider's answers paced, and a provider's bucket
    keeps no refused request: an honest CLI's retries of the organisation's 429s (Claude
    Code's subagents retrying together) do not add up to a burst. A run at the stated
    rate or under it never passes (its ``w`` seconds hold at most ``limit * w / 60 + 1``),
    nor do :data:`BURST_FLOOR` requests at once, whatever the limit.

    Args:
        others: The run's other requests, each as its arrival in seconds after the 429's
            and, for one the provider refused (:func:`_refused`), when that answer came;
            those outside the minute before the 429 and its answer are left out (the
            window itself is :data:`BURST_WINDOW_S` at most).
        latency_s: Seconds from the 429's arrival to its answer.
        limit: The provider's stated limit of requests per minute.

    Returns:
        The requests in the window and its length in seconds (whole microseconds, as
        the record has them), for the window passing the bound by the most (the
        shortest of equals); None when none passes.

    Examples
    --------
    >>> taken = [(-0.75 + k * 0.1, None) for k in range(7)]
    >>> request_burst(taken, 0.2, 60)  # 8 within 0.75 s: past 5 + 1
    (8, 0.75)
    >>> request_burst([(k * 0.01, k * 0.01 + 0.2) for k in range(1, 7)], 0.2, 60)
    (7, 0.06)
    >>> request_burst([(-0.2, None), (-0.1, None), (0.0, None), (0.1, 0.3)], 0.2, 60) is None
    True
    >>> request_burst([(-1.0 + k * 0.25, None) for k in range(4)], 0.2, 60) is None
    True
    >>> retries = [(-1.0 * k, -1.0 * k + 0.2) for k in range(1, 30)]  # one a second
    >>> request_burst(retries + retries, 0.2, 60) is None  # two subagents retrying
    True
    """
    end = round(max(latency_s, 0.0) * _US)
    taken: list[int] = []
    refused: list[tuple[int, int]] = []  # (arrival, answer)
    for arrival, answer in others:
        t = round(arrival * _US)
        if -_MINUTE_US <= t <= end:
            if answer is None:
                taken.append(t)
            else:
                refused.append((t, round(answer * _US)))
    taken.sort()
    refused.sort()
    arrivals = sorted([0, *taken, *(t for t, _ in refused)])
    if not _may_pass(arrivals, limit):
        return None
    best = _worst_window(taken, refused, arrivals, end, limit)
    return None if best is None else (best[2], best[3] / _US)


def _worst_window(taken: list[int], refused: list[tuple[int, int]], arrivals: list[int],
                  end: int, limit: int) -> tuple[int, int, int, int] | None:
    """:func:`request_burst`'s window passing its bound by the most, or None.

    As ``(excess, -w, n, w)`` in microseconds; ``taken`` and ``refused`` sorted.
    """
    refused_at = [t for t, _ in refused]
    stops = sorted({0, *(t for t in arrivals if t > 0)})
    best: tuple[int, int, int, int] | None = None  # (excess, -w, n, w)
    back = end  # the first refusal of the window to come back: the 429's, or earlier
    later = len(refused)
    for start in sorted({t for t in arrivals if t <= 0}, reverse=True):
        if -start > _WINDOW_US:
            break
        while later and refused[later - 1][0] >= start:
            later -= 1
            back = min(back, refused[later][1])
        first_taken = bisect_left(taken, start)
        first_refused = bisect_left(refused_at, start)
        for stop in stops:
            if stop - start > _WINDOW_US:
                break
            # The 429, the requests taken, the refused ones sent before a refusal came back.
            n = 1 + bisect_right(taken, stop) - first_taken \
                + max(0, bisect_right(refused_at, min(stop, back)) - first_refused)
            excess = (n - BURST_FLOOR) * _MINUTE_US - limit * max(stop - start, _US)
            key = (excess, start - stop, n, stop - start)
            if excess > 0 and (best is None or key > best):
                best = key
    return best


_US = 1_000_000
_MINUTE_US = int(RATE_WINDOW_S) * _US
_WINDOW_US = int(BURST_WINDOW_S * _US)


def _may_pass(arrivals: Sequence[int], limit: int) -> bool:
    """Whether some window of ``arrivals`` could pass :func:`request_burst`'s bound.

    ``arrivals`` are sorted microseconds, the 429 at 0. An upper bound, in one pass: every
    request counted and no window held to a second, ``n * M - limit * (t_j - t_i)`` for
    ``n = j - i + 1`` splits into a part of ``j`` and one of ``i``.
    """
    lowest = None
    for k, t in enumerate(arrivals):
        if t <= 0:
            here = k * _MINUTE_US - limit * t
            lowest = here if lowest is None else min(lowest, here)
        if t >= 0 and lowest is not None \
                and (k + 1) * _MINUTE_US - limit * t - lowest > BURST_FLOOR * _MINUTE_US:
            return True
    return False


def _prompt_tokens(entry: GatewayRequest, ratio: float, cached: int = 0) -> int:
    """The prompt tokens a provider's input limit counts for ``entry`` (no cache reads).

    A request without usage is estimated from its size, less ``cached``: the prefix the
    run's latest answered request read from the cache, which a session's next request
    repeats (cache reads are left out of input limits).
    """
    u = entry.usage
    if u.input or u.cache_read or u.cache_write:
        return u.input + u.cache_write
    return max(0, math.ceil(entry.bytes_in * ratio) - cached)


def _cached_prefix(entries: Sequence[GatewayRequest], at: float) -> int:
    """Cache reads of the run's latest answered generation that arrived by ``at``."""
    answered = [(then, e.usage.cache_read) for e in entries if e.endpoint in GENERATIONS
                and e.status < 400 and (then := _seconds(e.time)) is not None and then <= at
                and (e.usage.input or e.usage.cache_read)]
    return max(answered)[1] if answered else 0


def _answered_past(entries: Sequence[GatewayRequest], kind: str, limit: int | None,
                   ratio: float, cached: int) -> bool:
    """Whether the provider answered a request whose ``max_tokens`` passed ``limit``.

    Alone (with its prompt, for the all-tokens limit): such a provider does not count a
    request at its ``max_tokens``, or it would have refused that one.
    """
    if limit is None:
        return False
    for e in entries:
        if e.endpoint not in GENERATIONS or e.status >= 400 or not e.max_tokens:
            continue
        asked = e.max_tokens + (_prompt_tokens(e, ratio, cached) if kind == "tokens" else 0)
        if asked > limit:
            return True
    return False


TOKENS_PER_BYTE_FLOOR = 0.25
"""Prompt tokens a byte of a request body at least counts for (four bytes a token, as
English text and JSON tokenise), however few the run's answered requests showed."""


def _tokens_per_byte(entries: Sequence[GatewayRequest]) -> float:
    """Tokens a byte of a request without usage counts for; 1 with no answered request.

    The most prompt tokens a byte of the run's answered generations (the provider's own
    count of the run's own bodies), at least :data:`TOKENS_PER_BYTE_FLOOR`: a long
    session's 429 is not taken for the run's own doing at four times its tokens. With no
    answered request, a byte counts as a token: no token count exceeds the bytes.
    Residual: an agent whose refused bodies tokenise denser than its answered ones (a
    token a byte) is counted at a quarter of their tokens at worst.
    """
    ratios = [(e.usage.input + e.usage.cache_read + e.usage.cache_write) / e.bytes_in
              for e in entries if e.endpoint in GENERATIONS and e.bytes_in > 0
              and e.status < 400 and e.usage.input + e.usage.cache_read > 0]
    return min(1.0, max(TOKENS_PER_BYTE_FLOOR, *ratios)) if ratios else 1.0


def is_answer(entry: GatewayRequest) -> bool:
    """True for a generation the provider answered whole (a refusal included)."""
    return (entry.endpoint in GENERATIONS and entry.status < 400 and entry.complete
            and not is_failure(entry))


@dataclass(frozen=True)
class GatewayVerdict:
    """What the provider side of a run says about it."""

    requests: int
    """Lines of the record."""
    generations: int
    """Generation requests (messages, responses, chat completions) forwarded upstream."""
    usage: Usage
    """Sum of the usage the provider reported, bucket by bucket."""
    request_usages: tuple[Usage, ...]
    """Usage of each billed request, in order (long-context pricing is per request)."""
    final_answer: bool
    """The last answered generation was a final answer (no tool call after it)."""
    refusal: bool
    """The last answered generation was a refusal by the provider."""
    refusal_label: str | None
    """The provider's refusal category, ``[bio]``; ``[refusal]`` without one."""
    infra_error: str | None
    """Why the provider side failed with no answer after it; None when it did not."""
    cost_limit: bool
    """The gateway refused a request at ``limits.max_cost_usd``."""
    refused_models: tuple[str, ...] = field(default_factory=tuple)
    """Models asked for that the gateway refused (not the configured one), first seen first."""
    bad_tokens: int = 0
    """Requests with a missing or wrong token."""
    agent_caused: tuple[str, ...] = ()
    """Failures counted as the agent's doing, not the provider's, each with its rule:
    an unstreamed generation past the read window, a stream cut after the agent stopped
    reading it, a 429 the run's own requests or tokens brought on, a burst of its requests
    included (:func:`own_rate_limits`)."""


def gateway_verdict(entries: Sequence[GatewayRequest]) -> GatewayVerdict:
    """Sum a gateway record into usage and the provider side's verdict on the run.

    ``infra_error`` holds when some request failed (:func:`is_failure`) and no
    generation was answered after the last failure: the CLIs' own retries that then
    succeeded leave no infra error. ``refusal`` holds when the last answered
    generation is a provider refusal.

    Examples
    --------
    >>> ok = GatewayRequest(time="t", endpoint="messages", status=200, complete=True,
    ...                     final=True, stop_reason="end_turn", usage=Usage(input=3))
    >>> busy = GatewayRequest(time="t", endpoint="messages", status=529,
    ...                       error_type="overloaded_error", error="Overloaded")
    >>> gateway_verdict([busy, ok]).infra_error is None
    True
    >>> gateway_verdict([ok, busy]).infra_error
    'API error: HTTP 529 overloaded_error: Overloaded (1 failed request, no answer after it)'
    """
    usages = tuple(e.usage for e in entries if e.usage != Usage())
    total = Usage()
    for usage in usages:
        total = total + usage
    answers = [k for k, e in enumerate(entries) if is_answer(e)]
    own_limits = own_rate_limits(entries)
    failures = [k for k, e in enumerate(entries) if is_failure(e) and k not in own_limits]
    last = entries[answers[-1]] if answers else None
    infra = None
    if failures and (not answers or answers[-1] < failures[-1]):
        after = failures if not answers else [k for k in failures if k > answers[-1]]
        worst = entries[failures[-1]]
        what = worst.error_type or "error"
        n = len(after)
        if worst.status in (401, 403):
            head = f"API error: the provider rejected the API key (HTTP {worst.status}): {what}"
        else:
            head = f"API error: HTTP {worst.status} {what}"
        infra = (f"{head}: {worst.error or ''}".rstrip(": ")
                 + f" ({n} failed request{'s' if n != 1 else ''}, no answer after it)")
    refusal = last is not None and last.refusal
    refused: list[str] = []
    for e in entries:
        if e.error_type == "gateway.model_refused" and str(e.model) not in refused:
            refused.append(str(e.model))
    return GatewayVerdict(
        requests=len(entries),
        generations=sum(1 for e in entries if e.endpoint in GENERATIONS
                        and e.error_type not in POLICY_ERRORS),
        usage=total, request_usages=usages,
        final_answer=last is not None and last.final,
        refusal=refusal,
        refusal_label=(f"[{last.refusal_label}]" if last is not None and last.refusal_label
                       else "[refusal]") if refusal else None,
        infra_error=infra,
        cost_limit=any(e.error_type == "gateway.cost_limit" for e in entries),
        refused_models=tuple(refused),
        bad_tokens=sum(1 for e in entries if e.error_type == "gateway.bad_token"),
        agent_caused=tuple(_agent_caused(entries, own_limits)),
    )


def _agent_caused(entries: Sequence[GatewayRequest], own_limits: dict[int, str]) -> list[str]:
    said = []
    for k, e in enumerate(entries):
        if k in own_limits:
            said.append(own_limits[k])
        elif unstreamed_timeout(e):
            said.append("an unstreamed generation past model_gateway.read_timeout_s counted "
                        "as the agent's doing (its length is the agent's choice)")
        elif e.error_type == "gateway.client_stalled":
            said.append("a stream cut after the agent stopped reading it counted as the "
                        "agent's doing")
        elif e.error_type == "gateway.record_full":
            said.append("the model gateway's record reached its cap (model_gateway.record_mb):"
                        " every request after it was refused (gateway.record_full)")
    return list(dict.fromkeys(said))


def provider_answered(entry: GatewayRequest) -> bool:
    """A generation the provider answered (not the gateway's own answer, not a lost one)."""
    return entry.endpoint in GENERATIONS and entry.error_type not in POLICY_ERRORS \
        and entry.status > 0


def key_rejected(entries: Iterable[GatewayRequest]) -> str | None:
    """The provider's words when its last answer to a generation refused the key, or None.

    What the monitor asks before it stops an agent whose output shows a rejected key:
    the record holds what the provider answered, the agent's output only what it says.

    Examples
    --------
    >>> denied = GatewayRequest(time="t", endpoint="messages", status=401,
    ...                         error_type="authentication_error", error="invalid x-api-key")
    >>> key_rejected([denied])
    'the provider rejected the API key (HTTP 401): authentication_error: invalid x-api-key'
    >>> key_rejected([]) is None
    True
    """
    last = None
    for entry in entries:  # a record read as it streams: only the last answer is kept
        if provider_answered(entry):
            last = entry
    if last is None or last.status not in (401, 403):
        return None
    return (f"the provider rejected the API key (HTTP {last.status}): {last.error_type}: "
            f"{last.error}")


@dataclass(frozen=True)
class GatewaySummary:
    """A run's gateway record summed: the verdict and the cost at list prices."""

    verdict: GatewayVerdict
    cost_usd: float
    """Cost at list prices, cache writes billed by ``cache_write_rate``."""
    cost_full_input_usd: float
    """The same usage with every prompt token at the input price (paper 3.5)."""
    cost_by_cache_write_rate: dict[str, float]
    """The cost under each cache-write rule."""
    long_context_requests: int
    """Requests billed at the long-context rates."""


def summarize(entries: Sequence[GatewayRequest], prices: PriceConfig,
              cache_write_rate: str = "five_minute") -> GatewaySummary:
    """The verdict of ``entries`` and their cost at ``prices``, request by request.

    Examples
    --------
    >>> e = GatewayRequest(time="t", endpoint="messages", status=200, complete=True,
    ...                    usage=Usage(input=10**6, output=10**6))
    >>> summarize([e, e], PriceConfig(input=1.0, output=5.0)).cost_usd
    12.0
    """
    from spu.cost.prices import run_cost

    verdict = gateway_verdict(entries)
    cost = run_cost(prices, verdict.usage, list(verdict.request_usages),
                    cache_write_rate=cache_write_rate)
    return GatewaySummary(verdict=verdict, cost_usd=cost.estimate.total,
                          cost_full_input_usd=cost.full_input_price.total,
                          cost_by_cache_write_rate=dict(cost.by_cache_write_rate),
                          long_context_requests=cost.estimate.long_context_requests)


REFUSAL_FILES = "refusal_files"
"""Under the gateway's folder: ``NNNNNN.json``, the ``rankings.json`` a refused request
arrived with, distinct ones in order (:func:`files_at_refusals` reads them back)."""
MAX_REFUSAL_FILES = 4
"""Distinct files kept at refusals: the latest."""


def files_at_refusals(folder: str | Path) -> list[bytes]:
    """The files the gateway kept at refused requests, the latest first.

    Each is ``output/rankings.json`` as it stood when a request the provider then refused
    arrived, read as the grader reads it: what the run had written before a refusal,
    whatever the agent did to the file afterwards.
    """
    kept = Path(folder) / REFUSAL_FILES
    if not kept.is_dir():
        return []
    return [path.read_bytes() for path in sorted(kept.glob("*.json"), reverse=True)]


GATEWAY_TOOL = "model_input"
"""The tool name of the steps :func:`model_input_steps` builds (hits found there name it)."""


def model_input_steps(folder: str | Path) -> list[TrajectoryStep]:
    """The tool results the model was sent, as trajectory steps, for the exposure screen.

    Read from ``<run_dir>/model/tool_results.jsonl``, which the gateway writes outside
    the agent's reach: one step per tool result, its text as the call's output.
    """
    path = Path(folder) / "tool_results.jsonl"
    if not path.is_file():
        return []
    steps: list[TrajectoryStep] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            kept = json.loads(line)
        except json.JSONDecodeError:
            continue
        call = ToolCall(id=str(kept.get("call_id")), name=GATEWAY_TOOL,
                        output=str(kept.get("text") or ""))
        steps.append(TrajectoryStep(index=len(steps), timestamp=kept.get("time"),
                                    role="assistant", tool_calls=[call]))
    return steps
