"""The built-in analyses of ``spu stats``, registered in the order of the paper.

Each function below is one registered analysis (:func:`spu.stats.registry.analysis`): it
reads the shared inputs (:class:`~spu.stats.inputs.StatsInputs`), calls the statistics of
its module and returns an :class:`~spu.stats.registry.AnalysisResult`. The order of
registration is the order of the rows of ``summary.csv`` and ``tests.csv``; seeded draws
come from :func:`~spu.stats.resampling.rng_for` streams of their own, so the numbers do
not depend on it. An analysis kept in another package is written the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from spu.stats.agreement import repeat_agreement, repeat_orders_table
from spu.stats.costs import cost_sensitivity_table, cost_table
from spu.stats.coverage import all_tasks_table, coverage_table, shared_task_counts
from spu.stats.design import detectable_curves, pilot_variances, study_design
from spu.stats.disciplines import (
    GROUP_RULE,
    all_discipline_configs,
    default_groups,
    discipline_gap,
    discipline_stability,
    discipline_summary,
    named_groups,
)
from spu.stats.effort import (
    EFFORT_REPEAT_TASKS,
    effort_correlations,
    effort_pairs,
    effort_ratios,
    effort_table,
    effort_tasks,
)
from spu.stats.exposure import (
    DOI_RULE,
    DOI_SIDES_RULE,
    audited_doi_hits,
    doi_sides,
    doi_tasks,
    exposure_indicators,
    exposure_summary,
    exposure_table,
    presented_order_summary,
    task_dois,
)
from spu.stats.freshness import FRESHNESS_RULE, freshness_table
from spu.stats.inputs import StatsInputs
from spu.stats.interaction import (
    MIN_REPEATS,
    SPREAD_RATIOS,
    WIDE_COVERAGE,
    grouping_share,
    interaction_tasks,
    largest_common_block,
    repeat_spread_summary,
    simulated_nulls,
    spread_summary,
    variance_decomposition,
)
from spu.stats.means import discipline_table
from spu.stats.monotone import UNRELATED, monotone_prior, unrelated_rule
from spu.stats.named_tests import named_test
from spu.stats.outcomes import (
    departure_table,
    outcome_table,
    recovered_vs_valid,
    refusal_table,
    scoring_rules_table,
)
from spu.stats.pair_order import (
    MEDIAN_EXAMPLES_RULE,
    TOP1_WEIGHTS,
    example_runs,
    median_examples,
    pair_order_configs,
    pair_order_runs,
)
from spu.stats.paired import ALPHA, detectable_difference_z
from spu.stats.private import (
    private_pairs_table,
    private_table,
    private_task_table,
    random_ranking_null,
)
from spu.stats.registry import AnalysisResult, analysis
from spu.stats.repeats import (
    REPEAT_TASKS_RULE,
    TaskSpread,
    rank_stability,
    reliability_table,
    repeat_task_table,
    repeats_table,
    stop_clustering_test,
    stop_effect,
    unstable_share,
)
from spu.stats.rules import STATS_RULES, Rule
from spu.stats.runs_table import score_matrix
from spu.stats.submissions import StatsInputError
from spu.stats.tasks import kruskal_wallis_disciplines, task_summary


def summary_row(analysis: str, statistic: str, value: Any, n: Any = None,
                ci: tuple[float, float] | None = None) -> dict[str, Any]:
    """One row of ``summary.csv``.

    Examples
    --------
    >>> summary_row("paired", "pairs", 78)["value"]
    78
    """
    return {"analysis": analysis, "statistic": statistic, "value": value,
            "ci_low": None if ci is None else ci[0], "ci_high": None if ci is None else ci[1],
            "n": n}


def gpu_basis(inputs: StatsInputs) -> str:
    """``option`` where ``--gpu-rule measured`` replaced the paper's GPU rule, else ``paper``."""
    return "option" if inputs.options.gpu_rule != "executed" else "paper"


# Means and paired tests (3.1, 3.3, E.2).
@analysis(files=("configs.csv",), section="Table 1, Figure 9a, c (3.1, 3.3)")
def configs(inputs: StatsInputs) -> AnalysisResult:
    """Raw and task-adjusted means, above-chance shares (Table 1)."""
    public, table = inputs.public, inputs.configs
    return AnalysisResult(tables={"configs.csv": table}, summary=[
        summary_row("public", "tasks", int(public["task_id"].nunique())),
        summary_row("public", "official_runs", len(public)),
        summary_row("public", "scored_runs", int(public["scored"].sum())),
        summary_row("public", "shared_tasks",
                    int(table["n_shared_tasks"].iloc[0]) if len(table) else 0),
    ])


