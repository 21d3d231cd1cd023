"""Detectable differences and study design (paper E.2, Figure 26d-e).

Two configurations compared on ``n`` shared tasks differ detectably, with power ``1 -
beta`` at the two-sided level ``alpha``, by ``z * s_d / sqrt(n)``, where ``s_d`` is the
SD of the paired differences and ``z = Phi^-1(1 - alpha / 2) + Phi^-1(1 - beta)``
(:func:`spu.stats.paired.detectable_difference_z`).

A single-run paired difference on a task mixes two parts: the configuration-by-task
interaction, which a rerun repeats, and run-to-run noise, which it does not. With
``sigma_e`` the run-to-run SD (pooled within-task SD of repeated runs) and
``sigma_g^2`` the interaction variance of one configuration,
``s_d^2 = 2 sigma_g^2 + 2 sigma_e^2``, so ``sigma_g^2 = s_d^2 / 2 - sigma_e^2``. Averaging
``k`` runs per task shrinks only the noise part:

    s_d(k)^2 = 2 sigma_g^2 + 2 sigma_e^2 / k,   MDE = z * s_d(k) / sqrt(n),

and the number of tasks needed for a difference ``delta`` is
``ceil((z * s_d(k) / delta)^2)``. Spending a budget on new tasks therefore buys more
than spending it on repeats of the same tasks (Figure 26e).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from spu.stats.paired import ALPHA, POWER, detectable_difference_z

DIFFERENCES: tuple[float, ...] = (0.05, 0.1, 0.15, 0.2)
"""Differences of the default study-design table."""

MAX_RUNS_PER_TASK = 5
"""Largest number of runs per task in the study-design table."""

TASK_GRID: tuple[int, ...] = (5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 80, 90, 100, 120, 150,
                              200, 300, 500)
"""Numbers of shared tasks of the detectable-difference curve (Figure 26d)."""

BUDGETS: tuple[int, ...] = (100, 200, 300, 400, 500, 600, 800, 1000)
"""Runs per configuration of the budget curves (Figure 26e)."""

BASE_TASKS = 100
"""Tasks repeated in the repeated-runs budget curve (the paper's 100 public tasks)."""


@dataclass(frozen=True)
class PilotVariances:
    """The variances a study design needs, estimated from pilot runs."""

    paired_sd: float
    """SD of single-run paired differences between two configurations (median over pairs)."""
    paired_sd_low: float
    """Smallest SD of paired differences over the pairs."""
    paired_sd_high: float
    """Largest SD of paired differences over the pairs."""
    run_sd: float
    """Run-to-run SD (pooled within-task SD of repeated runs); NaN without repeats."""

    @property
    def interaction_var(self) -> float:
        """Interaction variance of one configuration, ``s_d^2 / 2 - sigma_e^2`` (at least 0).

        Without a run-to-run SD the whole paired variance is taken as interaction (repeats
        then buy nothing, the cautious assumption).
        """
        if not math.isfinite(self.run_sd):
            return self.paired_sd ** 2 / 2
        return max(self.paired_sd ** 2 / 2 - self.run_sd ** 2, 0.0)

    def paired_sd_with_runs(self, runs_per_task: float) -> float:
        """SD of the paired difference of ``k``-run task means.

        Examples
        --------
        >>> v = PilotVariances(0.3, 0.2, 0.4, 0.15)
        >>> round(v.paired_sd_with_runs(1), 6), round(v.paired_sd_with_runs(2), 6)
        (0.3, 0.259808)
        """
        noise = 0.0 if not math.isfinite(self.run_sd) else self.run_sd ** 2
        return math.sqrt(2 * self.interaction_var + 2 * noise / runs_per_task)


def pilot_variances(pairs: pd.DataFrame, run_sd: float) -> PilotVariances:
    """The variances of a design from ``pairs.csv`` (``sd_diff``) and the run-to-run SD.

    Examples
    --------
    >>> pilot_variances(pd.DataFrame({"sd_diff": [0.2, 0.3, 0.5]}), 0.15)
    PilotVariances(paired_sd=0.3, paired_sd_low=0.2, paired_sd_high=0.5, run_sd=0.15)
    """
    sd = pairs["sd_diff"].dropna().to_numpy(dtype=float) if "sd_diff" in pairs else np.zeros(0)
    if sd.size == 0:
        return PilotVariances(math.nan, math.nan, math.nan, float(run_sd))
    return PilotVariances(float(np.median(sd)), float(sd.min()), float(sd.max()), float(run_sd))


def detectable_curves(
    pilot: PilotVariances, alpha: float = ALPHA, power: float = POWER,
    tasks: Sequence[int] = TASK_GRID, budgets: Sequence[int] = BUDGETS,
    base_tasks: int = BASE_TASKS,
) -> pd.DataFrame:
    """``detectable.csv``: the detectable difference against tasks and against a budget.

    Parameters
    ----------
    pilot
        Variances from pilot runs (:func:`pilot_variances`).
    alpha, power
        Two-sided level (the paper's curves: an uncorrected 0.05) and power.
    tasks
        Numbers of shared tasks (curve ``shared_tasks``, one run per task: Figure 26d,
        with ``mde_low``/``mde_high`` from the smallest and largest paired SD).
    budgets
        Runs per configuration, spent on as many new tasks (curve ``new_tasks``) or on
        repeats of ``base_tasks`` tasks (curve ``repeats``, ``budget / base_tasks`` runs
        each, budgets of at least ``base_tasks``): Figure 26e.
    base_tasks
        Tasks of the repeated-runs curve.

    Returns
    -------
    pandas.DataFrame
        ``curve, n_tasks, runs_per_task, total_runs, mde, mde_low, mde_high``.

    References
    ----------
    Paper appendix E.2 and Figure 26d-e; Cohen (1988), *Statistical Power Analysis*, ch. 2.

    Examples
    --------
    With s_d = 0.3 and sigma_e = 0.15, 100 tasks detect 2.8016 * 0.3 / 10 = 0.0840, and
    200 runs as two runs on 100 tasks detect 2.8016 * 0.2598 / 10 = 0.0728:

    >>> c = detectable_curves(PilotVariances(0.3, 0.2, 0.4, 0.15), tasks=[100],
    ...                       budgets=[200])
    >>> c[["curve", "n_tasks", "runs_per_task", "mde"]].round(4).values.tolist()
    ... # doctest: +NORMALIZE_WHITESPACE
    [['shared_tasks', 100, 1.0, 0.084], ['new_tasks', 200, 1.0, 0.0594],
     ['repeats', 100, 2.0, 0.0728]]
    """
    z = detectable_difference_z(alpha, power)
    rows = []
    for n in tasks:
        rows.append({"curve": "shared_tasks", "n_tasks": int(n), "runs_per_task": 1.0,
                     "total_runs": int(n), "mde": z * pilot.paired_sd / math.sqrt(n),
                     "mde_low": z * pilot.paired_sd_low / math.sqrt(n),
                     "mde_high": z * pilot.paired_sd_high / math.sqrt(n)})
    for budget in budgets:
        rows.append({"curve": "new_tasks", "n_tasks": int(budget), "runs_per_task": 1.0,
                     "total_runs": int(budget), "mde": z * pilot.paired_sd / math.sqrt(budget),
                     "mde_low": math.nan, "mde_high": math.nan})
    for budget in budgets:
        if budget < base_tasks:
            continue
        k = budget / base_tasks
        rows.append({"curve": "repeats", "n_tasks": int(base_tasks), "runs_per_task": k,
                     "total_runs": int(budget),
                     "mde": z * pilot.paired_sd_with_runs(k) / math.sqrt(base_tasks),
                     "mde_low": math.nan, "mde_high": math.nan})
    return pd.DataFrame(rows, columns=["curve", "n_tasks", "runs_per_task", "total_runs", "mde",
                                       "mde_low", "mde_high"])


def study_design(
    pilot: PilotVariances, differences: Sequence[float] = DIFFERENCES, alpha: float = ALPHA,
    power: float = POWER, max_runs_per_task: int = MAX_RUNS_PER_TASK, comparisons: int = 1,
) -> pd.DataFrame:
    """``design.csv``: tasks (and runs) needed to detect a difference, from pilot runs.

    For each difference ``delta`` and ``k = 1 .. max_runs_per_task`` runs per task, the
    tasks needed for power ``power`` at the level ``alpha / comparisons`` (the strictest
    level Holm applies to ``comparisons`` pairs): ``ceil((z * s_d(k) / delta)^2)``.

    Parameters
    ----------
    pilot
        Variances from pilot runs (:func:`pilot_variances`).
    differences
        Differences in mean score to detect.
    alpha, power
        Family-wise two-sided level and power.
    max_runs_per_task
        Largest number of runs per task considered.
    comparisons
        Pairs of configurations tested together.

    Returns
    -------
    pandas.DataFrame
        ``difference, runs_per_task, tasks_needed, total_runs, level, z`` (``total_runs``
        per configuration).

    References
    ----------
    Paper appendix E.2 ("the minimum detectable effect of a single-run design") and
    Figure 26e; Cohen (1988), ch. 2.

    Examples
    --------
    Hand-worked with s_d = 0.3 and sigma_e = 0.15 (so sigma_g^2 = 0.0225): for 0.1 at
    0.05 and 80% power, one run needs (2.8016 * 0.3 / 0.1)^2 = 70.6, so 71 tasks; two
    runs (2.8016 * 0.2598 / 0.1)^2 = 53.0, so 53 tasks (106 runs):

    >>> d = study_design(PilotVariances(0.3, 0.2, 0.4, 0.15), [0.1], max_runs_per_task=2)
    >>> d[["runs_per_task", "tasks_needed", "total_runs"]].values.tolist()
    [[1, 71, 71], [2, 53, 106]]
    """
    level = alpha / max(comparisons, 1)
    z = detectable_difference_z(level, power)
    rows = []
    for delta in differences:
        for k in range(1, max_runs_per_task + 1):
            sd = pilot.paired_sd_with_runs(k)
            needed = math.ceil((z * sd / delta) ** 2 - 1e-9) if math.isfinite(sd) else None
            rows.append({"difference": float(delta), "runs_per_task": k,
                         "tasks_needed": needed,
                         "total_runs": None if needed is None else needed * k,
                         "level": level, "z": z})
    return pd.DataFrame(rows, columns=["difference", "runs_per_task", "tasks_needed",
                                       "total_runs", "level", "z"])
