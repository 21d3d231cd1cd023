"""Single-task panels for the tasks named by ``spu analyze --task ID`` (Figures 18e, 19b).

- :func:`task_settings` (``task_settings.csv``, Figure 18e): on each named task, the
  Spearman correlation between each scored run's submitted order of a group and each
  numeric setting of ``targets.csv``, with the measured order as the first row (paper:
  "On the hydrogel task, the correlation between each submitted order and five monomer
  fractions, with the measured order at the top").
- :func:`task_repeat_orders` (``task_repeat_orders.csv``, Figure 19b): the order each
  scored run of the task's most-repeated configuration submitted for each group, every
  item with its place in the most common order of the group, and the run's score (paper:
  "Order submitted for each group of an underwater adhesive task in its five repeats, with
  the items shaded by their place in the most common order of the group").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from spu.stats.submissions import TaskInfo

SETTINGS_COLUMNS = ["task_id", "run_key", "config", "repeat", "score", "group_id", "setting",
                    "n_items", "rho"]
"""Columns of ``task_settings.csv``; the measured order has ``run_key`` ``measured``."""

REPEAT_ORDER_COLUMNS = ["task_id", "config", "run_key", "repeat", "score", "group_id",
                        "position", "item", "modal_position", "modal_rule"]
"""Columns of ``task_repeat_orders.csv`` (positions from 1, the lowest predicted value)."""

SETTINGS_RULE = ("Figure 18e: per task named by --task, group of three or more items and "
                 "numeric setting of targets.csv (every value a number, not all equal in the "
                 "group), Spearman's rho between the setting and the place in the order "
                 "(lowest first): the measured order (run_key measured) and each scored "
                 "run's complete submitted order")
"""The manifest's rule for ``task_settings.csv``."""

REPEAT_ORDERS_RULE = ("Figure 19b: per task named by --task, the configuration with the most "
                      "scored runs on it (at least two; ties: the first by name), each run's "
                      "complete order of each group; modal_position is the item's place in "
                      "the most common order of the group among those runs, or, when no "
                      "order occurs twice, in the order by mean place (ties by item id); "
                      "with --all-repeats the runs are the repeats")
"""The manifest's rule for ``task_repeat_orders.csv``."""


def _numeric_settings(rows: Sequence[Mapping[str, str]]) -> dict[str, dict[str, float]]:
    """Numeric setting columns of ``targets.csv`` rows: column -> experiment -> value."""
    out: dict[str, dict[str, float]] = {}
    columns = [c for c in (rows[0] if rows else {}) if c not in ("experiment_id", "group_id")]
    for column in columns:
        values: dict[str, float] = {}
        for row in rows:
            try:
                value = float(row.get(column) or "")
            except ValueError:
                break
            if not math.isfinite(value):
                break
            values[str(row.get("experiment_id"))] = value
        else:
            out[column] = values
    return out


def _rho(order: Sequence[str], values: Mapping[str, float]) -> float:
    """Spearman's rho of a setting against the place in ``order`` (lowest first)."""
    from scipy import stats as sps

    x = np.array([values[i] for i in order], dtype=float)
    if x.size < 3 or np.ptp(x) == 0:
        return math.nan
    return float(sps.spearmanr(np.arange(x.size), x).statistic)


def _complete(order: Sequence[str] | None, items: Sequence[str]) -> bool:
    return order is not None and len(order) == len(items) and set(order) == set(items)