@analysis(files=("pairs.csv",), section="Figure 25a-c (3.3, E.2)")
def pairs(inputs: StatsInputs) -> AnalysisResult:
    """Wilcoxon paired tests of every pair, Holm-corrected, with detectable differences."""
    table = inputs.pairs
    n_pairs = len(table)
    return AnalysisResult(tables={"pairs.csv": table}, summary=[
        summary_row("paired", "pairs", n_pairs),
        summary_row("paired", "significant_pairs", int(table["significant"].sum())),
        summary_row("paired", "z_corrected",
                    detectable_difference_z(ALPHA / max(n_pairs, 1)), n_pairs),
        summary_row("paired", "z_uncorrected", detectable_difference_z(ALPHA)),
    ])


@analysis(files=("outcomes.csv",), section="Table 6 (3.2, E.1)")
def outcomes(inputs: StatsInputs) -> AnalysisResult:
    """Run outcomes and the mean score under each scoring of failures (Table 6)."""
    return AnalysisResult(tables={"outcomes.csv": outcome_table(inputs.public, inputs.order)})


@analysis(files=("costs.csv",), section="Table 3, Figure 11 (3.5)")
def costs(inputs: StatsInputs) -> AnalysisResult:
    """Cost per scored run and the Pareto frontier (Table 3)."""
    return AnalysisResult(tables={"costs.csv": cost_table(
        inputs.public, inputs.order, inputs.adjusted, inputs.seed, inputs.resamples)})


@analysis(files=("disciplines.csv",), section="Table 5, Figure 20b (4.6, C)")
def disciplines(inputs: StatsInputs) -> AnalysisResult:
    """Mean score of each configuration in each discipline (Table 5)."""
    return AnalysisResult(tables={"disciplines.csv": discipline_table(
        inputs.public, inputs.order, inputs.seed, inputs.resamples)})


# Tasks (2.2, 3.3).
@analysis(files=("tasks.csv",), section="Figure 3, Figure 20a (2.2, 3.3, E.9)")
def tasks(inputs: StatsInputs) -> AnalysisResult:
    """Task statistics and Kruskal-Wallis of task means across disciplines."""
    table = inputs.task_stats
    notes = [] if inputs.tasks else [
        "tasks: no --tasks, so no tied groups, attainable maximum or presented order"]
    return AnalysisResult(tables={"tasks.csv": table}, summary=task_summary(table),
                          tests=[kruskal_wallis_disciplines(table)], notes=notes)


# Outcomes (3.2, E.1).
@analysis(files=("departures.csv",), section="Figure 6a (3.2, E.1)")
def departures(inputs: StatsInputs) -> AnalysisResult:
    """Departures from the submission format, by configuration (Figure 6a)."""
    notes = []
    if "departures" in inputs.absent or "departures" not in inputs.runs.columns:
        notes.append("outcomes: the table has no departures column (spu runs export adds "
                     "it), so rejected files count as 'unrecorded' departures")
    return AnalysisResult(tables={"departures.csv": departure_table(inputs.public,
                                                                    inputs.order)},
                          notes=notes)


@analysis(files=("refusals.csv",), section="Figure 7 (3.2)")
def refusals(inputs: StatsInputs) -> AnalysisResult:
    """Refusals by configuration (Figure 7)."""
    return AnalysisResult(tables={"refusals.csv": refusal_table(inputs.public, inputs.order)})


@analysis(files=("scoring_rules.csv",), section="Figure 8 (3.2)")
def scoring_rules(inputs: StatsInputs) -> AnalysisResult:
    """Mean score under each rule for failed runs (Figure 8)."""
    return AnalysisResult(tables={"scoring_rules.csv": scoring_rules_table(
        inputs.official_all, inputs.order_all, inputs.seed, inputs.resamples)})


@analysis(files=("recovered.csv",), section="Figure 6b-c (3.2)")
def recovered(inputs: StatsInputs) -> AnalysisResult:
    """Recovered against valid files of each configuration, and pooled (Figure 6b-c)."""
    result = recovered_vs_valid(inputs.public, inputs.order, inputs.seed, inputs.resamples,
                                inputs.draws)
    pooled = result.pooled
    if not pooled["n_configs"]:
        return AnalysisResult(tables={"recovered.csv": result.table}, notes=[
            "outcomes: no configuration has both recovered and valid files"])
    test = named_test("recovered_vs_valid_pooled", pooled["diff"], pooled["p_perm"], "3.2",
                      n=pooled["n_marked"], method="exact" if pooled["exact"] else "monte-carlo")
    row = summary_row("outcomes", "recovered_minus_valid", pooled["diff"], pooled["n_marked"],
                      (pooled["ci_low"], pooled["ci_high"]))
    return AnalysisResult(tables={"recovered.csv": result.table}, tests=[test], summary=[row])


