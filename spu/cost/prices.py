"""Cost of token usage at list prices (paper section 3.5, appendix E.6, Table 7).

Each bucket is billed at its own price per million tokens: uncached input, cache
reads, cache writes (5-minute or 1-hour rate) and output. Where a provider lists no
cache price (n/a in Table 7) those tokens are billed at the input price. Prices in
another currency are converted at the model's ``units_per_usd``.

Cache writes have two rules (``cache_write_rate``): ``five_minute``, the paper's (E.6,
Table 7: "cache writes are billed at the five-minute rate"), bills every cache write at
the five-minute price; ``actual`` bills the writes the provider reported as one-hour
ones at the one-hour price. A run record keeps its cost under both.

A run is a sequence of model requests. Where the model has a long-context threshold
(GPT-6.1 Sol: 272K input tokens), a request whose prompt (uncached input, cache
reads and cache writes together) exceeds it is billed entirely at the long-context
rates, so a run's cost is summed request by request when the trajectory records
per-request usage.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from spu.config import CacheWriteRate, PriceConfig
from spu.schema import TrajectoryStep, Usage

PER = 1_000_000
"""Prices are quoted per million tokens."""

CLI_COST_TOLERANCE = 0.01
"""Relative gap between our estimate and a CLI's own cost above which both are flagged."""

CACHE_WRITE_TTLS = ("5m", "1h")

FIVE_MINUTE = CacheWriteRate.five_minute
ACTUAL = CacheWriteRate.actual
CACHE_WRITE_RATES = tuple(CacheWriteRate)
"""How cache writes are billed: all at the five-minute rate (the paper's rule, E.6), or
the one-hour writes at the one-hour rate (what the provider actually bills)."""


@dataclass(frozen=True)
class CostBreakdown:
    """Cost of one usage, in USD, by bucket."""

    input: float
    cache_read: float
    cache_write: float
    output: float
    long_context_requests: int = 0
    """Requests billed at the long-context rates."""

    @property
    def total(self) -> float:
        """Sum of the buckets."""
        return self.input + self.cache_read + self.cache_write + self.output

    def __add__(self, other: CostBreakdown) -> CostBreakdown:
        return CostBreakdown(
            input=self.input + other.input,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            output=self.output + other.output,
            long_context_requests=self.long_context_requests + other.long_context_requests,
        )

    def as_dict(self) -> dict[str, float]:
        """The four buckets, as printed by ``spu cost estimate --json``."""
        return {
            "input": self.input,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "output": self.output,
        }


