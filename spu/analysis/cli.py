"""``spu analyze``: trajectory analysis of a folder of runs (SPEC section 8, paper 4).

Three forms::

    spu analyze RUNS_DIR --out DIR [--tasks TASK_ROOT] [--seed S] [--resamples N]
    spu analyze sample RUNS_DIR --n 60 --seed S [--out FILE]
    spu analyze audit FILE [--out DIR]

Heavy imports happen in the handlers, so ``spu --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spu.printable import printable

USAGE = """spu analyze RUNS_DIR --out DIR [--tasks TASK_ROOT] [--answers-root DIR] [--seed S]
                   [--resamples N] [--trees N] [--jobs N] [--all-repeats]
                   [--include-private] [--flip-share pairs|runs]
                   [--revised-population differs|ranked] [--gpu-tasks both-sides|all]
                   [--task ID] [--no-figures]
       spu analyze sample RUNS_DIR [--n 60] [--seed S] [--out FILE]
       spu analyze audit FILE [--out DIR]"""


def register(sub: Any) -> None:
    """Add ``analyze`` to the ``spu`` parser."""
    p = sub.add_parser(
        "analyze", help="trajectory analysis of a folder of runs (paper section 4)",
        usage=USAGE,
        description="Label every tool call of every run under RUNS_DIR (activity, method "
        "families, GPU work), find the first complete ranking and its revisions, and write "
        "calls.csv, runs_features.csv, associations.csv, the tables and figures 14-24 to DIR. "
        "'sample' draws calls for a person to check; 'audit' scores the checked file.")
    p.add_argument("words", nargs=argparse.REMAINDER)
    p.set_defaults(handler=analyze_command)


def _analyze_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spu analyze", usage=USAGE)
    p.add_argument("runs_dir", type=Path, help="output root (or its runs/) holding run folders")
    p.add_argument("--out", type=Path, required=True, help="folder to write to")
    p.add_argument("--tasks", type=Path, action="append", default=[], metavar="TASK_ROOT",
                   help="task root with answer keys, for the score of the first draft "
                        "(repeatable)")
    p.add_argument("--answers-root", type=Path, default=None,
                   help="answer keys kept apart from the task packages")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
    p.add_argument("--resamples", type=int, default=10_000,
                   help="bootstrap resamples of tasks for the associations (default 10,000)")
    p.add_argument("--trees", type=int, default=500,
                   help="trees of the configuration classifier (default 500)")
    p.add_argument("--jobs", type=int, default=2,
                   help="worker processes reading the runs, then fitting the classifier's "
                        "folds (default 2; the results do not depend on it)")
    p.add_argument("--all-repeats", action="store_true",
                   help="analyse repeated runs too (default: official runs, repeat 0)")
    p.add_argument("--flip-share", choices=("pairs", "runs"), default="pairs",
                   help="Figure 24e's share of flipped pairs that moved into the measured "
                        "order (revision_intervals.csv): of the pairs pooled over the runs "
                        "(default, 'share of the item pairs') or each run's share averaged; "
                        "manifest.json names it")
    p.add_argument("--revised-population", choices=("differs", "ranked"), default="differs",
                   help="the revised runs of 4.3 (Figure 17c, the sign test in summary.csv) "
                        "and of Figure 24e, one population for both: differs, the paper's, "
                        "every run whose submission differs from its first draft, a return "
                        "to the input order included (default); ranked, only those whose "
                        "submission is a complete ranking other than the input order")
    p.add_argument("--gpu-tasks", choices=("both-sides", "all"), default="both-sides",
                   help="tasks of 4.8's GPU runs against the others (gpu_within_config.csv, "
                        "Figure 22e): both-sides, the paper's, the tasks with scored runs "
                        "that used the GPU and runs that did not (default); all, every task")
    p.add_argument("--include-private", action="store_true",
                   help="analyse runs on private tasks too (default: the public tasks, as the "
                        "paper's section 4)")
    p.add_argument("--task", action="append", default=[], metavar="ID", dest="detail_tasks",
                   help="a task examined in detail: task_runs.csv holds every scored run "
                        "on it, by discipline (Figure 21a); with --tasks, task_settings.csv "
                        "its orders against the settings (18e) and task_repeat_orders.csv "
                        "its repeats' orders (19b); repeatable")
    p.add_argument("--no-figures", action="store_true", help="write the tables only")
    return p


def _sample_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spu analyze sample", usage=USAGE)
    p.add_argument("runs_dir", type=Path)
    p.add_argument("--n", type=int, default=60, help="calls to draw (default 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("audit_sample.jsonl"),
                   help="verdict file to fill in (default audit_sample.jsonl)")
    return p


def _audit_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spu analyze audit", usage=USAGE)
    p.add_argument("file", type=Path, help="the sample file with verdicts filled in")
    p.add_argument("--out", type=Path, default=None,
                   help="folder to store audit.csv in (default: beside FILE)")
    return p


def analyze_command(args: argparse.Namespace) -> int:
    """Dispatch ``spu analyze``, ``spu analyze sample`` and ``spu analyze audit``."""
    words = list(args.words)
    if not words:
        print(f"usage: {USAGE}\nspu analyze: a runs folder, 'sample' or 'audit' is required",
              file=sys.stderr)
        return 2
    if words[0] == "sample" and not Path("sample").is_dir():
        return sample_command(_sample_parser().parse_args(words[1:]))
    if words[0] == "audit" and not Path("audit").is_dir():
        return audit_command(_audit_parser().parse_args(words[1:]))
    return run_analyze(_analyze_parser().parse_args(words))


def run_analyze(args: argparse.Namespace) -> int:
    """Write the tables and figures; exit 2 when the inputs cannot be used."""
    from spu.analysis.trajectory_analysis import AnalyzeOptions, analyze_runs, write_analysis
    from spu.stats.submissions import StatsInputError

    if args.resamples < 1 or args.trees < 1:
        print("spu analyze: --resamples and --trees must be at least 1", file=sys.stderr)
        return 2
    options = AnalyzeOptions(task_roots=tuple(args.tasks), answers_root=args.answers_root,
                             seed=args.seed, resamples=args.resamples, trees=args.trees,
                             official_only=not args.all_repeats,
                             public_only=not args.include_private,
                             flip_share=args.flip_share, jobs=args.jobs,
                             revised_population=args.revised_population,
                             gpu_tasks=args.gpu_tasks,
                             detail_tasks=tuple(args.detail_tasks))
    try:
        result = analyze_runs(args.runs_dir, options)
    except (FileNotFoundError, StatsInputError) as exc:
        print(f"spu analyze: {exc}", file=sys.stderr)
        return 2
    if not result.manifest["calls"]:
        # Every table and figure is about tool calls: say what is missing once, not per file.
        print(f"spu analyze: none of the {result.manifest['runs']} runs under {args.runs_dir} "
              f"has a trajectory with tool calls; trajectory analysis needs runs with an "
              f"agent harness (harness=claude_code or harness=codex; the baselines call no "
              f"tool)", file=sys.stderr)
        return 2
    written = write_analysis(result, args.out)
    if not args.no_figures:
        from spu.report.trajectory_figures import write_figures

        drawn, missing = write_figures(result.tables, args.out / "figures")
        written += drawn
        for name, need in missing.items():
            print(f"  figure {name}: not drawn ({need})")
    m = result.manifest
    print(f"spu analyze: {m['runs']} runs ({m['scored_runs']} scored), {m['calls']:,} tool "
          f"calls; wrote {len(written)} files to {args.out}")
    for note in result.notes[:20]:
        print(printable(f"  note: {note}"))
    if len(result.notes) > 20:
        print(f"  ... {len(result.notes) - 20} more notes in {args.out / 'manifest.json'}")
    return 0


def sample_command(args: argparse.Namespace) -> int:
    """Print ``--n`` labelled calls and write them as a verdict file to fill in."""
    from spu.analysis.audit import draw_sample, format_sample, write_sample

    try:
        sample = draw_sample(args.runs_dir, args.n, args.seed)
    except FileNotFoundError as exc:
        print(f"spu analyze sample: {exc}", file=sys.stderr)
        return 2
    print(printable(format_sample(sample)))  # the agents' commands and outputs
    write_sample(sample, args.out)
    print(f"\nspu analyze sample: {len(sample)} calls; set \"correct\" (and "
          f"\"correct_activity\" where wrong) in {args.out}, then: spu analyze audit {args.out}")
    return 0


def audit_command(args: argparse.Namespace) -> int:
    """Store the verdicts and report label accuracy."""
    from spu.analysis.audit import AuditFileError, label_accuracy, read_verdicts, store_verdicts

    try:
        verdicts = read_verdicts(args.file)
    except (OSError, AuditFileError) as exc:
        print(f"spu analyze audit: {exc}", file=sys.stderr)
        return 2
    out = args.out or args.file.parent
    path = store_verdicts(verdicts, out)
    acc = label_accuracy(verdicts)
    if not acc.checked:
        print(f"spu analyze audit: no verdicts yet in {args.file} ({acc.unchecked} calls with "
              f"\"correct\": null); stored in {path}")
        return 0
    print(f"spu analyze audit: {acc.correct} of {acc.checked} labels correct "
          f"({acc.share:.0%}, 95% CI {acc.ci_low:.0%} to {acc.ci_high:.0%}); "
          f"{acc.unchecked} unchecked; stored in {path}")
    for activity, (right, n) in sorted(acc.by_activity.items()):
        print(f"  {activity}: {right} of {n}")
    return 0
