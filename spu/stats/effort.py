"""Effort: the same model at two reasoning efforts, and score against effort spent.

Paper 4.10 and Figure 24a-c compare Astra Medium with Astra Max, configurations that
differ only in reasoning effort; E.3 relates each run's score to how long it ran, how
many tool calls and web fetches it made and whether it used the GPU.

- :func:`effort_pairs`: configurations of one model and harness at two efforts (the
  lowest against the highest present).
- :func:`effort_tasks` (``effort_tasks.csv``, Figure 24a): per task, the lower effort's
  score, the higher effort's official score and the mean of its repeats.
- :func:`effort_table` (``effort.csv``, Figure 24b): the lower minus the higher effort
  under four ways of scoring the higher one, plus a trimmed check, each with a bootstrap
  interval over tasks and the uncorrected Wilcoxon p (Figure 25d).
- :func:`effort_ratios` (``effort_ratios.csv``, Figure 24c, 3.5): the higher over the
  lower effort on the same task for run time, tokens, tool calls, web fetches and cost,
  and the share of runs that used a GPU.
- :func:`effort_correlations` (``effort_correlations.csv``, E.3): Spearman correlation
  of score with each effort measure within every configuration (Holm over the
  configurations, per measure), and the correlation with task and configuration effects
  removed, with a bootstrap interval over tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from spu.stats.additive import AdditiveDesign, residual_gram
from spu.stats.paired import holm, wilcoxon_p
from spu.stats.resampling import (
    DEFAULT_RESAMPLES,
    bootstrap_mean,
    percentile_interval,
    resample_counts,
    rng_for,
)
from spu.stats.runs_table import score_matrix
from spu.stats.ties import exact

EFFORT_ORDER: tuple[str, ...] = ("minimal", "low", "medium", "high", "xhigh", "max")
"""Reasoning efforts from least to most; others sort after these, by name."""

TRIM = 0.05
"""Share of tasks trimmed from each end of the differences in the trimmed check."""

RATIO_QUANTITIES: tuple[tuple[str, str], ...] = (
    ("runtime_s", "run time"), ("output_tokens", "output tokens"),
    ("prompt_tokens", "prompt tokens"), ("tool_calls", "tool calls"),
    ("web_fetches", "web searches and fetches"), ("cost_usd", "cost"))
"""Quantities whose higher-over-lower effort ratio is reported (column, label)."""

MEASURES: tuple[tuple[str, str], ...] = (
    ("runtime_s", "log run time"), ("tool_calls", "log tool calls"),
    ("web_fetches", "log web fetches"), ("used_gpu", "GPU use"),
    ("gpu_measured", "GPU use, sampled by NVML"))
"""Effort measures of E.3 (column, label); counts and times enter as their log, as the
paper writes them, and as log(1 + x) only where the measure has a zero (:func:`log_measure`).

``used_gpu`` is the paper's GPU use (E.12, :mod:`spu.stats.gpu`), ``gpu_measured`` the
sampled device beside it (only where the table has the column)."""

GPU_SHARES: tuple[tuple[str, str], ...] = (
    ("used_gpu", "share of runs that used a GPU"),
    ("gpu_measured", "share of runs whose GPU was sampled busy (NVML)"))
"""The GPU shares of ``effort_ratios.csv`` (column, label): the paper's, then the sampled."""

FLAG_MEASURES = frozenset({"used_gpu", "gpu_measured"})
"""Measures that are flags, entering as 0 and 1 instead of a log."""

LOG_RULES = ("log", "log1p")
"""How a count or time enters the adjusted correlations: ``log`` (the paper's: log x,
log(1 + x) where the measure has a zero) or ``log1p`` (always log(1 + x))."""


def log_measure(x: np.ndarray, rule: str = "log") -> tuple[np.ndarray, str]:
    """A count or time on the log scale of E.3, and the transform used.

    The paper writes log run time, log tool calls and log web fetches: ``log x`` where
    every value is above zero; a measure with a zero (a run without a web fetch) takes
    ``log(1 + x)`` instead, as does every measure under ``rule="log1p"``.

    Examples
    --------
    >>> x, how = log_measure(np.array([1.0, np.e]))
    >>> x.round(6).tolist(), how
    ([0.0, 1.0], 'log')
    >>> x, how = log_measure(np.array([0.0, np.e - 1]))
    >>> x.round(6).tolist(), how
    ([0.0, 1.0], 'log1p')
    """
    if rule not in LOG_RULES:
        raise ValueError(f"effort log rule: {rule!r} is not one of {', '.join(LOG_RULES)}")
    if rule == "log" and (x > 0).all():
        return np.log(x), "log"
    return np.log1p(np.maximum(x, 0.0)), "log1p"