ZERO = CostBreakdown(0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class _Rates:
    """Prices per million tokens of each bucket for one request, in the price currency."""

    input: float
    cache_read: float
    cache_write_5m: float
    cache_write_1h: float
    output: float
    per_usd: float
    """Divisor from (tokens x price per million) to USD: one million x units per USD."""

    def usd(self, tokens: int, price: float) -> float:
        """``tokens`` at ``price``, in USD (dividing last keeps round prices exact)."""
        return tokens * price / self.per_usd


def prompt_tokens(usage: Usage) -> int:
    """All input tokens of a request: uncached, read from and written to the cache."""
    return usage.input + usage.cache_read + usage.cache_write


def is_long_context(prices: PriceConfig, usage: Usage) -> bool:
    """True when one request's prompt exceeds the model's long-context threshold."""
    threshold = prices.long_context_threshold
    return threshold is not None and prompt_tokens(usage) > threshold


def _rates(prices: PriceConfig, long_context: bool, full_input_price: bool) -> _Rates:
    def pick(short: float | None, long: float | None) -> float | None:
        return long if long_context and long is not None else short

    if prices.units_per_usd <= 0:
        raise ValueError(f"prices.units_per_usd must be positive, not {prices.units_per_usd}")
    input_price = pick(prices.input, prices.long_input) or 0.0
    output = pick(prices.output, prices.long_output) or 0.0
    if full_input_price:
        cache_read = write_5m = write_1h = input_price
    else:
        # n/a in Table 7: no cache price listed, so those tokens are billed as input.
        cache_read = _or(pick(prices.cache_read, prices.long_cache_read), input_price)
        write_5m = _or(pick(prices.cache_write_5m, prices.long_cache_write), input_price)
        write_1h = _or(pick(prices.cache_write_1h, prices.long_cache_write), write_5m)
    return _Rates(input=input_price, cache_read=cache_read, cache_write_5m=write_5m,
                  cache_write_1h=write_1h, output=output, per_usd=PER * prices.units_per_usd)


def _or(price: float | None, fallback: float) -> float:
    return fallback if price is None else price


def request_cost(prices: PriceConfig, usage: Usage, *, long_context: bool | None = None,
                 full_input_price: bool = False,
                 cache_write_rate: str = ACTUAL) -> CostBreakdown:
    """USD cost of one model request.

    Args:
        prices: the model's list prices.
        usage: the request's token usage.
        long_context: bill at the long-context rates; by default, when the request's
            prompt exceeds ``prices.long_context_threshold``.
        full_input_price: bill every prompt token at the input price (paper 3.5,
            sensitivity check), ignoring the cache prices.
        cache_write_rate: ``actual`` bills one-hour writes at the one-hour price;
            ``five_minute`` (the paper's rule, E.6) bills every write at the
            five-minute price.

    Examples:
        Opus 5 (cache writes 6.25 per million for five minutes, 10.00 for one hour):
        one million writes, all of them one-hour writes.

        >>> p = PriceConfig(input=5.0, cache_write_5m=6.25, cache_write_1h=10.0)
        >>> u = Usage(cache_write=10**6, cache_write_1h=10**6)
        >>> request_cost(p, u).total, request_cost(p, u, cache_write_rate="five_minute").total
        (10.0, 6.25)
    """
    long = is_long_context(prices, usage) if long_context is None else long_context
    long = long and prices.long_context_threshold is not None
    rates = _rates(prices, long, full_input_price)
    writes_1h = 0 if cache_write_rate == FIVE_MINUTE else min(usage.cache_write_1h,
                                                              usage.cache_write)
    writes_5m = usage.cache_write - writes_1h
    return CostBreakdown(
        input=rates.usd(usage.input, rates.input),
        cache_read=rates.usd(usage.cache_read, rates.cache_read),
        cache_write=rates.usd(writes_5m, rates.cache_write_5m)
        + rates.usd(writes_1h, rates.cache_write_1h),
        output=rates.usd(usage.output, rates.output),
        long_context_requests=int(long),
    )


def _subtract(total: Usage, part: Usage) -> Usage:
    """``total - part`` bucket by bucket, clipped at zero."""
    return Usage(
        input=max(0, total.input - part.input),
        cache_read=max(0, total.cache_read - part.cache_read),
        cache_write=max(0, total.cache_write - part.cache_write),
        cache_write_1h=max(0, total.cache_write_1h - part.cache_write_1h),
        output=max(0, total.output - part.output),
    )


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """Bucket-wise sum of ``usages``."""
    total = Usage()
    for usage in usages:
        total = total + usage
    return total


def estimate_cost(prices: PriceConfig, usage: Usage, requests: Sequence[Usage] | None = None,
                  *, full_input_price: bool = False,
                  cache_write_rate: str = ACTUAL) -> CostBreakdown:
    """USD cost of ``usage`` at ``prices``, request by request where requests are known.

    Each request in ``requests`` is billed on its own (long-context rates where its
    prompt exceeds the threshold); what ``usage`` holds beyond the requests' sum is
    billed at the short-context rates. Without ``requests`` the whole usage is billed
    at the short-context rates (Table 7 quotes them; an aggregate has no request to
    compare with the threshold).

    Examples:
        Claude Opus 5 (Table 7: 5.00 input, 0.50 cache read, 6.25 cache write, 25.00
        output): 1M of each bucket costs 5 + 0.5 + 6.25 + 25 = 36.75 USD.

        >>> p = PriceConfig(input=5.0, cache_read=0.5, cache_write_5m=6.25, output=25.0)
        >>> estimate_cost(p, Usage(input=10**6, cache_read=10**6, cache_write=10**6,
        ...                        output=10**6)).total
        36.75

        Every prompt token at the input price instead: 3M x 5 + 1M x 25 = 40 USD.

        >>> estimate_cost(p, Usage(input=10**6, cache_read=10**6, cache_write=10**6,
        ...                        output=10**6), full_input_price=True).total
        40.0
    """
    rule = {"full_input_price": full_input_price, "cache_write_rate": cache_write_rate}
    if not requests:
        return request_cost(prices, usage, long_context=False, **rule)  # type: ignore[arg-type]
    cost = ZERO
    for request in requests:
        cost = cost + request_cost(prices, request, **rule)  # type: ignore[arg-type]
    rest = _subtract(usage, sum_usage(requests))
    return cost + request_cost(prices, rest, long_context=False, **rule)  # type: ignore[arg-type]


def request_usages(steps: Iterable[TrajectoryStep]) -> list[Usage]:
    """The usage of each model request of a trajectory.

    A step's usage is that of the model call behind it; steps that share a provider
    message id come from one request, so only the last usage of a message id counts.
    """
    by_message: dict[str, int] = {}
    usages: list[Usage] = []
    for step in steps:
        if step.usage is None:
            continue
        if step.message_id is not None and step.message_id in by_message:
            usages[by_message[step.message_id]] = step.usage
            continue
        if step.message_id is not None:
            by_message[step.message_id] = len(usages)
        usages.append(step.usage)
    return usages


def costs_disagree(estimate_usd: float, cli_cost_usd: float,
                   tolerance: float = CLI_COST_TOLERANCE) -> bool:
    """True when our estimate and the CLI's own cost differ by more than ``tolerance``.

    The gap is relative to the CLI's figure; a CLI that reports zero agrees only
    with an estimate of (almost) zero.

    Examples:
        >>> costs_disagree(1.005, 1.0), costs_disagree(1.02, 1.0)
        (False, True)
    """
    gap = abs(estimate_usd - cli_cost_usd)
    if cli_cost_usd == 0:
        return gap > 1e-9
    return gap > tolerance * abs(cli_cost_usd)


@dataclass(frozen=True)
class RunCost:
    """What the runner records about the cost of one run."""

    estimate: CostBreakdown
    """Our estimate at list prices, cache buckets at their own prices."""
    full_input_price: CostBreakdown
    """The same usage with every prompt token at the input price (paper 3.5)."""
    cli_cost_usd: float | None = None
    """The CLI's own figure, where it reports one."""
    disagreement: bool = False
    """True when the CLI's figure differs from ours by more than 1%."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Warnings for the run record."""
    cache_write_rate: str = FIVE_MINUTE
    """The rule ``estimate`` billed cache writes by."""
    by_cache_write_rate: dict[str, float] = field(default_factory=dict)
    """The estimate's total under each rule (``five_minute``, ``actual``)."""


def run_cost(prices: PriceConfig, usage: Usage, requests: Sequence[Usage] | None = None,
             cli_cost_usd: float | None = None,
             cache_write_rate: str = FIVE_MINUTE) -> RunCost:
    """The cost record of a run: estimate, full-input-price variant, CLI comparison.

    Args:
        prices: the model's list prices.
        usage: the run's total usage.
        requests: per-request usage from the trajectory, where recorded.
        cli_cost_usd: the cost the agent CLI reported itself, where it did.
        cache_write_rate: the rule of the estimate (``cost.cache_write_rate``); the
            other rule's total is kept beside it.
    """
    notes: list[str] = []
    if requests:
        summed = sum_usage(requests)
        if summed != usage:
            notes.append(
                f"usage of the trajectory's requests ({summed.model_dump()}) differs from "
                f"its total ({usage.model_dump()}); the difference is billed at "
                f"short-context rates"
            )
    by_rate = {rate: estimate_cost(prices, usage, requests, cache_write_rate=rate)
               for rate in CACHE_WRITE_RATES}
    estimate = by_rate[CacheWriteRate(cache_write_rate)]
    disagreement = False
    # The CLI reports what the provider bills: compare it with the actual rule.
    if cli_cost_usd is not None and costs_disagree(by_rate[ACTUAL].total, cli_cost_usd):
        disagreement = True
        notes.append(
            f"cost estimate {by_rate[ACTUAL].total:.6f} USD differs from the CLI's reported "
            f"{cli_cost_usd:.6f} USD by more than {CLI_COST_TOLERANCE:.0%}"
        )
    return RunCost(
        estimate=estimate,
        full_input_price=estimate_cost(prices, usage, requests, full_input_price=True),
        cli_cost_usd=cli_cost_usd,
        disagreement=disagreement,
        notes=tuple(notes),
        cache_write_rate=cache_write_rate,
        by_cache_write_rate={rate: cost.total for rate, cost in by_rate.items()},
    )
