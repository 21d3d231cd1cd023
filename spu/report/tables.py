"""The paper's tables, built from the statistics and rendered as Markdown or HTML.

Cells are formatted here (:func:`number`, :func:`usd`, :func:`count`...); pandas renders
them, through tabulate (``DataFrame.to_markdown``) and jinja2 (``Styler.to_html``).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from spu.stats.analysis import StatsResult


@dataclass(frozen=True)
class Table:
    """A titled table of formatted cells."""

    name: str
    """File stem (``configs`` writes ``configs.md``)."""
    title: str
    """Heading."""
    caption: str
    """What the columns mean, in one paragraph."""
    header: tuple[str, ...]
    """Column headings."""
    rows: tuple[tuple[str, ...], ...]
    """Formatted cells."""
    blanks: str = ""
    """Why a cell shows ``-`` (no value), said under the table; a table with such a cell
    and no reason is a fault (tests/report)."""
    files: tuple[str, ...] | None = None
    """The output files it shows, whose rules the report prints beside it (default: the
    ``spu stats`` file of its name, ``configs.csv`` for ``configs``)."""

    @property
    def full_caption(self) -> str:
        """The caption, and why cells are empty where some are."""
        if not any(cell == "-" for row in self.rows for cell in row) or not self.blanks:
            return self.caption
        return f"{self.caption} A dash (-) marks {self.blanks}."

    @property
    def sources(self) -> tuple[str, ...]:
        """:attr:`files`, or the file of the table's name."""
        return (f"{self.name}.csv",) if self.files is None else self.files

    def frame(self) -> pd.DataFrame:
        """The formatted cells as a DataFrame of strings, one column per heading."""
        return pd.DataFrame(list(self.rows), columns=list(self.header), dtype=str)

    def to_markdown(self) -> str:
        """GitHub-flavoured Markdown: heading, caption, pipe table (pandas + tabulate)."""
        frame = self.frame().apply(lambda c: c.str.replace("|", "\\|", regex=False))
        frame.columns = [c.replace("|", "\\|") for c in frame.columns]
        align = ["left", *["right"] * (len(self.header) - 1)]
        table = frame.to_markdown(index=False, tablefmt="pipe", colalign=align,
                                  disable_numparse=True)
        return f"## {self.title}\n\n{self.full_caption}\n\n{table}\n"

    def to_html(self, rule: str = "") -> str:
        """An HTML section: heading, caption, ``rule`` block, table (pandas Styler + jinja2)."""
        # A fixed uuid keeps the page byte-for-byte reproducible; cells are escaped.
        styler = (self.frame().style.hide(axis="index").format(escape="html")
                  .format_index(escape="html", axis="columns").set_uuid(self.name))
        table = styler.to_html(table_attributes='class="spu-table"')
        return (f'<section id="{self.name}"><h2>{html.escape(self.title)}</h2>'
                f"<p>{html.escape(self.full_caption)}</p>{rule}{table}</section>")