@dataclass(frozen=True)
class EffortPair:
    """Two configurations of one model and harness at different reasoning efforts."""

    low: str
    """Configuration at the lower effort."""
    high: str
    """Configuration at the higher effort."""
    model: str
    """Their model."""


def _effort_rank(effort: str) -> tuple[int, str]:
    return (EFFORT_ORDER.index(effort) if effort in EFFORT_ORDER else len(EFFORT_ORDER), effort)


def _label_effort(label: str) -> tuple[str, str]:
    """The model and effort a configuration label names: its effort word taken out.

    >>> _label_effort("Astra Max"), _label_effort("Opus 5")
    (('Astra', 'max'), ('Opus 5', ''))
    """
    words = label.split()
    for i in range(len(words) - 1, -1, -1):
        if words[i].lower() in EFFORT_ORDER:
            return " ".join(words[:i] + words[i + 1:]), words[i].lower()
    return label, ""


def effort_pairs(runs: pd.DataFrame) -> list[EffortPair]:
    """Configurations that run one model with one harness at two efforts: lowest, highest.

    The model a configuration runs is its ``model`` column and its effort the ``effort``
    column; where the table leaves them empty (a table without those columns), both come
    from the label, whose effort word names the effort and whose other words the model
    ("Astra Medium" and "Astra Max" run "Astra"). The harness must agree where the table
    has one.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["Astra Max", "Astra Medium", "Opus 5"],
    ...     "model": ["astra", "astra", "opus5"], "harness": ["codex", "codex", "cc"],
    ...     "effort": ["max", "medium", "max"]})
    >>> effort_pairs(runs)
    [EffortPair(low='Astra Medium', high='Astra Max', model='astra')]
    >>> effort_pairs(pd.DataFrame({"config": ["Astra Max", "Astra Medium", "Opus 5"]}))
    [EffortPair(low='Astra Medium', high='Astra Max', model='Astra')]
    """
    rows = []
    for config, group in runs.groupby("config", sort=True):
        first = group.iloc[0]
        label_model, label_effort = _label_effort(str(config))

        def text(column: str, row: pd.Series = first) -> str:
            value = row.get(column, "") if column in row.index else ""
            return "" if pd.isna(value) else str(value).strip()

        effort = text("effort") or label_effort
        model = text("model") if text("effort") else ""
        rows.append((model or label_model, text("harness"), effort, str(config)))
    configs = pd.DataFrame(rows, columns=["model", "harness", "effort", "config"])
    configs = configs[configs["effort"] != ""]
    out = []
    for (model, _), group in sorted(configs.groupby(["model", "harness"]),
                                    key=lambda kv: tuple(map(str, kv[0]))):
        efforts = sorted(group.itertuples(index=False), key=lambda r: _effort_rank(r.effort))
        if len(efforts) >= 2 and efforts[0].effort != efforts[-1].effort:
            out.append(EffortPair(efforts[0].config, efforts[-1].config, str(model)))
    return out


EFFORT_REPEAT_TASKS = {
    "repeat-tasks": ("4.5, 4.10: repeats_mean and all_runs_mean over the tasks of 3.6 (the "
                     "higher effort's repeated tasks) on which the lower effort's official "
                     "run is scored and the higher effort has a scored repeat, whether or not "
                     "its official run is scored (\"the mean of its five repeated runs on "
                     "the 29 tasks of Section 3.6\")"),
    "official-scored": ("repeats_mean and all_runs_mean only over the repeated tasks on which "
                        "the higher effort's official run is scored too "
                        "(--effort-repeat-tasks official-scored; the paper uses every "
                        "repeated task)"),
}
"""The tasks over which the lower effort is compared with the higher one's repeats
(``--effort-repeat-tasks``): ``repeat-tasks``, the paper's, or ``official-scored``."""


