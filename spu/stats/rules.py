"""The rule behind every output file: its population, the paper's sentence, and its basis.

``manifest.json`` (``outputs.<file>``) of ``spu stats`` and ``spu analyze`` gives, for each
file, the :class:`Rule` that produced it: ``rule`` (what was computed), ``population``
(which runs, tasks and configurations), ``basis`` and ``sentence`` (the paper's words it
follows or reads). ``basis`` is one of :data:`BASES`:

- ``paper``: the paper states the rule and the population;
- ``reading``: the paper's sentence leaves a choice open, and the rule is our reading of it
  (the sentence is quoted, the reading said);
- ``option``: an option of the command replaced the paper's rule (the option is named);
- ``framework``: the paper has no such output; the rule is the framework's own.

An analysis returns a rule for a file as a :class:`Rule`, or as text that replaces only
the text of the file's default rule (:data:`STATS_RULES`; ``spu analyze`` keeps its own,
:data:`spu.analysis.trajectory_analysis.ANALYZE_RULES`). The report shows each rule
beside the table or figure it made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spu.stats.ties import TIE_RULE

BASES = ("paper", "reading", "option", "framework")
"""What a rule rests on (see the module docstring)."""


@dataclass(frozen=True)
class Rule:
    """How one output file was made."""

    text: str
    """What was computed, in words."""
    population: str
    """The runs, tasks and configurations it was computed over."""
    basis: str = "paper"
    """``paper``, ``reading``, ``option`` or ``framework`` (:data:`BASES`)."""
    sentence: str = ""
    """The paper's sentence the rule follows or reads (with its section)."""

    def __post_init__(self) -> None:
        """Refuse an unknown basis."""
        if self.basis not in BASES:
            raise ValueError(f"rule basis {self.basis!r} is not one of {', '.join(BASES)}")

    def replace(self, **changes: Any) -> Rule:
        """A copy with ``changes`` (dataclass fields)."""
        return dataclasses.replace(self, **changes)

    def entry(self) -> dict[str, str]:
        """The manifest's fields: ``rule``, ``population``, ``basis``, ``sentence``."""
        return {"rule": self.text, "population": self.population, "basis": self.basis,
                "sentence": self.sentence}


NO_RULE: dict[str, Any] = {"rule": None, "population": None, "basis": None, "sentence": None}
"""The manifest's fields for a file whose analysis states no rule (an outside analysis)."""


def resolve(given: Rule | str | None, default: Rule | None) -> Rule | None:
    """The rule of a file: the analysis' own, its text over the default, or the default.

    Examples
    --------
    >>> d = Rule("mean", "scored runs", "paper", "3.1")
    >>> resolve(None, d) is d, resolve("median", d).text, resolve("median", d).basis
    (True, 'median', 'paper')
    >>> resolve("median", None).basis
    'framework'
    """
    if isinstance(given, Rule):
        return given
    if given is None:
        return default
    if default is None:
        return Rule(given, "", "framework")
    return default.replace(text=given)


def entry(given: Rule | str | None, default: Rule | None) -> dict[str, Any]:
    """The manifest's fields for a file (:func:`resolve`; :data:`NO_RULE` without one)."""
    rule = resolve(given, default)
    return NO_RULE.copy() if rule is None else rule.entry()


OFFICIAL = "official runs (repeat 0) of the public tasks"
SCORED = "scored official runs (repeat 0) of the public tasks"
SCORED_SENTENCE = ("3.1: \"a run is scored when its rankings.json is valid or when its group "
                   "orderings can be unambiguously recovered\"")