# Coverage (3.3, Figure 1).
@analysis(files=("coverage.csv",), section="3.3 Coverage")
def coverage(inputs: StatsInputs) -> AnalysisResult:
    """Missing runs against task difficulty (3.3)."""
    table = coverage_table(inputs.public, inputs.order, inputs.seed, inputs.resamples,
                           inputs.draws)
    tests = [named_test(f"coverage_difficulty {r.config}", r.diff, r.p_perm, "3.3",
                        n=r.n_excluded, method="permutation", p_holm=r.p_holm)
             for r in table.itertuples(index=False)]
    return AnalysisResult(tables={"coverage.csv": table}, tests=tests,
                          summary=shared_task_counts(inputs.runs))


@analysis(files=("all_tasks.csv",), section="Figure 1")
def all_tasks(inputs: StatsInputs) -> AnalysisResult:
    """Every configuration on every task, public and private (Figure 1)."""
    return AnalysisResult(tables={"all_tasks.csv": all_tasks_table(
        inputs.official_all, inputs.order_all, inputs.seed, inputs.resamples)})


# Cost (3.5).
@analysis(files=("cost_sensitivity.csv",), section="3.5 Cost range (Pareto sensitivity)")
def cost_sensitivity(inputs: StatsInputs) -> AnalysisResult:
    """The Pareto frontier under other prices (3.5)."""
    notes = []
    if "cost_full_input_usd" in inputs.absent:
        notes.append("cost: no cost_full_input_usd column, so no full-input-price check")
    return AnalysisResult(tables={"cost_sensitivity.csv": cost_sensitivity_table(
        inputs.public, inputs.order, inputs.adjusted)}, notes=notes)


# Effort (3.3, 4.10, E.3).
@analysis(files={"effort_tasks.csv": "Figure 24a, Figure 25d (4.10)",
                 "effort.csv": "Figure 24b (3.3, 4.5, 4.10)",
                 "effort_ratios.csv": "Figure 24c (3.5, 4.10)"},
          section="4.10")
def effort(inputs: StatsInputs) -> AnalysisResult:
    """Two reasoning efforts of one model with one harness (4.10)."""
    public, public_all, seed, resamples = (inputs.public, inputs.public_all, inputs.seed,
                                           inputs.resamples)
    found = [(pair, effort_tasks(public_all, pair)) for pair in effort_pairs(public)]
    if not found:
        return AnalysisResult(notes=[
            "effort: no model ran at two reasoning efforts with the same harness"])
    repeat_tasks = inputs.options.effort_repeat_tasks
    tables = [effort_table(t, public_all, p, seed, resamples, repeat_tasks) for p, t in found]
    summary = []
    for table in tables:
        # 4.5: the lower effort's official runs against the mean of the higher's repeats.
        for r in table[table["way"] == "repeats_mean"].itertuples(index=False):
            summary.append(summary_row("effort", f"official {r.low} minus repeats mean "
                                       f"{r.high}", r.diff, r.n_tasks, (r.ci_low, r.ci_high)))
    pairing = ("pairs: configurations running one model (the model column, else the label "
               "without its effort word) with one harness at two efforts, lowest against "
               "highest: " + "; ".join(f"{p.low} / {p.high} ({p.model})" for p, _ in found))
    rule = Rule(f"{pairing}; official: the tasks both efforts' official runs scored; "
                f"{EFFORT_REPEAT_TASKS[repeat_tasks]}",
                "official runs of the public tasks of the pair's configurations and the "
                "higher effort's repeats (repeat >= 1)",
                "paper" if repeat_tasks == "repeat-tasks" else "option",
                "4.10: \"Four ways of scoring Max, including the mean of its five repeated "
                "runs on the 29 tasks of Section 3.6\"; 4.5: \"The official scores of Astra "
                "Medium average 0.004 above the mean of the Astra Max repeats on the same "
                "tasks\"")
    ratio_rule = rule.replace(
        text=f"{pairing}; per task, the higher over the lower effort's official scored runs; "
             f"GPU use (quantity used_gpu): {inputs.gpu_rule_text}",
        population="scored official runs of the public tasks of the pair's configurations",
        basis=gpu_basis(inputs), sentence="4.10, Figure 24c: \"Ratio of Max to Medium on "
        "the same task\"")
    return AnalysisResult(tables={
        "effort_tasks.csv": pd.concat(
            [t.assign(low_config=p.low, high_config=p.high) for p, t in found],
            ignore_index=True),
        "effort.csv": pd.concat(tables, ignore_index=True),
        "effort_ratios.csv": pd.concat(
            [effort_ratios(public, p, seed, resamples) for p, _ in found], ignore_index=True),
    }, summary=summary, rules={"effort_tasks.csv": rule.replace(basis="paper"),
                               "effort.csv": rule, "effort_ratios.csv": ratio_rule})