def missing(value: Any) -> bool:
    """True for None, NaN and pandas' NA."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def number(value: Any, digits: int = 3) -> str:
    """A number with ``digits`` decimals, ``-`` when missing, never ``-0.000``.

    Examples
    --------
    >>> number(0.43051), number(float("nan")), number(None), number(-0.0002)
    ('0.431', '-', '-', '0.000')
    """
    if missing(value):
        return "-"
    if math.isinf(float(value)):
        return "\u221e" if float(value) > 0 else "-\u221e"
    text = f"{float(value):.{digits}f}"
    return text.lstrip("-") if float(text) == 0 else text


def amount(value: Any, digits: int) -> str:
    """A quantity with ``digits`` decimals, never a small amount read as zero.

    Below the resolution, two significant digits; an exact zero is ``0``.

    Examples
    --------
    >>> amount(12.345, 1), amount(0.0042, 2), amount(0.0, 2), amount(float("nan"), 1)
    ('12.3', '0.0042', '0', '-')
    """
    if missing(value):
        return "-"
    v = float(value)
    if v == 0:
        return "0"
    if abs(v) < 10.0 ** -digits:
        return f"{v:.2g}"
    return f"{v:,.{digits}f}"


def money(value: Any) -> str:
    """US dollars: cents, or two significant digits below a cent (never ``0.00`` for a cost).

    Examples
    --------
    >>> money(37.4412), money(0.0042), money(0.0), money(1234.5), money(None)
    ('37.44', '0.0042', '0.00', '1,234.50', '-')
    """
    if missing(value):
        return "-"
    v = float(value)
    if 0 < abs(v) < 0.01:
        return f"{v:.2g}"
    return "0.00" if v == 0 else f"{v:,.2f}"


def count(value: Any) -> str:
    """A whole number without decimals (``100``, not ``100.0000``).

    Examples
    --------
    >>> count(100.0), count(1300), count(float("nan"))
    ('100', '1,300', '-')
    """
    return "-" if missing(value) else f"{int(round(float(value))):,}"


def with_interval(estimate: Any, low: Any, high: Any, digits: int = 3) -> str:
    """``estimate [low, high]``.

    Examples
    --------
    >>> with_interval(0.431, 0.373, 0.486)
    '0.431 [0.373, 0.486]'
    """
    if number(estimate) == "-":
        return "-"
    return f"{number(estimate, digits)} [{number(low, digits)}, {number(high, digits)}]"


def money_interval(estimate: Any, low: Any, high: Any) -> str:
    """``estimate [low, high]`` in dollars (:func:`money`).

    Examples
    --------
    >>> money_interval(0.0042, 0.003, 0.0051)
    '0.0042 [0.003, 0.0051]'
    """
    if missing(estimate):
        return "-"
    return f"{money(estimate)} [{money(low)}, {money(high)}]"


def p_value(value: Any) -> str:
    """A p-value: three significant digits, scientific below 0.001.

    Examples
    --------
    >>> p_value(0.0123), p_value(3.1e-5), p_value(float("nan"))
    ('0.0123', '3.1e-05', '-')
    """
    if number(value) == "-":
        return "-"
    v = float(value)
    return f"{v:.2g}" if v < 0.001 else f"{v:.3g}"


def _count_share(count: Any, share: Any) -> str:
    if number(share) == "-":
        return "-"
    return f"{int(count)} ({100 * float(share):.0f}%)"


def _flagged(config: str, n_tasks: Any) -> str:
    """A configuration's label, warned when it is scored on fewer than five tasks.

    Examples
    --------
    >>> _flagged("A", 2), _flagged("B", 5), _flagged("C", float("nan"))
    ('A (warning: 2 tasks scored, fewer than 5)', 'B', 'C')
    """
    from spu.stats.means import MIN_TASKS

    if missing(n_tasks) or int(n_tasks) >= MIN_TASKS:
        return str(config)
    return f"{config} (warning: {int(n_tasks)} tasks scored, fewer than {MIN_TASKS})"


def configs_table(t: pd.DataFrame) -> Table:
    """Paper Table 1: results on the public tasks."""
    rows = tuple(
        (_flagged(r.config, getattr(r, "n_scored_tasks", None)), str(r.n_scored),
         with_interval(r.adjusted_mean, r.adjusted_ci_low,
                                                  r.adjusted_ci_high),
         with_interval(r.raw_mean, r.raw_ci_low, r.raw_ci_high),
         _count_share(r.above_chance, r.above_chance_share),
         with_interval(r.shared_mean, r.shared_ci_low, r.shared_ci_high))
        for r in t.itertuples(index=False))
    shared = int(t["n_shared_tasks"].iloc[0]) if len(t) else 0
    return Table(
        "configs", "Results on the public tasks (Table 1)",
        "Configurations ordered by task-adjusted mean; brackets are 95% bootstrap intervals "
        "over tasks (10,000 resamples by default). Above chance counts the scored tasks whose "
        f"score exceeds the task's chance threshold. The last column is the mean on the {shared} "
        "tasks every configuration has scored, with the same resampled tasks for all.",
        ("Configuration", "Scored tasks", "Task-adjusted mean [95% CI]", "Raw mean [95% CI]",
         "Above chance", f"Shared tasks ({shared})"),
        rows, blanks="no mean: the configuration has no scored task, or no task is scored by "
                     "every configuration (the shared column)")


def pairs_table(t: pd.DataFrame) -> Table:
    """Paired comparisons on shared scored tasks (paper 3.3, Figure 25)."""
    rows = tuple(
        (r.config_a, r.config_b, str(r.n_shared), number(r.mean_diff), p_value(r.p_value),
         p_value(r.p_holm), "yes" if r.significant else "", number(r.mde),
         number(r.mde_uncorrected))
        for r in t.itertuples(index=False))
    return Table(
        "pairs", "Paired comparisons on the public tasks",
        "Mean difference (first minus second) on the tasks scored for both, two-sided Wilcoxon "
        "signed-rank P, Holm-corrected over all pairs; the detectable difference has 80% power "
        "at 0.05 / number of pairs (MDE) and at 0.05 (uncorrected).",
        ("First", "Second", "Shared", "Difference", "P", "P (Holm)", "Significant", "MDE",
         "MDE (uncorrected)"),
        rows, blanks="no test: the pair shares no scored task, every difference is zero, or "
                     "too few differences to estimate their spread (MDE)")


def outcomes_table(t: pd.DataFrame) -> Table:
    """Paper Table 6: outcomes and the grader's scoring rules."""
    rows = tuple(
        (r.config, str(r.n_runs), str(r.rejected), str(r.refusal), str(r.no_file),
         number(r.mean_at_minus1), number(r.mean_after_recovery), number(r.scored_mean))
        for r in t.itertuples(index=False))
    return Table(
        "outcomes", "Outcomes and scoring rules (Table 6)",
        "Official public runs. Rejected: files the strict grader rejected for their format "
        "(recovered or not); No file: every other unscored run that is not a refusal. Mean at "
        "-1 scores every run without a valid file at -1; After recovery replaces the recovered "
        "files by their scores; Scored mean averages the scored runs.",
        ("Configuration", "Runs", "Rejected", "Refusal", "No file", "Mean at -1",
         "After recovery", "Scored mean"),
        rows, blanks="no scored run to average")