_RULES: dict[str, Rule] = {}
_RULES["configs.csv"] = Rule(
    "raw mean over each configuration's scored tasks; task-adjusted mean alpha_c + mean "
    "mu_t of the additive model y_tc = mu_t + alpha_c fitted to every scored public run; "
    "95% percentile intervals from bootstrap resamples of tasks; above chance: score "
    "above the task's chance threshold (compared at the tie precision), Wilson "
    "intervals; shared_mean over the tasks every configuration scored",
    SCORED, "paper", "3.1: \"The raw mean averages a configuration's scores over its "
    "scored tasks. The task-adjusted mean fits the additive model y_tc = mu_t + alpha_c "
    "to the scores y_tc of all scored public runs\"")
_RULES["pairs.csv"] = Rule(
    "mean paired difference (a minus b) on the tasks both scored; two-sided Wilcoxon "
    "signed-rank test with scipy's defaults on the differences at the tie precision "
    "(zero differences dropped); Holm over all pairs; detectable difference at 80% power "
    "and alpha 0.05 / pairs (mde) and 0.05 (mde_uncorrected)",
    f"{SCORED}; each pair on the tasks scored for both", "paper",
    "3.1: \"Two configurations are compared on the tasks scored for both, by the mean "
    "paired difference and a two-sided Wilcoxon signed-rank test with Holm correction "
    "over the 78 pairs\"")
_RULES["outcomes.csv"] = Rule(
    "runs by outcome; mean_at_minus1 averages score_strict (every run without a valid "
    "file at -1), mean_after_recovery score_recovered, scored_mean the scored runs",
    f"every {OFFICIAL}", "paper",
    "3.2: \"Table 6 in Appendix E.1 traces how each configuration's mean on the 1,300 "
    "public runs changes across scoring rules\"")
_RULES["costs.csv"] = Rule(
    "tokens, run time and cost per scored run with 95% bootstrap intervals over runs; "
    "cost_total over every official run; Pareto: no other configuration has a "
    "lower-or-equal cost_mean and a higher-or-equal adjusted_mean, one strictly",
    f"{SCORED} (cost_total: every official public run)", "paper",
    "3.5, Table 3: \"Estimated API cost per scored run on the public tasks\"")
_RULES["disciplines.csv"] = Rule(
    "raw mean of each configuration in each discipline; n_tasks counts scored runs",
    SCORED, "paper", "Table 5: \"Raw mean score by discipline\"")
_RULES["tasks.csv"] = Rule(
    "per task: experiments, groups, chance threshold; task_mean the mean over the "
    f"configurations scored on it, from a correctly rounded sum ({TIE_RULE}); "
    "Kruskal-Wallis of the public task means across disciplines in tests.csv, tied means "
    "taking average ranks",
    "official runs (repeat 0) of every task; the test over the public tasks with a mean",
    "paper", "3.3: \"a task's mean over the configurations scored on it averages 0.330 ... "
    "a Kruskal-Wallis test over these task means detects no difference among the four "
    "disciplines (P=0.18)\"")
_RULES["departures.csv"] = Rule(
    "rejected files by schema departure (the five kinds of E.1) and configuration",
    "official public runs whose file the strict grader rejected", "paper",
    "3.2: \"fall into five kinds of schema departure\"")
_RULES["recovered.csv"] = Rule(
    "each scored run's score minus the mean of the other configurations on its task; "
    "recovered minus valid files within each configuration (bootstrap interval, "
    "permutation P), pooled weighted by recovered files",
    f"{SCORED} of the configurations with both recovered and valid files", "paper",
    "3.2: \"We compare the two within each configuration, measuring each run by its score "
    "minus the mean of the other configurations on the same task; weighted by the number "
    "of recovered files\"")
_RULES["refusals.csv"] = Rule(
    "share of tasks refused by each configuration, overall and by discipline",
    f"every {OFFICIAL}", "paper", "Figure 7: \"Share of the 100 public tasks refused by "
    "each configuration\"")
_RULES["scoring_rules.csv"] = Rule(
    "mean with rejected files and runs without a submission at -1, and with rejected "
    "files recovered; 95% bootstrap intervals over tasks",
    "official runs of the public and private tasks, refusals excluded", "paper",
    "Figure 8: \"Both rules cover the public and the private tasks and exclude "
    "refusals\"")