@analysis(files=("effort_correlations.csv",), section="E.3", name="effort_correlations")
def effort_correlation(inputs: StatsInputs) -> AnalysisResult:
    """Reasoning effort and usage against score (E.3)."""
    table, rows = effort_correlations(inputs.public, inputs.order, inputs.seed,
                                      inputs.resamples)
    rule = STATS_RULES["effort_correlations.csv"].replace(
        text="E.3: Spearman within each configuration, Holm over the configurations per "
             "measure; with task and configuration effects removed, Pearson of the "
             "residuals of score and log run time, log tool calls and log web fetches "
             "(log x; log(1 + x) where a measure has a zero, named in transform); "
             f"GPU use (measure used_gpu): {inputs.gpu_rule_text}", basis=gpu_basis(inputs))
    return AnalysisResult(tables={"effort_correlations.csv": table}, summary=rows,
                          rules={"effort_correlations.csv": rule})


# Repeats (3.6, 4.5).
@analysis(files={"repeats.csv": "Figure 26a (3.6, 4.5)",
                 "reliability.csv": "Figure 26b (4.5)",
                 "repeats_tasks.csv": "Figure 12a-b, Figure 26a (3.6)",
                 "repeats_stops.csv": "Figure 19d (4.5)"},
          section="3.6, 4.5", needs=("repeats",))
def repeats(inputs: StatsInputs) -> AnalysisResult:
    """Run-to-run variation, reliability and clustered stops of repeated runs."""
    public_all, seed = inputs.public_all, inputs.seed
    table = repeats_table(public_all, seed, inputs.resamples)
    tests, summary = [], []
    for config, own in public_all[public_all["repeat"] >= 1].groupby("config"):
        test = stop_clustering_test(own, seed, inputs.draws)
        tests.append(named_test(f"stop_clustering {config}", test["statistic"],
                                test["p_value"], "3.6", n=test["n"], method=test["method"]))
        n_unstable, share = unstable_share(TaskSpread.from_scores(own[own["scored"]]))
        summary += [summary_row("repeats", f"unstable_tasks {config}", n_unstable),
                    summary_row("repeats", f"unstable_ss_share {config}", share)]
        summary += [summary_row("repeats", f"stops {config}", test["stops"], test["runs"]),
                    summary_row("repeats", f"stop_clusters_expected {config}",
                                test["expected"], test["tasks"]),
                    summary_row("repeats", f"max_stops_per_task {config}",
                                test["max_stops"], test["tasks"])]
    stops, row = stop_effect(public_all, seed, inputs.resamples)
    return AnalysisResult(tables={
        "repeats.csv": table, "reliability.csv": reliability_table(table),
        "repeats_tasks.csv": repeat_task_table(public_all), "repeats_stops.csv": stops,
    }, tests=tests, summary=[*summary, row], rules={"repeats_tasks.csv": REPEAT_TASKS_RULE})


@analysis(files=("rank_stability.csv",), section="Figure 26f (4.5)", needs=("run_sd",),
          name="rank_stability")
def rank_stabilities(inputs: StatsInputs) -> AnalysisResult:
    """Rank stability under simulated reruns with the run-to-run SD (Figure 26f)."""
    opt = inputs.options
    stability = rank_stability(inputs.matrix, inputs.run_sd, inputs.seed, opt.simulations,
                               opt.top_group_size)
    if stability is None:
        return AnalysisResult(notes=[
            "rank stability: fewer than two configurations with a task-adjusted mean"])
    n = stability.simulations
    rule = STATS_RULES["rank_stability.csv"]
    if opt.top_group_size is not None:
        rule = rule.replace(basis="option", text=f"{rule.text}; --top-group "
                            f"{opt.top_group_size}: the {opt.top_group_size} best lead")
    return AnalysisResult(tables={"rank_stability.csv": stability.table},
                          rules={"rank_stability.csv": rule}, summary=[
        summary_row("rank_stability", "run_sd", stability.run_sd),
        summary_row("rank_stability", "top_group_size", stability.top_group_size),
        summary_row("rank_stability", "top_group_kept", stability.top_group_kept, n),
        summary_row("rank_stability", "leader_first", stability.leader_first, n),
        summary_row("rank_stability", "exact_order", stability.exact_order, n),
        summary_row("rank_stability", "top_group_kept_tasks_resampled",
                    stability.top_group_kept_tasks_resampled, n),
    ], values={"rank_stability": stability})


# Detectable differences and study design (E.2).
@analysis(files={"detectable.csv": "Figure 26d-e (E.2)", "design.csv": "E.2 (study design)"},
          section="E.2")
