"""Cost of token usage at list prices (paper section 3.5, appendix E.6, Table 7).

Each bucket is billed at its own price per million tokens: uncached input, cache
reads, cache writes (5-minute or 1-hour rate) and output. Where a provider lists no
cache price (n/a in Table 7) those tokens are billed at the input price. Prices in
another currency are converted at the model's ``units_per_usd``.
"""

from __future__ import annotations

from dataclasses import dataclass

from spu.config import PriceConfig
from spu.schema import Usage

PER = 1_000_000


@dataclass(frozen=True)
class CostBreakdown:
    """Cost of one usage, in USD, by bucket."""

    input: float
    cache_read: float
    cache_write: float
    output: float

    @property
    def total(self) -> float:
        """Sum of the buckets."""
        return self.input + self.cache_read + self.cache_write + self.output


def estimate_cost(prices: PriceConfig, usage: Usage) -> CostBreakdown:
    """USD cost of ``usage`` at ``prices``.

    Examples
    --------
    Claude Opus 5 (Table 7: 5.00 input, 0.50 cache read, 6.25 cache write, 25.00
    output): 1M of each bucket costs 5 + 0.5 + 6.25 + 25 = 36.75 USD.

    >>> p = PriceConfig(input=5.0, cache_read=0.5, cache_write_5m=6.25, output=25.0)
    >>> estimate_cost(p, Usage(input=10**6, cache_read=10**6, cache_write=10**6,
    ...                        output=10**6)).total
    36.75
    """
    rate = 1.0 / (prices.units_per_usd * PER)
    cache_read = prices.cache_read if prices.cache_read is not None else prices.input
    write_5m = prices.cache_write_5m if prices.cache_write_5m is not None else prices.input
    write_1h = prices.cache_write_1h if prices.cache_write_1h is not None else write_5m
    writes_1h = min(usage.cache_write_1h, usage.cache_write)
    writes_5m = usage.cache_write - writes_1h
    return CostBreakdown(
        input=usage.input * prices.input * rate,
        cache_read=usage.cache_read * cache_read * rate,
        cache_write=(writes_5m * write_5m + writes_1h * write_1h) * rate,
        output=usage.output * prices.output * rate,
    )