_RULES["coverage.csv"] = Rule(
    "the other configurations' mean on a configuration's excluded tasks minus their mean "
    "on its scored tasks; bootstrap interval, permutation P, Holm over configurations",
    f"{OFFICIAL}; per configuration its excluded and its scored tasks", "paper",
    "3.3: \"the other eleven configurations score 0.023 lower on the tasks excluded for "
    "Opus 5.5 than on its scored tasks\"")
_RULES["all_tasks.csv"] = Rule(
    "mean over every scored task (Figure 1's solid bars) and over the tasks every "
    "configuration scored (hatched bars), with bootstrap intervals over tasks",
    "scored official runs of the public and private tasks", "paper",
    "3.2: \"that mean is 0.344 over all the tasks each one completed and 0.396 over the "
    "28 tasks that every one of them completed (hatched bars)\"")
_RULES["cost_sensitivity.csv"] = Rule(
    "the Pareto frontier at the full input price, on the shared tasks, and with the "
    "cost of excluded runs charged", SCORED, "paper", "3.5, Cost range")
_RULES["effort.csv"] = Rule(
    "the lower effort minus the higher under four ways of scoring the higher one, "
    "bootstrap intervals over tasks, uncorrected Wilcoxon P",
    "official runs of the public tasks of one model at two efforts and the higher "
    "effort's repeats", "paper",
    "4.10: \"Four ways of scoring Max, including the mean of its five repeated runs on "
    "the 29 tasks of Section 3.6\"")
_RULES["effort_tasks.csv"] = _RULES["effort.csv"].replace(
    text="per task, the two efforts' scores and the mean of the higher one's repeats",
    sentence="Figure 24a: \"Difference in score between Astra Medium and Astra Max on "
             "each of the 100 public tasks\"")
_RULES["effort_ratios.csv"] = _RULES["effort.csv"].replace(
    text="per task, the higher over the lower effort's official scored runs",
    sentence="4.10, Figure 24c: \"Ratio of Max to Medium on the same task\"")
_RULES["effort_correlations.csv"] = Rule(
    "Spearman of score with each effort measure within configurations (Holm per "
    "measure); with task and configuration effects removed", SCORED, "paper",
    "E.3: \"With task and configuration effects removed, the correlation between score "
    "and log run time\"")
_RULES["repeats.csv"] = Rule(
    "pooled within-task SD of the repeats, SD of the task means, intraclass correlation "
    "of single-run scores, official run minus the mean of the repeats; bootstrap "
    "intervals over tasks",
    "repeated runs (repeat >= 1) of public tasks with at least two scored repeats, and "
    "the official runs there", "paper",
    "4.5: \"The within-task and between-task spreads of Section 3.6 give single-run "
    "scores an intraclass correlation of 0.655\"")
_RULES["reliability.csv"] = Rule(
    "reliability of a task mean over k runs from the intraclass correlation "
    "(Spearman-Brown)", "as repeats.csv", "paper",
    "Figure 26b: \"Reliability of a task mean over k runs\"")
_RULES["repeats_tasks.csv"] = Rule("3.6: per configuration and task, the scored repeats",
                              "scored repeated runs of public tasks", "paper",
                              "3.6: tasks whose repeats' SD exceeds 0.2")
_RULES["repeats_stops.csv"] = Rule(
    "repeats that stopped under the information policy minus the other repeats",
    "repeated runs of public tasks", "paper", "Figure 19d")
_RULES["rank_stability.csv"] = Rule(
    "ranks of the task-adjusted means in simulated reruns that add normal noise of the "
    "run-to-run SD (pooled SD of the repeats, --run-sd) to every official score and "
    "refit; the top group is the configurations above the widest gap of the "
    "task-adjusted means (the paper names its 'leading six' without saying how the "
    "tiers were cut: our reading; --top-group K sets it)",
    f"{SCORED}; the run-to-run SD from the repeats", "reading",
    "4.5: \"In 10,000 simulated reruns that add this noise to every official score, the "
    "leading six configurations stay above the other seven\"")