def design(inputs: StatsInputs) -> AnalysisResult:
    """Detectable-difference curves and the study design table (E.2)."""
    pilot = pilot_variances(inputs.pairs, inputs.run_sd)
    if not np.isfinite(pilot.paired_sd):
        return AnalysisResult(notes=[
            "design: no pair of configurations with two shared scored tasks"])
    notes = [] if np.isfinite(pilot.run_sd) else [
        "design: no run-to-run SD, so repeats are assumed to buy nothing"]
    return AnalysisResult(tables={
        "detectable.csv": detectable_curves(pilot),
        "design.csv": study_design(pilot, inputs.options.design_differences),
    }, summary=[summary_row("design", "paired_sd", pilot.paired_sd, len(inputs.pairs)),
                summary_row("design", "interaction_variance", pilot.interaction_var)],
        notes=notes)


# Configuration-by-task interaction (4.4, E.9).
@analysis(files=("variance.csv",), section="Figure 26c (4.4, E.2)")
def variance(inputs: StatsInputs) -> AnalysisResult:
    """Variance of scores split into task, configuration, interaction and noise."""
    chosen = inputs.options.decomposition_configs
    matrix = score_matrix(inputs.public, inputs.order)
    if chosen is not None:
        unknown = [c for c in chosen if c not in inputs.order]
        if unknown:
            raise StatsInputError(f"--decomposition-configs: no official public runs of "
                                  f"{', '.join(unknown)} (configurations: "
                                  f"{', '.join(inputs.order)})")
    block = largest_common_block(matrix, None if chosen is None else list(chosen))
    table, rows = variance_decomposition(inputs.public_all, inputs.order, inputs.seed,
                                         inputs.resamples,
                                         None if chosen is None else list(chosen))
    if not len(table):
        return AnalysisResult(notes=[
            f"variance: fewer than two configurations or tasks in the block ({block.rule})"])
    truncated = bool(table["truncated"].any())
    rule = (f"{block.rule}: {len(block.configs)} configurations ({', '.join(block.configs)}) "
            f"on {len(block.tasks)} tasks; run noise the pooled within-task variance of the "
            "repeats, interaction the rest of the residual mean square"
            + (", truncated at zero (the repeats vary more than the residuals)" if truncated
               else ", not truncated"))
    notes = [f"variance: the interaction was truncated at zero ({rule})"] if truncated else []
    default = STATS_RULES["variance.csv"]
    return AnalysisResult(tables={"variance.csv": table}, summary=rows, notes=notes,
                          rules={"variance.csv": default.replace(
                              text=rule, basis="reading" if chosen is None else "option")})


@analysis(files=("interaction_tasks.csv",), section="Figure 18b (4.4, E.9)",
          needs=("repeats",), name="interaction_tasks")
def interaction(inputs: StatsInputs) -> AnalysisResult:
    """Spread between configurations against spread between repeats, per task."""
    table, rows = interaction_tasks(inputs.public_all, inputs.order)
    ratio = inputs.options.spread_ratio
    column, words = SPREAD_RATIOS[ratio]
    rule = (f"tasks with at least {MIN_REPEATS} scored repeats; F = mean square of the "
            "additive-fit residuals of the configurations over that of the repeats, Holm over "
            f"the tasks; 4.4's ratio (--spread-ratio {ratio}, column {column}): {words}; "
            "configurations exceed repeats where it is above 1, its median over all those "
            "tasks (median_spread_ratio in summary.csv)")
    return AnalysisResult(tables={"interaction_tasks.csv": table}, tests=rows,
                          summary=repeat_spread_summary(table, ratio),
                          rules={"interaction_tasks.csv": STATS_RULES[
                              "interaction_tasks.csv"].replace(
                                  text=rule, basis="paper" if ratio == "ms" else "option")})


@analysis(files=("pair_correlations.csv",), section="Figure 18d (4.4, E.9)")
def pair_correlations(inputs: StatsInputs) -> AnalysisResult:
    """Correlations of configuration pairs across tasks against simulated nulls."""
    same = [(p.low, p.high) for p in effort_pairs(inputs.public)]
    table, tests, summary = simulated_nulls(inputs.public_all, inputs.order, inputs.run_sd,
                                            inputs.seed, inputs.null_draws, same_model=same)
    if not np.isfinite(inputs.run_sd):
        return AnalysisResult(tests=tests, summary=summary)
    tested = [f"{a} / {b}" for a, b in same
              if ((table["config_a"] == a) & (table["config_b"] == b)
                  | (table["config_a"] == b) & (table["config_b"] == a)).any()]
    rule = (f"pairs of the configurations scored on at least {WIDE_COVERAGE:.0%} of the "
            f"tasks against {inputs.null_draws:,} tables simulated without interaction; "
            + (f"tested: the same-model pairs ({'; '.join(tested)}) against the other "
               "pairs' median and maximum" if tested
               else "no same-model pair among them, so the largest pair is tested, "
                    "unadjusted for the choice"))
    return AnalysisResult(tables={"pair_correlations.csv": table}, tests=tests,
                          summary=summary, rules={"pair_correlations.csv": rule})


