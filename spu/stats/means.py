"""Coverage and means of the public tasks (paper 3.1, 3.3, Table 1) and by discipline (Table 5).

Per configuration: scored tasks, the raw mean with a percentile bootstrap interval over
its scored tasks, the task-adjusted mean with a bootstrap interval over all tasks (the
additive model refitted for each resample), the runs above the task's chance threshold
with a Wilson interval, and the mean on the tasks every configuration has scored
(Figure 1, hatched bars; the same resampled tasks for every configuration).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spu.stats.additive import bootstrap_adjusted, fit_additive
from spu.stats.resampling import (
    DEFAULT_RESAMPLES,
    bootstrap_mean,
    percentile_interval,
    resample_counts,
    rng_for,
    wilson_interval,
)
from spu.stats.runs_table import score_matrix
from spu.stats.ties import exact

CONFIG_COLUMNS: tuple[str, ...] = (
    "config", "n_runs", "n_scored", "raw_mean", "raw_ci_low", "raw_ci_high",
    "adjusted_mean", "adjusted_ci_low", "adjusted_ci_high", "above_chance",
    "above_chance_share", "above_chance_ci_low", "above_chance_ci_high",
)
"""The columns SPEC section 6 fixes for ``configs.csv``, in order (more follow)."""


def above_chance(scores: np.ndarray, thresholds: np.ndarray) -> tuple[int, int]:
    """Runs whose score exceeds the task's chance threshold, and runs with a threshold.

    Examples
    --------
    >>> above_chance(np.array([0.5, 0.44, 0.9]), np.array([0.44, 0.44, np.nan]))
    (1, 2)
    """
    thresholds = np.asarray(thresholds, dtype=float)
    known = np.isfinite(thresholds)
    above = exact(np.asarray(scores, dtype=float)[known]) > exact(thresholds[known])
    return int(above.sum()), int(known.sum())


MIN_TASKS = 5
"""Scored tasks below which a configuration's mean is flagged in its own row."""


def few_tasks_warning(n_tasks: int) -> str:
    """The ``warning`` of a configuration scored on fewer than :data:`MIN_TASKS` tasks, else "".

    Examples
    --------
    >>> few_tasks_warning(2)
    'scored on 2 tasks (fewer than 5): its mean and interval rest on too few tasks'
    >>> few_tasks_warning(5)
    ''
    """
    if n_tasks >= MIN_TASKS:
        return ""
    tasks = "task" if n_tasks == 1 else "tasks"
    return (f"scored on {n_tasks} {tasks} (fewer than {MIN_TASKS}): its mean and interval "
            f"rest on too few tasks")


def config_order(runs: pd.DataFrame, adjusted: pd.Series | None = None) -> list[str]:
    """Configurations by decreasing task-adjusted mean (Table 1), then by name."""
    names = sorted(runs["config"].unique())
    if adjusted is None:
        return names
    key = {c: (-adjusted.get(c, np.nan) if np.isfinite(adjusted.get(c, np.nan)) else np.inf)
           for c in names}
    return sorted(names, key=lambda c: (key[c], c))


