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
    cost = np.asarray(cost, dtype=float)
    score = np.asarray(score, dtype=float)
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