@analysis(section="4.4, E.9", name="grouping_share")
def grouping_shares(inputs: StatsInputs) -> AnalysisResult:
    """Share of the interaction explained by discipline and subfield (rows of tests.csv)."""
    public = inputs.public
    return AnalysisResult(tests=[
        grouping_share(public, inputs.order, column, inputs.seed, inputs.null_draws)
        for column in ("discipline", "subfield") if column in public.columns])


# Disciplines (4.6, E.10).
@analysis(files=("discipline_summary.csv",), section="Figure 20a (4.6, E.10)",
          name="discipline_summary")
def disciplines_summary(inputs: StatsInputs) -> AnalysisResult:
    """Scores by discipline, over every configuration (Figure 20a)."""
    return AnalysisResult(tables={"discipline_summary.csv": discipline_summary(
        inputs.public, inputs.seed, inputs.resamples)})


@analysis(files=("discipline_gap.csv",), section="Figure 20c (4.6, E.10)", name="discipline_gap")
def disciplines_gap(inputs: StatsInputs) -> AnalysisResult:
    """The gap between leading and trailing configurations in each discipline."""
    eligible = all_discipline_configs(inputs.public, inputs.order)
    named = inputs.options.discipline_groups
    notes = []
    if named is not None:
        try:
            top, bottom = named_groups(named, inputs.order)
        except ValueError as exc:
            raise StatsInputError(str(exc)) from exc
        rule = f"--discipline-groups {named}"
        outside = [c for c in [*top, *bottom] if c not in eligible]
        if outside:
            notes.append(f"discipline gap: {', '.join(outside)} of --discipline-groups "
                         "have no scored run in some discipline")
    else:
        size = inputs.options.top_group_size
        top, bottom = default_groups(inputs.configs, inputs.pairs, eligible, size)
        rule = GROUP_RULE if size is None else f"{GROUP_RULE}; --top-group {size}"
    if not (top and bottom):
        return AnalysisResult(notes=[
            "discipline gap: no leading and trailing group scored in every discipline"])
    gap, test = discipline_gap(inputs.public, top, bottom, inputs.seed, inputs.resamples,
                               inputs.permutations)
    left_out = [c for c in inputs.order if c not in {*top, *bottom}]
    rule += (f": leading {', '.join(top)}; trailing {', '.join(bottom)}; left out "
             f"{', '.join(left_out) or 'none'}")
    optioned = named is not None or inputs.options.top_group_size is not None
    return AnalysisResult(
        tables={"discipline_gap.csv": gap.assign(leading=", ".join(top),
                                                 trailing=", ".join(bottom))},
        tests=[test], notes=notes, rules={"discipline_gap.csv": STATS_RULES[
            "discipline_gap.csv"].replace(text=rule,
                                          basis="option" if optioned else "reading")},
        summary=[summary_row("disciplines", "gap_range", test["statistic"], test["n"]),
                 summary_row("disciplines", "gap_range_null_median", test.get("null_median"),
                             inputs.permutations),
                 summary_row("disciplines", "leading_configs", len(top)),
                 summary_row("disciplines", "trailing_configs", len(bottom))])


@analysis(files=("discipline_pairs.csv",), section="Figure 20d (4.6, E.10)",
          name="discipline_order")
def disciplines_order(inputs: StatsInputs) -> AnalysisResult:
    """Whether configuration pairs keep their order across disciplines (Figure 20d)."""
    eligible = all_discipline_configs(inputs.public, inputs.order)
    table, test = discipline_stability(inputs.public, eligible, inputs.seed,
                                       inputs.permutations)
    rule = (f"the {len(eligible)} configurations with a scored run in every discipline "
            f"({', '.join(eligible)}), against {inputs.permutations:,} random splits into "
            "blocks of the disciplines' sizes")
    return AnalysisResult(tables={"discipline_pairs.csv": table}, tests=[test],
                          rules={"discipline_pairs.csv": rule}, summary=[
        summary_row("disciplines", "order_stability", test["statistic"], test["n"]),
        summary_row("disciplines", "order_stability_null_median", test.get("null_median"),
                    inputs.permutations)])


# Exposure (3.7, E.4).
@analysis(files=("exposure.csv",), section="Figure 13d (3.7, E.4)")
def exposure(inputs: StatsInputs) -> AnalysisResult:
    """Flagged against unflagged runs of each configuration, and pooled (3.7)."""
    table, test = exposure_table(inputs.public, inputs.order, inputs.seed, inputs.resamples,
                                 inputs.draws)
    row = summary_row("exposure", "pooled_difference", test["statistic"], test["n"],
                      (test["ci_low"], test["ci_high"]))
    return AnalysisResult(
        tables={"exposure.csv": table},
        tests=[{k: v for k, v in test.items() if k not in ("ci_low", "ci_high")}],
        summary=[row, *exposure_summary(inputs.public)])


