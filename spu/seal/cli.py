"""``spu seal verify`` (and later ``spu seal export``): the seals of an output root."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add ``seal verify`` to the ``spu`` parser."""
    seal = sub.add_parser("seal", help="check the seals of finished runs (SPEC section 13)")
    seal_sub = seal.add_subparsers(dest="seal_command", metavar="COMMAND")
    p = seal_sub.add_parser(
        "verify",
        help="check the ledger's chain, every signature and every sealed file",
        description="Check OUTPUT_ROOT's ledger.jsonl line by line (signature, seq, prev), "
        "each line's seal.json and the files it seals; exit 0 when all hold, else 1 "
        "naming the first fault.",
    )
    p.add_argument("path", type=Path, metavar="OUTPUT_ROOT|BUNDLE")
    p.add_argument("--public-key", type=Path, default=None,
                   help="the published public key (default: OUTPUT_ROOT/seal/public_key.pem)")
    p.set_defaults(handler=verify_command)
    seal.set_defaults(handler=lambda args: (seal.print_help(), 2)[1])


def verify_command(args: argparse.Namespace) -> int:
    """Print the verdict; 0 when everything holds, 1 at the first fault."""
    from spu.seal.verify import verify_path

    result = verify_path(args.path, args.public_key)
    faults = result.faults
    if faults:
        more = f" (and {len(faults) - 1} more)" if len(faults) > 1 else ""
        print(f"spu seal verify: {args.path}: {faults[0]}{more}", file=sys.stderr)
        return 1
    print(f"{args.path}: {len(result.runs)} sealed runs hold; ledger head {result.head}")
    return 0
