"""What a run is expected to cost before it runs: reference usage priced at list prices.

A dry run (``python -m spu.main ... dry_run=true``) shows each job's expected cost. The
reference usage of a configuration is its mean usage per scored run in the paper's
Table 3 (prompt tokens, the share read from the cache, output tokens); priced with the
model's prices (Table 7, ``conf/model/``), it reproduces Table 3's mean cost to within
a few percent (the prompt tokens not read from the cache are billed as cache writes,
which Table 3 does not separate from uncached input). Baselines cost nothing; the
scripted model is priced on the usage its script reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from spu.config import ModelConfig, PriceConfig
from spu.cost.prices import request_cost
from spu.schema import Usage

PAPER_TABLE3: dict[str, tuple[float, float, float]] = {
    # config label: (prompt tokens in millions, cache-read share, output tokens in millions)
    "opus55-max": (25.6, 0.93, 0.49),
    "astra-medium": (5.1, 0.96, 0.05),
    "opus5-max": (35.4, 0.96, 0.46),
    "fable51-max": (10.8, 0.80, 0.15),
    "astra-max": (30.4, 0.95, 0.34),
    "sonnet55-max": (20.7, 0.94, 0.49),
    "doubao-max": (14.8, 0.97, 0.13),
    "sol61-max": (34.0, 0.93, 0.31),
    "kimi31-max": (15.9, 0.96, 0.15),
    "deepseek-max": (13.0, 0.99, 0.25),
    "hy4-max": (15.1, 0.96, 0.21),
    "glm53-max": (15.4, 0.97, 0.23),
    "qwen38-max": (10.7, 0.94, 0.17),
}
"""Mean usage per scored run of the paper's thirteen configurations (Table 3)."""


@dataclass(frozen=True)
class ExpectedCost:
    """The expected API cost of one run, and where the usage behind it comes from."""

    usd: float | None
    """Expected cost in USD; None where no reference usage exists."""
    basis: str
    """``paper Table 3``, ``baseline``, ``scripted`` or why there is no estimate."""


def table3_usage(label: str) -> Usage | None:
    """The mean usage per scored run of configuration ``label`` in Table 3.

    Examples:
        >>> table3_usage("opus5-max")
        Usage(input=0, cache_read=33984000, cache_write=1416000, cache_write_1h=0, output=460000)
    """
    found = PAPER_TABLE3.get(label)
    if found is None:
        return None
    prompt_m, read_share, output_m = found
    prompt = round(prompt_m * 1e6)
    read = round(prompt * read_share)
    return Usage(cache_read=read, cache_write=prompt - read, output=round(output_m * 1e6))


def expected_cost(model: ModelConfig, label: str, usage: Usage | None = None) -> ExpectedCost:
    """The expected cost of one run of configuration ``label`` with ``model``.

    Args:
        model: the model configuration (its provider and prices).
        label: the configuration label (``opus5-max``).
        usage: the reference usage to price instead of Table 3's (the scripted model's).

    Examples:
        Opus 5 at max effort: Table 3 gives 37.44 USD per scored run.

        >>> from spu.cost.catalogue import load_model_config
        >>> round(expected_cost(load_model_config("opus5"), "opus5-max").usd, 2)
        37.34
    """
    if model.provider == "baseline":
        return ExpectedCost(0.0, "baseline")
    if usage is not None:
        return ExpectedCost(_price(model.prices, usage), model.provider)
    reference = table3_usage(label)
    if reference is None:
        return ExpectedCost(None, f"no reference usage for {label}")
    return ExpectedCost(_price(model.prices, reference), "paper Table 3")


def _price(prices: PriceConfig, usage: Usage) -> float:
    return request_cost(prices, usage, long_context=False).total
