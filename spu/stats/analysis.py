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
from spu.stats.agreement import agreement_analysis, repeat_agreement, repeat_orders_table
from spu.stats.costs import cost_sensitivity_table, cost_table
from spu.stats.coverage import all_tasks_table, coverage_table, shared_task_counts
from spu.stats.design import DIFFERENCES, detectable_curves, pilot_variances, study_design
from spu.stats.disciplines import (
    PERMUTATIONS,
    all_discipline_configs,
    default_groups,
    discipline_gap,
    discipline_stability,
    discipline_summary,
)
from spu.stats.effort import (
    effort_correlations,
    effort_pairs,
    effort_ratios,
    effort_table,
    effort_tasks,
)
from spu.stats.exposure import (
    exposure_indicators,
    exposure_summary,
    exposure_table,
    presented_order_summary,
)
from spu.stats.interaction import (
    NULL_DRAWS,
    grouping_share,
    interaction_tasks,
    simulated_nulls,
    spread_summary,
    variance_decomposition,
)
from spu.stats.means import config_table, discipline_table
from spu.stats.monotone import monotone_prior
from spu.stats.named_tests import TEST_COLUMNS, named_test
from spu.stats.outcomes import (
    departure_table,
    outcome_table,
    recovered_vs_valid,
    refusal_table,
    scoring_rules_table,
)
from spu.stats.pair_order import example_runs, pair_order_configs, pair_order_runs
from spu.stats.paired import ALPHA, detectable_difference_z, paired_table
from spu.stats.private import (
    NULL_DRAWS as PRIVATE_NULL_DRAWS,
)
from spu.stats.private import (
    private_pairs_table,
    private_table,
    private_task_table,
    random_ranking_null,
)
from spu.stats.repeats import (
    DEFAULT_SIMULATIONS,
    RankStability,
    pooled_within_sd,
    rank_stability,
    reliability_table,
    repeat_task_table,
    repeats_table,
    stop_clustering_test,
    stop_effect,
)
from spu.stats.resampling import DEFAULT_RESAMPLES
from spu.stats.runs_table import official, score_matrix
from spu.stats.submissions import (
    TaskInfo,
    load_submitted_orders,
    load_task_set,
)
from spu.stats.tasks import kruskal_wallis_disciplines, task_summary, task_table

MAX_NOTES = 50
"""Notes kept in the manifest; the rest are counted."""

FILES: dict[str, str] = {
    "configs.csv": "Table 1, Figure 9a, c (3.1, 3.3)",
    "pairs.csv": "Figure 25a-c (3.3, E.2)",
    "outcomes.csv": "Table 6 (3.2, E.1)",
    "costs.csv": "Table 3, Figure 11 (3.5)",
    "disciplines.csv": "Table 5, Figure 20b (4.6, C)",
    "tasks.csv": "Figure 3, Figure 20a (2.2, 3.3, E.9)",
    "departures.csv": "Figure 6a (3.2, E.1)",
    "recovered.csv": "Figure 6b-c (3.2)",
    "refusals.csv": "Figure 7 (3.2)",
    "scoring_rules.csv": "Figure 8 (3.2)",
    "coverage.csv": "3.3 Coverage",
    "all_tasks.csv": "Figure 1",
    "cost_sensitivity.csv": "3.5 Cost range (Pareto sensitivity)",
    "effort_tasks.csv": "Figure 24a, Figure 25d (4.10)",
    "effort.csv": "Figure 24b (3.3, 4.5, 4.10)",
    "effort_ratios.csv": "Figure 24c (3.5, 4.10)",
    "effort_correlations.csv": "E.3",
    "repeats.csv": "Figure 26a (3.6, 4.5)",
    "reliability.csv": "Figure 26b (4.5)",
    "repeats_tasks.csv": "Figure 12a-b, Figure 26a (3.6)",
    "repeats_stops.csv": "Figure 19d (4.5)",
    "rank_stability.csv": "Figure 26f (4.5)",
    "detectable.csv": "Figure 26d-e (E.2)",
    "design.csv": "E.2 (study design)",
    "variance.csv": "Figure 26c (4.4, E.2)",
    "interaction_tasks.csv": "Figure 18b (4.4, E.9)",
    "pair_correlations.csv": "Figure 18d (4.4, E.9)",
    "discipline_summary.csv": "Figure 20a (4.6, E.10)",
    "discipline_gap.csv": "Figure 20c (4.6, E.10)",
    "discipline_pairs.csv": "Figure 20d (4.6, E.10)",
    "exposure.csv": "Figure 13d (3.7, E.4)",
    "exposure_indicators.csv": "Figure 13c (3.7)",
    "presented_order.csv": "E.4 Presented order",
    "private.csv": "Table 2 (3.4)",
    "private_pairs.csv": "3.4 (exact sign-flip)",
    "private_tasks.csv": "Figure 10 (3.4, E.5)",
    "agreement_tasks.csv": "Figure 27a (E.8)",
    "consensus_loo.csv": "Figure 27b-c (E.8)",
    "monotone.csv": "Figure 16d (4.2)",
    "monotone_groups.csv": "Figure 16c (4.2)",
    "repeats_orders.csv": "Figure 19a (4.5)",
    "repeats_agreement.csv": "Figure 12c (4.5)",
    "pair_order_runs.csv": "Figure 28c (F)",
    "pair_order.csv": "Figure 28d (F)",
    "pair_order_examples.csv": "Figure 28a (F)",
    "tests.csv": "every named test (3.2-3.7, 4.4, 4.6, E.9, E.10)",
    "summary.csv": "scalar results quoted in the text",
}
"""Each output file and the paper table, figure or section it reproduces."""