@analysis(files=("exposure_indicators.csv",), section="Figure 13c (3.7)",
          name="exposure_indicators")
def exposure_indicator(inputs: StatsInputs) -> AnalysisResult:
    """Exposure indicators by configuration (Figure 13c)."""
    notes = []
    if "flagged_exposure" in inputs.absent:
        notes.append("exposure: the table has no flagged_exposure column")
    with_doi = doi_tasks(inputs.tasks)
    runs_dir = inputs.options.runs_dir
    audited = ({} if runs_dir is None
               else audited_doi_hits(runs_dir, inputs.public[inputs.public["scored"]]))
    sides = ({} if runs_dir is None else
             doi_sides(runs_dir, inputs.public[inputs.public["scored"]], task_dois(inputs.tasks)))
    table = exposure_indicators(inputs.public, inputs.order, with_doi, audited, sides)
    parts = [DOI_RULE, DOI_SIDES_RULE]
    if with_doi is None:
        parts.append("no answer key names a source (--tasks), so over every scored run")
    n_doi = int(table["n_doi_runs"].sum())
    missing = n_doi - int(table["n_doi_audited_known"].sum())
    if missing:
        parts.append(f"{missing} of {n_doi} runs without exposure hits in a run record "
                     "(--runs-dir), counted by exposure_kinds from any tool")
    return AnalysisResult(tables={"exposure_indicators.csv": table}, notes=notes,
                          rules={"exposure_indicators.csv": "; ".join(parts)},
                          summary=[summary_row("exposure", "doi_runs", int(round(float(
                              (table["doi_share"] * table["n_doi_runs"]).sum()))), n_doi),
                              summary_row("exposure", "doi_requested",
                                          int(table["n_doi_requested"].sum()),
                                          int(table["n_doi_sides_known"].sum())),
                              summary_row("exposure", "doi_reported",
                                          int(table["n_doi_reported"].sum()),
                                          int(table["n_doi_sides_known"].sum()))])


@analysis(files=("freshness.csv",), section="3.7 (training cutoffs, appendix B)",
          needs=("column:published_before_cutoff",))
def freshness(inputs: StatsInputs) -> AnalysisResult:
    """Runs on tasks published before the model's training cutoff against fresh runs."""
    table, test, unknown = freshness_table(inputs.public, inputs.order, inputs.seed,
                                           inputs.resamples, inputs.draws)
    notes = [f"freshness: {unknown} scored public run(s) of unknown freshness left out"
             ] if unknown else []
    row = summary_row("freshness", "pooled_difference", test["statistic"], test["n"],
                      (test["ci_low"], test["ci_high"]))
    return AnalysisResult(
        tables={"freshness.csv": table}, notes=notes,
        tests=[{k: v for k, v in test.items() if k not in ("ci_low", "ci_high")}],
        rules={"freshness.csv": FRESHNESS_RULE}, summary=[row])


# Private tasks (3.4, E.5).
@analysis(files={"private.csv": "Table 2 (3.4)", "private_pairs.csv": "3.4 (exact sign-flip)",
                 "private_tasks.csv": "Figure 10 (3.4, E.5)"},
          section="3.4", needs=("private",))
def private(inputs: StatsInputs) -> AnalysisResult:
    """Private tasks against random rankings, and their paired tests (3.4)."""
    runs, order, tasks_found = inputs.private, inputs.order, inputs.tasks
    null = random_ranking_null(tasks_found, sorted(set(runs["task_id"])), inputs.seed,
                               inputs.private_null_draws) if tasks_found else {}
    notes = [] if null else [
        "private: no task packages with answer keys, so the test against random rankings "
        "uses the normal approximation from the thresholds"]
    private_order = [c for c in order if c in set(runs["config"])] + sorted(
        set(runs["config"]) - set(order))
    return AnalysisResult(tables={
        "private.csv": private_table(runs, private_order, null, inputs.seed,
                                     inputs.resamples),
        "private_pairs.csv": private_pairs_table(score_matrix(runs, private_order),
                                                 private_order, inputs.seed),
        "private_tasks.csv": private_task_table(runs),
    }, notes=notes)


# Submitted orders: agreement, monotone prior, repeats, presented order, appendix F.
@analysis(files={"agreement_tasks.csv": "Figure 27a (E.8)",
                 "consensus_loo.csv": "Figure 27b-c (E.8)"},
          section="E.8", needs=("orders",))