def config_table(
    runs: pd.DataFrame, seed: int = 0, resamples: int = DEFAULT_RESAMPLES
) -> pd.DataFrame:
    """``configs.csv``: coverage, raw and task-adjusted means, above chance (SPEC section 6).

    Parameters
    ----------
    runs
        Official runs of the public tasks (any outcome).
    seed, resamples
        Bootstrap seed and number of resamples.

    Returns
    -------
    pandas.DataFrame
        One row per configuration, ordered by task-adjusted mean, with the columns of
        :data:`CONFIG_COLUMNS` and ``adjusted_rank``, ``n_shared_tasks``, ``shared_mean``,
        ``shared_ci_low``, ``shared_ci_high``, ``n_chance_known``, ``n_scored_tasks`` and
        ``warning`` (:func:`few_tasks_warning`: set on fewer than :data:`MIN_TASKS`).

    References
    ----------
    Paper sections 3.1 ("Statistics"), 3.3 (Table 1, Figure 9) and Figure 1.

    Examples
    --------
    >>> runs = pd.DataFrame({
    ...     "config": ["A", "A", "B", "B"], "task_id": ["t1", "t2", "t1", "t2"],
    ...     "scored": [True, True, True, False], "score_recovered": [0.5, 0.3, 0.3, -1.0],
    ...     "threshold": [0.4, 0.4, 0.4, 0.4]})
    >>> t = config_table(runs, resamples=200)
    >>> t[["config", "n_scored", "raw_mean", "adjusted_mean", "above_chance"]].round(3)
      config  n_scored  raw_mean  adjusted_mean  above_chance
    0      A         2       0.4            0.4             1
    1      B         1       0.3            0.2             0
    """
    configs = sorted(runs["config"].unique())
    matrix = score_matrix(runs, configs)
    fit = fit_additive(matrix)
    draws = bootstrap_adjusted(fit.design, fit.y, rng_for(seed, "adjusted"), resamples)
    adjusted_ci = percentile_interval(draws)

    # Tasks every configuration with a scored run has scored (Figure 1, hatched bars).
    shared = matrix.dropna(axis=1, how="all").dropna().reindex(columns=matrix.columns)
    shared_counts = resample_counts(len(shared), resamples, rng_for(seed, "shared"))
    shared_draws = (shared_counts @ shared.to_numpy()) / max(len(shared), 1)
    shared_ci = percentile_interval(shared_draws)

    rows = []
    for j, config in enumerate(configs):
        own = runs[runs["config"] == config]
        scored = own[own["scored"]]
        raw = bootstrap_mean(scored["score_recovered"].to_numpy(), rng_for(seed, "raw", config),
                             resamples)
        above, known = above_chance(scored["score_recovered"].to_numpy(),
                                    scored["threshold"].to_numpy())
        low, high = wilson_interval(above, known)
        rows.append({
            "config": config,
            "n_runs": len(own),
            "n_scored": len(scored),
            "raw_mean": raw.estimate,
            "raw_ci_low": raw.low,
            "raw_ci_high": raw.high,
            "adjusted_mean": fit.adjusted[j],
            "adjusted_ci_low": adjusted_ci[0, j],
            "adjusted_ci_high": adjusted_ci[1, j],
            "above_chance": above,
            "above_chance_share": above / known if known else np.nan,
            "above_chance_ci_low": low,
            "above_chance_ci_high": high,
            "n_chance_known": known,
            "n_shared_tasks": len(shared),
            "shared_mean": shared[config].mean() if len(shared) else np.nan,
            "shared_ci_low": shared_ci[0, j],
            "shared_ci_high": shared_ci[1, j],
            "n_scored_tasks": scored["task_id"].nunique(),
            "warning": few_tasks_warning(scored["task_id"].nunique()),
        })
    table = pd.DataFrame(rows, columns=[*CONFIG_COLUMNS, "n_chance_known", "n_shared_tasks",
                                        "shared_mean", "shared_ci_low", "shared_ci_high",
                                        "n_scored_tasks", "warning"])
    order = config_order(runs, table.set_index("config")["adjusted_mean"])
    table = table.set_index("config").loc[order].reset_index()
    ranks = [i + 1 if np.isfinite(m) else None for i, m in enumerate(table["adjusted_mean"])]
    table.insert(1, "adjusted_rank", pd.array(ranks, dtype="Int64"))
    return table


def discipline_table(
    runs: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = DEFAULT_RESAMPLES
) -> pd.DataFrame:
    """``disciplines.csv``: raw mean of each configuration in each discipline (Table 5).

    ``n_tasks`` counts scored runs; the interval resamples the configuration's scored
    tasks of the discipline (paper E.10), and ``above_chance_share`` counts runs.

    References
    ----------
    Paper section 4.6, appendices C (Table 5) and E.10.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A"] * 3, "discipline": ["biology", "biology", "medicine"],
    ...     "task_id": ["t1", "t2", "t3"], "scored": [True, True, False],
    ...     "score_recovered": [0.2, 0.4, -1.0], "threshold": [0.5, 0.3, 0.5]})
    >>> discipline_table(runs, ["A"], resamples=100)[["discipline", "n_tasks", "raw_mean"]]
      discipline  n_tasks  raw_mean
    0    biology        2       0.3
    """
    rows = []
    scored = runs[runs["scored"]]
    for config in order:
        own = scored[scored["config"] == config]
        for discipline, group in sorted(own.groupby("discipline"), key=lambda kv: str(kv[0])):
            values = group["score_recovered"].to_numpy()
            raw = bootstrap_mean(values, rng_for(seed, "discipline", config, str(discipline)),
                                 resamples)
            above, known = above_chance(values, group["threshold"].to_numpy())
            rows.append({
                "config": config,
                "discipline": discipline,
                "n_tasks": len(group),
                "raw_mean": raw.estimate,
                "raw_ci_low": raw.low,
                "raw_ci_high": raw.high,
                "above_chance_share": above / known if known else np.nan,
            })
    columns = ["config", "discipline", "n_tasks", "raw_mean", "raw_ci_low", "raw_ci_high",
               "above_chance_share"]
    return pd.DataFrame(rows, columns=columns)
