"""Every analysis of paper sections 3 and 4 on one runs table, as ``spu stats`` writes it.

:func:`analyze` returns all tables in memory (the report draws from them);
:func:`write_stats` writes them as CSV files with a ``summary.csv`` of the scalar results
and a ``manifest.json`` saying what was computed from what, and what was skipped and why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import spu
from spu.stats.agreement import agreement_analysis
from spu.stats.costs import cost_table
from spu.stats.means import config_table, discipline_table
from spu.stats.monotone import monotone_prior
from spu.stats.outcomes import outcome_table
from spu.stats.paired import ALPHA, detectable_difference_z, paired_table
from spu.stats.private import NULL_DRAWS, private_pairs_table, private_table, random_ranking_null
from spu.stats.repeats import (
    DEFAULT_SIMULATIONS,
    RankStability,
    pooled_within_sd,
    rank_stability,
    reliability_table,
    repeats_table,
)
from spu.stats.resampling import DEFAULT_RESAMPLES
from spu.stats.runs_table import official, score_matrix
from spu.stats.submissions import (
    TaskInfo,
    load_submitted_orders,
    load_task_set,
)

MAX_NOTES = 50
"""Notes kept in the manifest; the rest are counted."""


@dataclass(frozen=True)
class StatsOptions:
    """What ``spu stats`` computes and from which inputs beyond the runs table."""

    seed: int = 0
    """Seed of every random draw."""
    resamples: int = DEFAULT_RESAMPLES
    """Bootstrap resamples."""
    simulations: int = DEFAULT_SIMULATIONS
    """Simulated reruns of the rank-stability analysis."""
    null_draws: int = NULL_DRAWS
    """Random submissions per private task for the exact null."""
    task_roots: tuple[Path, ...] = ()
    """Task roots holding the task packages (contracts, settings, answer keys)."""
    answers_root: Path | None = None
    """Answer keys kept apart from the task packages."""
    runs_dir: Path | None = None
    """Output root whose ``runs/<run_key>/`` folders hold the submitted files."""
    top_group_size: int | None = None
    """Size of the top group of the rank-stability analysis (default: widest gap)."""
    run_sd: float | None = None
    """Run-to-run SD of the simulated reruns (default: pooled SD of the repeats)."""


@dataclass(frozen=True)
class StatsResult:
    """All outputs of :func:`analyze`."""

    tables: dict[str, pd.DataFrame]
    """CSV tables by file name."""
    summary: pd.DataFrame
    """Scalar results: analysis, statistic, value, ci_low, ci_high, n."""
    manifest: dict[str, Any]
    """Inputs, options, and the analyses skipped with their reasons."""
    runs: pd.DataFrame
    """The checked runs table the results come from."""
    rank_stability: RankStability | None = None
    """Simulated-rerun rank stability, when a run-to-run SD was available."""
    notes: list[str] = field(default_factory=list)
    """Everything skipped, and why."""


def _summary_row(analysis: str, statistic: str, value: Any, n: Any = None,
                 ci: tuple[float, float] | None = None) -> dict[str, Any]:
    return {"analysis": analysis, "statistic": statistic, "value": value,
            "ci_low": None if ci is None else ci[0], "ci_high": None if ci is None else ci[1],
            "n": n}


def analyze(runs: pd.DataFrame, options: StatsOptions | None = None) -> StatsResult:
    """Run every analysis on a checked runs table (:func:`~spu.stats.runs_table.read_runs_table`).

    Parameters
    ----------
    runs
        The runs table.
    options
        Seed, resamples and the optional inputs.

    Returns
    -------
    StatsResult
        The tables of SPEC section 6 (``configs``, ``pairs``, ``outcomes``, ``costs``,
        ``disciplines``) and those of the private tasks, the repeats, agreement and the
        monotone prior where their inputs exist.

    References
    ----------
    Paper sections 3.1-3.6, 4.2, 4.5, 4.6, appendices C and E.1, E.2, E.8.
    """
    opt = options or StatsOptions()
    seed, resamples = opt.seed, opt.resamples
    notes: list[str] = []
    summary: list[dict[str, Any]] = []
    tables: dict[str, pd.DataFrame] = {}

    public = official(runs, "public")
    configs = config_table(public, seed, resamples)
    order = list(configs["config"])
    adjusted = configs.set_index("config")["adjusted_mean"]
    matrix = score_matrix(public, order)
    tables["configs.csv"] = configs
    pairs = paired_table(matrix, order)
    tables["pairs.csv"] = pairs
    tables["outcomes.csv"] = outcome_table(public, order)
    tables["costs.csv"] = cost_table(public, order, adjusted, seed, resamples)
    tables["disciplines.csv"] = discipline_table(public, order, seed, resamples)
    n_pairs = len(pairs)
    summary += [
        _summary_row("public", "tasks", int(public["task_id"].nunique())),
        _summary_row("public", "official_runs", len(public)),
        _summary_row("public", "scored_runs", int(public["scored"].sum())),
        _summary_row("public", "shared_tasks",
                     int(configs["n_shared_tasks"].iloc[0]) if len(configs) else 0),
        _summary_row("paired", "pairs", n_pairs),
        _summary_row("paired", "significant_pairs", int(pairs["significant"].sum())),
        _summary_row("paired", "z_corrected",
                     detectable_difference_z(ALPHA / max(n_pairs, 1)), n_pairs),
        _summary_row("paired", "z_uncorrected", detectable_difference_z(ALPHA)),
    ]

    wanted = set(runs["task_id"])
    tasks: dict[str, TaskInfo] = {}
    if opt.task_roots:
        tasks = load_task_set(list(opt.task_roots), opt.answers_root, wanted)
        missing = sorted(wanted - set(tasks))
        if missing:
            notes.append(f"{len(missing)} task(s) of the table have no task package: "
                         + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))

    private = official(runs, "private")
    if len(private):
        null = random_ranking_null(tasks, sorted(set(private["task_id"])), seed,
                                   opt.null_draws) if tasks else {}
        if not null:
            notes.append("private: no task packages with answer keys, so the test against "
                         "random rankings uses the normal approximation from the thresholds")
        private_order = [c for c in order if c in set(private["config"])] + sorted(
            set(private["config"]) - set(order))
        tables["private.csv"] = private_table(private, private_order, null, seed, resamples)
        tables["private_pairs.csv"] = private_pairs_table(
            score_matrix(private, private_order), private_order, seed)
    else:
        notes.append("private: no official runs on private tasks")

    public_all = runs[runs["visibility"] == "public"]
    stability = None
    if (public_all["repeat"] >= 1).any():
        repeats = repeats_table(public_all, seed, resamples)
        tables["repeats.csv"] = repeats
        tables["reliability.csv"] = reliability_table(repeats)
    else:
        notes.append("repeats: no repeated runs (repeat >= 1) on public tasks")
    run_sd = opt.run_sd if opt.run_sd is not None else pooled_within_sd(public_all)
    if np.isfinite(run_sd):
        stability = rank_stability(matrix, run_sd, seed, opt.simulations, opt.top_group_size)
    else:
        notes.append("rank stability: no run-to-run SD (no repeats with two scored runs on a "
                     "task, and no --run-sd)")
    if stability is None and np.isfinite(run_sd):
        notes.append("rank stability: fewer than two configurations with a task-adjusted mean")
    if stability is not None:
        tables["rank_stability.csv"] = stability.table
        summary += [
            _summary_row("rank_stability", "run_sd", stability.run_sd),
            _summary_row("rank_stability", "top_group_size", stability.top_group_size),
            _summary_row("rank_stability", "top_group_kept", stability.top_group_kept,
                         stability.simulations),
            _summary_row("rank_stability", "leader_first", stability.leader_first,
                         stability.simulations),
            _summary_row("rank_stability", "exact_order", stability.exact_order,
                         stability.simulations),
            _summary_row("rank_stability", "top_group_kept_tasks_resampled",
                         stability.top_group_kept_tasks_resampled, stability.simulations),
        ]

    scored_public = public[public["scored"]]
    if opt.runs_dir is None:
        notes.append("agreement, monotone prior: no --runs-dir, so no submitted orders")
    elif not tasks:
        notes.append("agreement, monotone prior: no --tasks, so no contracts or settings")
    else:
        submitted = load_submitted_orders(opt.runs_dir, scored_public)
        notes += submitted.notes[:MAX_NOTES]
        if len(submitted.notes) > MAX_NOTES:
            notes.append(f"... and {len(submitted.notes) - MAX_NOTES} more run folder notes")
        agreement = agreement_analysis(scored_public, submitted.orders, tasks, order, seed,
                                       resamples)
        tables["agreement_tasks.csv"] = agreement.tasks
        tables["consensus_loo.csv"] = agreement.leave_one_out
        summary += agreement.summary
        monotone = monotone_prior(scored_public, submitted.orders, tasks, order)
        tables["monotone.csv"] = monotone.configs
        tables["monotone_groups.csv"] = monotone.groups
        summary += monotone.summary

    manifest = {
        "spu_version": spu.__version__,
        "seed": seed, "resamples": resamples, "simulations": opt.simulations,
        "null_draws": opt.null_draws,
        "task_roots": [str(p) for p in opt.task_roots],
        "answers_root": None if opt.answers_root is None else str(opt.answers_root),
        "runs_dir": None if opt.runs_dir is None else str(opt.runs_dir),
        "rows": len(runs), "configs": order,
        "files": sorted([*tables, "summary.csv", "manifest.json"]),
        "notes": notes,
    }
    summary_frame = pd.DataFrame(summary, columns=["analysis", "statistic", "value", "ci_low",
                                                   "ci_high", "n"])
    return StatsResult(tables, summary_frame, manifest, runs, stability, notes)


def write_stats(result: StatsResult, out: str | Path) -> list[Path]:
    """Write the tables, ``summary.csv`` and ``manifest.json`` under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in [*result.tables.items(), ("summary.csv", result.summary)]:
        path = out / name
        table.to_csv(path, index=False)
        written.append(path)
    path = out / "manifest.json"
    path.write_text(json.dumps(result.manifest, indent=2) + "\n", encoding="utf-8")
    written.append(path)
    return written
