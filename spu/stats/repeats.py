"""Run-to-run variation and rank stability (paper 3.6, 4.5, Figure 26).

The repeated runs (``repeat`` >= 1) of a configuration on the public tasks give, over the
tasks with at least two scored repeats: the pooled within-task standard deviation, the
standard deviation of the task means, the one-way intraclass correlation of single-run
scores with its interval, and the reliability of a mean of ``k`` runs (Spearman-Brown).
Intervals are percentile bootstrap intervals over tasks, as in the paper.

The simulated reruns add independent normal noise with the pooled within-task SD to
every official score, refit the task-adjusted means and rank them; the shares of
simulations that keep the top group above the rest, the leader first, and the whole
order are reported, with the tasks also resampled in a second set of simulations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from spu.stats.additive import adjusted_means, fit_additive, linear_map
from spu.stats.resampling import (
    DEFAULT_RESAMPLES,
    bootstrap_mean,
    percentile_interval,
    resample_counts,
    rng_for,
)

DEFAULT_SIMULATIONS = 10_000
"""Simulated reruns of paper 4.5."""


@dataclass(frozen=True)
class TaskSpread:
    """Per-task sufficient statistics of repeated scores (tasks with >= 2 scored runs)."""

    tasks: tuple[str, ...]
    """Task ids."""
    k: np.ndarray
    """Scored runs per task."""
    mean: np.ndarray
    """Mean score per task."""
    ss: np.ndarray
    """Sum of squared deviations from the task mean."""

    @classmethod
    def from_scores(cls, scores: pd.DataFrame) -> TaskSpread:
        """From a frame with ``task_id`` and ``score_recovered`` (one row per scored run)."""
        grouped = scores.groupby("task_id")["score_recovered"]
        k = grouped.count()
        keep = k[k >= 2].index
        mean = grouped.mean()[keep]
        ss = grouped.apply(lambda v: float(((v - v.mean()) ** 2).sum()))[keep]
        return cls(tuple(str(t) for t in keep), k[keep].to_numpy(float), mean.to_numpy(float),
                   ss.to_numpy(float))


UNSTABLE_SD = 0.2
"""Within-task SD above which a task counts as unstable (paper 3.6)."""


def unstable_share(spread: TaskSpread, sd: float = UNSTABLE_SD) -> tuple[int, float]:
    """Tasks whose repeats have an SD above ``sd``, and their share of the within-task SS.

    References
    ----------
    Paper 3.6 ("the four tasks with a standard deviation above 0.2 account for 71% of
    the within-task sum of squares").

    Examples
    --------
    Task a: 0.1, 0.5 (SD 0.283, SS 0.08); task b: 0.4, 0.5 (SD 0.071, SS 0.005):

    >>> s = TaskSpread(("a", "b"), np.array([2.0, 2.0]), np.array([0.3, 0.45]),
    ...                np.array([0.08, 0.005]))
    >>> n, share = unstable_share(s)
    >>> n, round(share, 4)
    (1, 0.9412)
    """
    task_sd = np.sqrt(spread.ss / np.maximum(spread.k - 1, 1))
    total = float(spread.ss.sum())
    above = task_sd > sd
    return int(above.sum()), float(spread.ss[above].sum() / total) if total > 0 else math.nan


def variance_components(
    spread: TaskSpread, weights: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Pooled within-task SD, SD of task means and ICC(1), for rows of task ``weights``.

    Parameters
    ----------
    spread
        Per-task statistics.
    weights
        ``(B, T)`` multiplicities of the tasks (bootstrap counts), or ``None`` for once each.

    Returns
    -------
    dict
        Arrays ``within_sd``, ``task_sd`` and ``icc``, one entry per row of ``weights``.

    References
    ----------
    Shrout and Fleiss (1979), Psychol. Bull. 86, 420-428 (ICC(1) from the one-way
    ANOVA); the unbalanced ``k0`` of Snedecor and Cochran (1989), section 13.11; paper 3.6
    and 4.5.

    Examples
    --------
    Hand-worked, two tasks with runs (0, 0.2) and (0.6, 0.8, 1.0): SSW = 0.02 + 0.08 = 0.1
    on 3 df, so MSW = 1/30 and the within SD is 0.1826; task means 0.1 and 0.8 about the
    grand mean 0.52 give SSB = 2 * 0.42^2 + 3 * 0.28^2 = 0.588 = MSB; k0 = (5 - 13/5) / 1
    = 2.4, so ICC = (0.588 - 1/30) / (0.588 + 1.4/30) = 0.8739:

    >>> s = TaskSpread(("a", "b"), np.array([2.0, 3.0]), np.array([0.1, 0.8]),
    ...                np.array([0.02, 0.08]))
    >>> {k: round(float(v[0]), 4) for k, v in variance_components(s).items()}
    {'within_sd': 0.1826, 'task_sd': 0.495, 'icc': 0.8739}
    """
    n = spread.k.size
    w = np.ones((1, n)) if weights is None else np.atleast_2d(weights)
    big_n = w @ spread.k
    sums = w @ (spread.k * spread.mean)
    grand = sums / big_n
    ssb = w @ (spread.k * spread.mean**2) - big_n * grand**2
    ssw = w @ spread.ss
    df_within = big_n - n
    msw = ssw / df_within
    msb = ssb / (n - 1)
    k0 = (big_n - (w @ spread.k**2) / big_n) / (n - 1)
    task_var = (w @ spread.mean**2 - (w @ spread.mean) ** 2 / n) / (n - 1)
    # No spread at all (every run of every task scored alike, as a deterministic
    # baseline does, or a resample that drew one task only): the ICC is undefined.
    denominator = msb + (k0 - 1) * msw
    icc = np.divide(msb - msw, denominator, out=np.full(np.shape(denominator), np.nan),
                    where=denominator > 0)
    return {
        "within_sd": np.sqrt(msw),
        "task_sd": np.sqrt(np.maximum(task_var, 0.0)),
        "icc": icc,
    }


def spearman_brown(icc: float | np.ndarray, k: int | np.ndarray) -> float | np.ndarray:
    """Reliability of the mean of ``k`` runs from the single-run ICC.

    References
    ----------
    Spearman (1910) and Brown (1910), Br. J. Psychol. 3; paper Figure 26b.

    Examples
    --------
    >>> round(spearman_brown(0.655, 5), 4)  # 5 * 0.655 / (1 + 4 * 0.655)
    0.9047
    """
    icc = np.asarray(icc, dtype=float)
    denominator = 1 + (k - 1) * icc
    with np.errstate(divide="ignore", invalid="ignore"):
        # A negative ICC (less spread between tasks than within) can zero the denominator.
        out = np.where(denominator > 0, k * icc / denominator, np.nan)
    return float(out) if out.ndim == 0 else out


def repeats_table(
    runs: pd.DataFrame, seed: int = 0, resamples: int = DEFAULT_RESAMPLES
) -> pd.DataFrame:
    """``repeats.csv``: run-to-run variation of each configuration with repeated runs.

    Parameters
    ----------
    runs
        Runs of the public tasks, official and repeated; repeats are ``repeat >= 1``.
    seed, resamples
        Bootstrap seed and resamples (over tasks).

    References
    ----------
    Paper 3.6 ("Score variation"), 4.5 and Figure 26a-b.
    """
    rows = []
    scored = runs[runs["scored"]]
    repeated = scored[scored["repeat"] >= 1]
    for config in sorted(repeated["config"].unique()):
        own = repeated[repeated["config"] == config]
        spread = TaskSpread.from_scores(own)
        n = len(spread.tasks)
        row: dict[str, object] = {"config": config, "n_tasks": n,
                                  "n_runs": int(spread.k.sum())}
        if n >= 2:
            point = variance_components(spread)
            counts = resample_counts(n, resamples, rng_for(seed, "repeats", config))
            boot = variance_components(spread, counts)
            for name in ("within_sd", "task_sd", "icc"):
                row[name] = float(point[name][0])
                row[f"{name}_ci_low"], row[f"{name}_ci_high"] = percentile_interval(boot[name])
            row["median_within_sd"] = float(np.median(np.sqrt(spread.ss / (spread.k - 1))))
        official = scored[(scored["config"] == config) & (scored["repeat"] == 0)]
        official = official.set_index("task_id")["score_recovered"]
        repeat_means = own.groupby("task_id")["score_recovered"].mean()
        both = repeat_means.index.intersection(official.index)
        gap = bootstrap_mean((official[both] - repeat_means[both]).to_numpy(),
                             rng_for(seed, "official-vs-repeats", config), resamples)
        row.update({"n_official_tasks": len(both), "official_minus_repeats": gap.estimate,
                    "official_minus_repeats_ci_low": gap.low,
                    "official_minus_repeats_ci_high": gap.high})
        rows.append(row)
    columns = ["config", "n_tasks", "n_runs", "within_sd", "within_sd_ci_low",
               "within_sd_ci_high", "task_sd", "task_sd_ci_low", "task_sd_ci_high", "icc",
               "icc_ci_low", "icc_ci_high", "median_within_sd", "n_official_tasks",
               "official_minus_repeats", "official_minus_repeats_ci_low",
               "official_minus_repeats_ci_high"]
    return pd.DataFrame(rows, columns=columns)


def reliability_table(repeats: pd.DataFrame, k_max: int = 10) -> pd.DataFrame:
    """``reliability.csv``: Spearman-Brown reliability of a mean of 1..``k_max`` runs.

    The interval maps the ends of the ICC interval (the reliability rises with the ICC).

    Examples
    --------
    >>> t = pd.DataFrame({"config": ["A"], "icc": [0.5], "icc_ci_low": [0.2],
    ...                   "icc_ci_high": [0.8]})
    >>> reliability_table(t, k_max=2)["reliability"].round(4).tolist()  # 2 * 0.5 / 1.5
    [0.5, 0.6667]
    """
    rows = []
    for r in repeats.itertuples(index=False):
        for k in range(1, k_max + 1):
            rows.append({"config": r.config, "k": k,
                         "reliability": spearman_brown(r.icc, k),
                         "ci_low": spearman_brown(r.icc_ci_low, k),
                         "ci_high": spearman_brown(r.icc_ci_high, k)})
    return pd.DataFrame(rows, columns=["config", "k", "reliability", "ci_low", "ci_high"])


def pooled_within_sd(runs: pd.DataFrame) -> float:
    """Pooled within-task SD of all repeated public runs (every configuration together).

    Examples
    --------
    Hand-worked: deviations of (0.2, 0.4) and (0.5, 0.5, 0.8) from their task means give
    SS = 0.02 + 0.06 on 1 + 2 df, so the SD is sqrt(0.08 / 3) = 0.1633:

    >>> runs = pd.DataFrame({"config": "A", "scored": True, "repeat": [1, 2, 1, 2, 3],
    ...     "task_id": ["a", "a", "b", "b", "b"],
    ...     "score_recovered": [0.2, 0.4, 0.5, 0.5, 0.8]})
    >>> round(pooled_within_sd(runs), 4)
    0.1633
    """
    scored = runs[runs["scored"] & (runs["repeat"] >= 1)]
    ss, df = 0.0, 0.0
    for _, own in scored.groupby("config"):
        spread = TaskSpread.from_scores(own)
        ss += spread.ss.sum()
        df += (spread.k - 1).sum()
    return float(np.sqrt(ss / df)) if df > 0 else np.nan


def largest_gap_group(means: np.ndarray) -> int:
    """Size of the top group: the configurations above the widest gap between sorted means.

    Examples
    --------
    Paper Table 1: the widest gap, 0.078, separates a leading six at 0.393 and above
    from the rest at 0.315 and below.

    >>> largest_gap_group(np.array([0.478, 0.431, 0.424, 0.421, 0.409, 0.393, 0.315,
    ...                             0.308, 0.296, 0.254, 0.245, 0.239, 0.227]))
    6
    """
    s = np.sort(np.asarray(means, dtype=float))[::-1]
    return int(np.argmax(s[:-1] - s[1:]) + 1) if s.size >= 2 else 0


@dataclass(frozen=True)
class RankStability:
    """Ranks of the task-adjusted means in simulated reruns (paper 4.5, Figure 26f)."""

    table: pd.DataFrame
    """Per configuration: observed rank, rank interval, share at the observed rank."""
    run_sd: float
    """SD of the noise added to every official score."""
    top_group_size: int
    """Configurations in the top group."""
    simulations: int
    """Simulated reruns."""
    top_group_kept: float
    """Share of reruns whose top group stays above every other configuration."""
    leader_first: float
    """Share of reruns whose leader stays first."""
    exact_order: float
    """Share of reruns that reproduce the whole order."""
    top_group_kept_tasks_resampled: float
    """The same share when the tasks are resampled as well."""


def _kept(sim: np.ndarray, top: np.ndarray) -> np.ndarray:
    return sim[:, top].min(axis=1) > np.delete(sim, top, axis=1).max(axis=1)


def rank_stability(
    matrix: pd.DataFrame, run_sd: float, seed: int = 0,
    simulations: int = DEFAULT_SIMULATIONS, top_group_size: int | None = None,
) -> RankStability | None:
    """Simulated reruns: noise ``N(0, run_sd)`` on every official score, means refitted.

    Parameters
    ----------
    matrix
        Official scores, tasks x configurations (NaN where not scored).
    run_sd
        Run-to-run SD (the pooled within-task SD of the repeats).
    seed, simulations
        Seed and number of simulated reruns.
    top_group_size
        Size of the top group; by default the group above the widest gap of the
        observed task-adjusted means (:func:`largest_gap_group`).

    Returns
    -------
    RankStability or None
        ``None`` when fewer than two configurations have a task-adjusted mean.

    References
    ----------
    Paper section 4.5 (last paragraph) and Figure 26f.
    """
    fit = fit_additive(matrix)
    identified = np.isfinite(fit.adjusted)
    keep = [c for c, ok in zip(matrix.columns, identified, strict=True) if ok]
    if len(keep) < 2 or not np.isfinite(run_sd):
        return None
    # The configurations left out have no scored run (a design that is not connected
    # identifies none), so the fit of the others is the fit already made.
    design, y = fit.design.scored_configs(identified), fit.y
    observed = fit.adjusted[identified]
    order = np.argsort(-observed, kind="stable")
    observed_rank = np.empty(len(keep), dtype=int)
    observed_rank[order] = np.arange(1, len(keep) + 1)
    k = top_group_size if top_group_size else largest_gap_group(observed)
    top = order[:k]

    rng = rng_for(seed, "rank-stability")
    lmap = linear_map(design)
    ranks = np.empty((simulations, len(keep)), dtype=int)
    kept = leader = exact = 0
    kept_resampled: list[np.ndarray] = []
    for start in range(0, simulations, 1000):
        b = min(1000, simulations - start)
        noise = rng.normal(0.0, run_sd, size=(b, y.size))
        sim = observed + noise @ lmap.T
        sim_order = np.argsort(-sim, axis=1, kind="stable")
        r = np.empty_like(sim_order)
        np.put_along_axis(r, sim_order, np.arange(1, len(keep) + 1)[None, :], axis=1)
        ranks[start:start + b] = r
        kept += int(_kept(sim, top).sum())
        leader += int((sim_order[:, 0] == order[0]).sum())
        exact += int((r == observed_rank).all(axis=1).sum())
        weights = resample_counts(len(design.tasks), b, rng)
        resampled = adjusted_means(design, y + noise, weights)
        valid = np.isfinite(resampled).all(axis=1)
        kept_resampled.append(_kept(resampled[valid], top))
    low, high = percentile_interval(ranks.astype(float))
    table = pd.DataFrame({
        "config": keep, "adjusted_mean": observed, "observed_rank": observed_rank,
        "rank_ci_low": low, "rank_ci_high": high,
        "share_same_rank": (ranks == observed_rank).mean(axis=0),
        "in_top_group": np.isin(np.arange(len(keep)), top),
    }).sort_values("observed_rank").reset_index(drop=True)
    both = np.concatenate(kept_resampled)
    return RankStability(
        table=table, run_sd=float(run_sd), top_group_size=k, simulations=simulations,
        top_group_kept=kept / simulations, leader_first=leader / simulations,
        exact_order=exact / simulations,
        top_group_kept_tasks_resampled=float(both.mean()) if both.size else np.nan,
    )


STOP_MIN = 3
"""A task counts as a stop cluster when at least this many of its repeats stopped (3.6)."""


def repeat_task_table(runs: pd.DataFrame) -> pd.DataFrame:
    """``repeats_tasks.csv``: each task with repeated runs (Figures 12a-b, 26a, 19d).

    Parameters
    ----------
    runs
        Runs of the public tasks, official and repeated.

    Returns
    -------
    pandas.DataFrame
        One row per configuration and task with repeats: ``n_repeats``, ``n_scored``,
        ``repeat_mean``, ``repeat_sd`` (SD over the scored repeats), ``official`` (the
        official score where scored), ``n_stops`` (repeats with outcome ``policy_stop``),
        ``official_above_all`` (the official score exceeds every scored repeat);
        ``within_ss`` (the scored repeats' squared deviations from their mean, tasks with
        two or more), ``ss_share`` (its share of the configuration's within-task sum of
        squares) and ``unstable`` (``repeat_sd`` above :data:`UNSTABLE_SD`): the unstable
        tasks' ``ss_share`` adds up to ``unstable_ss_share`` of ``summary.csv``.

    References
    ----------
    Paper 3.6 (Figure 12a-b: "exceeds every repeat on one of the 29 tasks"; "the four tasks
    with a standard deviation above 0.2 account for 71% of the within-task sum of
    squares"), Figure 26a.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": "A", "task_id": "t", "repeat": [0, 1, 2, 3],
    ...     "outcome": ["valid", "valid", "policy_stop", "valid"], "scored": True,
    ...     "score_recovered": [0.9, 0.2, 0.4, 0.6]})
    >>> t = repeat_task_table(runs).iloc[0]
    >>> int(t.n_scored), round(float(t.repeat_mean), 3), int(t.n_stops), bool(t.official_above_all)
    (3, 0.4, 1, True)
    """
    repeated = runs[runs["repeat"] >= 1]
    official = runs[(runs["repeat"] == 0) & runs["scored"]].set_index(
        ["config", "task_id"])["score_recovered"]
    rows = []
    for (config, task), group in repeated.groupby(["config", "task_id"], sort=True):
        scores = group.loc[group["scored"], "score_recovered"].to_numpy(dtype=float)
        off = official.get((config, task), np.nan)
        rows.append({
            "config": config, "task_id": task, "discipline": group["discipline"].iloc[0]
            if "discipline" in group else "",
            "n_repeats": len(group), "n_scored": int(scores.size),
            "repeat_mean": float(scores.mean()) if scores.size else np.nan,
            "repeat_sd": float(scores.std(ddof=1)) if scores.size >= 2 else np.nan,
            "official": off,
            "n_stops": int((group["outcome"] == "policy_stop").sum()),
            "official_above_all": bool(scores.size and np.isfinite(off)
                                       and off > scores.max()),
            "within_ss": float(((scores - scores.mean()) ** 2).sum())
            if scores.size >= 2 else np.nan,
        })
    table = pd.DataFrame(rows, columns=["config", "task_id", "discipline", "n_repeats",
                                        "n_scored", "repeat_mean", "repeat_sd", "official",
                                        "n_stops", "official_above_all", "within_ss"])
    total = table.groupby("config")["within_ss"].transform("sum")
    table["ss_share"] = (table["within_ss"] / total.where(total > 0)).astype(float)
    table["unstable"] = table["repeat_sd"] > UNSTABLE_SD
    return table


REPEAT_TASKS_RULE = (
    "3.6: per configuration and task, the scored repeated runs (repeat >= 1); repeat_sd "
    "their SD (ddof 1); within_ss their sum of squares about their mean and ss_share its "
    "share of the configuration's within-task sum of squares, over tasks with two or more "
    f"scored repeats; unstable: repeat_sd above {UNSTABLE_SD} (summary.csv's "
    "unstable_tasks and unstable_ss_share: the unstable tasks and their share)")
"""The paper's rule behind ``repeats_tasks.csv`` (the manifest's ``rule``)."""


def _clusters(stopped: np.ndarray, task_index: np.ndarray, n_tasks: int,
              minimum: int) -> np.ndarray:
    """Tasks with at least ``minimum`` stops, for each row of ``stopped`` (B, N)."""
    counts = np.zeros((stopped.shape[0], n_tasks))
    for t in range(n_tasks):
        counts[:, t] = stopped[:, task_index == t].sum(axis=1)
    return (counts >= minimum).sum(axis=1)


def stop_clustering_test(
    runs: pd.DataFrame, seed: int = 0, draws: int = 10_000, minimum: int = STOP_MIN
) -> dict[str, Any]:
    """Whether policy stops of repeated runs cluster on a few tasks (paper 3.6).

    The statistic is the number of tasks with at least ``minimum`` stops among their
    repeats. Its null spreads the same number of stops over the same runs at random:
    the stop labels are permuted over all repeated runs, keeping each task's number of
    runs, and ``p = (1 + #{T* >= T}) / (1 + draws)`` (exact when there are at most
    ``draws`` relabelings). ``expected`` is what the pooled stop rate predicts,
    ``sum_t P(Binomial(k_t, p) >= minimum)``.

    Parameters
    ----------
    runs
        Repeated runs (``repeat >= 1``) of one configuration.
    seed, draws
        Seed and permutation draws.
    minimum
        Stops that make a task a cluster.

    Returns
    -------
    dict
        ``tests.csv`` fields plus ``stops``, ``runs``, ``tasks``, ``expected`` and
        ``max_stops`` (the most stops on one task).

    References
    ----------
    Paper 3.6 ("four tasks stopped in three of their five runs, whereas the pooled stop
    rate predicts 0.61 tasks with three or more stops (permutation P=0.0019)").

    Examples
    --------
    The paper's rate, 20 stops in 145 runs of 29 tasks of five: 29 * P(Bin(5, 20/145) >= 3)
    = 0.61:

    >>> runs = pd.DataFrame({"task_id": np.repeat(np.arange(29), 5),
    ...     "outcome": ["policy_stop"] * 20 + ["valid"] * 125})
    >>> round(stop_clustering_test(runs, draws=200)["expected"], 2)
    0.61
    """
    from scipy import stats as sps

    from spu.stats.permutation import p_from_null, relabelings

    task_codes, task_index = np.unique(runs["task_id"].astype(str).to_numpy(),
                                       return_inverse=True)
    stopped = (runs["outcome"] == "policy_stop").to_numpy()
    n_tasks, n = task_codes.size, stopped.size
    observed = int(_clusters(stopped[None, :], task_index, n_tasks, minimum)[0])
    per_task = np.bincount(task_index, minlength=n_tasks)
    rate = stopped.mean() if n else np.nan
    expected = float(sum(sps.binom.sf(minimum - 1, k, rate) for k in per_task)) if n else np.nan
    out: dict[str, Any] = {"test": "stop_clustering", "statistic": float(observed),
                           "df": None, "section": "3.6", "n": n, "stops": int(stopped.sum()),
                           "runs": n, "tasks": n_tasks, "expected": expected,
                           "max_stops": int(np.bincount(task_index, weights=stopped,
                                                        minlength=n_tasks).max()) if n else 0}
    if not stopped.any() or stopped.all():
        out.update({"p_value": np.nan, "method": ""})
        return out
    null_labels, exact = relabelings(stopped, rng_for(seed, "stop-clustering"), draws)
    null = _clusters(null_labels, task_index, n_tasks, minimum).astype(float)
    out.update({"p_value": p_from_null(null, float(observed), exact, "greater"),
                "method": "exact" if exact else "monte-carlo", "null_mean": float(null.mean())})
    return out


def stop_effect(runs: pd.DataFrame, seed: int = 0, resamples: int = DEFAULT_RESAMPLES
                ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """What a policy stop costs: stopped minus other scored repeats of the same task.

    Over the tasks with scored repeats of both kinds, the mean score of the repeats that
    stopped under the policy (and left a file) minus that of the others, averaged over
    the tasks with a percentile bootstrap interval over tasks.

    Returns
    -------
    tuple
        ``repeats_stops.csv`` (``config, task_id, n_stopped, n_other, stopped_mean,
        other_mean, diff``) and a ``summary.csv`` row.

    References
    ----------
    Paper 4.5 ("Across the seven tasks that have repeats of both kinds, a stop costs 0.054
    on average ... (95% CI -0.181 to 0.049)") and Figure 19d.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": "A", "task_id": ["t"] * 3, "repeat": [1, 2, 3],
    ...     "outcome": ["policy_stop", "valid", "valid"], "scored": True,
    ...     "score_recovered": [0.1, 0.5, 0.3]})
    >>> table, row = stop_effect(runs, resamples=20)
    >>> round(float(table["diff"].iloc[0]), 3), row["n"]
    (-0.3, 1)
    """
    scored = runs[(runs["repeat"] >= 1) & runs["scored"]]
    rows = []
    for (config, task), group in scored.groupby(["config", "task_id"], sort=True):
        stop = (group["outcome"] == "policy_stop").to_numpy()
        if stop.any() and (~stop).any():
            s = group["score_recovered"].to_numpy(dtype=float)
            rows.append({"config": config, "task_id": task, "n_stopped": int(stop.sum()),
                         "n_other": int((~stop).sum()), "stopped_mean": s[stop].mean(),
                         "other_mean": s[~stop].mean(), "diff": s[stop].mean() - s[~stop].mean()})
    table = pd.DataFrame(rows, columns=["config", "task_id", "n_stopped", "n_other",
                                        "stopped_mean", "other_mean", "diff"])
    iv = bootstrap_mean(table["diff"].to_numpy(dtype=float), rng_for(seed, "stop-effect"),
                        resamples)
    row = {"analysis": "repeats", "statistic": "stop_effect", "value": iv.estimate,
           "ci_low": iv.low, "ci_high": iv.high, "n": len(table)}
    return table, row
