"""Retired tasks (SPEC section 15): out of the official statistics, kept in ``retired.csv``.

A task retired in its ``task.yaml`` (``retired: {date, reason}``, e.g. after its source
was found recalled by the models) keeps its runs: they are left out of every table of
``spu stats`` and summarized, task by task, in ``retired.csv`` instead. A runs table may
also mark them itself (a true/false ``retired`` column); the task roots given with
``--tasks`` are read for the date and the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

RETIRED_FILE = "retired.csv"
"""The table of retired tasks written beside the official statistics."""

RETIRED_COLUMNS: tuple[str, ...] = ("task_id", "retired_date", "reason", "n_runs",
                                    "n_configs", "n_scored", "raw_mean")
"""Columns of ``retired.csv``."""


@dataclass(frozen=True)
class RetiredTask:
    """When and why a task was retired, as its ``task.yaml`` says (empty when unknown)."""

    date: str = ""
    """``YYYY-MM-DD``."""
    reason: str = ""
    """The stated reason."""


def retirements_of_roots(roots: Iterable[Path]) -> dict[str, RetiredTask]:
    """Task id -> its retirement, for every retired task package under the task roots."""
    from spu.tasks.package import scan_task_root

    found: dict[str, RetiredTask] = {}
    for root in roots:
        for meta in scan_task_root(root).tasks.values():
            if meta.retired is not None:
                found[meta.id] = RetiredTask(meta.retired.date.isoformat(),
                                             meta.retired.reason)
    return found


def split_retired(runs: pd.DataFrame,
                  retired: Mapping[str, RetiredTask]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs of tasks still in the benchmark, and the table of the retired ones.

    A task is retired when ``retired`` names it or a run of it has ``retired`` true in the
    table. ``retired.csv`` counts each retired task's runs (every repeat), the
    configurations that ran it, its scored runs and their mean ``score_recovered``
    (paper 3.1's score), so nothing measured on it is lost.

    Examples
    --------
    >>> runs = pd.DataFrame({"task_id": ["a", "a", "b"], "config": ["X", "Y", "X"],
    ...                      "scored": [True, False, True],
    ...                      "score_recovered": [0.5, -1.0, 0.2]})
    >>> kept, table = split_retired(runs, {"a": RetiredTask("2026-11-30", "recalled")})
    >>> counts = ["n_runs", "n_configs", "n_scored", "raw_mean"]
    >>> list(kept["task_id"]), table[counts].to_dict("records")
    (['b'], [{'n_runs': 2, 'n_configs': 2, 'n_scored': 1, 'raw_mean': 0.5}])
    """
    marked = set(retired)
    if "retired" in runs.columns:
        marked |= set(runs.loc[runs["retired"].astype(bool), "task_id"])
    is_retired = runs["task_id"].isin(marked)
    rows = []
    for task_id in sorted(set(runs.loc[is_retired, "task_id"]) | set(retired)):
        mine = runs[runs["task_id"] == task_id]
        scored = mine[mine["scored"].astype(bool)]
        info = retired.get(task_id, RetiredTask())
        rows.append({"task_id": task_id, "retired_date": info.date, "reason": info.reason,
                     "n_runs": len(mine), "n_configs": mine["config"].nunique(),
                     "n_scored": len(scored),
                     "raw_mean": float(scored["score_recovered"].mean())
                     if len(scored) else float("nan")})
    table = pd.DataFrame(rows, columns=list(RETIRED_COLUMNS))
    return runs[~is_retired].reset_index(drop=True), table


PROBE_HARNESSES: frozenset[str] = frozenset({"recall"})
"""Harnesses whose runs are contamination probes, not predictions (``harness=recall``):
``spu task contamination`` reads them; the official statistics leave them out."""


def split_probes(runs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The runs that are predictions, and how many contamination probe runs were left out.

    A probe asks a model what it remembers of a task (its source, its measured order)
    with no tools (:mod:`spu.harness.recall`): its score is a measure of contamination,
    not of prediction, so it enters no table of ``spu stats`` or ``spu leaderboard``.

    Examples
    --------
    >>> runs = pd.DataFrame({"harness": ["claude_code", "recall", "recall"]})
    >>> kept, n = split_probes(runs)
    >>> len(kept), n
    (1, 2)
    """
    if "harness" not in runs.columns:
        return runs, 0
    probe = runs["harness"].astype(str).isin(PROBE_HARNESSES)
    if not probe.any():
        return runs, 0
    kept = runs[~probe].copy()
    kept.attrs.update(runs.attrs)
    return kept, int(probe.sum())