_RULES["detectable.csv"] = Rule(
    "difference detectable with 80% power against shared tasks, and for a budget of runs "
    "on new tasks or on repeats", "the SD of the paired differences of pairs.csv and the "
    "run-to-run SD", "paper", "Figure 26d-e (E.2)")
_RULES["design.csv"] = Rule(
    "tasks and runs needed to detect each --design-difference with 80% power",
    "as detectable.csv", "paper", "E.2 (study design)")
_RULES["variance.csv"] = Rule(
    "shares of single-run variance due to tasks, configurations, the interaction and run "
    "noise over the largest complete block (the configurations and the tasks they all "
    "scored that hold the most scores)",
    "scored official public runs of the block's configurations on its tasks, and the "
    "repeats", "reading",
    "4.4: \"a variance decomposition over the nine configurations scored on the same 86 "
    "tasks\" names the block, not how it was chosen: the largest block is our reading")
_RULES["interaction_tasks.csv"] = Rule(
    "per task, the configurations' spread against the repeats'",
    "public tasks with at least three scored repeats", "paper",
    "4.4: \"Across the 28 repeated-run tasks with at least three scored repeats, the "
    "spread between configurations exceeds the spread between repeats of one "
    "configuration on 25 tasks, by a median ratio of 6.4\"")
_RULES["pair_correlations.csv"] = Rule(
    "correlation across tasks of each pair of configurations against tables simulated "
    "without interaction", "configurations scored on most public tasks", "paper",
    "4.4 and Figure 18d")
_RULES["discipline_summary.csv"] = Rule(
    "mean score, threshold and refusals by discipline, over every configuration",
    SCORED, "paper", "Figure 20a")
_RULES["discipline_gap.csv"] = Rule(
    "leading minus trailing group by discipline against label permutations",
    f"{SCORED} of the configurations with a scored run in every discipline", "reading",
    "4.6: \"the four of the leading six that remain, score above the six configurations "
    "that the paired tests separate from the leading six\"; the leading six are cut at "
    "the widest gap of the task-adjusted means (our reading)")
_RULES["discipline_pairs.csv"] = Rule(
    "rank correlation of the configurations' discipline means against random splits",
    f"{SCORED} of the configurations with a scored run in every discipline", "paper",
    "4.6: \"Eleven configurations have a scored run in every discipline\"")
_RULES["exposure.csv"] = Rule(
    "flagged minus unflagged runs of each configuration, each run relative to the other "
    "configurations on its task; bootstrap interval, permutation P, Holm; pooled",
    SCORED, "paper", "3.7, Figure 13d")
_RULES["exposure_indicators.csv"] = Rule(
    "flag, source-DOI and outside-request shares by configuration", SCORED, "paper",
    "3.7, Figure 13c")
_RULES["presented_order.csv"] = Rule(
    "the score of the presented order (the rows of targets.csv, the one input order) and "
    "the scored runs that submitted it", "public tasks with a package (--tasks); "
    "scored official runs with a submitted file (--runs-dir)", "paper",
    "3.2: \"22 official runs on 15 tasks submitted the input order\"")
_RULES["freshness.csv"] = Rule(
    "runs on tasks published before the model's training cutoff minus fresh runs, "
    "relative to the other configurations", f"{SCORED} of known freshness",
    "framework", "3.7 and appendix B (training cutoffs)")
_RULES["private.csv"] = Rule(
    "mean with bootstrap intervals over tasks; above chance; one-sided test against "
    "uniformly random rankings of the same tasks, Holm over configurations",
    "scored official runs of the private tasks", "paper",
    "3.4: \"Compared with uniformly random rankings of the same tasks, twelve "
    "configurations score significantly higher after Holm correction\"")