def agreement(inputs: StatsInputs) -> AnalysisResult:
    """Agreement between configurations' orders and the leave-one-out consensus (E.8)."""
    result = inputs.agreement
    assert result is not None  # the need "orders" holds
    return AnalysisResult(tables={"agreement_tasks.csv": result.tasks,
                                  "consensus_loo.csv": result.leave_one_out},
                          summary=result.summary)


@analysis(files={"monotone.csv": "Figure 16d (4.2)", "monotone_groups.csv": "Figure 16c (4.2)",
                 "monotone_unrelated.csv": "4.2"},
          section="4.2", needs=("orders",))
def monotone(inputs: StatsInputs) -> AnalysisResult:
    """Orders that follow a setting monotonically (the monotone prior, 4.2)."""
    assert inputs.orders is not None  # the need "orders" holds
    unrelated = inputs.options.unrelated_below
    result = monotone_prior(inputs.scored_public, inputs.orders, inputs.tasks, inputs.order,
                            unrelated=unrelated)
    return AnalysisResult(tables={"monotone.csv": result.configs,
                                  "monotone_groups.csv": result.groups,
                                  "monotone_unrelated.csv": result.unrelated},
                          summary=result.summary,
                          rules={"monotone_unrelated.csv": STATS_RULES[
                              "monotone_unrelated.csv"].replace(
                                  text=unrelated_rule(unrelated),
                                  basis="reading" if unrelated == UNRELATED else "option")})


@analysis(files={"repeats_orders.csv": "Figure 19a (4.5)",
                 "repeats_agreement.csv": "Figure 12c (4.5)"},
          section="4.5", needs=("orders", "repeats"))
def repeats_orders(inputs: StatsInputs) -> AnalysisResult:
    """Whether repeated runs submit the same orders (Figures 12c, 19a)."""
    orders, public_all = inputs.orders, inputs.public_all
    assert orders is not None  # the need "orders" holds
    scored_repeats = public_all[(public_all["repeat"] >= 1) & public_all["scored"]]
    table, rows = repeat_agreement(public_all[public_all["scored"]], orders, inputs.tasks,
                                   inputs.seed, inputs.resamples)
    return AnalysisResult(tables={
        "repeats_orders.csv": repeat_orders_table(scored_repeats, orders, inputs.tasks),
        "repeats_agreement.csv": table,
    }, summary=rows)


@analysis(files={"pair_order_runs.csv": "Figure 28c (F)", "pair_order.csv": "Figure 28d (F)",
                 "pair_order_examples.csv": "Figure 28a (F)",
                 "pair_order_median_examples.csv": "Figure 28b (F)"},
          section="F", needs=("orders",))
def pair_order(inputs: StatsInputs) -> AnalysisResult:
    """Pairs of items in the measured order, and the top-1 rate (appendix F)."""
    orders, scored = inputs.orders, inputs.scored_public
    assert orders is not None  # the need "orders" holds
    weights = inputs.options.top1_weights
    per_run = pair_order_runs(scored, orders, inputs.tasks, weights)
    table, rows = pair_order_configs(per_run, inputs.order, inputs.seed, inputs.resamples)
    rule = STATS_RULES["pair_order.csv"].replace(
        text=TOP1_WEIGHTS[weights], basis="paper" if weights == "groups" else "option",
        sentence="appendix F: \"the share of experiment pairs with different measured values "
                 "that a run places in the measured order, weighting groups as in the task "
                 "score ... The top-ranked experiment of a group is the measured top 25% "
                 "(HY4) to 45% (Fable 5.1) of the time\"")
    return AnalysisResult(tables={
        "pair_order_runs.csv": per_run, "pair_order.csv": table,
        "pair_order_examples.csv": example_runs(scored, orders, inputs.tasks),
        "pair_order_median_examples.csv": median_examples(scored, orders, inputs.tasks),
    }, summary=rows, rules={"pair_order_runs.csv": rule, "pair_order.csv": rule,
                            "pair_order_median_examples.csv": MEDIAN_EXAMPLES_RULE})


@analysis(files=("presented_order.csv",), section="E.4 Presented order", needs=("tasks",))
def presented_order(inputs: StatsInputs) -> AnalysisResult:
    """Orders that copy the order the items were presented in (E.4)."""
    table, rows = presented_order_summary(inputs.task_stats, inputs.public, inputs.orders,
                                          inputs.tasks, inputs.order)
    tables = {} if inputs.orders is None else {"presented_order.csv": table}
    return AnalysisResult(tables=tables, summary=rows)


@analysis(section="4.4, E.10")
def spread(inputs: StatsInputs) -> AnalysisResult:
    """Spread statistics of the task means quoted in 4.4 and E.10."""
    agreement_result = inputs.agreement
    rows, tests = spread_summary(inputs.task_stats, inputs.public,
                                 None if agreement_result is None else agreement_result.tasks)
    return AnalysisResult(summary=rows, tests=tests)
