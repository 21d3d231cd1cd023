"""``spu report``: the statistics as Markdown tables, figures and one HTML page.

Takes the same inputs as ``spu stats``; heavy imports happen in the handler.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from spu.stats.cli import add_analysis_arguments

RUNS_HELP = ("a runs table (CSV or parquet, spu runs export), or an output root: its runs "
             "table is exported from its store, its run folders give the submitted orders and "
             "trajectories (--runs-dir) and its launches' task roots the task packages "
             "(--tasks, --answers-root); options given win")


def register(sub: Any) -> None:
    """Add ``report`` to the ``spu`` parser."""
    p = sub.add_parser("report", help="tables, figures and an HTML page of a runs table "
                       "or an output root",
                       description="Run the statistics of spu stats and write Markdown tables "
                       "(tables/, report.md), figures (figures/*.png, *.svg) and a "
                       "self-contained report.html to --out. 'spu report OUTPUT_ROOT --out "
                       "DIR' builds the whole report (trajectory figures included) from "
                       "what the output root holds.")
    add_analysis_arguments(p, RUNS_HELP)
    p.add_argument("--analysis", type=Path, default=None, metavar="ANALYZE_DIR",
                   help="an spu analyze output folder: its figures 14-24 join the report "
                        "(with --runs-dir and no --analysis, the runs are analysed first, "
                        "into OUT/analysis)")
    p.add_argument("--with-csv", action="store_true",
                   help="also write the CSV files of spu stats under OUT/stats/")
    p.set_defaults(handler=report_command)


def from_output_root(args: argparse.Namespace, scratch: Path) -> list[str]:
    """Fill ``args`` from the output root ``args.runs``; the lines saying what was found.

    The runs table is exported into ``scratch`` (copied to ``OUT/runs.csv`` once the
    report is written); ``--runs-dir``, ``--tasks`` and ``--answers-root`` given win.

    Raises
    ------
    OutputRootError
        The folder is no output root, or its runs cannot be exported.
    """
    from spu.report.inputs import export_runs, launch_roots

    root = Path(args.runs)
    table = scratch / "runs.csv"
    source = export_runs(root, table)
    said = [f"runs table from {source}"]
    args.runs, args.runs_label = table, root
    if args.runs_dir is None:
        args.runs_dir = root
    found = launch_roots(root)
    if not args.tasks:
        args.tasks = list(found.task_roots)
        said.append("task packages from " + (", ".join(map(str, found.task_roots))
                                             if found.task_roots else
                                             "nowhere: no launch's task_root exists (--tasks "
                                             "gives one)"))
    if args.answers_root is None and found.answers_root is not None:
        args.answers_root = found.answers_root
        said.append(f"answer keys from {found.answers_root}")
    return said + list(found.notes)


def report_command(args: argparse.Namespace) -> int:
    """Write the report; exit 2 for an unusable input, 1 for no official run."""
    import shutil
    import sys
    import tempfile

    from spu.report.inputs import OutputRootError

    with tempfile.TemporaryDirectory(prefix="spu-report-") as scratch:
        said: list[str] = []
        if Path(args.runs).is_dir():
            try:
                said = from_output_root(args, Path(scratch))
            except OutputRootError as exc:
                print(f"spu report: {exc}", file=sys.stderr)
                return 2
        for line in said:
            print(f"spu report: {line}")
        code = _report(args)
        if code == 0 and said:
            shutil.copyfile(args.runs, args.out / "runs.csv")
    return code


def _report(args: argparse.Namespace) -> int:
    from spu.report.build import build_report
    from spu.stats.analysis import write_stats
    from spu.stats.cli import run_analysis

    result = run_analysis(args, "report")
    if isinstance(result, int):
        return result
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