def effort_tasks(runs: pd.DataFrame, pair: EffortPair) -> pd.DataFrame:
    """``effort_tasks.csv``: the two efforts' scores on each public task (Figure 24a).

    Parameters
    ----------
    runs
        Runs of the public tasks, official and repeated.
    pair
        The two configurations.

    Returns
    -------
    pandas.DataFrame
        ``task_id, low, high, diff, high_repeats_mean, n_high_repeats``, one row per task
        on which the lower effort's official run is scored and the higher effort has a
        scored official run or a scored repeat: ``diff`` is the lower effort's score minus
        the higher one's official score (NaN where that is unscored); repeats
        (``repeat >= 1``) of the higher effort are averaged where scored.

    References
    ----------
    Paper 4.10 and Figure 24a, Figure 25d; 4.10 ("the mean of its five repeated runs on
    the 29 tasks of Section 3.6").

    Examples
    --------
    The higher effort's official run on ``u`` is unscored; its repeats there still count:

    >>> runs = pd.DataFrame({"config": ["M", "X", "X", "X", "M", "X", "X"],
    ...     "task_id": ["t", "t", "t", "t", "u", "u", "u"], "repeat": [0, 0, 1, 2, 0, 0, 1],
    ...     "scored": [True, True, True, True, True, False, True],
    ...     "score_recovered": [0.5, 0.3, 0.2, 0.4, 0.1, -1.0, 0.6]})
    >>> effort_tasks(runs, EffortPair("M", "X", "m")).round(3).values.tolist()
    [['t', 0.5, 0.3, 0.2, 0.3, 2], ['u', 0.1, nan, nan, 0.6, 1]]
    """
    scored = runs[runs["scored"]]
    official = scored[scored["repeat"] == 0]
    matrix = score_matrix(official, [pair.low, pair.high])
    repeats = scored[(scored["repeat"] >= 1) & (scored["config"] == pair.high)]
    repeat_mean = repeats.groupby("task_id")["score_recovered"].mean()
    repeat_n = repeats.groupby("task_id").size()
    has_high = matrix[pair.high].notna() | matrix.index.isin(repeat_n.index)
    matrix = matrix[matrix[pair.low].notna() & has_high]
    table = pd.DataFrame({
        "task_id": matrix.index, "low": matrix[pair.low].to_numpy(),
        "high": matrix[pair.high].to_numpy(),
    })
    table["diff"] = table["low"] - table["high"]
    table["high_repeats_mean"] = table["task_id"].map(repeat_mean).to_numpy(dtype=float)
    table["n_high_repeats"] = table["task_id"].map(repeat_n).fillna(0).astype(int).to_numpy()
    return table.reset_index(drop=True)


def trimmed(values: np.ndarray, share: float = TRIM) -> np.ndarray:
    """``values`` without the ``share`` smallest and ``share`` largest (rounded down).

    Examples
    --------
    >>> trimmed(np.arange(20.0), 0.05).tolist() == list(range(1, 19))
    True
    """
    k = int(math.floor(share * values.size))
    return np.sort(values)[k:values.size - k] if k else np.sort(values)