def task_settings(runs: Sequence[Mapping[str, Any]], tasks: Mapping[str, TaskInfo],
                  wanted: Sequence[str]) -> pd.DataFrame:
    """``task_settings.csv``: submitted and measured orders against each setting (Figure 18e).

    Args:
        runs: One mapping per scored run: ``run_key``, ``task_id``, ``config``, ``repeat``,
            ``score`` and ``submitted`` (group id -> order, or None).
        tasks: Task packages with their answer keys, by task id.
        wanted: The tasks named by ``--task``.

    Examples
    --------
    See ``tests/analysis/test_detail_tasks.py`` for a table worked by hand.
    """
    rows: list[dict[str, Any]] = []
    for task_id in wanted:
        info = tasks.get(task_id)
        if info is None:
            continue
        settings = _numeric_settings(info.package.targets_rows())
        answers = info.answers.groups if info.answers is not None else {}
        own = sorted((r for r in runs if str(r["task_id"]) == task_id),
                     key=lambda r: (str(r["config"]), int(r["repeat"]), str(r["run_key"])))
        for group in info.package.contract.groups:
            items = list(group.items)
            if len(items) < 3:
                continue
            measured = answers.get(group.group_id)
            orders: list[tuple[dict[str, Any], list[str]]] = []
            if measured is not None:
                orders.append(({"run_key": "measured", "config": "measured", "repeat": -1,
                                "score": math.nan},
                               sorted(items, key=lambda i: (measured[i], i))))
            for r in own:
                order = (r.get("submitted") or {}).get(group.group_id)
                if order is not None and _complete(order, items):
                    orders.append((dict(r), list(order)))
            for setting, values in settings.items():
                if not all(i in values for i in items) or len({values[i] for i in items}) < 2:
                    continue
                for head, order in orders:
                    rows.append({"task_id": task_id, "run_key": head["run_key"],
                                 "config": head["config"], "repeat": head["repeat"],
                                 "score": head["score"], "group_id": group.group_id,
                                 "setting": setting, "n_items": len(items),
                                 "rho": _rho(order, values)})
    return pd.DataFrame(rows, columns=SETTINGS_COLUMNS)


def modal_order(orders: Sequence[Sequence[str]]) -> list[str]:
    """The most common of ``orders`` (first seen on ties); the mean-place order if none repeats.

    Examples
    --------
    >>> modal_order([["a", "b", "c"], ["b", "a", "c"], ["a", "b", "c"]])
    ['a', 'b', 'c']
    >>> modal_order([["a", "b", "c"], ["c", "a", "b"]])  # mean places a 1, b 2, c 1.5
    ['a', 'c', 'b']
    """
    counts = Counter(tuple(o) for o in orders)
    best, n = max(counts.items(), key=lambda kv: (kv[1], -list(counts).index(kv[0])))
    if n >= 2 or len(orders) == 1:
        return list(best)
    places: dict[str, list[int]] = {}
    for order in orders:
        for k, item in enumerate(order):
            places.setdefault(item, []).append(k)
    return sorted(places, key=lambda i: (float(np.mean(places[i])), i))


def task_repeat_orders(runs: Sequence[Mapping[str, Any]], tasks: Mapping[str, TaskInfo],
                       wanted: Sequence[str]) -> pd.DataFrame:
    """``task_repeat_orders.csv``: each repeat's order, shaded by the modal order (Figure 19b).

    Args:
        runs: As for :func:`task_settings`.
        tasks: Task packages, by task id (for the groups and their items).
        wanted: The tasks named by ``--task``.
    """
    rows: list[dict[str, Any]] = []
    for task_id in wanted:
        info = tasks.get(task_id)
        own = [r for r in runs if str(r["task_id"]) == task_id]
        if info is None or not own:
            continue
        counts = Counter(str(r["config"]) for r in own)
        config, n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if n < 2:
            continue
        chosen = sorted((r for r in own if str(r["config"]) == config),
                        key=lambda r: (int(r["repeat"]), str(r["run_key"])))
        for group in info.package.contract.groups:
            items = list(group.items)
            orders = [(r, list((r.get("submitted") or {})[group.group_id])) for r in chosen
                      if _complete((r.get("submitted") or {}).get(group.group_id), items)]
            if len(orders) < 2:
                continue
            modal = modal_order([o for _, o in orders])
            repeated = Counter(tuple(o) for _, o in orders).most_common(1)[0][1] >= 2
            place = {item: k + 1 for k, item in enumerate(modal)}
            for r, order in orders:
                for k, item in enumerate(order):
                    rows.append({"task_id": task_id, "config": config,
                                 "run_key": r["run_key"], "repeat": r["repeat"],
                                 "score": r["score"], "group_id": group.group_id,
                                 "position": k + 1, "item": item,
                                 "modal_position": place[item],
                                 "modal_rule": "most common" if repeated else "mean place"})
    return pd.DataFrame(rows, columns=REPEAT_ORDER_COLUMNS)
