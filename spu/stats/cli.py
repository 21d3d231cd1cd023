"""``spu stats``: every analysis of paper sections 3 and 4 from a runs table (SPEC section 6).

Heavy imports (numpy, scipy, pandas) happen in the handler, so ``spu --help`` stays fast.
The defaults below are therefore written out; a test checks that they equal
:data:`~spu.stats.resampling.DEFAULT_RESAMPLES`,
:data:`~spu.stats.repeats.DEFAULT_SIMULATIONS` and :data:`~spu.stats.design.DIFFERENCES`;
``--null-draws`` defaults to ``None``, each null at its paper count
(:data:`~spu.stats.interaction.NULL_DRAWS`, :data:`~spu.stats.disciplines.PERMUTATIONS`,
:data:`~spu.stats.private.NULL_DRAWS`), which its help spells out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DESIGN_DIFFERENCES = (0.05, 0.1, 0.15, 0.2)
"""Default differences of ``design.csv`` (:data:`spu.stats.design.DIFFERENCES`)."""


def add_analysis_arguments(p: argparse.ArgumentParser,
                           runs_help: str = "runs table, CSV or parquet (spu runs export)"
                           ) -> None:
    """The inputs and options shared by ``spu stats`` and ``spu report``."""
    p.add_argument("runs", type=Path, help=runs_help)
    p.add_argument("--out", type=Path, required=True, help="folder to write to")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
    p.add_argument("--resamples", type=int, default=10_000,
                   help="bootstrap resamples (default 10,000)")
    p.add_argument("--simulations", type=int, default=10_000,
                   help="simulated reruns of the rank-stability analysis (default 10,000)")
    p.add_argument("--tasks", type=Path, action="append", default=[], metavar="TASK_ROOT",
                   help="task root with the task packages (repeatable): contracts, settings and "
                        "answer keys for agreement, the monotone prior and the exact private null")
    p.add_argument("--answers-root", type=Path, default=None,
                   help="answer keys kept apart from the task packages")
    p.add_argument("--experiment", default=None, metavar="NAME",
                   help="the MLflow experiment whose runs to use (paper finds spu-paper; "
                        "'all': every one; default: the most recent sweep's, said in the "
                        "output)")
    p.add_argument("--runs-dir", type=Path, default=None, metavar="OUTPUT_ROOT",
                   help="output root whose runs/<run_key>/output/rankings.json hold the "
                        "submitted orders")
    add_rule_arguments(p)


def add_rule_arguments(p: argparse.ArgumentParser) -> None:
    """The options that replace one of the paper's rules or readings (docs/statistics.md)."""
    p.add_argument("--top-group", type=int, default=None, metavar="K",
                   help="size of the leading group: the top group of the rank-stability "
                        "analysis (rank_stability.csv) and the leading group of the "
                        "discipline comparison (discipline_gap.csv, unless "
                        "--discipline-groups names both groups); default: the "
                        "configurations above the widest gap of the task-adjusted means, "
                        "our reading of the paper's 'leading six'")
    p.add_argument("--run-sd", type=float, default=None,
                   help="run-to-run SD of the simulated reruns (default: pooled SD of repeats)")
    p.add_argument("--null-draws", type=int, default=None,
                   help="draws of every null distribution, whatever --resamples is (default: "
                        "the paper's 2,000 tables simulated without interaction, 5,000 "
                        "permutations of discipline labels and random splits, 40,000 random "
                        "submissions per private task)")
    p.add_argument("--decomposition-configs", default=None, metavar="A,B,...",
                   help="configurations of variance.csv's decomposition (4.4, E.2), "
                        "comma-separated, on the tasks they all scored (default, our reading "
                        "of 4.4's 'nine configurations scored on the same 86 tasks': the "
                        "largest set scored on a common task set, the one holding the most "
                        "scores)")
    p.add_argument("--discipline-groups", default=None, metavar="A,B;C,D",
                   help="leading and trailing groups of discipline_gap.csv (4.6, E.10), "
                        "e.g. the paper's named ones; replaces both groups and ignores "
                        "--top-group there (default: the leading group is the "
                        "configurations above the widest gap of the task-adjusted means, "
                        "or the --top-group best, that have a scored run in every "
                        "discipline; the trailing group is those of the rest a "
                        "Holm-significant paired test separates from a leading one, or "
                        "all of the rest when no test separates any)")
    p.add_argument("--unrelated-below", type=float, default=None, metavar="RHO",
                   help="largest absolute Spearman of a measured order with a group's "
                        "numeric settings at which it counts as nearly unrelated to them, "
                        "for monotone_unrelated.csv (4.2 gives no number; default 0.2)")
    p.add_argument("--spread-ratio", choices=("ms", "sd"), default="ms",
                   help="4.4's ratio of the configurations' spread on a task to the repeats': "
                        "ms, the paper's comparison (E.9: mean square of the additive-fit "
                        "residuals over the repeats' mean square, the F of "
                        "interaction_tasks.csv; default), or sd (standard deviation of the "
                        "configurations' scores over that of the repeats); manifest.json "
                        "names the rule")
    p.add_argument("--design-difference", type=float, action="append", default=None,
                   metavar="D", dest="design_differences",
                   help="difference in mean score for the study-design table design.csv "
                        "(repeatable; default 0.05, 0.1, 0.15, 0.2)")
    p.add_argument("--gpu-rule", choices=("executed", "measured"), default="executed",
                   help="which runs used the GPU: executed, the paper's (E.12: a GPU workload "
                        "in executed code ran without failing, read from the trajectories "
                        "under --runs-dir; default), or measured (the device sampled by "
                        "NVML); the other is gpu_measured beside it, manifest.json names "
                        "the rule")
    p.add_argument("--effort-repeat-tasks", choices=("repeat-tasks", "official-scored"),
                   default="repeat-tasks",
                   help="tasks on which the lower effort is compared with the mean of the "
                        "higher effort's repeats (effort.csv repeats_mean and all_runs_mean, "
                        "the 4.5 row of summary.csv): repeat-tasks, the paper's (4.10: every "
                        "task of the repeated runs of 3.6 on which the lower effort scored; "
                        "default), or official-scored (only those where the higher effort's "
                        "official run is scored too)")
    p.add_argument("--top1-weights", choices=("groups", "weights"), default="groups",
                   help="appendix F's top-1 rate (pair_order_runs.csv, pair_order.csv): "
                        "groups, the paper's (each completely ordered group counts once; "
                        "default), or weights (groups weighted by their contract weights, "
                        "as the pair share is)")
    p.add_argument("--refusals-after-file", choices=("exclude", "score"), default="exclude",
                   help="refusals that came after a valid or recoverable file: exclude them "
                        "as refusals (default, the paper's rule 3.1) or score their file; "
                        "outcomes.csv counts them apart (refusal_after_file), manifest.json "
                        "names the rule")


