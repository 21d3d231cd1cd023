"""Selection of tasks by pilot runs (paper section 2.3, step 4; ``spu task select``).

The paper keeps, from the candidate tasks, one task per subfield and then the rest on
quality and difficulty, judged by pilot scores. Here each candidate with pilot runs gets
three components, each on [0, 1], from a runs table (SPEC 5) of pilot configurations:

- ``difficulty = (1 - mean_score) / 2``, where ``mean_score`` is the mean over pilot
  configurations of each configuration's mean score on the task (``score_recovered``
  of scored runs, -1 for a run that left no usable file, as the strict rules score it):
  0 when every configuration ranks perfectly, 1 when every one scores -1;
- ``spread``: the standard deviation (``ddof=0``) of those configuration means, an
  informative task separating configurations (at most 1 for means in [-1, 1]);
- ``demand``: the computational demand of the runs, the mean of the min-max scaled
  (over the candidates) task means of ``runtime_s``, ``tool_calls`` and ``used_gpu``
  (the share of runs that used a GPU), over the columns the table holds (0 without any).

``composite = w_difficulty * difficulty + w_spread * spread + w_demand * demand``
(default weights 0.4, 0.4, 0.2). The selection keeps ``per_subfield`` tasks of each
subfield first (the highest composites of that subfield), then the highest composites of
the rest until ``n``; ties go to the smaller task folder name. A candidate without a pilot
run, or excluded (``spu task select --reviewed-only``: no current accepted review), is left
out, said so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

DEFAULT_WEIGHTS: tuple[float, float, float] = (0.4, 0.4, 0.2)
"""Weights of difficulty, spread and demand in the composite score."""

DEMAND_COLUMNS: tuple[str, ...] = ("runtime_s", "tool_calls", "used_gpu")
"""Columns of the runs table that measure computational demand."""

SELECTION_COLUMNS: tuple[str, ...] = (
    "task", "task_id", "discipline", "subfield", "n_runs", "n_configs", "mean_score",
    "difficulty", "spread", "demand", "composite", "rank", "kept", "reason")
"""Columns of the selection table (one row per candidate task)."""


@dataclass(frozen=True)
class Candidate:
    """A task package that may be selected."""

    task: str
    """Folder name (``task=<folder>``)."""
    task_id: str
    """``task.yaml`` id (the runs table's ``task_id``)."""
    discipline: str
    subfield: str
    excluded: str | None = None
    """Why the task may not be chosen whatever its pilot runs (e.g. not reviewed), or None."""


@dataclass(frozen=True)
class Selection:
    """The chosen tasks and why each candidate was kept or left."""

    chosen: tuple[str, ...]
    """Folder names of the kept tasks, in the order they were chosen."""
    table: pd.DataFrame
    """One row per candidate (:data:`SELECTION_COLUMNS`), by rank."""
    rule: str
    """The composite score and the selection rule, in words, with the weights used."""

    def sweep_list(self) -> str:
        """The chosen tasks as a sweep list, for ``-m task=$(cat FILE)``.

        ``spu task list --format hydra`` writes the same format: folder names, commas.
        """
        return ",".join(sorted(self.chosen))


def rule_text(weights: Sequence[float]) -> str:
    """The composite and the selection rule in one line."""
    wd, ws, wc = weights
    return (f"composite = {wd:g} x difficulty + {ws:g} x spread + {wc:g} x demand; "
            "difficulty = (1 - mean over configurations of the task mean score) / 2, spread = "
            "SD of the configuration means, demand = mean of min-max scaled runtime_s, "
            "tool_calls, used_gpu; per-subfield picks first, then the highest composites")


def _minmax(values: pd.Series) -> pd.Series:
    span = values.max() - values.min()
    if not np.isfinite(span) or span == 0:
        return pd.Series(0.0, index=values.index)
    return (values - values.min()) / span


def pilot_components(runs: pd.DataFrame,
                     demand_columns: Sequence[str] = DEMAND_COLUMNS) -> pd.DataFrame:
    """Per task id: n_runs, n_configs, mean_score, difficulty, spread, demand.

    ``demand_columns``: the columns of :data:`DEMAND_COLUMNS` the table really holds (a
    checked table fills an absent ``used_gpu`` with false; that is no measurement).

    Examples
    --------
    >>> runs = pd.DataFrame({"task_id": ["a", "a", "b", "b"], "config": ["X", "Y", "X", "Y"],
    ...                      "scored": [True, True, True, False],
    ...                      "score_recovered": [0.8, 0.4, 0.2, float("nan")]})
    >>> parts = pilot_components(runs)[["mean_score", "difficulty", "spread"]].round(3)
    >>> parts.to_dict("index")  # b: X 0.2, Y -1 (no usable file): mean -0.4, SD 0.6
    {'a': {'mean_score': 0.6, 'difficulty': 0.2, 'spread': 0.2}, \
'b': {'mean_score': -0.4, 'difficulty': 0.7, 'spread': 0.6}}
    """
    score = runs["score_recovered"].where(runs["scored"].astype(bool), -1.0).fillna(-1.0)
    frame = runs.assign(_score=score)
    by_config = frame.groupby(["task_id", "config"])["_score"].mean()
    out = pd.DataFrame({
        "n_runs": frame.groupby("task_id").size(),
        "n_configs": by_config.groupby(level="task_id").size(),
        "mean_score": by_config.groupby(level="task_id").mean(),
        "spread": by_config.groupby(level="task_id").agg(lambda v: float(np.std(v, ddof=0))),
    })
    out["difficulty"] = (1 - out["mean_score"]) / 2
    parts = []
    for column in demand_columns:
        if column not in runs.columns:
            continue
        values = pd.to_numeric(runs[column].astype(float), errors="coerce")
        per_task = values.groupby(runs["task_id"]).mean()
        if per_task.notna().any():
            parts.append(_minmax(per_task.reindex(out.index)).fillna(0.0))
    out["demand"] = sum(parts) / len(parts) if parts else 0.0
    return out


def select_tasks_by_pilot(
    runs: pd.DataFrame,
    candidates: Sequence[Candidate],
    n: int,
    per_subfield: int = 1,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
) -> Selection:
    """Choose up to ``n`` tasks: ``per_subfield`` of each subfield, then by composite score.

    Parameters
    ----------
    runs
        The pilot runs (a checked runs table, :func:`~spu.stats.runs_table.read_runs_table`).
    candidates
        The task packages to choose from.
    n
        How many tasks to keep at most.
    per_subfield
        Tasks kept first from each subfield (by composite; fewer where a subfield has fewer
        candidates with pilot runs). When ``n`` cannot hold them all, the per-subfield picks
        with the highest composites are kept.
    weights
        Weights of difficulty, spread and demand.

    Returns
    -------
    Selection
        The chosen folder names and the table of every candidate with its reason.

    References
    ----------
    Paper section 2.3, step 4 (one task per subfield, the rest on quality and difficulty).
    """
    if len(weights) != 3 or any(not math.isfinite(w) or w < 0 for w in weights):
        raise ValueError("weights: three finite numbers >= 0 (difficulty, spread, demand)")
    table = _candidate_table(runs, candidates, weights)
    excluded = {c.task: c.excluded for c in candidates if c.excluded}
    eligible = (table["n_runs"] > 0) & ~table["task"].isin(excluded)
    piloted = table[eligible].sort_values(["composite", "task"], ascending=[False, True],
                                          kind="stable")
    rank = {task: i + 1 for i, task in enumerate(piloted["task"])}
    chosen, reasons = _keep(table, piloted, rank, n, per_subfield)
    for task in table["task"]:
        if task not in reasons:
            reasons[task] = _left_reason(task, excluded, rank, n)
    table["rank"] = table["task"].map(rank).astype("Int64")
    table["kept"] = table["task"].isin(chosen)
    table["reason"] = table["task"].map(reasons)
    table = table.sort_values(["rank", "task"], na_position="last", kind="stable")
    return Selection(tuple(chosen), table.reset_index(drop=True)[list(SELECTION_COLUMNS)],
                     rule_text(weights))


def _candidate_table(runs: pd.DataFrame, candidates: Sequence[Candidate],
                     weights: Sequence[float]) -> pd.DataFrame:
    """One row per candidate: its pilot components and composite (NaN without pilot runs)."""
    absent = set(runs.attrs.get("absent_columns", ()))
    parts = pilot_components(runs[runs["task_id"].isin({c.task_id for c in candidates})],
                             [c for c in DEMAND_COLUMNS if c not in absent])
    wd, ws, wc = weights
    rows = []
    for c in candidates:
        row: dict[str, object] = {"task": c.task, "task_id": c.task_id,
                                  "discipline": c.discipline, "subfield": c.subfield}
        if c.task_id in parts.index:
            p = parts.loc[c.task_id]
            row.update({k: p[k] for k in ("n_runs", "n_configs", "mean_score", "difficulty",
                                          "spread", "demand")})
            row["composite"] = wd * p["difficulty"] + ws * p["spread"] + wc * p["demand"]
        else:
            row.update({"n_runs": 0, "n_configs": 0, "mean_score": math.nan,
                        "difficulty": math.nan, "spread": math.nan, "demand": math.nan,
                        "composite": math.nan})
        rows.append(row)
    table = pd.DataFrame(rows, columns=[c for c in SELECTION_COLUMNS
                                        if c not in ("rank", "kept", "reason")])
    return table.astype({"n_runs": int, "n_configs": int})


def _keep(table: pd.DataFrame, piloted: pd.DataFrame, rank: dict[str, int], n: int,
          per_subfield: int) -> tuple[list[str], dict[str, str]]:
    """The kept tasks in the order chosen, and why each was kept.

    The best ``per_subfield`` of each subfield first (the highest composites of them when
    ``n`` cannot hold them all), then the rest of ``piloted`` (eligible candidates by
    composite) until ``n``.
    """
    reasons: dict[str, str] = {}
    chosen: list[str] = []
    firsts = [task for _, group in piloted.groupby("subfield", sort=True)
              for task in list(group["task"])[:per_subfield]]
    for task in sorted(firsts, key=rank.__getitem__)[:n]:
        chosen.append(task)
        subfield = table.loc[table["task"] == task, "subfield"].iloc[0]
        reasons[task] = f"kept: among the best {per_subfield} of subfield {subfield!r}"
    for task in piloted["task"]:
        if len(chosen) >= n:
            break
        if task not in reasons:
            chosen.append(task)
            reasons[task] = f"kept: composite rank {rank[task]} of {len(rank)}"
    return chosen, reasons


def _left_reason(task: str, excluded: dict[str, str], rank: dict[str, int], n: int) -> str:
    """Why a candidate was left out: excluded, never piloted, or below the cut."""
    if task in excluded:
        return f"left: {excluded[task]}"
    if task not in rank:
        return "left: no pilot run"
    return (f"left: composite rank {rank[task]} of {len(rank)}, below the "
            f"cut of {n} tasks")
