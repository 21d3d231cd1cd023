"""The ``spu`` console script (``python -m spu`` does the same).

Each pipeline stage contributes its own subcommands from ``spu/<stage>/cli.py``
through a function ``register(subparsers)``; the handlers import their heavy
dependencies only when they run, so ``spu --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

import spu

COMMAND_MODULES: tuple[str, ...] = (
    "spu.grading.cli",   # spu grade
    "spu.tasks.cli",     # spu task validate | threshold | build | list
    "spu.tracking.cli",  # spu runs export, spu regrade, spu grade-bundle
    "spu.seal.cli",      # spu seal verify | export
    "spu.cost.cli",      # spu cost estimate
    "spu.stats.cli",     # spu stats
    "spu.analysis.cli",  # spu analyze
    "spu.analysis.show",  # spu show, spu compare
    "spu.report.cli",    # spu report
    "spu.report.leaderboard",  # spu leaderboard
    "spu.scripted.cli",  # spu scripted-server
    "spu.listing",       # spu list, spu run
    "spu.project_init",  # spu init
    "spu.datasets.cli",  # spu dataset pack | list | pull | verify
    "spu.selfcheck.cli",  # spu selfcheck
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every stage's subcommands."""
    parser = argparse.ArgumentParser(
        prog="spu",
        description="Run, grade and analyse the Science Prediction Universe benchmark. "
        "Runs and sweeps: spu run [overrides] [-m ...] (the same as python -m spu.main).",
    )
    parser.add_argument("--version", action="version", version=f"spu {spu.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # the stage's package itself is not there
            found = False
        if found:
            importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns the exit status.

    ``spu run ARGS`` hands ``ARGS`` to the Hydra application untouched (Hydra's own
    flags and ``-m`` anywhere included).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list == ["--version"]:  # without importing every stage's command line
        print(f"spu {spu.__version__}")
        return 0
    if args_list[:1] == ["run"]:
        from spu.listing import run_command

        return run_command(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
