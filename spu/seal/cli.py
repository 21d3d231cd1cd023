"""``spu seal verify``, ``spu seal export`` and ``spu grade-bundle`` (SPEC sections 13, 14)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spu.printable import printable


def register(sub: Any) -> None:
    """Add ``seal verify``, ``seal export`` and ``grade-bundle`` to the ``spu`` parser."""
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
    e = seal_sub.add_parser(
        "export", help="write a bundle of the sealed runs (never a key)",
        description="Pack OUTPUT_ROOT's ledger, public key and sealed run folders (seal.json, "
        "run.json and the sealed files only) into one tar file for the key holder.")
    e.add_argument("output_root", type=Path, metavar="OUTPUT_ROOT")
    e.add_argument("--out", type=Path, required=True, help="the bundle file (.tar)")
    e.set_defaults(handler=export_command)
    g = sub.add_parser(
        "grade-bundle", help="verify a bundle of sealed runs and grade it with local keys",
        description="Unpack FILE under OUTPUT_ROOT/bundles/, verify its chain and seals, "
        "grade each run in the isolated grader with the local answer keys and record it in "
        "the local tracking; a run whose sealed files changed ends seal_broken.")
    g.add_argument("bundle", type=Path, metavar="FILE")
    g.add_argument("--task-root", type=Path, required=True, help="the tasks, found by id")
    g.add_argument("--answers-root", type=Path, default=None,
                   help="answer keys as <root>/<task_id>/answers.json (default: each task's "
                   "hidden/answers.json)")
    g.add_argument("--output-root", type=Path, default=Path("outputs"),
                   help="local output root (default: outputs)")
    g.add_argument("--public-key", type=Path, default=None,
                   help="the lab's published public key (default: the bundle's own)")
    g.add_argument("--tracking-uri", default=None,
                   help="MLflow store (default: sqlite:///OUTPUT_ROOT/mlflow.db)")
    g.add_argument("--no-tracking", action="store_true", help="record run.json files only")
    g.set_defaults(handler=grade_bundle_command)
    seal.set_defaults(handler=lambda args: (seal.print_help(), 2)[1])


def verify_command(args: argparse.Namespace) -> int:
    """Print the verdict; 0 when everything holds, 1 at the first fault."""
    from spu.seal.verify import verify_path

    result = verify_path(args.path, args.public_key)
    faults = result.faults
    if faults:
        more = f" (and {len(faults) - 1} more)" if len(faults) > 1 else ""
        # a fault names a run's files, whose names the agent chose
        print(printable(f"spu seal verify: {args.path}: {faults[0]}{more}"), file=sys.stderr)
        return 1
    print(f"{args.path}: {len(result.runs)} sealed runs hold; ledger head {result.head}")
    return 0


def export_command(args: argparse.Namespace) -> int:
    """Write the bundle; 1 when the root does not verify or a file is unsafe."""
    from spu.seal.bundle import BundleError, export_bundle

    try:
        n = export_bundle(args.output_root, args.out)
    except BundleError as exc:
        print(f"spu seal export: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {n} sealed runs")
    return 0


def grade_bundle_command(args: argparse.Namespace) -> int:
    """Grade the bundle; 1 when it is refused, 0 otherwise (broken runs are recorded)."""
    from spu.seal.bundle import BundleError
    from spu.tracking.bundles import grade_bundle

    uri = None if args.no_tracking else (
        args.tracking_uri or f"sqlite:///{(args.output_root / 'mlflow.db').resolve()}")
    try:
        graded = grade_bundle(args.bundle, args.task_root, args.output_root,
                              answers_root=args.answers_root, public_key=args.public_key,
                              tracking_uri=uri)
    except (BundleError, OSError) as exc:
        print(f"spu grade-bundle: {exc}", file=sys.stderr)
        return 1
    for run in graded.runs:
        score = "-" if run.score is None else f"{run.score:.3f}"
        print(printable(f"{run.run_key}  {run.outcome:<12} {score:>7}  {run.note}".rstrip()))
    print(f"{graded.root}: {len(graded.runs)} runs; ledger head {graded.head}")
    return 0
