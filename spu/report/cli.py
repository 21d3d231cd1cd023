"""``spu report``: the statistics as Markdown tables, figures and one HTML page.

Takes the same inputs as ``spu stats``; heavy imports happen in the handler.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from spu.stats.cli import add_analysis_arguments


def register(sub: Any) -> None:
    """Add ``report`` to the ``spu`` parser."""
    p = sub.add_parser("report", help="tables, figures and an HTML page of a runs table",
                       description="Run the statistics of spu stats and write Markdown tables "
                       "(tables/, report.md), figures (figures/*.png, *.svg) and a "
                       "self-contained report.html to --out.")
    add_analysis_arguments(p)
    p.add_argument("--analysis", type=Path, default=None, metavar="ANALYZE_DIR",
                   help="an spu analyze output folder: its figures 14-24 join the report "
                        "(with --runs-dir and no --analysis, the runs are analysed first, "
                        "into OUT/analysis)")
    p.add_argument("--with-csv", action="store_true",
                   help="also write the CSV files of spu stats under OUT/stats/")
    p.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace) -> int:
    """Write the report; exit 2 when an input cannot be used (nothing is written then)."""
    from spu.report.build import build_report
    from spu.stats.analysis import write_stats
    from spu.stats.cli import run_analysis

    result = run_analysis(args, "report")
    if result is None:
        return 2
    analysis = args.analysis
    if analysis is None and args.runs_dir is not None:
        from spu.analysis.trajectory_analysis import (
            AnalyzeOptions,
            analyze_runs,
            write_analysis,
        )

        analysis = args.out / "analysis"
        write_analysis(analyze_runs(args.runs_dir, AnalyzeOptions(
            task_roots=tuple(args.tasks), answers_root=args.answers_root, seed=args.seed,
            resamples=args.resamples)), analysis)
    written = build_report(result, args.out, analysis)
    if args.with_csv:
        written += write_stats(result, args.out / "stats")
    print(f"spu report: wrote {len(written)} files to {args.out} "
          f"(open {args.out / 'report.html'})")
    for note in result.notes:
        print(f"  note: {note}")
    return 0