def costs_table(t: pd.DataFrame) -> Table:
    """Paper Table 3: usage and cost per scored run."""
    rows = tuple(
        (r.config, str(r.n_scored), amount(r.prompt_tokens_mean / 1e6, 1),
         "-" if number(r.cache_read_share) == "-" else f"{100 * r.cache_read_share:.0f}%",
         amount(r.output_tokens_mean / 1e6, 2), amount(r.runtime_h_mean, 2),
         money_interval(r.cost_mean, r.cost_ci_low, r.cost_ci_high),
         money(r.cost_total), "yes" if r.pareto else "")
        for r in t.itertuples(index=False))
    return Table(
        "costs", "Estimated API cost on the public tasks (Table 3)",
        "Means over scored official runs; Input counts all prompt tokens, Cache reads is the "
        "share read from the prompt cache; brackets are 95% bootstrap intervals over runs; the "
        "total sums every official run. Pareto: no other configuration is both cheaper (or "
        "as cheap) and better (or as good) by the task-adjusted mean. Amounts below the "
        "column's resolution are given to two significant digits (0.0042 M tokens); 0 is "
        "none (a baseline calls no model).",
        ("Configuration", "Scored", "Input (M tokens)", "Cache reads", "Output (M tokens)",
         "Run time (h)", "Cost per scored run (USD) [95% CI]", "Total (USD)", "Pareto"),
        rows, blanks="no scored run, or no prompt token to take a cache share of")


def disciplines_table(t: pd.DataFrame, order: list[str]) -> Table:
    """Paper Table 5: raw mean by discipline, with scored tasks in parentheses."""
    disciplines = sorted(t["discipline"].unique()) if len(t) else []
    cells = {(r.config, r.discipline): f"{number(r.raw_mean)} ({r.n_tasks})"
             for r in t.itertuples(index=False)}
    rows = tuple((c, *(cells.get((c, d), "-") for d in disciplines)) for c in order)
    return Table(
        "disciplines", "Raw mean score by discipline (Table 5)",
        "Each cell averages a configuration's scored official runs in one discipline, with "
        "the number of scored tasks in parentheses.",
        ("Configuration", *(d.capitalize() for d in disciplines)), rows,
        blanks="a discipline in which the configuration has no scored run")


def private_table(t: pd.DataFrame) -> Table:
    """Paper Table 2: the private tasks."""
    rows = tuple(
        (r.config, str(r.n_scored), with_interval(r.raw_mean, r.raw_ci_low, r.raw_ci_high),
         f"{r.above_chance} of {r.n_scored}", p_value(r.p_holm), r.null_method or "-")
        for r in t.itertuples(index=False))
    return Table(
        "private", "Results on the private tasks (Table 2)",
        "Brackets are 95% bootstrap intervals over tasks; the last columns give the "
        "Holm-corrected one-sided P for a mean above that of uniformly random rankings of "
        "the same tasks, and how its null distribution was obtained.",
        ("Configuration", "Scored tasks", "Mean [95% CI]", "Above chance",
         "P vs random (Holm)", "Null"),
        rows, blanks="no scored private task to average or test")


def repeats_table(t: pd.DataFrame) -> Table:
    """Run-to-run variation of the repeated runs (paper 3.6, 4.5)."""
    rows = tuple(
        (r.config, str(r.n_tasks), str(r.n_runs),
         with_interval(r.within_sd, r.within_sd_ci_low, r.within_sd_ci_high),
         with_interval(r.task_sd, r.task_sd_ci_low, r.task_sd_ci_high),
         with_interval(r.icc, r.icc_ci_low, r.icc_ci_high),
         with_interval(r.official_minus_repeats, r.official_minus_repeats_ci_low,
                       r.official_minus_repeats_ci_high))
        for r in t.itertuples(index=False))
    return Table(
        "repeats", "Repeated runs",
        "Over tasks with at least two scored repeats: pooled within-task SD, SD of the task "
        "means, intraclass correlation of single-run scores, and the official run minus the "
        "mean of the repeats; brackets are 95% bootstrap intervals over tasks.",
        ("Configuration", "Tasks", "Runs", "Within-task SD", "Task SD", "ICC",
         "Official minus repeats"),
        rows, blanks="too few tasks with two scored repeats (or no scored official run "
                     "there) to estimate it")