def _names(value: str | None) -> tuple[str, ...] | None:
    """Comma-separated configuration labels, or ``None``.

    >>> _names("Astra Max, Opus 5")
    ('Astra Max', 'Opus 5')
    """
    if value is None:
        return None
    return tuple(name.strip() for name in value.split(",") if name.strip())


def register(sub: Any) -> None:
    """Add ``stats`` to the ``spu`` parser."""
    p = sub.add_parser("stats", help="statistics of a runs table (paper sections 3 and 4)",
                       description="Write the tables of SPEC sections 6 and 9 (configs, pairs, "
                       "outcomes, costs, disciplines, tasks, exposure, variance, tests, "
                       "repeats_orders, ...) and every other table the inputs allow to --out; "
                       "manifest.json names the paper section of each file.")
    add_analysis_arguments(p)
    p.set_defaults(handler=stats_command)


def run_analysis(args: argparse.Namespace, command: str) -> Any:
    """Read the table and run :func:`spu.stats.analysis.analyze`.

    Returns the result, or the exit code after saying why in one line: 2 when an input
    cannot be used, 1 when the table has no official run to analyse.
    """
    from spu.overrides import folder_problem
    from spu.stats.analysis import StatsOptions, analyze
    from spu.stats.registry import AnalysisRegistryError
    from spu.stats.runs_table import (
        EMPTY_HINT,
        RunsTableError,
        nothing_to_analyse,
        read_experiment_table,
    )
    from spu.stats.submissions import StatsInputError

    problem = folder_problem(args.out)
    if problem:
        print(f"spu {command}: --out {args.out}: {problem}; choose another --out",
              file=sys.stderr)
        return 2
    for name in ("resamples", "simulations", "null_draws"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            print(f"spu {command}: --{name.replace('_', '-')} must be at least 1",
                  file=sys.stderr)
            return 2
    chosen = _names(args.decomposition_configs)
    if chosen is not None and len(set(chosen)) < 2:
        print(f"spu {command}: --decomposition-configs needs at least two configurations",
              file=sys.stderr)
        return 2
    differences = tuple(args.design_differences or DESIGN_DIFFERENCES)
    if any(not d > 0 for d in differences):
        print(f"spu {command}: --design-difference must be above 0", file=sys.stderr)
        return 2
    from spu.stats.monotone import UNRELATED

    unrelated = UNRELATED if args.unrelated_below is None else args.unrelated_below
    if not 0 <= unrelated < 1:
        print(f"spu {command}: --unrelated-below must be at least 0 and below 1",
              file=sys.stderr)
        return 2
    from spu.analysis.runs import executed_gpu_use

    options = StatsOptions(
        seed=args.seed, resamples=args.resamples, simulations=args.simulations,
        null_draws=args.null_draws, task_roots=tuple(args.tasks),
        answers_root=args.answers_root, runs_dir=args.runs_dir,
        top_group_size=args.top_group, run_sd=args.run_sd, design_differences=differences,
        decomposition_configs=chosen, discipline_groups=args.discipline_groups,
        unrelated_below=unrelated,
        spread_ratio=args.spread_ratio,
        refusals_after_file=args.refusals_after_file, gpu_rule=args.gpu_rule,
        effort_repeat_tasks=args.effort_repeat_tasks, top1_weights=args.top1_weights,
        gpu_reader=executed_gpu_use,
    )
    try:
        runs, experiment = read_experiment_table(args.runs, args.experiment)
        if experiment is not None:
            print(f"spu {command}: {experiment}")
        result = analyze(runs, options)
    except (RunsTableError, StatsInputError, AnalysisRegistryError) as exc:
        print(f"spu {command}: {exc}", file=sys.stderr)
        return 2
    empty = nothing_to_analyse(result.runs, len(runs) - len(result.runs))
    if empty is not None:
        print(f"spu {command}: {getattr(args, 'runs_label', args.runs)}: {empty}; nothing "
              f"written; {EMPTY_HINT}", file=sys.stderr)
        return 1
    result.manifest["runs_table"] = str(getattr(args, "runs_label", args.runs))
    result.manifest["experiment"] = experiment
    return result


def stats_command(args: argparse.Namespace) -> int:
    """Write the statistics; exit 2 for an unusable input, 1 for no official run."""
    from spu.stats.analysis import write_stats

    result = run_analysis(args, "stats")
    if isinstance(result, int):
        return result
    written = write_stats(result, args.out)
    print(f"spu stats: wrote {len(written)} files to {args.out}")
    for note in result.notes:
        print(f"  note: {note}")
    return 0
