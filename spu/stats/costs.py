"""Usage and cost per scored run, and the cost-score Pareto frontier (paper 3.5, Table 3).

Token counts, run time and cost are means over the scored official public runs of a
configuration, with percentile bootstrap intervals over those runs (the same resampled
runs for every quantity); ``prompt_tokens`` counts all prompt tokens (uncached input,
cache reads and cache writes), ``cache_read_share`` is the share of them read from the
cache, and ``cost_total`` sums the cost of every official run, scored or not.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from spu.stats.resampling import DEFAULT_RESAMPLES, percentile_interval, rng_for
from spu.stats.ties import exact

COST_COLUMNS: tuple[str, ...] = (
    "config", "n_scored", "cost_mean", "cost_ci_low", "cost_ci_high", "cost_total", "pareto",
)
"""The columns SPEC section 6 fixes for ``costs.csv``, in order (more follow)."""


def pareto_frontier(cost: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Which points no other point dominates: the cost-score Pareto frontier.

    A point is dominated when another has lower-or-equal cost and higher-or-equal score,
    one of them strictly; a point with a missing value is not on the frontier.

    References
    ----------
    Paper section 3.5, Figure 11; SPEC section 6 (``pareto``).

    Examples
    --------
    >>> pareto_frontier(np.array([1.0, 2.0, 3.0, 2.0]), np.array([0.2, 0.4, 0.3, 0.4])).tolist()
    [True, True, False, True]
    """
    cost = exact(cost)  # equal costs and equal means tie (spu.stats.ties)
    score = exact(score)
    known = np.isfinite(cost) & np.isfinite(score)
    out = np.zeros(cost.size, dtype=bool)
    for i in np.flatnonzero(known):
        others = known.copy()
        others[i] = False
        dominated = others & (cost <= cost[i]) & (score >= score[i]) & (
            (cost < cost[i]) | (score > score[i]))
        out[i] = not dominated.any()
    return out


def cost_table(
    runs: pd.DataFrame, order: list[str], adjusted: pd.Series, seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
) -> pd.DataFrame:
    """``costs.csv``: usage and cost per scored run, total cost, Pareto frontier.

    Parameters
    ----------
    runs
        Every official run of the public tasks.
    order
        Configurations in table order.
    adjusted
        Task-adjusted mean of each configuration (the score axis of the frontier).
    seed, resamples
        Bootstrap seed and resamples (over scored runs).

    References
    ----------
    Paper section 3.5, Table 3 and Figure 11.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A", "A", "B"], "scored": [True, False, True],
    ...     "cost_usd": [2.0, 1.0, 5.0], "input_tokens": [10, 5, 10],
    ...     "cache_read_tokens": [80, 0, 60], "cache_write_tokens": [10, 0, 30],
    ...     "output_tokens": [3, 1, 4], "runtime_s": [3600, 60, 7200]})
    >>> t = cost_table(runs, ["A", "B"], pd.Series({"A": 0.4, "B": 0.3}), resamples=50)
    >>> t[["config", "cost_mean", "cost_total", "cache_read_share", "pareto"]]
      config  cost_mean  cost_total  cache_read_share  pareto
    0      A        2.0         3.0               0.8    True
    1      B        5.0         5.0               0.6   False
    """
    runs = runs.assign(
        prompt_tokens=runs["input_tokens"] + runs["cache_read_tokens"]
        + runs["cache_write_tokens"],
        runtime_h=runs["runtime_s"] / 3600.0,
    )
    quantities = ("prompt_tokens", "output_tokens", "runtime_h", "cost")
    rows = []
    for config in order:
        own = runs[runs["config"] == config]
        scored = own[own["scored"]]
        n = len(scored)
        values = {
            "prompt_tokens": scored["prompt_tokens"].to_numpy(dtype=float),
            "output_tokens": scored["output_tokens"].to_numpy(dtype=float),
            "runtime_h": scored["runtime_h"].to_numpy(dtype=float),
            "cost": scored["cost_usd"].to_numpy(dtype=float),
        }
        cache = scored["cache_read_tokens"].to_numpy(dtype=float)
        idx = rng_for(seed, "cost", config).integers(0, max(n, 1), size=(resamples, n))
        row: dict[str, object] = {"config": config, "n_runs": len(own), "n_scored": n}
        for name in quantities:
            v = values[name]
            with warnings.catch_warnings():  # a quantity missing from every run stays NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                row[f"{name}_mean"] = float(np.nanmean(v)) if n else np.nan
                draws = np.nanmean(v[idx], axis=1) if n else np.zeros(0)
            row[f"{name}_ci_low"], row[f"{name}_ci_high"] = percentile_interval(draws)
        prompt = values["prompt_tokens"]
        known = np.isfinite(prompt) & np.isfinite(cache)
        prompt, cache = np.where(known, prompt, 0.0), np.where(known, cache, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):  # no prompt tokens: NaN share
            row["cache_read_share"] = cache.sum() / prompt.sum() if n else np.nan
            share = cache[idx].sum(axis=1) / prompt[idx].sum(axis=1) if n else np.zeros(0)
        row["cache_read_share_ci_low"], row["cache_read_share_ci_high"] = (
            percentile_interval(np.where(np.isfinite(share), share, np.nan)))
        row["cost_total"] = own["cost_usd"].sum(min_count=1)
        row["n_cost_missing"] = int(own["cost_usd"].isna().sum())
        row["adjusted_mean"] = adjusted.get(config, np.nan)
        rows.append(row)
    table = pd.DataFrame(rows, columns=[
        "config", "n_runs", "n_scored",
        *(f"{q}_{part}" for q in quantities for part in ("mean", "ci_low", "ci_high")),
        "cache_read_share", "cache_read_share_ci_low", "cache_read_share_ci_high",
        "cost_total", "n_cost_missing", "adjusted_mean"])
    table["pareto"] = pareto_frontier(table["cost_mean"].to_numpy(),
                                      table["adjusted_mean"].to_numpy())
    first = list(COST_COLUMNS)
    return table[first + [c for c in table.columns if c not in first]]