def effort_table(
    tasks: pd.DataFrame, runs: pd.DataFrame, pair: EffortPair, seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES, repeat_tasks: str = "repeat-tasks",
) -> pd.DataFrame:
    """``effort.csv``: lower minus higher effort under four ways of scoring the higher one.

    The four ways (Figure 24b): ``official`` (the higher effort's official run, every
    task both scored), ``official_repeat_tasks`` (the same on the tasks with repeats of
    the higher effort), ``repeats_mean`` (the mean of its scored repeats, paper 4.5:
    "The official scores of Astra Medium average 0.004 above the mean of the Astra Max
    repeats on the same tasks"), and ``all_runs_mean`` (its scored runs averaged, the
    official one where scored). The last two use every repeated task on which the lower
    effort scored (4.10: "the mean of its five repeated runs on the 29 tasks of Section
    3.6"), also where the higher effort's official run is unscored; ``repeat_tasks``
    ``official-scored`` keeps only the tasks where it is scored
    (:data:`EFFORT_REPEAT_TASKS`). The check ``official_trimmed`` drops the :data:`TRIM`
    most divergent tasks at each end.

    Parameters
    ----------
    tasks
        :func:`effort_tasks` of the pair.
    runs
        Runs of the public tasks (for the official-and-repeats mean).
    pair
        The two configurations.
    seed, resamples
        Bootstrap seed and resamples (over tasks).
    repeat_tasks
        ``repeat-tasks`` (the paper's) or ``official-scored``.

    Returns
    -------
    pandas.DataFrame
        ``low, high, way, n_tasks, diff, ci_low, ci_high, p_wilcoxon, low_ahead``
        (tasks on which the lower effort scored higher).

    References
    ----------
    Paper 3.3 ("Effort": 0.022, 95% CI -0.031 to 0.074), 4.5, 4.10 and Figure 24b;
    ``scipy.stats.wilcoxon`` for the uncorrected P of Figure 25d.

    Examples
    --------
    >>> t = pd.DataFrame({"task_id": ["a", "b"], "low": [0.5, 0.2], "high": [0.3, 0.4],
    ...     "diff": [0.2, -0.2], "high_repeats_mean": [0.1, np.nan], "n_high_repeats": [2, 0]})
    >>> runs = pd.DataFrame({"config": "X", "task_id": "a", "repeat": [0, 1, 2],
    ...     "scored": True, "score_recovered": [0.3, 0.0, 0.2]})
    >>> e = effort_table(t, runs, EffortPair("M", "X", "m"), resamples=50)
    >>> e.set_index("way")["diff"].round(4).to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'official': 0.0, 'official_repeat_tasks': 0.2, 'repeats_mean': 0.4,
     'all_runs_mean': 0.3333, 'official_trimmed': 0.0}
    """
    if repeat_tasks not in EFFORT_REPEAT_TASKS:
        raise ValueError(f"effort repeat tasks: {repeat_tasks!r} is not one of "
                         f"{', '.join(EFFORT_REPEAT_TASKS)}")
    scored = runs[runs["scored"] & (runs["config"] == pair.high)]
    all_mean = scored.groupby("task_id")["score_recovered"].mean()
    both = tasks[tasks["diff"].notna()]
    with_repeats = tasks[tasks["n_high_repeats"] > 0]
    if repeat_tasks == "official-scored":
        with_repeats = with_repeats[with_repeats["diff"].notna()]
    ways = {
        "official": both["diff"].to_numpy(dtype=float),
        "official_repeat_tasks": with_repeats["diff"].to_numpy(dtype=float),
        "repeats_mean": (with_repeats["low"] - with_repeats["high_repeats_mean"]).to_numpy(
            dtype=float),
        "all_runs_mean": (with_repeats["low"] - with_repeats["task_id"].map(all_mean).astype(
            float)).to_numpy(dtype=float),
        "official_trimmed": trimmed(both["diff"].to_numpy(dtype=float)),
    }
    rows = []
    for way, d in ways.items():
        d = d[np.isfinite(d)]
        iv = bootstrap_mean(d, rng_for(seed, "effort", pair.low, pair.high, way), resamples)
        rows.append({"low": pair.low, "high": pair.high, "way": way, "n_tasks": d.size,
                     "diff": iv.estimate, "ci_low": iv.low, "ci_high": iv.high,
                     "p_wilcoxon": wilcoxon_p(d)[1], "low_ahead": int((exact(d) > 0).sum())})
    return pd.DataFrame(rows)


def _with_prompt_tokens(runs: pd.DataFrame) -> pd.DataFrame:
    return runs.assign(prompt_tokens=runs["input_tokens"] + runs["cache_read_tokens"]
                       + runs["cache_write_tokens"])


