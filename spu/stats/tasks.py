"""Task statistics (paper 2.2, Figure 3) and task difficulty by discipline (3.3).

``tasks.csv`` holds one row per task of the runs table: its discipline, subfield and
visibility, its experiments and comparison groups, its chance threshold, and the mean and
standard deviation of the official scored runs on it (the task mean over the
configurations scored on it, and the spread between them, paper 3.3 and E.9). Task
packages (``--tasks``) add what only the answer key holds: groups with tied measured
values, the attainable maximum and the score of the presented order (2.5, E.4).

The Kruskal-Wallis test compares the task means of the public tasks across disciplines
(3.3: "detects no difference among the four disciplines (P=0.18)").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from spu.stats.named_tests import groups_df, named_test
from spu.stats.submissions import TaskInfo
from spu.stats.ties import exact, exact_mean

TASK_COLUMNS: tuple[str, ...] = (
    "task_id", "discipline", "n_items", "n_groups", "threshold", "task_mean", "task_sd",
)
"""The columns SPEC section 9 fixes for ``tasks.csv``, in order (more follow)."""


def _first(values: pd.Series) -> Any:
    known = values.dropna()
    return known.iloc[0] if len(known) else math.nan


def task_table(runs: pd.DataFrame, tasks: Mapping[str, TaskInfo] | None = None) -> pd.DataFrame:
    """``tasks.csv``: size, threshold and scores of every task of the runs table.

    Parameters
    ----------
    runs
        The runs table; official runs (``repeat`` 0) give the task means.
    tasks
        Task packages by id, for the groups, ties, attainable maximum and presented order.

    Returns
    -------
    pandas.DataFrame
        The columns of :data:`TASK_COLUMNS`, then ``subfield``, ``visibility``,
        ``n_configs`` (configurations with an official run), ``n_scored``, ``task_min``,
        ``task_max``, ``n_tied_groups``, ``attainable_max`` and ``presented_order_score``
        (NaN without a task package). ``n_groups`` comes from the runs table, else from
        the package; ``task_sd`` is the sample SD over the scored configurations.

    References
    ----------
    Paper section 2.2 and Figure 3 (tasks, experiments, groups), 2.5 (ties, attainable
    maximum), 3.3 ("a task's mean over the configurations scored on it averages 0.330")
    and E.9 (a task's spread).

    Examples
    --------
    >>> runs = pd.DataFrame({"task_id": ["t1", "t1", "t2"], "config": ["A", "B", "A"],
    ...     "discipline": "biology", "visibility": "public", "repeat": 0,
    ...     "scored": [True, True, False], "score_recovered": [0.2, 0.6, -1.0],
    ...     "threshold": [0.4, 0.4, 0.7], "n_items": [10, 10, 5]})
    >>> task_table(runs)[["task_id", "n_items", "task_mean", "task_sd", "n_scored"]].round(4)
      task_id  n_items  task_mean  task_sd  n_scored
    0      t1     10.0        0.4   0.2828         2
    1      t2      5.0        NaN      NaN         0
    """
    tasks = tasks or {}
    official = runs[runs["repeat"] == 0]
    rows = []
    for task_id, group in official.groupby("task_id", sort=True):
        scores = group.loc[group["scored"], "score_recovered"].to_numpy(dtype=float)
        info = tasks.get(str(task_id))
        n_groups = _first(group["n_groups"]) if "n_groups" in group.columns else math.nan
        n_items = _first(group["n_items"]) if "n_items" in group.columns else math.nan
        row = {
            "task_id": task_id,
            "discipline": group["discipline"].iloc[0],
            "n_items": float(n_items) if pd.notna(n_items) else math.nan,
            "n_groups": float(n_groups) if pd.notna(n_groups) else math.nan,
            "threshold": _first(group["threshold"]),
            "task_mean": exact_mean(scores),
            "task_sd": float(scores.std(ddof=1)) if scores.size >= 2 else math.nan,
            "subfield": group["subfield"].iloc[0] if "subfield" in group.columns else "",
            "visibility": group["visibility"].iloc[0],
            "n_configs": int(group["config"].nunique()),
            "n_scored": int(scores.size),
            "task_min": float(scores.min()) if scores.size else math.nan,
            "task_max": float(scores.max()) if scores.size else math.nan,
            "n_tied_groups": math.nan,
            "attainable_max": math.nan,
            "presented_order_score": math.nan,
        }
        if info is not None:
            row.update(_package_columns(info, row))
        rows.append(row)
    return pd.DataFrame(rows, columns=[
        *TASK_COLUMNS, "subfield", "visibility", "n_configs", "n_scored", "task_min",
        "task_max", "n_tied_groups", "attainable_max", "presented_order_score"])


def _package_columns(info: TaskInfo, row: dict[str, Any]) -> dict[str, Any]:
    from spu.tasks.threshold import attainable_max, presented_order_score

    contract = info.package.contract
    out: dict[str, Any] = {}
    if not np.isfinite(row["n_items"]):
        out["n_items"] = float(info.package.n_items)
    if not np.isfinite(row["n_groups"]):
        out["n_groups"] = float(len(contract.groups))
    if info.answers is not None:
        values = info.answers.groups
        out["n_tied_groups"] = float(sum(
            len(set(values[g.group_id][i] for i in g.items)) < len(g.items)
            for g in contract.groups))
        out["attainable_max"] = attainable_max(contract, info.answers)
        presented = [r["experiment_id"] for r in info.package.targets_rows()]
        out["presented_order_score"] = presented_order_score(contract, info.answers, presented)
    return out


def kruskal_wallis_disciplines(tasks: pd.DataFrame) -> dict[str, Any]:
    """Kruskal-Wallis test of the task means of the public tasks across disciplines.

    Parameters
    ----------
    tasks
        ``tasks.csv`` (:func:`task_table`); tasks without a mean are left out.

    Returns
    -------
    dict
        A ``tests.csv`` row: H (tie-corrected), ``k - 1`` degrees of freedom, the
        asymptotic chi-squared p.

    References
    ----------
    Kruskal and Wallis (1952), JASA 47, 583-621; ``scipy.stats.kruskal``; paper 3.3
    ("a Kruskal-Wallis test over these task means detects no difference among the four
    disciplines (P=0.18)").

    Examples
    --------
    Hand-worked: means (1, 2) and (3, 4, 5) have ranks summing to 3 and 12, so
    H = 12 / (5 * 6) * (3^2 / 2 + 12^2 / 3) - 3 * 6 = 3.0 on 1 df, P = 0.0833:

    >>> t = pd.DataFrame({"visibility": "public", "discipline": list("aabbb"),
    ...                   "task_mean": [1.0, 2.0, 3.0, 4.0, 5.0]})
    >>> r = kruskal_wallis_disciplines(t)
    >>> round(r["statistic"], 6), r["df"], round(r["p_value"], 4)
    (3.0, 1, 0.0833)
    """
    public = tasks[(tasks["visibility"] == "public") & tasks["task_mean"].notna()]
    # Task means enter at the tie precision, so equal means take the same rank.
    samples = [exact(g["task_mean"].to_numpy(dtype=float))
               for _, g in sorted(public.groupby("discipline"), key=lambda kv: str(kv[0]))]
    samples = [s for s in samples if s.size]
    if len(samples) < 2 or sum(s.size for s in samples) <= len(samples):
        return named_test("kruskal_wallis_task_means", math.nan, math.nan, "3.3",
                        df=groups_df(len(samples)), n=len(public))
    result = sps.kruskal(*samples)
    return named_test("kruskal_wallis_task_means", float(result.statistic),
                    float(result.pvalue), "3.3", df=groups_df(len(samples)), n=len(public),
                    method="asymptotic")


def task_summary(tasks: pd.DataFrame) -> list[dict[str, Any]]:
    """Scalar task statistics of paper 2.2 and 3.3 as ``summary.csv`` rows.

    Counts by visibility, experiments and groups in all, the range and median of task
    sizes, tasks with tied measured values, the median chance threshold of the public
    tasks, and the average and range of the public task means.

    Examples
    --------
    >>> t = pd.DataFrame({"task_id": ["a", "b"], "visibility": "public",
    ...     "discipline": "chemistry", "n_items": [4.0, 10.0], "n_groups": [1.0, 2.0],
    ...     "threshold": [0.8, 0.5], "task_mean": [0.1, 0.3], "n_tied_groups": [0.0, 1.0]})
    >>> {r["statistic"]: r["value"] for r in task_summary(t)}["experiments"]
    14
    """
    out: list[dict[str, Any]] = []

    def add(statistic: str, value: Any, n: Any = None) -> None:
        out.append({"analysis": "tasks", "statistic": statistic, "value": value, "n": n})

    public = tasks[tasks["visibility"] == "public"]
    add("tasks", len(tasks))
    add("public_tasks", len(public))
    add("private_tasks", int((tasks["visibility"] == "private").sum()))
    items = tasks["n_items"].dropna()
    if len(items):
        add("experiments", int(items.sum()), len(items))
        add("median_experiments", float(items.median()), len(items))
        add("min_experiments", int(items.min()), len(items))
        add("max_experiments", int(items.max()), len(items))
    groups = tasks["n_groups"].dropna()
    if len(groups):
        add("groups", int(groups.sum()), len(groups))
    tied = tasks["n_tied_groups"].dropna() if "n_tied_groups" in tasks else pd.Series([])
    if len(tied):
        add("public_tasks_with_ties",
            int((public["n_tied_groups"].dropna() > 0).sum()), int(public["n_tied_groups"]
                                                                   .notna().sum()))
    add("median_threshold_public", float(public["threshold"].median()), len(public))
    means = public["task_mean"].dropna()
    if len(means):
        add("task_mean_average", float(means.mean()), len(means))
        add("task_mean_min", float(means.min()), len(means))
        add("task_mean_max", float(means.max()), len(means))
    return out
