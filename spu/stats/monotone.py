"""The monotone prior (paper 4.2, Figure 16c-d, appendix E.7).

For each comparison group of at least four experiments, every numeric setting of
``targets.csv`` that takes at least three values within the group is compared with the
submitted order and with the measured values; the largest absolute Spearman correlation
over those settings is kept. A group is monotone when it reaches 0.95. Submitted orders
come from the official scored runs of the public tasks.

Where the measured order is nearly unrelated to the settings (its largest absolute
correlation at most :data:`UNRELATED`), :func:`follow_where_unrelated` gives the share of
the submitted groups that still follow a setting with an absolute correlation of at least
:data:`FOLLOWS` (``monotone_unrelated.csv``; paper 4.2: "30% of the submitted groups").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from spu.stats.paired import wilcoxon_p
from spu.stats.submissions import Orders, TaskInfo, is_complete

MIN_ITEMS = 4
"""Smallest group examined."""

MIN_SETTING_VALUES = 3
"""Fewest distinct values a setting must take within the group."""

MONOTONE = 0.95
"""Absolute correlation from which a group counts as monotone in a setting."""

FOLLOWS = 0.9
"""Absolute correlation from which a submitted group still follows a setting (4.2:
"still follow it with a correlation of at least 0.9")."""

UNRELATED = 0.2
"""Largest absolute correlation of the measured order with the settings at which it is
"nearly unrelated" to them (4.2). The paper gives no number (its examples: 0.03); this
reading is ours, ``--unrelated-below`` sets another."""

UNRELATED_COLUMNS = ("config", "n_tasks", "n_groups", "n_submitted", "n_follow", "share")
"""Columns of ``monotone_unrelated.csv``."""


def unrelated_rule(unrelated: float = UNRELATED, follows: float = FOLLOWS) -> str:
    """The rule behind ``monotone_unrelated.csv``, as the manifest names it.

    Examples
    --------
    >>> unrelated_rule().split(";")[0]
    '4.2, E.7: groups of at least 4 items with a numeric setting of at least 3 values'
    """
    return (f"4.2, E.7: groups of at least {MIN_ITEMS} items with a numeric setting of at "
            f"least {MIN_SETTING_VALUES} values; the measured order nearly unrelated to the "
            f"settings (its largest absolute Spearman over them at most {unrelated:g}, our "
            f"reading: the paper gives no number); the share of the official scored "
            f"submissions of those groups whose largest absolute Spearman with a setting is "
            f"at least {follows:g}, over all configurations (config 'all') and by "
            f"configuration")


def abs_spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Absolute Spearman correlation, ties at average ranks; NaN when one side is constant.

    Examples
    --------
    >>> abs_spearman(np.array([1.0, 2.0, 3.0, 4.0]), np.array([40.0, 30.0, 20.0, 10.0]))
    1.0
    """
    rx, ry = sps.rankdata(x), sps.rankdata(y)
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return np.nan
    return float(abs(np.corrcoef(rx, ry)[0, 1]))


def numeric_settings(rows: list[dict[str, str]], items: list[str]) -> dict[str, np.ndarray]:
    """Numeric settings of a group taking at least three values, each in ``items`` order.

    Examples
    --------
    >>> rows = [{"experiment_id": e, "group_id": "G", "t": t, "s": s}
    ...         for e, t, s in [("a", "20", "x"), ("b", "40", "y"), ("c", "60", "z")]]
    >>> {k: v.tolist() for k, v in numeric_settings(rows, ["c", "a", "b"]).items()}
    {'t': [60.0, 20.0, 40.0]}
    """
    by_id = {r["experiment_id"]: r for r in rows}
    if any(i not in by_id for i in items):
        return {}
    out = {}
    for column in rows[0]:
        if column in ("experiment_id", "group_id"):
            continue
        try:
            values = np.array([float(by_id[i][column]) for i in items])
        except (TypeError, ValueError):
            continue
        if np.isfinite(values).all() and np.unique(values).size >= MIN_SETTING_VALUES:
            out[column] = values
    return out


def _largest(values: np.ndarray, settings: dict[str, np.ndarray]) -> float:
    rhos = [abs_spearman(values, s) for s in settings.values()]
    rhos = [r for r in rhos if not math.isnan(r)]
    return max(rhos) if rhos else np.nan