def rank_stability_table(t: pd.DataFrame) -> Table:
    """Ranks of the task-adjusted means in simulated reruns (paper 4.5, Figure 26f)."""
    rows = tuple(
        (r.config, str(r.observed_rank), f"{r.rank_ci_low:.0f}-{r.rank_ci_high:.0f}",
         f"{100 * r.share_same_rank:.1f}%", "yes" if r.in_top_group else "")
        for r in t.itertuples(index=False))
    return Table(
        "rank_stability", "Rank stability in simulated reruns",
        "Run-to-run noise added to every official score and the task-adjusted means refitted; "
        "95% interval of each configuration's rank and the share of reruns at its observed rank.",
        ("Configuration", "Rank", "95% rank interval", "Same rank", "Top group"), rows)


def consensus_table(t: pd.DataFrame) -> Table:
    """Each configuration against the consensus of the others (paper E.8, Figure 27b)."""
    rows = tuple(
        (r.config, str(r.n_tasks), number(r.score_mean), number(r.consensus_mean),
         with_interval(r.diff_mean, r.diff_ci_low, r.diff_ci_high))
        for r in t.itertuples(index=False))
    return Table(
        "consensus_loo", "Against the consensus of the other configurations",
        "Mean score minus that of the consensus ranking (average position, ties by experiment "
        "id) of the other configurations scored on the same tasks; 95% bootstrap intervals "
        "over tasks.",
        ("Configuration", "Tasks", "Own score", "Consensus score", "Difference [95% CI]"), rows,
        blanks="no task on which another configuration is scored too")


def monotone_table(t: pd.DataFrame) -> Table:
    """The monotone prior by configuration (paper 4.2, Figure 16d)."""
    rows = tuple(
        (r.config, str(r.n_groups), number(r.submitted_mean_abs_rho),
         number(r.measured_mean_abs_rho), f"{100 * r.submitted_monotone_share:.0f}%",
         f"{100 * r.measured_monotone_share:.0f}%")
        for r in t.itertuples(index=False))
    return Table(
        "monotone", "The monotone prior",
        "Groups of at least four experiments with a numeric setting taking at least three "
        "values: largest absolute Spearman correlation of the submitted and of the measured "
        "order with a setting, and the share of groups monotone in one (at least 0.95).",
        ("Configuration", "Groups", "Submitted |rho|", "Measured |rho|", "Submitted monotone",
         "Measured monotone"),
        rows, blanks="no group with a numeric setting of three values among its submissions")


def _scalar(value: Any) -> str:
    """A summary value: a whole number as a count, anything else with four decimals."""
    if not missing(value) and float(value).is_integer():
        return count(value)
    return number(value, 4)


def summary_table(t: pd.DataFrame) -> Table:
    """The scalar results (``summary.csv``), each value that is no number with its note."""
    notes = t["note"] if "note" in t.columns else pd.Series("", index=t.index)
    rows = tuple(
        (r.analysis, r.statistic,
         with_interval(r.value, r.ci_low, r.ci_high) if number(r.ci_low) != "-"
         else _scalar(r.value), "" if number(r.n) == "-" else count(r.n),
         "" if missing(note) else str(note))
        for r, note in zip(t.itertuples(index=False), notes, strict=True))
    return Table("summary", "Summary statistics",
                 "Scalar results of every analysis, with 95% intervals where computed; the "
                 "note says why a value is missing or infinite.",
                 ("Analysis", "Statistic", "Value", "n", "Note"), rows,
                 blanks="a value not defined on these inputs, its reason in the note")


def report_tables(result: StatsResult) -> list[Table]:
    """Every table the report shows, in reading order, for the analyses that ran."""
    t = result.tables
    order = list(t["configs.csv"]["config"])
    tables = [configs_table(t["configs.csv"]), outcomes_table(t["outcomes.csv"]),
              costs_table(t["costs.csv"]), disciplines_table(t["disciplines.csv"], order),
              pairs_table(t["pairs.csv"])]
    builders = (("private.csv", private_table), ("repeats.csv", repeats_table),
                ("rank_stability.csv", rank_stability_table),
                ("consensus_loo.csv", consensus_table), ("monotone.csv", monotone_table))
    tables += [build(t[name]) for name, build in builders if name in t and len(t[name])]
    tables.append(summary_table(result.summary))
    return tables
