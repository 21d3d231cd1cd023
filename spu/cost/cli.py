"""``spu cost estimate``: the cost of a token usage at a model's list prices (SPEC section 6)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from spu.cost.prices import CACHE_WRITE_TTLS


def _tokens(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: token counts cannot be negative")
    return value


def register(sub: Any) -> None:
    """Add ``cost estimate`` to the ``spu`` parser."""
    cost = sub.add_parser("cost", help="API cost from token usage (paper 3.5, Table 7)")
    cost_sub = cost.add_subparsers(dest="cost_command", metavar="COMMAND")
    p = cost_sub.add_parser(
        "estimate",
        help="cost of a usage at a model's list prices",
        description="Price a token usage with the model's Table 7 prices from conf/model/. "
        "--input counts uncached input tokens only.",
    )
    p.add_argument("--model", required=True,
                   help="catalogue name (conf/model/<M>.yaml) or a path to a model YAML")
    p.add_argument("--input", type=_tokens, default=0, help="uncached input tokens")
    p.add_argument("--cache-read", type=_tokens, default=0, help="tokens read from the cache")
    p.add_argument("--cache-write", type=_tokens, default=0,
                   help="tokens written to the cache")
    p.add_argument("--output", type=_tokens, default=0, help="output tokens, reasoning included")
    p.add_argument("--cache-write-ttl", choices=CACHE_WRITE_TTLS, default="5m",
                   help="bill cache writes at the 5-minute (default) or the 1-hour rate")
    p.add_argument("--long-context", action="store_true",
                   help="bill at the model's long-context rates (one request above its "
                   "threshold, e.g. GPT-6.1 Sol above 272K input tokens)")
    p.add_argument("--full-input-price", action="store_true",
                   help="bill every prompt token at the input price (paper 3.5 sensitivity)")
    p.add_argument("--json", action="store_true",
                   help='print {"model", "cost_usd", "breakdown"} as JSON')
    p.set_defaults(handler=estimate_command)
    cost.set_defaults(handler=lambda args: (cost.print_help(), 2)[1])


def estimate_command(args: argparse.Namespace) -> int:
    """Print the cost; exit 2 when the model configuration cannot be read."""
    from spu.cost.catalogue import ModelConfigError, load_model_config
    from spu.cost.prices import request_cost
    from spu.schema import Usage

    try:
        model = load_model_config(args.model)
    except ModelConfigError as exc:
        print(f"spu cost estimate: {exc}", file=sys.stderr)
        return 2
    usage = Usage(
        input=args.input,
        cache_read=args.cache_read,
        cache_write=args.cache_write,
        cache_write_1h=args.cache_write if args.cache_write_ttl == "1h" else 0,
        output=args.output,
    )
    if args.long_context and model.prices.long_context_threshold is None:
        print(f"spu cost estimate: model {model.name} has no long-context rates",
              file=sys.stderr)
        return 2
    cost = request_cost(model.prices, usage, long_context=args.long_context,
                        full_input_price=args.full_input_price)
    if args.json:
        print(json.dumps({"model": model.name, "cost_usd": cost.total,
                          "breakdown": cost.as_dict()}))
        return 0
    prices = model.prices
    rates = "long-context" if args.long_context else "list"
    print(f"{model.label or model.name}: {cost.total:.6f} USD at {rates} prices"
          + (f" (converted from {prices.currency} at {prices.units_per_usd} per USD)"
             if prices.currency != "USD" else ""))
    for bucket, usd in cost.as_dict().items():
        print(f"  {bucket:<12} {getattr(usage, bucket):>14,} tokens  {usd:12.6f} USD")
    return 0