@dataclass(frozen=True)
class MonotoneResult:
    """Group-level correlations, per-configuration shares and summary rows."""

    groups: pd.DataFrame
    """``monotone_groups.csv``: one row per group and submitting configuration."""
    configs: pd.DataFrame
    """``monotone.csv``: one row per configuration."""
    summary: list[dict[str, object]]
    """Rows for ``summary.csv``."""
    unrelated: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=list(UNRELATED_COLUMNS)))
    """``monotone_unrelated.csv``: submitted groups that follow a setting the measured
    order is nearly unrelated to, over all configurations and by configuration."""


def monotone_prior(
    runs: pd.DataFrame, orders: Mapping[str, Orders], tasks: Mapping[str, TaskInfo],
    order: list[str], unrelated: float = UNRELATED,
) -> MonotoneResult:
    """Correlation of submitted and measured orders with the experiments' numeric settings.

    Parameters
    ----------
    runs
        Official scored runs of the public tasks.
    orders
        Submitted orders by ``run_id``.
    tasks
        Task packages with answer keys, by id.
    order
        Configurations in table order.
    unrelated
        Largest absolute correlation of a measured order with the settings at which it is
        nearly unrelated to them (:data:`UNRELATED`).

    Returns
    -------
    MonotoneResult
        ``monotone_groups.csv`` (with ``measured_unrelated`` and ``submitted_follows``),
        ``monotone.csv``, ``monotone_unrelated.csv`` (:func:`follow_where_unrelated`) and
        the ``summary.csv`` rows.

    References
    ----------
    Paper section 4.2 ("The monotone prior"; "Where the measured order is nearly unrelated
    to the condition, 30% of the submitted groups still follow it with a correlation of at
    least 0.9"), Figure 16c-d and appendix E.7.
    """
    groups = _group_rows(runs, orders, tasks, unrelated)
    unrelated_table = follow_where_unrelated(groups, order)
    return MonotoneResult(groups, _config_table(groups, order),
                          _summary_rows(groups, unrelated_table), unrelated_table)


GROUP_COLUMNS = ["task_id", "group_id", "n_items", "n_settings", "measured_abs_rho",
                 "measured_monotone", "config", "submitted_abs_rho", "submitted_monotone",
                 "measured_unrelated", "submitted_follows"]
"""The columns of ``monotone_groups.csv``."""


def _group_rows(runs: pd.DataFrame, orders: Mapping[str, Orders],
                tasks: Mapping[str, TaskInfo], unrelated: float) -> pd.DataFrame:
    """``monotone_groups.csv``: one row per run and group with numeric settings."""
    rows = []
    for task_id, group in runs.groupby("task_id"):
        info = tasks.get(str(task_id))
        if info is None or info.answers is None:
            continue
        targets = info.package.targets_rows()
        if not targets:
            continue
        for g in info.package.contract.groups:
            if len(g.items) < MIN_ITEMS:
                continue
            settings = numeric_settings(targets, g.items)
            if not settings:
                continue
            measured_values = info.answers.groups[g.group_id]
            measured = _largest(np.array([measured_values[i] for i in g.items]), settings)
            for r in group.itertuples(index=False):
                submitted = orders.get(r.run_id, {}).get(g.group_id)
                if not is_complete(submitted, g.items):
                    continue
                assert submitted is not None
                position = {item: float(p) for p, item in enumerate(submitted)}
                value = _largest(np.array([position[i] for i in g.items]), settings)
                rows.append({"task_id": task_id, "group_id": g.group_id,
                             "n_items": len(g.items), "n_settings": len(settings),
                             "measured_abs_rho": measured,
                             "measured_monotone": bool(measured >= MONOTONE),
                             "config": r.config, "submitted_abs_rho": value,
                             "submitted_monotone": bool(value >= MONOTONE),
                             "measured_unrelated": bool(measured <= unrelated),
                             "submitted_follows": bool(value >= FOLLOWS)})
    return pd.DataFrame(rows, columns=GROUP_COLUMNS)