def effort_ratios(
    runs: pd.DataFrame, pair: EffortPair, seed: int = 0, resamples: int = DEFAULT_RESAMPLES
) -> pd.DataFrame:
    """``effort_ratios.csv``: the higher over the lower effort on the same task.

    For each quantity, over the tasks both configurations scored with a positive value:
    the median of the per-task ratios with a percentile bootstrap interval over tasks,
    and the ratio of the means. ``used_gpu`` gives the share of scored runs of each
    configuration that used a GPU, and their ratio.

    Parameters
    ----------
    runs
        Official runs of the public tasks.
    pair
        The two configurations.
    seed, resamples
        Bootstrap seed and resamples.

    Returns
    -------
    pandas.DataFrame
        ``low, high, quantity, label, n_tasks, median_ratio, ci_low, ci_high, low_mean,
        high_mean, mean_ratio``.

    References
    ----------
    Paper 4.10 and Figure 24c ("Max runs a median of 4.8 times as long as Medium on the
    same task"), 3.5 ("reads six times as many prompt tokens per scored run ... costs a
    median of 5.3 times as much on the same task").

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["M", "X"] * 2, "task_id": ["a", "a", "b", "b"],
    ...     "scored": True, "runtime_s": [10.0, 40.0, 20.0, 60.0], "output_tokens": 1,
    ...     "input_tokens": 1, "cache_read_tokens": 0, "cache_write_tokens": 0,
    ...     "tool_calls": 1, "web_fetches": 1, "cost_usd": 1.0,
    ...     "used_gpu": [False, True, False, True]})
    >>> r = effort_ratios(runs, EffortPair("M", "X", "m"), resamples=50).set_index("quantity")
    >>> float(r.loc["runtime_s", "median_ratio"]), float(r.loc["runtime_s", "mean_ratio"])
    (3.5, 3.3333333333333335)
    """
    scored = _with_prompt_tokens(runs[runs["scored"]])
    rows = []
    for quantity, label in RATIO_QUANTITIES:
        if quantity not in scored.columns:
            continue
        wide = scored.pivot_table(index="task_id", columns="config", values=quantity,
                                  aggfunc="first").reindex(columns=[pair.low, pair.high])
        wide = wide[(wide > 0).all(axis=1)].dropna()
        ratio = (wide[pair.high] / wide[pair.low]).to_numpy(dtype=float)
        row: dict[str, Any] = {"low": pair.low, "high": pair.high, "quantity": quantity,
                               "label": label, "n_tasks": ratio.size}
        if ratio.size:
            idx = rng_for(seed, "effort-ratio", pair.low, quantity).integers(
                0, ratio.size, size=(resamples, ratio.size))
            low, high = percentile_interval(np.median(ratio[idx], axis=1))
            low_mean, high_mean = wide[pair.low].mean(), wide[pair.high].mean()
            row.update({"median_ratio": float(np.median(ratio)), "ci_low": low,
                        "ci_high": high, "low_mean": low_mean, "high_mean": high_mean,
                        "mean_ratio": high_mean / low_mean})
        rows.append(row)
    for column, label in GPU_SHARES:
        gpu = {c: scored.loc[scored["config"] == c, column].astype(bool) for c in
               (pair.low, pair.high)} if column in scored else {}
        if gpu and len(gpu[pair.low]) and len(gpu[pair.high]):
            low_share, high_share = float(gpu[pair.low].mean()), float(gpu[pair.high].mean())
            rows.append({"low": pair.low, "high": pair.high, "quantity": column,
                         "label": label,
                         "n_tasks": int(min(len(gpu[pair.low]), len(gpu[pair.high]))),
                         "low_mean": low_share, "high_mean": high_share,
                         "mean_ratio": high_share / low_share if low_share else np.nan})
    return pd.DataFrame(rows, columns=["low", "high", "quantity", "label", "n_tasks",
                                       "median_ratio", "ci_low", "ci_high", "low_mean",
                                       "high_mean", "mean_ratio"])