_RULES["private_pairs.csv"] = Rule("exact sign-flip test of each pair on shared private tasks",
                              "scored official runs of the private tasks", "paper",
                              "3.4 (exact sign-flip)")
_RULES["private_tasks.csv"] = Rule("per private task: mean, spread, excluded runs",
                              "official runs of the private tasks", "paper", "Figure 10")
_RULES["agreement_tasks.csv"] = Rule(
    "agreement between configurations' submitted orders, per task (the task score with "
    "the other order in place of the measured one)", f"{SCORED} with a submitted order",
    "paper", "E.8 and Figure 27a")
_RULES["consensus_loo.csv"] = Rule(
    "each configuration against the consensus (average position) of the other "
    "configurations on the same tasks", f"{SCORED} with a submitted order", "paper",
    "E.8: \"Measured against the consensus of the other configurations on the same "
    "tasks\"")
_RULES["monotone.csv"] = Rule(
    "share of groups whose submitted and measured orders are monotone in a numeric "
    "setting", f"{SCORED} with a submitted order; groups of at least four items with a "
    "numeric setting of at least three values", "paper",
    "4.2: \"We examined the 95 groups of at least four items, on 37 tasks, in which such "
    "a condition takes at least three values\"")
_RULES["monotone_groups.csv"] = _RULES["monotone.csv"].replace(
    text="per group: the largest absolute Spearman of the submitted and measured orders "
         "with a setting")
_RULES["monotone_unrelated.csv"] = Rule(
    "groups whose measured order is nearly unrelated to every numeric setting",
    _RULES["monotone.csv"].population, "reading",
    "4.2: \"Its measured orders are nearly unrelated to temperature\" gives no number; "
    "the threshold is our reading")
_RULES["repeats_orders.csv"] = Rule(
    "groups that received the same order in every scored repeat of their task",
    "scored repeated runs of public tasks with a submitted order", "paper",
    "4.5: \"Of the 156 comparison groups in these 29 tasks, 39 received an identical "
    "order in every scored repeat of their task\"")
_RULES["repeats_agreement.csv"] = Rule(
    "agreement between two scored repeats against a repeat and another configuration's "
    "official run", "scored repeats and official runs of the repeated tasks", "paper",
    "4.5: \"two scored repeats of the same task agree with each other more closely than "
    "a repeat agrees with the official run of another configuration\"")
_RULES["pair_order_runs.csv"] = Rule("per run: pair share, top-1 and random top-1",
                                f"{SCORED} with a submitted order and an answer key",
                                "paper", "appendix F")
_RULES["pair_order.csv"] = _RULES["pair_order_runs.csv"].replace(
    text="per configuration: mean pair share and top-1 rate, bootstrap over tasks")
_RULES["pair_order_examples.csv"] = Rule(
    "measured against submitted ranks for the runs closest to 0, 0.2, 0.4, 0.6 and 0.8",
    f"{SCORED} on one-group tasks of 10 to 20 experiments without ties", "paper",
    "Figure 28a")
_RULES["pair_order_median_examples.csv"] = _RULES["pair_order_examples.csv"].replace(
    text="one run per discipline closest to the median score", sentence="Figure 28b: "
    "\"The same for one run per discipline at the median score of 0.40\"")
_RULES["retired.csv"] = Rule(
    "per retired task: date, reason, runs and their mean; its runs are in no other table",
    "runs of retired tasks", "framework", "SPEC section 15")
_RULES["tests.csv"] = Rule(
    "every named test; each row names its section and method", "as each row's analysis",
    "paper", "3.2-3.7, 4.4, 4.6, E.9, E.10")
_RULES["summary.csv"] = Rule(
    "scalar results quoted in the text; each row names its analysis",
    "as each row's analysis", "paper", "sections 2.2 to 4.10")


STATS_RULES: Mapping[str, Rule] = _RULES
"""The default rule of each file ``spu stats`` writes (the analyses refine the text)."""
