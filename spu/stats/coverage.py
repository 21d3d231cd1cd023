"""Coverage (paper 3.3, Figure 1, Figure 9d): which tasks each configuration completed.

- **Missing runs and task difficulty** (:func:`coverage_table`): for a configuration that
  left tasks unscored, the other configurations' mean score on those tasks minus their
  mean on the configuration's scored tasks. A difference near zero says the missing runs
  are unrelated to task difficulty; the interval resamples the two sets of tasks
  separately and the p permutes which tasks are missing (Holm over the configurations).
  "The other configurations" leave out those scored on fewer than
  :data:`LOW_COVERAGE` of the tasks (paper: "the other eleven configurations", without
  Opus 5.5 and Fable 5.1).
- **Shared tasks over public and private tasks** (:func:`all_tasks_table`, Figure 1):
  each configuration's mean over every task it completed, public or private, and the
  mean over the tasks all configurations completed, with the same resampled tasks for
  every configuration.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from spu.stats.paired import holm
from spu.stats.permutation import DRAWS, mean_difference_test
from spu.stats.resampling import (
    DEFAULT_RESAMPLES,
    bootstrap_mean,
    percentile_interval,
    resample_counts,
    rng_for,
)
from spu.stats.runs_table import score_matrix
from spu.stats.ties import exact

LOW_COVERAGE = 0.5
"""Configurations scored on fewer than this share of the tasks are not among the others."""

COVERAGE_COLUMNS = ("config", "n_tasks", "n_scored", "n_excluded", "n_other_configs",
                    "others_mean_excluded", "others_mean_scored", "diff", "ci_low", "ci_high",
                    "p_perm", "p_holm")


def coverage_table(
    runs: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
    draws: int = DRAWS, low_coverage: float = LOW_COVERAGE,
) -> pd.DataFrame:
    """``coverage.csv``: are the tasks a configuration left unscored harder or easier?

    Parameters
    ----------
    runs
        Official runs of the public tasks.
    order
        Configurations in table order.
    seed, resamples, draws
        Seed, bootstrap resamples and permutation draws.
    low_coverage
        Share of tasks below which a configuration is not among "the others".

    Returns
    -------
    pandas.DataFrame
        One row per configuration with both scored and unscored official runs, columns
        :data:`COVERAGE_COLUMNS`: ``diff`` is the others' mean on the excluded tasks minus
        their mean on the scored tasks (task means over the other configurations scored
        on each task).

    References
    ----------
    Paper 3.3, "Coverage" ("the other eleven configurations score 0.023 lower on the
    tasks excluded for Opus 5.5 than on its scored tasks (95% CI -0.100 to 0.055;
    Holm-corrected P=0.30)").

    Examples
    --------
    A left out t3, where the others average 0.8, against 0.2 on its scored tasks:

    >>> runs = pd.DataFrame({"config": ["A"] * 3 + ["B"] * 3,
    ...     "task_id": ["t1", "t2", "t3"] * 2, "scored": [True, True, False] + [True] * 3,
    ...     "score_recovered": [0.5, 0.5, -1.0, 0.1, 0.3, 0.8]})
    >>> t = coverage_table(runs, ["A", "B"], resamples=100, draws=100)
    >>> t[["config", "n_excluded", "diff", "p_perm"]].round(3).values.tolist()
    [['A', 1, 0.6, 0.333]]
    """
    matrix = score_matrix(runs, order)
    tasks = sorted(runs["task_id"].unique())
    matrix = matrix.reindex(tasks)
    coverage = matrix.notna().sum(axis=0) / max(len(tasks), 1)
    official = runs.pivot_table(index="task_id", columns="config", values="scored",
                                aggfunc="size").reindex(index=tasks, columns=order)
    rows = []
    for config in order:
        ran = official[config].notna().to_numpy()
        scored = matrix[config].notna().to_numpy()
        excluded = ran & ~scored
        if not excluded.any() or not scored.any():
            continue
        others = [c for c in order if c != config and coverage[c] >= low_coverage]
        task_mean = matrix[others].mean(axis=1).to_numpy() if others else np.full(len(tasks),
                                                                                  np.nan)
        known = np.isfinite(task_mean) & ran
        ex, sc = task_mean[known & excluded], task_mean[known & scored]
        row: dict[str, Any] = {"config": config, "n_tasks": int(ran.sum()),
                               "n_scored": int(scored.sum()), "n_excluded": int(excluded.sum()),
                               "n_other_configs": len(others)}
        if ex.size and sc.size:
            rng = rng_for(seed, "coverage", config)
            boot = (resample_counts(ex.size, resamples, rng) @ ex / ex.size
                    - resample_counts(sc.size, resamples, rng) @ sc / sc.size)
            test = mean_difference_test(np.r_[ex, sc], np.r_[np.ones(ex.size), np.zeros(sc.size)]
                                        .astype(bool), rng, draws)
            low, high = percentile_interval(boot)
            row.update({"others_mean_excluded": float(ex.mean()),
                        "others_mean_scored": float(sc.mean()), "diff": test.statistic,
                        "ci_low": low, "ci_high": high, "p_perm": test.p_value})
        rows.append(row)
    table = pd.DataFrame(rows, columns=[c for c in COVERAGE_COLUMNS if c != "p_holm"])
    table["p_holm"] = holm(table["p_perm"].to_numpy(dtype=float))
    return table


def shared_task_counts(runs: pd.DataFrame, low_coverage: float = LOW_COVERAGE
                       ) -> list[dict[str, Any]]:
    """Tasks every configuration completed, over public and private tasks (Figure 1).

    Returns ``summary.csv`` rows: shared tasks over all tasks, public and private, and
    over the configurations scored on at least ``low_coverage`` of the tasks.

    References
    ----------
    Paper Figure 1 ("the 28 shared tasks, the 27 public tasks and one private task ...
    against 94 shared by the other eleven") and 3.3.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A", "A", "B", "B"], "task_id": ["p", "q"] * 2,
    ...     "visibility": ["public", "private"] * 2, "repeat": 0,
    ...     "scored": [True, True, True, False], "score_recovered": [0.1, 0.2, 0.3, -1.0]})
    >>> {r["statistic"]: r["value"] for r in shared_task_counts(runs)}["shared_tasks_all"]
    1
    """
    official = runs[runs["repeat"] == 0]
    configs = sorted(official["config"].unique())
    matrix = score_matrix(official, configs)
    all_tasks = sorted(official["task_id"].unique())
    matrix = matrix.reindex(all_tasks)
    visibility = official.groupby("task_id")["visibility"].first().reindex(all_tasks)
    complete = matrix.notna().all(axis=1)
    coverage = matrix.notna().mean(axis=0)
    wide = [c for c in configs if coverage[c] >= low_coverage]
    complete_wide = matrix[wide].notna().all(axis=1) if wide else complete & False
    n = len(all_tasks)

    def row(statistic: str, value: Any, count: Any = None) -> dict[str, Any]:
        return {"analysis": "coverage", "statistic": statistic, "value": value, "n": count}

    return [
        row("shared_tasks_all", int(complete.sum()), n),
        row("shared_tasks_public", int((complete & (visibility == "public")).sum()),
            int((visibility == "public").sum())),
        row("shared_tasks_private", int((complete & (visibility == "private")).sum()),
            int((visibility == "private").sum())),
        row("wide_coverage_configs", len(wide), len(configs)),
        row("shared_tasks_public_wide_coverage",
            int((complete_wide & (visibility == "public")).sum()),
            int((visibility == "public").sum())),
    ]


def all_tasks_table(
    runs: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = DEFAULT_RESAMPLES
) -> pd.DataFrame:
    """``all_tasks.csv``: Figure 1, means over every scored task, public and private.

    Parameters
    ----------
    runs
        Official runs of the public and the private tasks.
    order
        Configurations in table order.
    seed, resamples
        Bootstrap seed and resamples (over tasks).

    Returns
    -------
    pandas.DataFrame
        ``config, n_scored, raw_mean, raw_ci_low, raw_ci_high, n_shared_tasks,
        shared_mean, shared_ci_low, shared_ci_high, shared_rank``; the shared tasks are
        resampled once for all configurations.

    References
    ----------
    Paper Figure 1 (solid bars: scored tasks among the 100 public and 16 private tasks;
    hatched bars: the 28 shared tasks, with the far-right column ranking on them).

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A", "A", "B", "B"], "task_id": ["p", "q"] * 2,
    ...     "scored": [True, True, True, False], "score_recovered": [0.1, 0.5, 0.3, -1.0]})
    >>> all_tasks_table(runs, ["A", "B"], resamples=50)[["config", "raw_mean",
    ...     "shared_mean", "shared_rank"]].values.tolist()
    [['A', 0.3, 0.1, 2], ['B', 0.3, 0.3, 1]]
    """
    matrix = score_matrix(runs, order)
    shared = matrix.dropna()
    counts = resample_counts(len(shared), resamples, rng_for(seed, "all-tasks-shared"))
    draws = counts @ shared.to_numpy() / max(len(shared), 1)
    low, high = percentile_interval(draws)
    shared_mean = shared.mean(axis=0) if len(shared) else pd.Series(np.nan, index=order)
    ranks = pd.Series(exact(shared_mean), index=shared_mean.index).rank(ascending=False,
                                                                       method="min")
    rows = []
    for j, config in enumerate(order):
        values = matrix[config].dropna().to_numpy()
        raw = bootstrap_mean(values, rng_for(seed, "all-tasks", config), resamples)
        rows.append({"config": config, "n_scored": int(values.size), "raw_mean": raw.estimate,
                     "raw_ci_low": raw.low, "raw_ci_high": raw.high,
                     "n_shared_tasks": len(shared),
                     "shared_mean": float(shared_mean[config]) if len(shared) else np.nan,
                     "shared_ci_low": low[j] if len(shared) else np.nan,
                     "shared_ci_high": high[j] if len(shared) else np.nan,
                     "shared_rank": int(ranks[config]) if len(shared) else None})
    return pd.DataFrame(rows)