def effort_correlations(
    runs: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
    log_rule: str = "log",
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """``effort_correlations.csv``: score against effort within configurations (E.3).

    Parameters
    ----------
    runs
        Official runs of the public tasks.
    order
        Configurations in table order.
    seed, resamples
        Bootstrap seed and resamples (over tasks) of the adjusted correlations.
    log_rule
        How counts and times enter the adjusted correlations (:func:`log_measure`):
        ``log`` (the paper's) or ``log1p``.

    Returns
    -------
    tuple
        The table ``config, measure, n, rho, p_value, p_holm`` (Spearman, Holm over the
        configurations for each measure) with one more row per measure, config
        ``(task and configuration effects removed)``: the Pearson correlation of the
        residuals of score and measure (on the log scale, ``transform`` says which) after
        the additive fit ``mu_t + alpha_c``, with a percentile bootstrap interval over
        tasks (``ci_low``, ``ci_high``); and the ``summary.csv`` rows of those adjusted
        correlations.

    References
    ----------
    Paper E.3 ("none of the 52 correlations is detected ... With task and configuration
    effects removed, the correlation between score and log run time is 0.043 (95% CI
    -0.026 to 0.113)") and 3.3 ("Effort"); ``scipy.stats.spearmanr``.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": "A", "task_id": list("abcde"), "scored": True,
    ...     "score_recovered": [0.1, 0.2, 0.3, 0.4, 0.5], "runtime_s": [5, 4, 3, 2, 1.0],
    ...     "tool_calls": 1, "web_fetches": 1, "used_gpu": False})
    >>> t, _ = effort_correlations(runs, ["A"], resamples=20)
    >>> round(float(t.loc[t["measure"] == "runtime_s", "rho"].iloc[0]), 12)
    -1.0
    """
    scored = runs[runs["scored"]]
    by_config = {str(c): g for c, g in scored.groupby("config")}
    empty = scored.iloc[:0]
    rows = []
    for measure, _ in MEASURES:
        if measure not in scored.columns:
            continue
        family = []
        for config in order:
            own = by_config.get(config, empty)
            x = own[measure].to_numpy(dtype=float)
            y = own["score_recovered"].to_numpy(dtype=float)
            keep = np.isfinite(x) & np.isfinite(y)
            rho = p = math.nan
            if keep.sum() >= 3 and np.ptp(x[keep]) > 0 and np.ptp(y[keep]) > 0:
                result = sps.spearmanr(exact(x[keep]), exact(y[keep]))
                rho, p = float(result.statistic), float(result.pvalue)
            family.append({"config": config, "measure": measure, "n": int(keep.sum()),
                           "rho": rho, "p_value": p, "transform": "ranks"})
        p_values = [float(r["p_value"]) for r in family]  # type: ignore[arg-type]
        for row, adjusted in zip(family, holm(p_values), strict=True):
            row["p_holm"] = adjusted
        rows += family
    summary: list[dict[str, Any]] = []
    adjusted_rows = _adjusted_correlations(scored, order, seed, resamples, log_rule)
    for row in adjusted_rows:
        summary.append({"analysis": "effort", "statistic": f"adjusted_corr_{row['measure']}",
                        "value": row["rho"], "ci_low": row["ci_low"],
                        "ci_high": row["ci_high"], "n": row["n"], "note": row["note"]})
    table = pd.DataFrame(rows + adjusted_rows, columns=[
        "config", "measure", "n", "rho", "p_value", "p_holm", "ci_low", "ci_high",
        "transform", "note"])
    return table, summary


def _adjusted_correlations(scored: pd.DataFrame, order: list[str], seed: int,
                           resamples: int, log_rule: str = "log") -> list[dict[str, Any]]:
    """Correlation of score and each measure after removing task and configuration effects."""
    out: list[dict[str, Any]] = []
    matrix = score_matrix(scored, order)
    design, y = AdditiveDesign.from_matrix(matrix)
    if y.size < 3:
        return out
    key = pd.MultiIndex.from_arrays([np.array(design.tasks)[design.task_index],
                                     np.array(design.configs)[design.config_index]])
    indexed = scored.set_index(["task_id", "config"])
    names, columns, transforms = [], [y], []
    for measure, _ in MEASURES:
        if measure not in indexed.columns:
            continue
        x = indexed[measure].reindex(key).to_numpy(dtype=float)
        if not np.isfinite(x).all() or np.ptp(x) == 0:
            continue
        names.append(measure)
        if measure in FLAG_MEASURES:
            columns.append(x)
            transforms.append("flag")
        else:
            scaled, how = log_measure(x, log_rule)
            columns.append(scaled)
            transforms.append(how)
    if not names:
        return out
    variables = np.vstack(columns)
    weights = resample_counts(len(design.tasks), resamples, rng_for(seed, "effort-adjusted"))
    point = residual_gram(design, variables)[0]
    boot = residual_gram(design, variables, weights)
    for j, measure in enumerate(names, start=1):
        note = _no_residual_variation(variables, point, j, measure)
        rho = low = high = math.nan
        if not note:
            with np.errstate(invalid="ignore", divide="ignore"):
                rho = float(point[0, j] / np.sqrt(point[0, 0] * point[j, j]))
                draws = boot[:, 0, j] / np.sqrt(boot[:, 0, 0] * boot[:, j, j])
            low, high = percentile_interval(draws)
        out.append({"config": "(task and configuration effects removed)", "measure": measure,
                    "n": int(y.size), "rho": rho, "p_value": math.nan, "p_holm": math.nan,
                    "ci_low": low, "ci_high": high, "transform": transforms[j - 1],
                    "note": note})
    return out


RESIDUAL_TOLERANCE = 1e-12
"""Residual sum of squares, relative to the total, below which nothing is left to correlate."""


def _no_residual_variation(variables: np.ndarray, gram: np.ndarray, j: int, measure: str
                           ) -> str:
    """Why the adjusted correlation of ``measure`` is undefined ("" when it is defined).

    Once task and configuration effects are removed, a score or a measure fixed by them
    (a scripted agent makes the same calls on every task) leaves a residual of float noise;
    dividing by it gave an infinite "correlation".
    """
    for k, what in ((0, "the scores"), (j, measure.replace("_", " "))):
        centred = variables[k] - variables[k].mean()
        total = float(centred @ centred)
        if not gram[k, k] > RESIDUAL_TOLERANCE * max(total, 1e-300):
            return (f"undefined: {what} do not vary once task and configuration effects are "
                    "removed")
    return ""
