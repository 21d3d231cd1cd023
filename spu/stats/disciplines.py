"""Scores by discipline (paper 4.6, E.10, Figure 20).

- :func:`discipline_summary` (``discipline_summary.csv``, Figure 20a): per discipline,
  the mean over scored runs with an interval that resamples the discipline's tasks, the
  mean chance threshold, the share of runs above chance, the median task size and the
  share of official runs refused or excluded.
- :func:`discipline_gap` (``discipline_gap.csv``, Figure 20c): on every task, the mean
  score of a leading group of configurations minus that of a trailing group, averaged
  within each discipline; the widest minus the narrowest of those averages is tested
  against 5,000 permutations of the tasks' discipline labels.
- :func:`discipline_stability` (``discipline_pairs.csv``, Figure 20d): the rank
  correlation between the configurations' discipline means for every pair of
  disciplines, their mean against random splits of the tasks into blocks of the
  disciplines' sizes.
- :func:`default_groups`: the leading and trailing groups of E.10 from the tables.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pandas as pd

from spu.stats.named_tests import groups_df, named_test
from spu.stats.permutation import multiset_permutations, p_from_null
from spu.stats.repeats import largest_gap_group
from spu.stats.resampling import (
    DEFAULT_RESAMPLES,
    percentile_interval,
    resample_counts,
    rng_for,
)
from spu.stats.runs_table import score_matrix
from spu.stats.ties import exact

PERMUTATIONS = 5000
"""Permutations of discipline labels and random splits (paper E.10: 5,000)."""


def discipline_summary(
    runs: pd.DataFrame, seed: int = 0, resamples: int = DEFAULT_RESAMPLES
) -> pd.DataFrame:
    """``discipline_summary.csv``: what differs between disciplines (Figure 20a).

    Parameters
    ----------
    runs
        Official runs of the public tasks.
    seed, resamples
        Bootstrap seed and resamples (tasks of the discipline).

    Returns
    -------
    pandas.DataFrame
        ``discipline, n_tasks, n_runs, n_scored, raw_mean, ci_low, ci_high,
        mean_threshold, above_chance_share, median_items, refusal_share,
        excluded_share``. The mean averages scored runs (a configuration with more
        scored tasks there weighs more); the interval resamples tasks and averages the
        scored runs they hold; the share above chance counts scored runs.

    References
    ----------
    Paper 4.6 ("materials science and medicine average 0.378 and 0.394, against 0.294 in
    chemistry and 0.290 in biology ... the threshold averages 0.384 in biology and 0.522
    in medicine ... Refusals ... removing 3% of its 377 official runs against 12% to 15%")
    and E.10 ("What the quantities cover").

    Examples
    --------
    >>> runs = pd.DataFrame({"task_id": ["a", "a", "b", "c"], "config": ["A", "B"] * 2,
    ...     "discipline": ["x", "x", "x", "y"], "scored": [True, True, True, False],
    ...     "outcome": ["valid", "valid", "valid", "refusal"],
    ...     "score_recovered": [0.2, 0.4, 0.9, -1.0], "threshold": [0.5, 0.5, 0.3, 0.6],
    ...     "n_items": [10, 10, 20, 5]})
    >>> t = discipline_summary(runs, resamples=50)
    >>> t[["discipline", "n_tasks", "raw_mean", "mean_threshold", "refusal_share"]].round(3
    ...     ).values.tolist()
    [['x', 2, 0.5, 0.4, 0.0], ['y', 1, nan, 0.6, 1.0]]
    """
    rows = []
    for discipline, group in sorted(runs.groupby("discipline"), key=lambda kv: str(kv[0])):
        scored = group[group["scored"]]
        per_task = scored.groupby("task_id")["score_recovered"].agg(["sum", "count"])
        tasks = group.groupby("task_id").agg(threshold=("threshold", "first"),
                                             n_items=("n_items", "first")
                                             if "n_items" in group else ("threshold", "size"))
        low = high = math.nan
        if len(per_task):
            counts = resample_counts(len(per_task), resamples,
                                     rng_for(seed, "discipline-summary", str(discipline)))
            with np.errstate(invalid="ignore", divide="ignore"):
                draws = (counts @ per_task["sum"].to_numpy()) / (counts @ per_task["count"]
                                                                 .to_numpy())
            low, high = percentile_interval(draws)
        thresholds = scored["threshold"].to_numpy(dtype=float)
        known = np.isfinite(thresholds)
        above = exact(scored["score_recovered"].to_numpy(dtype=float)[known]) > exact(
            thresholds[known])
        rows.append({
            "discipline": discipline, "n_tasks": int(group["task_id"].nunique()),
            "n_runs": len(group), "n_scored": len(scored),
            "raw_mean": float(scored["score_recovered"].mean()) if len(scored) else math.nan,
            "ci_low": low, "ci_high": high,
            "mean_threshold": float(tasks["threshold"].mean()),
            "above_chance_share": float(above.mean()) if above.size else math.nan,
            "median_items": float(tasks["n_items"].median()) if "n_items" in group
            else math.nan,
            "refusal_share": float((group["outcome"] == "refusal").mean()),
            "excluded_share": float((~group["scored"]).mean()),
        })
    return pd.DataFrame(rows, columns=[
        "discipline", "n_tasks", "n_runs", "n_scored", "raw_mean", "ci_low", "ci_high",
        "mean_threshold", "above_chance_share", "median_items", "refusal_share",
        "excluded_share"])


def all_discipline_configs(runs: pd.DataFrame, order: list[str],
                           low_coverage: float = 0.0) -> list[str]:
    """Configurations with a scored run in every discipline (paper 4.6, E.10).

    The paper's rule has no coverage condition ("Eleven configurations have a scored run
    in every discipline"); ``low_coverage`` (a share of the tasks, for example
    :data:`~spu.stats.coverage.LOW_COVERAGE`) adds one.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A", "A", "B"], "task_id": ["t", "u", "t"],
    ...                      "discipline": ["x", "y", "x"], "scored": True})
    >>> all_discipline_configs(runs, ["A", "B"])
    ['A']
    """
    disciplines = set(runs["discipline"])
    n_tasks = max(runs["task_id"].nunique(), 1)
    scored = runs[runs["scored"]]
    have = scored.groupby("config")["discipline"].agg(lambda s: set(s))
    coverage = scored.groupby("config")["task_id"].nunique() / n_tasks
    return [c for c in order if c in have.index and have[c] >= disciplines
            and coverage[c] >= low_coverage]


GROUP_RULE = ("the configurations above the widest gap of the task-adjusted means lead "
              "and those below it trail (3.3); of these, the configurations with a scored "
              "run in every discipline; a trailing one enters when a Holm-significant "
              "paired test separates it from a leading configuration (4.6, E.10)")
"""How :func:`default_groups` forms the groups of the discipline comparison."""


def default_groups(
    configs: pd.DataFrame, pairs: pd.DataFrame, eligible: list[str],
    top_size: int | None = None,
) -> tuple[list[str], list[str]]:
    """The leading and trailing groups of 4.6 and E.10 (:data:`GROUP_RULE`).

    The configurations above the widest gap of the task-adjusted means lead, the rest
    trail (:func:`spu.stats.repeats.largest_gap_group`, the two groups of 3.3). The
    leading group keeps its ``eligible`` configurations (scored in every discipline);
    the trailing group keeps those eligible configurations that a Holm-significant
    paired test separates from at least one configuration of the leading group of 3.3
    (eligible or not). ``top_size`` (``--top-group``) fixes the size of the leading
    group of 3.3 instead of the widest gap. When no test separates any, the eligible
    trailing configurations
    all enter; when the gap leaves no eligible configuration on one side, the eligible
    ones are split at their median.

    References
    ----------
    Paper 4.6 ("Astra Medium, Opus 5, Astra Max and Sonnet 5.5, the four of the leading
    six that remain, score above the six configurations that the paired tests separate
    from the leading six") and E.10 ("Opus 5.5, Fable 5.1 and GPT-6.1 Sol are left out").

    Examples
    --------
    >>> configs = pd.DataFrame({"config": list("ABCD"), "adjusted_mean": [0.5, 0.48, 0.2, 0.1]})
    >>> pairs = pd.DataFrame({"config_a": ["A", "A", "B", "B"], "config_b": list("CDCD"),
    ...                       "significant": [False, True, False, False]})
    >>> default_groups(configs, pairs, list("ABCD"))
    (['A', 'B'], ['D'])
    """
    ordered = configs.dropna(subset=["adjusted_mean"]).sort_values("adjusted_mean",
                                                                   ascending=False)
    k = (largest_gap_group(ordered["adjusted_mean"].to_numpy()) if top_size is None
         else top_size)
    leading = list(ordered["config"].iloc[:k])
    top = [c for c in leading if c in eligible]
    bottom = [c for c in ordered["config"].iloc[k:] if c in eligible]
    significant = pairs[pairs["significant"].astype(bool)] if len(pairs) else pairs
    separated = set()
    for r in significant.itertuples(index=False):
        if r.config_a in leading:
            separated.add(r.config_b)
        if r.config_b in leading:
            separated.add(r.config_a)
    refined_bottom = [c for c in bottom if c in separated]
    if top and refined_bottom:
        return top, refined_bottom
    if top and bottom:
        return top, bottom
    # The widest gap leaves one side without an eligible configuration: split the eligible
    # ones at their median task-adjusted mean instead.
    ranked = [c for c in ordered["config"] if c in eligible]
    half = len(ranked) // 2
    return ranked[:half], ranked[len(ranked) - half:]


def named_groups(value: str, order: list[str]) -> tuple[list[str], list[str]]:
    """``--discipline-groups "A,B;C,D"``: the leading and the trailing group, named.

    Raises
    ------
    ValueError
        When the value is not two groups or names a configuration the table lacks.

    Examples
    --------
    >>> named_groups("A, B; C", ["A", "B", "C"])
    (['A', 'B'], ['C'])
    """
    parts = value.split(";")
    groups = [[n.strip() for n in part.split(",") if n.strip()] for part in parts]
    if len(groups) != 2 or not all(groups):
        raise ValueError(f"--discipline-groups {value!r}: expected two groups, "
                         "'LEADING,...;TRAILING,...'")
    unknown = [n for g in groups for n in g if n not in order]
    if unknown:
        raise ValueError(f"--discipline-groups: no official public runs of "
                         f"{', '.join(unknown)} (configurations: {', '.join(order)})")
    if set(groups[0]) & set(groups[1]):
        raise ValueError("--discipline-groups: a configuration is in both groups")
    return groups[0], groups[1]


def _gap_by_discipline(diff: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Mean of ``diff`` within each discipline, for rows of discipline codes (B, T)."""
    codes = np.atleast_2d(codes)
    onehot = np.zeros((codes.shape[0], codes.shape[1], n_groups))
    np.put_along_axis(onehot, codes[:, :, None], 1.0, axis=2)
    return np.einsum("btg,t->bg", onehot, diff) / onehot.sum(axis=1)


def discipline_gap(
    runs: pd.DataFrame, top: list[str], bottom: list[str], seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES, permutations: int = PERMUTATIONS,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``discipline_gap.csv``: the leading minus the trailing group on the same task.

    On each public task with a scored run in both groups: the mean score of the leading
    group minus that of the trailing group, over the configurations scored there; the
    task differences are averaged within each discipline (with a percentile bootstrap
    interval over the discipline's tasks). The statistic, the widest minus the narrowest
    discipline average, is compared with ``permutations`` permutations of the discipline
    labels over the tasks: ``p = (1 + #{T* >= T}) / (1 + permutations)``.

    Returns
    -------
    tuple
        The table (``discipline, n_tasks, diff, ci_low, ci_high``) and a ``tests.csv``
        row with the null median in ``method``.

    References
    ----------
    Paper 4.6 ("by a margin that is widest in chemistry and narrowest in biology, 0.232
    against 0.078 ... the widest minus the narrowest, 0.154, sits inside what permuting
    the discipline labels of the 100 tasks gives for that statistic (median 0.116,
    P=0.239 over 5,000 permutations)"), E.10 and Figure 20c.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A", "B"] * 4, "scored": True,
    ...     "task_id": ["t1", "t1", "t2", "t2", "t3", "t3", "t4", "t4"],
    ...     "discipline": ["x"] * 4 + ["y"] * 4,
    ...     "score_recovered": [0.5, 0.1, 0.6, 0.2, 0.3, 0.3, 0.4, 0.2]})
    >>> table, test = discipline_gap(runs, ["A"], ["B"], resamples=50, permutations=100)
    >>> table["diff"].round(3).tolist(), round(test["statistic"], 3), test["method"][:5]
    ([0.4, 0.1], 0.3, 'exact')
    """
    configs = [*top, *bottom]
    matrix = score_matrix(runs, configs)
    with np.errstate(invalid="ignore"):
        lead = matrix[top].mean(axis=1) if top else pd.Series(np.nan, index=matrix.index)
        trail = matrix[bottom].mean(axis=1) if bottom else pd.Series(np.nan,
                                                                     index=matrix.index)
    diff = (lead - trail).dropna()
    discipline = runs.groupby("task_id")["discipline"].first().reindex(diff.index)
    codes, names = pd.factorize(discipline.astype(str), sort=True)
    rows = []
    for g, name in enumerate(names):
        d = diff.to_numpy()[codes == g]
        counts = resample_counts(d.size, resamples, rng_for(seed, "discipline-gap", name))
        low, high = percentile_interval(counts @ d / d.size)
        rows.append({"discipline": name, "n_tasks": int(d.size), "diff": float(d.mean()),
                     "ci_low": low, "ci_high": high})
    table = pd.DataFrame(rows, columns=["discipline", "n_tasks", "diff", "ci_low", "ci_high"])
    if len(names) < 2:
        return table, named_test("discipline_gap_range", math.nan, math.nan, "4.6",
                                 df=groups_df(len(names)))
    observed = float(table["diff"].max() - table["diff"].min())
    values = diff.to_numpy(dtype=float)
    n_relabelings = math.factorial(len(codes)) // math.prod(
        math.factorial(int((codes == g).sum())) for g in range(len(names)))
    if n_relabelings <= permutations:
        permuted = multiset_permutations(codes.tolist())
        exact = True
    else:
        rng = rng_for(seed, "discipline-gap-permutation")
        permuted = rng.permuted(np.broadcast_to(codes, (permutations, codes.size)), axis=1)
        exact = False
    means = _gap_by_discipline(values, permuted, len(names))
    null = means.max(axis=1) - means.min(axis=1)
    p = p_from_null(null, observed, exact, "greater")
    method = ("exact" if exact else "monte-carlo") + f", null median {np.median(null):.3f}"
    test = named_test("discipline_gap_range", observed, p, "4.6", df=groups_df(len(names)),
                      n=int(values.size), method=method)
    test["null_median"] = float(np.median(null))
    return table, test


def _block_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks (average for ties) along the last axis."""
    from scipy import stats as sps

    return sps.rankdata(exact(values), axis=-1)


def _mean_pair_rho(means: np.ndarray) -> np.ndarray:
    """Mean Spearman correlation over pairs of blocks; ``means`` is (B, K, C)."""
    ranks = _block_ranks(means)
    ranks = ranks - ranks.mean(axis=-1, keepdims=True)
    norm = np.sqrt((ranks**2).sum(axis=-1))
    k = means.shape[1]
    rhos = [(ranks[:, a] * ranks[:, b]).sum(-1) / (norm[:, a] * norm[:, b])
            for a, b in itertools.combinations(range(k), 2)]
    return np.mean(rhos, axis=0)


def discipline_stability(
    runs: pd.DataFrame, configs: list[str], seed: int = 0, draws: int = PERMUTATIONS
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``discipline_pairs.csv``: is the order of the configurations stable across disciplines?

    For each discipline, each configuration's raw mean over its scored runs there; for
    each pair of disciplines, the Spearman correlation of those means over the
    configurations. Their mean is compared with random splits of the same tasks into
    blocks of the disciplines' sizes: the reported p is the share of splits whose mean
    correlation is at or below the observed one, ``(1 + #{T* <= T}) / (1 + draws)``.

    Parameters
    ----------
    runs
        Official runs of the public tasks.
    configs
        Configurations compared (those scored in every discipline).
    seed, draws
        Seed and random splits.

    Returns
    -------
    tuple
        The table (``discipline_a, discipline_b, rho``) and a ``tests.csv`` row (the null
        median in ``method``).

    References
    ----------
    Paper 4.6 ("their mean scores correlate at 0.45 on average between pairs of
    disciplines, below the median of 0.62 for random splits of the task set into blocks
    of the same sizes but above 9% of those splits"), E.10 and Figure 20d.

    Examples
    --------
    Three configurations in the same order in both disciplines:

    >>> runs = pd.DataFrame({"config": ["A", "B", "C"] * 2, "scored": True,
    ...     "task_id": ["t1"] * 3 + ["t2"] * 3, "discipline": ["x"] * 3 + ["y"] * 3,
    ...     "score_recovered": [0.5, 0.3, 0.1, 0.6, 0.4, 0.2]})
    >>> table, test = discipline_stability(runs, ["A", "B", "C"], draws=20)
    >>> table["rho"].tolist(), test["statistic"]
    ([1.0], 1.0)
    """
    matrix = score_matrix(runs, configs)
    discipline = runs.groupby("task_id")["discipline"].first().reindex(matrix.index)
    codes, names = pd.factorize(discipline.astype(str), sort=True)
    k = len(names)
    empty = pd.DataFrame(columns=["discipline_a", "discipline_b", "rho"])
    if k < 2 or len(configs) < 3:
        return empty, named_test("discipline_order_stability", math.nan, math.nan, "4.6",
                                 df=groups_df(k))
    values = matrix.to_numpy(dtype=float)
    known = np.isfinite(values)
    filled = np.where(known, values, 0.0)

    def block_means(code_rows: np.ndarray) -> np.ndarray:
        onehot = np.zeros((code_rows.shape[0], code_rows.shape[1], k))
        np.put_along_axis(onehot, code_rows[:, :, None], 1.0, axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.einsum("btk,tc->bkc", onehot, filled)
                    / np.einsum("btk,tc->bkc", onehot, known.astype(float)))

    observed_means = block_means(codes[None, :])
    ranks = _block_ranks(observed_means)[0]
    rows = []
    for a, b in itertools.combinations(range(k), 2):
        ra, rb = ranks[a] - ranks[a].mean(), ranks[b] - ranks[b].mean()
        rows.append({"discipline_a": names[a], "discipline_b": names[b],
                     "rho": float((ra * rb).sum() / np.sqrt((ra**2).sum() * (rb**2).sum()))})
    table = pd.DataFrame(rows, columns=empty.columns)
    observed = float(table["rho"].mean())
    rng = rng_for(seed, "discipline-splits")
    splits = rng.permuted(np.broadcast_to(codes, (draws, codes.size)), axis=1)
    null = _mean_pair_rho(block_means(splits))
    null = null[np.isfinite(null)]
    p = (1 + int((null <= observed + 1e-12).sum())) / (1 + null.size)
    test = named_test("discipline_order_stability", observed, p, "4.6", df=groups_df(k),
                      n=len(configs),
                      method=f"random splits, median {np.median(null):.3f}")
    test["null_median"] = float(np.median(null))
    return table, test