@dataclass(frozen=True)
class StatsOptions:
    """What ``spu stats`` computes and from which inputs beyond the runs table."""

    seed: int = 0
    """Seed of every random draw."""
    resamples: int = DEFAULT_RESAMPLES
    """Bootstrap resamples."""
    simulations: int = DEFAULT_SIMULATIONS
    """Simulated reruns of the rank-stability analysis."""
    null_draws: int = PRIVATE_NULL_DRAWS
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
    design_differences: tuple[float, ...] = DIFFERENCES
    """Differences in mean score of the study-design table (``design.csv``)."""


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
        The tables of SPEC sections 6 and 9 and every other table whose inputs exist
        (:data:`FILES` says which paper section each file reproduces).

    References
    ----------
    Paper sections 2.2, 3.1-3.7, 4.2, 4.4-4.6, 4.10, appendices C, E.1-E.10 and F.
    """
    opt = options or StatsOptions()
    seed, resamples = opt.seed, opt.resamples
    draws = resamples  # permutation draws
    null_draws = min(NULL_DRAWS, resamples)
    permutations = min(PERMUTATIONS, resamples)
    notes: list[str] = []
    summary: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    tables: dict[str, pd.DataFrame] = {}
    absent = list(runs.attrs.get("absent_columns", []))

    public = official(runs, "public")
    official_all = runs[runs["repeat"] == 0]
    public_all = runs[runs["visibility"] == "public"]
    configs = config_table(public, seed, resamples)
    order = list(configs["config"])
    order_all = order + sorted(set(official_all["config"]) - set(order))
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

    # Tasks (2.2, 3.3).
    task_stats = task_table(runs, tasks)
    tables["tasks.csv"] = task_stats
    summary += task_summary(task_stats)
    tests.append(kruskal_wallis_disciplines(task_stats))
    if not tasks:
        notes.append("tasks: no --tasks, so no tied groups, attainable maximum or presented "
                     "order")

    # Outcomes (3.2, E.1).
    tables["departures.csv"] = departure_table(public, order)
    if "departures" in absent or "departures" not in runs.columns:
        notes.append("outcomes: the table has no departures column (spu runs export adds it), "
                     "so rejected files count as 'unrecorded' departures")
    tables["refusals.csv"] = refusal_table(public, order)
    tables["scoring_rules.csv"] = scoring_rules_table(official_all, order_all, seed, resamples)
    recovered = recovered_vs_valid(public, order, seed, resamples, draws)
    tables["recovered.csv"] = recovered.table
    if recovered.pooled["n_configs"]:
        tests.append(named_test("recovered_vs_valid_pooled", recovered.pooled["diff"],
                                recovered.pooled["p_perm"], "3.2",
                                n=recovered.pooled["n_marked"],
                                method="exact" if recovered.pooled["exact"] else "monte-carlo"))
        summary.append(_summary_row("outcomes", "recovered_minus_valid",
                                    recovered.pooled["diff"], recovered.pooled["n_marked"],
                                    (recovered.pooled["ci_low"], recovered.pooled["ci_high"])))
    else:
        notes.append("outcomes: no configuration has both recovered and valid files")

    # Coverage (3.3, Figure 1).
    coverage = coverage_table(public, order, seed, resamples, draws)
    tables["coverage.csv"] = coverage
    tests += [named_test(f"coverage_difficulty {r.config}", r.diff, r.p_perm, "3.3",
                         n=r.n_excluded, method="permutation", p_holm=r.p_holm)
              for r in coverage.itertuples(index=False)]
    summary += shared_task_counts(runs)
    tables["all_tasks.csv"] = all_tasks_table(official_all, order_all, seed, resamples)

    # Cost (3.5).
    tables["cost_sensitivity.csv"] = cost_sensitivity_table(public, order, adjusted)
    if "cost_full_input_usd" in absent:
        notes.append("cost: no cost_full_input_usd column, so no full-input-price check")

    # Effort (3.3, 4.10, E.3).
    effort = [(pair, effort_tasks(public_all, pair)) for pair in effort_pairs(public)]
    if effort:
        tables["effort_tasks.csv"] = pd.concat(
            [t.assign(low_config=p.low, high_config=p.high) for p, t in effort],
            ignore_index=True)
        tables["effort.csv"] = pd.concat(
            [effort_table(t, public_all, p, seed, resamples) for p, t in effort],
            ignore_index=True)
        tables["effort_ratios.csv"] = pd.concat(
            [effort_ratios(public, p, seed, resamples) for p, _ in effort], ignore_index=True)
    else:
        notes.append("effort: no model ran at two reasoning efforts with the same harness")
    correlations, rows = effort_correlations(public, order, seed, resamples)
    tables["effort_correlations.csv"] = correlations
    summary += rows

    # Repeats (3.6, 4.5).
    stability = None
    has_repeats = bool((public_all["repeat"] >= 1).any())
    if has_repeats:
        repeats = repeats_table(public_all, seed, resamples)
        tables["repeats.csv"] = repeats
        tables["reliability.csv"] = reliability_table(repeats)
        tables["repeats_tasks.csv"] = repeat_task_table(public_all)
        repeated = public_all[public_all["repeat"] >= 1]
        for config, own in repeated.groupby("config"):
            test = stop_clustering_test(own, seed, draws)
            tests.append(named_test(f"stop_clustering {config}", test["statistic"],
                                    test["p_value"], "3.6", n=test["n"],
                                    method=test["method"]))
            summary += [_summary_row("repeats", f"stops {config}", test["stops"], test["runs"]),
                        _summary_row("repeats", f"stop_clusters_expected {config}",
                                     test["expected"], test["tasks"]),
                        _summary_row("repeats", f"max_stops_per_task {config}",
                                     test["max_stops"], test["tasks"])]
        stops, row = stop_effect(public_all, seed, resamples)
        tables["repeats_stops.csv"] = stops
        summary.append(row)
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

    # Detectable differences and study design (E.2).
    pilot = pilot_variances(pairs, run_sd)
    if np.isfinite(pilot.paired_sd):
        tables["detectable.csv"] = detectable_curves(pilot)
        tables["design.csv"] = study_design(pilot, opt.design_differences)
        summary += [_summary_row("design", "paired_sd", pilot.paired_sd, n_pairs),
                    _summary_row("design", "interaction_variance", pilot.interaction_var)]
        if not np.isfinite(pilot.run_sd):
            notes.append("design: no run-to-run SD, so repeats are assumed to buy nothing")
    else:
        notes.append("design: no pair of configurations with two shared scored tasks")

    # Configuration-by-task interaction (4.4, E.9).
    variance, rows = variance_decomposition(public_all, order, seed, resamples)
    if len(variance):
        tables["variance.csv"] = variance
        summary += rows
    else:
        notes.append("variance: fewer than two widely covered configurations or shared tasks")
    if has_repeats:
        interaction, rows = interaction_tasks(public_all, order)
        tables["interaction_tasks.csv"] = interaction
        tests += rows
    correlations, rows, more = simulated_nulls(public_all, order, run_sd, seed, null_draws)
    if np.isfinite(run_sd):
        tables["pair_correlations.csv"] = correlations
    tests += rows
    summary += more
    tests += [grouping_share(public, order, column, seed, null_draws)
              for column in ("discipline", "subfield") if column in public.columns]

    # Disciplines (4.6, E.10).
    tables["discipline_summary.csv"] = discipline_summary(public, seed, resamples)
    eligible = all_discipline_configs(public, order)
    top, bottom = default_groups(configs, pairs, eligible)
    if top and bottom:
        gap, test = discipline_gap(public, top, bottom, seed, resamples, permutations)
        tables["discipline_gap.csv"] = gap.assign(leading=", ".join(top),
                                                  trailing=", ".join(bottom))
        tests.append(test)
        summary.append(_summary_row("disciplines", "gap_range", test["statistic"], test["n"]))
        summary.append(_summary_row("disciplines", "gap_range_null_median",
                                    test.get("null_median"), permutations))
    else:
        notes.append("discipline gap: no leading and trailing group scored in every discipline")
    stable, test = discipline_stability(public, eligible, seed, permutations)
    tables["discipline_pairs.csv"] = stable
    tests.append(test)
    summary.append(_summary_row("disciplines", "order_stability", test["statistic"], test["n"]))
    summary.append(_summary_row("disciplines", "order_stability_null_median",
                                test.get("null_median"), permutations))

    # Exposure (3.7, E.4).
    exposure, test = exposure_table(public, order, seed, resamples, draws)
    tables["exposure.csv"] = exposure
    tests.append({k: v for k, v in test.items() if k not in ("ci_low", "ci_high")})
    summary.append(_summary_row("exposure", "pooled_difference", test["statistic"], test["n"],
                                (test["ci_low"], test["ci_high"])))
    summary += exposure_summary(public)
    tables["exposure_indicators.csv"] = exposure_indicators(public, order)
    if "flagged_exposure" in absent:
        notes.append("exposure: the table has no flagged_exposure column")

    # Private tasks (3.4, E.5).
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
        tables["private_tasks.csv"] = private_task_table(private)
    else:
        notes.append("private: no official runs on private tasks")

    # Submitted orders: agreement, monotone prior, repeats, presented order, appendix F.
    scored_public = public[public["scored"]]
    orders = None
    if opt.runs_dir is None:
        notes.append("agreement, monotone prior, repeated orders, appendix F: no --runs-dir, "
                     "so no submitted orders")
    elif not tasks:
        notes.append("agreement, monotone prior, repeated orders, appendix F: no --tasks, so "
                     "no contracts or answer keys")
    else:
        submitted = load_submitted_orders(opt.runs_dir, public_all[public_all["scored"]])
        orders = submitted.orders
        notes += submitted.notes[:MAX_NOTES]
        if len(submitted.notes) > MAX_NOTES:
            notes.append(f"... and {len(submitted.notes) - MAX_NOTES} more run folder notes")
        agreement = agreement_analysis(scored_public, orders, tasks, order, seed, resamples)
        tables["agreement_tasks.csv"] = agreement.tasks
        tables["consensus_loo.csv"] = agreement.leave_one_out
        summary += agreement.summary
        monotone = monotone_prior(scored_public, orders, tasks, order)
        tables["monotone.csv"] = monotone.configs
        tables["monotone_groups.csv"] = monotone.groups
        summary += monotone.summary
        if has_repeats:
            scored_repeats = public_all[(public_all["repeat"] >= 1) & public_all["scored"]]
            tables["repeats_orders.csv"] = repeat_orders_table(scored_repeats, orders, tasks)
            table, rows = repeat_agreement(public_all[public_all["scored"]], orders, tasks,
                                           seed, resamples)
            tables["repeats_agreement.csv"] = table
            summary += rows
        per_run = pair_order_runs(scored_public, orders, tasks)
        tables["pair_order_runs.csv"] = per_run
        table, rows = pair_order_configs(per_run, order, seed, resamples)
        tables["pair_order.csv"] = table
        summary += rows
        tables["pair_order_examples.csv"] = example_runs(scored_public, orders, tasks)
    if tasks:
        table, rows = presented_order_summary(task_stats, public, orders, tasks, order)
        if orders is not None:
            tables["presented_order.csv"] = table
        summary += rows
    rows, more_tests = spread_summary(task_stats, public, tables.get("agreement_tasks.csv"))
    summary += rows
    tests += more_tests

    tables["tests.csv"] = pd.DataFrame(tests, columns=list(TEST_COLUMNS))
    manifest = {
        "spu_version": spu.__version__,
        "seed": seed, "resamples": resamples, "simulations": opt.simulations,
        "null_draws": opt.null_draws, "permutation_draws": draws,
        "simulated_null_draws": null_draws, "discipline_permutations": permutations,
        "task_roots": [str(p) for p in opt.task_roots],
        "answers_root": None if opt.answers_root is None else str(opt.answers_root),
        "runs_dir": None if opt.runs_dir is None else str(opt.runs_dir),
        "rows": len(runs), "configs": order, "absent_columns": absent,
        "files": sorted([*tables, "summary.csv", "manifest.json"]),
        "sections": {name: FILES.get(name, "") for name in sorted(tables)},
        "notes": notes,
    }
    summary_frame = pd.DataFrame(summary, columns=["analysis", "statistic", "value", "ci_low",
                                                   "ci_high", "n"])
    # Every value is a number (a flag counts as 1 or 0), so summary.csv reads back as one.
    summary_frame["value"] = pd.to_numeric(summary_frame["value"].map(
        lambda v: float(v) if isinstance(v, (bool, np.bool_)) else v), errors="raise")
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