def _config_table(groups: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``monotone.csv``: the submitted and measured correlations by configuration."""
    config_rows = []
    for c in order:
        own = groups[groups["config"] == c]
        if len(own):
            config_rows.append({
                "config": c, "n_groups": len(own),
                "submitted_mean_abs_rho": own["submitted_abs_rho"].mean(),
                "measured_mean_abs_rho": own["measured_abs_rho"].mean(),
                "submitted_monotone_share": own["submitted_monotone"].mean(),
                "measured_monotone_share": own["measured_monotone"].mean()})
    return pd.DataFrame(config_rows, columns=[
        "config", "n_groups", "submitted_mean_abs_rho", "measured_mean_abs_rho",
        "submitted_monotone_share", "measured_monotone_share"])


def _summary_rows(groups: pd.DataFrame,
                  unrelated_table: pd.DataFrame) -> list[dict[str, object]]:
    """The ``summary.csv`` rows: measured groups counted once, submitted ones per run."""
    summary: list[dict[str, object]] = []
    if len(groups):
        distinct = groups.drop_duplicates(["task_id", "group_id"])
        per_task = groups.groupby("task_id")["submitted_abs_rho"].mean() - distinct.groupby(
            "task_id")["measured_abs_rho"].mean()
        _, p = wilcoxon_p(per_task.dropna().to_numpy())
        summary = [
            {"analysis": "monotone", "statistic": "groups", "value": len(distinct),
             "n": distinct["task_id"].nunique()},
            {"analysis": "monotone", "statistic": "submitted_mean_abs_rho",
             "value": groups["submitted_abs_rho"].mean(), "n": len(groups)},
            {"analysis": "monotone", "statistic": "measured_mean_abs_rho",
             "value": distinct["measured_abs_rho"].mean(), "n": len(distinct)},
            {"analysis": "monotone", "statistic": "submitted_monotone_share",
             "value": groups["submitted_monotone"].mean(), "n": len(groups)},
            {"analysis": "monotone", "statistic": "measured_monotone_share",
             "value": distinct["measured_monotone"].mean(), "n": len(distinct)},
            {"analysis": "monotone", "statistic": "wilcoxon_p_over_tasks", "value": p,
             "n": int(per_task.notna().sum())},
        ]
    if len(unrelated_table):
        everything = unrelated_table.iloc[0]
        summary.append({"analysis": "monotone",
                        "statistic": "submitted_follow_share_where_measured_unrelated",
                        "value": everything["share"], "n": int(everything["n_submitted"])})
    return summary


def follow_where_unrelated(groups: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``monotone_unrelated.csv``: submitted groups following a setting the truth does not.

    Where the measured order is nearly unrelated to the settings, the share of the
    submitted groups that still follow one (paper 4.2).

    Parameters
    ----------
    groups
        ``monotone_groups.csv``'s rows (one per group and submitting run), with
        ``measured_unrelated`` and ``submitted_follows``.
    order
        Configurations in table order.

    Returns
    -------
    pandas.DataFrame
        :data:`UNRELATED_COLUMNS`: config ``all`` first, then each configuration with such
        a submission; ``n_groups`` the distinct groups whose measured order is nearly
        unrelated, ``n_submitted`` the submissions of them, ``n_follow`` those at
        :data:`FOLLOWS` or above and ``share`` their share.

    Examples
    --------
    Two unrelated groups submitted by A (one follows) and B (both follow), and a related
    group left out:

    >>> g = pd.DataFrame({"task_id": ["t", "t", "t", "t", "t"],
    ...     "group_id": ["G", "H", "G", "H", "K"], "config": ["A", "A", "B", "B", "B"],
    ...     "measured_unrelated": [True, True, True, True, False],
    ...     "submitted_follows": [True, False, True, True, True]})
    >>> follow_where_unrelated(g, ["A", "B"])[["config", "n_groups", "n_follow", "share"]
    ...     ].values.tolist()
    [['all', 2, 3, 0.75], ['A', 2, 1, 0.5], ['B', 2, 2, 1.0]]
    """
    eligible = groups[groups["measured_unrelated"].astype(bool)] if len(groups) else groups
    rows = []
    for config in ["all", *order]:
        own = eligible if config == "all" else eligible[eligible["config"] == config]
        if not len(own) and config != "all":
            continue
        follows = own["submitted_follows"].astype(bool)
        rows.append({"config": config, "n_tasks": int(own["task_id"].nunique()),
                     "n_groups": int(len(own.drop_duplicates(["task_id", "group_id"]))),
                     "n_submitted": int(len(own)), "n_follow": int(follows.sum()),
                     "share": float(follows.mean()) if len(own) else math.nan})
    return pd.DataFrame(rows, columns=list(UNRELATED_COLUMNS))