SENSITIVITY_COLUMNS: tuple[str, ...] = (
    "config", "n_scored", "adjusted_mean", "cost_mean", "pareto", "cost_full_input_mean",
    "full_input_ratio", "pareto_full_input", "n_shared_tasks", "cost_shared_mean",
    "shared_mean", "pareto_shared", "cost_charged_mean", "charged_increase", "pareto_charged",
)
"""Columns of ``cost_sensitivity.csv``."""


def cost_sensitivity_table(
    runs: pd.DataFrame, order: list[str], adjusted: pd.Series
) -> pd.DataFrame:
    """``cost_sensitivity.csv``: the Pareto frontier under the checks of paper 3.5.

    Three variants of the cost of a scored run, each with its own frontier against the
    task-adjusted mean (against the shared-task mean for the shared tasks):

    - **full input price** (``cost_full_input_usd``): every prompt token billed at the
      input price, without the cache prices; ``full_input_ratio`` is its mean over the
      cached cost's mean;
    - **shared tasks**: costs and scores restricted to the public tasks every
      configuration scored;
    - **charged** (``cost_total / n_scored``): the cost of the excluded runs charged to
      the scored runs of the same configuration; ``charged_increase`` is the relative
      rise over ``cost_mean``.

    Parameters
    ----------
    runs
        Official runs of the public tasks.
    order
        Configurations in table order.
    adjusted
        Task-adjusted mean by configuration.

    References
    ----------
    Paper 3.5, "Cost range" ("The frontier gains only Sonnet 5.5 ... when every prompt
    token is billed at the full input price ..., which multiplies the mean cost per scored
    run by 3.2 (Fable 5.1) to 9.5 (DeepSeek), and when the means are restricted to the 27
    public tasks scored for all thirteen configurations ...; it is unchanged when the cost
    of the excluded runs is charged to the scored runs of the same configuration").

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A", "A", "B", "B"], "task_id": ["t1", "t2"] * 2,
    ...     "scored": [True, False, True, True], "score_recovered": [0.5, -1, 0.3, 0.1],
    ...     "cost_usd": [2.0, 1.0, 1.0, 1.0], "cost_full_input_usd": [10.0, 5.0, 8.0, 8.0]})
    >>> t = cost_sensitivity_table(runs, ["A", "B"], pd.Series({"A": 0.5, "B": 0.2}))
    >>> t[["config", "full_input_ratio", "cost_charged_mean", "cost_shared_mean"]].values.tolist()
    [['A', 5.0, 3.0, 2.0], ['B', 8.0, 1.0, 1.0]]
    """
    from spu.stats.runs_table import score_matrix

    matrix = score_matrix(runs, order)
    shared_tasks = matrix.dropna().index
    full = runs["cost_full_input_usd"] if "cost_full_input_usd" in runs else pd.Series(
        np.nan, index=runs.index)
    runs = runs.assign(cost_full_input_usd=full)
    rows = []
    for config in order:
        own = runs[runs["config"] == config]
        scored = own[own["scored"]]
        on_shared = scored[scored["task_id"].isin(shared_tasks)]
        with warnings.catch_warnings():  # a configuration without costs stays NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            cost_mean = float(np.nanmean(scored["cost_usd"])) if len(scored) else np.nan
            full_mean = (float(np.nanmean(scored["cost_full_input_usd"])) if len(scored)
                         else np.nan)
            shared_cost = (float(np.nanmean(on_shared["cost_usd"])) if len(on_shared)
                           else np.nan)
        total = own["cost_usd"].sum(min_count=1)
        charged = float(total) / len(scored) if len(scored) and pd.notna(total) else np.nan
        rows.append({
            "config": config, "n_scored": len(scored),
            "adjusted_mean": adjusted.get(config, np.nan), "cost_mean": cost_mean,
            "cost_full_input_mean": full_mean,
            "full_input_ratio": full_mean / cost_mean if cost_mean else np.nan,
            "n_shared_tasks": len(shared_tasks), "cost_shared_mean": shared_cost,
            "shared_mean": float(matrix.loc[shared_tasks, config].mean())
            if len(shared_tasks) else np.nan,
            "cost_charged_mean": charged,
            "charged_increase": charged / cost_mean - 1 if cost_mean else np.nan,
        })
    table = pd.DataFrame(rows, columns=[c for c in SENSITIVITY_COLUMNS if not
                                        c.startswith("pareto")])
    score = table["adjusted_mean"].to_numpy(dtype=float)
    table["pareto"] = pareto_frontier(table["cost_mean"].to_numpy(), score)
    table["pareto_full_input"] = pareto_frontier(table["cost_full_input_mean"].to_numpy(), score)
    table["pareto_shared"] = pareto_frontier(table["cost_shared_mean"].to_numpy(),
                                             table["shared_mean"].to_numpy(dtype=float))
    table["pareto_charged"] = pareto_frontier(table["cost_charged_mean"].to_numpy(), score)
    return table[list(SENSITIVITY_COLUMNS)]
