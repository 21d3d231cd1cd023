"""Scores on individual runs (paper appendix F, Figure 28).

A task score is a Spearman correlation; a more direct reading is the share of
experiment pairs with different measured values that a run places in the measured
order (50% for a random ranking), and how often a group's top-ranked experiment is the
measured top. The pair share weights the groups as the task score does (over the groups
the run ordered completely, weights renormalized: "weighting groups as in the task
score"); the top-1 rate counts each such group once ("The top-ranked experiment of a
group is the measured top 25% ... of the time"), or by the group weights under
``top1_weights="weights"`` (:data:`TOP1_WEIGHTS`).

- :func:`pair_order_runs` (``pair_order_runs.csv``): per scored run, the pair share, the
  top-1 rate and the top-1 rate of a random ranking.
- :func:`pair_order_configs` (``pair_order.csv``, Figure 28d): per configuration, the
  means with bootstrap intervals over tasks.
- :func:`example_runs` (``pair_order_examples.csv``, Figure 28a): measured against
  submitted ranks for the runs closest to chosen scores, on one-group tasks without
  ties and with 10 to 20 experiments, no task used twice.
- :func:`median_examples` (``pair_order_median_examples.csv``, Figure 28b): the same for
  one run per discipline, the one closest to the median score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from spu.stats.resampling import DEFAULT_RESAMPLES, bootstrap_mean, rng_for
from spu.stats.submissions import Orders, TaskInfo, is_complete

EXAMPLE_SCORES: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8)
"""Scores of the example runs of Figure 28a."""

EXAMPLE_ITEMS = (10, 20)
"""Smallest and largest number of experiments of an example task (appendix F)."""


def pairs_in_order(order: Sequence[str], measured: Mapping[str, float]) -> tuple[int, int]:
    """Pairs with different measured values placed in the measured order, and all such pairs.

    ``order`` runs from the lowest to the highest predicted value.

    References
    ----------
    Paper appendix F, "Pairs in the measured order"; Kendall (1938), Biometrika 30, 81-93
    (concordant pairs).

    Examples
    --------
    Measured a < b < c; submitted b, a, c: the pairs (a, c) and (b, c) are in order,
    (a, b) is not:

    >>> pairs_in_order(["b", "a", "c"], {"a": 1.0, "b": 2.0, "c": 3.0})
    (2, 3)
    """
    values = np.array([measured[i] for i in order], dtype=float)
    diff = values[None, :] - values[:, None]  # j after i: measured_j - measured_i
    upper = np.triu(np.ones_like(diff, dtype=bool), k=1)
    return int(((diff > 0) & upper).sum()), int(((diff != 0) & upper).sum())


def top_is_measured_top(order: Sequence[str], measured: Mapping[str, float]) -> tuple[bool, float]:
    """Whether the top-ranked experiment has the highest measured value, and the random rate.

    A group whose highest value is shared by ``m`` of ``n`` experiments is hit by a random
    ranking with probability ``m / n``.

    Examples
    --------
    >>> top_is_measured_top(["a", "c", "b"], {"a": 1.0, "b": 3.0, "c": 3.0})
    (True, 0.6666666666666666)
    """
    top = max(measured[i] for i in order)
    tied = sum(measured[i] == top for i in order)
    return measured[order[-1]] == top, tied / len(order)


TOP1_WEIGHTS = {
    "groups": ("appendix F: the pair share weights the groups as the task score does "
               "(\"weighting groups as in the task score\"); the top-1 rate and its random "
               "rate count each completely ordered group once (\"The top-ranked experiment "
               "of a group is the measured top 25% (HY4) to 45% (Fable 5.1) of the time\"); "
               "configuration means over its runs, 95% bootstrap intervals over tasks"),
    "weights": ("appendix F, with the top-1 rate and its random rate weighted by the group "
                "weights like the pair share (--top1-weights weights; the paper weights only "
                "the pair share)"),
}
"""How the top-1 rate weights a run's groups (``--top1-weights``): ``groups``, the paper's,
each group once; ``weights``, by the contract's group weights."""


def run_pair_order(orders: Orders, info: TaskInfo, top1_weights: str = "groups"
                   ) -> dict[str, float]:
    """Pair share (groups weighted as the task score), top-1 and random top-1 of one run.

    The top-1 rate counts each group once (``top1_weights="groups"``, appendix F) or by
    the group weights (``"weights"``).

    Examples
    --------
    >>> from spu.schema import AnswerKey, ComparisonGroup, Contract
    >>> from spu.tasks.package import TaskPackage
    >>> c = Contract(task_id="t", task_version="1", groups=[
    ...     ComparisonGroup(group_id="G", endpoint="y", weight=0.5, items=["a", "b", "c"]),
    ...     ComparisonGroup(group_id="H", endpoint="y", weight=0.5, items=["d", "e"])])
    >>> a = AnswerKey(task_id="t", task_version="1", groups={
    ...     "G": {"a": 1.0, "b": 2.0, "c": 3.0}, "H": {"d": 1.0, "e": 2.0}})
    >>> info = TaskInfo(TaskPackage(path=None, meta=None, contract=c), a)
    >>> r = run_pair_order({"G": ["b", "a", "c"], "H": ["e", "d"]}, info)
    >>> round(r["pair_share"], 4), r["top1"], round(r["top1_random"], 4)  # (2/3 + 0) / 2
    (0.3333, 0.5, 0.4167)
    """
    if top1_weights not in TOP1_WEIGHTS:
        raise ValueError(f"top-1 weights: {top1_weights!r} is not one of "
                         f"{', '.join(TOP1_WEIGHTS)}")
    assert info.answers is not None
    share = top1 = random_top = weight = top_weight = 0.0
    for g in info.package.contract.groups:
        order = orders.get(g.group_id)
        measured = info.answers.groups[g.group_id]
        if not is_complete(order, g.items) or len(g.items) < 2:
            continue
        assert order is not None
        in_order, pairs = pairs_in_order(order, measured)
        if pairs == 0:
            continue
        hit, chance = top_is_measured_top(order, measured)
        share += g.weight * in_order / pairs
        weight += g.weight
        w = g.weight if top1_weights == "weights" else 1.0
        top1 += w * float(hit)
        random_top += w * chance
        top_weight += w
    if weight == 0 or top_weight == 0:
        return {"pair_share": math.nan, "top1": math.nan, "top1_random": math.nan}
    return {"pair_share": share / weight, "top1": top1 / top_weight,
            "top1_random": random_top / top_weight}


def pair_order_runs(
    runs: pd.DataFrame, orders: Mapping[str, Orders], tasks: Mapping[str, TaskInfo],
    top1_weights: str = "groups",
) -> pd.DataFrame:
    """``pair_order_runs.csv``: appendix F's measures for every scored run with an order.

    Returns ``run_id, config, task_id, score, pair_share, top1, top1_random``
    (:func:`run_pair_order` under ``top1_weights``).

    References
    ----------
    Paper appendix F and Figure 28c ("It rises almost linearly with the score (r=0.98)
    ... median of 64% over the scored runs, against 50% for random rankings").
    """
    rows = []
    for r in runs.itertuples(index=False):
        info = tasks.get(str(r.task_id))
        if info is None or info.answers is None or r.run_id not in orders:
            continue
        rows.append({"run_id": r.run_id, "config": r.config, "task_id": r.task_id,
                     "score": r.score_recovered,
                     **run_pair_order(orders[r.run_id], info, top1_weights)})
    return pd.DataFrame(rows, columns=["run_id", "config", "task_id", "score", "pair_share",
                                       "top1", "top1_random"])


def pair_order_configs(
    per_run: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = DEFAULT_RESAMPLES
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """``pair_order.csv``: mean pair share and top-1 rate per configuration (Figure 28d).

    Intervals resample the configuration's tasks (one official run each).

    Returns
    -------
    tuple
        The table (``config, n_runs, pair_share, pair_share_ci_low, pair_share_ci_high,
        top1, top1_ci_low, top1_ci_high, top1_random``) and ``summary.csv`` rows (median
        pair share, its correlation with the score, the random top-1 rate).

    References
    ----------
    Paper appendix F ("Configuration means range from 59% (Qwen3.8) to 70% (Opus 5.5) ...
    every 95% interval lies above 50% ... The top-ranked experiment of a group is the
    measured top 25% (HY4) to 45% (Fable 5.1) of the time, against 16% at random").

    Examples
    --------
    >>> per_run = pd.DataFrame({"config": "A", "task_id": ["t", "u"], "score": [0.2, 0.6],
    ...     "pair_share": [0.6, 0.8], "top1": [0.0, 1.0], "top1_random": [0.2, 0.2]})
    >>> t, _ = pair_order_configs(per_run, ["A"], resamples=50)
    >>> t[["pair_share", "top1", "top1_random"]].round(3).values.tolist()
    [[0.7, 0.5, 0.2]]
    """
    rows = []
    known = per_run.dropna(subset=["pair_share"])
    for config in order:
        own = known[known["config"] == config]
        if not len(own):
            continue
        row: dict[str, Any] = {"config": config, "n_runs": len(own)}
        for name in ("pair_share", "top1"):
            iv = bootstrap_mean(own[name].to_numpy(dtype=float),
                                rng_for(seed, "pair-order", name, config), resamples)
            row[name], row[f"{name}_ci_low"], row[f"{name}_ci_high"] = (iv.estimate, iv.low,
                                                                        iv.high)
        row["top1_random"] = float(own["top1_random"].mean())
        rows.append(row)
    table = pd.DataFrame(rows, columns=["config", "n_runs", "pair_share", "pair_share_ci_low",
                                        "pair_share_ci_high", "top1", "top1_ci_low",
                                        "top1_ci_high", "top1_random"])
    summary: list[dict[str, Any]] = []
    if len(known):
        summary += [
            {"analysis": "pair_order", "statistic": "pair_share_median",
             "value": float(known["pair_share"].median()), "n": len(known)},
            {"analysis": "pair_order", "statistic": "top1_random_mean",
             "value": float(known["top1_random"].mean()), "n": len(known)},
        ]
        if len(known) >= 3:
            summary.append({"analysis": "pair_order", "statistic": "pair_share_score_r",
                            "value": float(np.corrcoef(known["pair_share"], known["score"])[0, 1]),
                            "n": len(known)})
    return table, summary


def example_runs(
    runs: pd.DataFrame, orders: Mapping[str, Orders], tasks: Mapping[str, TaskInfo],
    scores: Sequence[float] = EXAMPLE_SCORES,
) -> pd.DataFrame:
    """``pair_order_examples.csv``: measured against submitted rank for example runs.

    Candidates are scored runs on tasks with one comparison group, no tied measured
    values and 10 to 20 experiments; for each target score the closest candidate on a
    task not used yet. Ranks count from 1 at the lowest value.

    Returns ``target, run_id, config, task_id, score, item, submitted_rank, measured_rank``.

    References
    ----------
    Paper appendix F, "Example runs", and Figure 28a.
    """
    candidates = _example_candidates(runs, orders, tasks)
    rows: list[dict[str, Any]] = []
    used: set[str] = set()
    for target in scores:
        pool = [c for c in candidates if c[0].task_id not in used]
        if not pool:
            break
        chosen = _closest(pool, target)
        used.add(chosen[0].task_id)
        rows += _rank_rows(chosen, {"target": target})
    return pd.DataFrame(rows, columns=["target", "run_id", "config", "task_id", "score", "item",
                                       "submitted_rank", "measured_rank"])


_Candidate = tuple[Any, list[str], dict[str, float]]


def _example_candidates(runs: pd.DataFrame, orders: Mapping[str, Orders],
                        tasks: Mapping[str, TaskInfo]) -> list[_Candidate]:
    """Scored runs on one-group tasks of 10 to 20 experiments without ties (appendix F)."""
    candidates = []
    for r in runs.itertuples(index=False):
        info = tasks.get(str(r.task_id))
        if info is None or info.answers is None or r.run_id not in orders:
            continue
        groups = info.package.contract.groups
        if len(groups) != 1:
            continue
        g = groups[0]
        values = info.answers.groups[g.group_id]
        n = len(g.items)
        order = orders[r.run_id].get(g.group_id)
        if not (EXAMPLE_ITEMS[0] <= n <= EXAMPLE_ITEMS[1]) or not is_complete(order, g.items):
            continue
        if len({values[i] for i in g.items}) < n:
            continue
        assert order is not None
        candidates.append((r, list(order), dict(values)))
    return candidates


def _closest(pool: Sequence[_Candidate], target: float) -> _Candidate:
    """The candidate whose score is closest to ``target`` (ties: the first ``run_id``)."""
    return min(pool, key=lambda c: (abs(c[0].score_recovered - target), str(c[0].run_id)))


def _rank_rows(candidate: _Candidate, head: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per item of the candidate's group: submitted and measured rank (1: lowest)."""
    r, order, values = candidate
    measured_rank = {item: k + 1 for k, item in enumerate(sorted(order, key=lambda i: values[i]))}
    return [{**head, "run_id": r.run_id, "config": r.config, "task_id": r.task_id,
             "score": r.score_recovered, "item": item, "submitted_rank": k + 1,
             "measured_rank": measured_rank[item]} for k, item in enumerate(order)]


MEDIAN_EXAMPLES_RULE = ("Figure 28b: for each discipline, the scored official public run "
                        "closest to the median score of all of them (the paper's 0.40), "
                        "among the runs on one-group tasks of 10 to 20 experiments without "
                        "tied measured values (the candidates of Figure 28a); ties go to the "
                        "first run_id")
"""The rule of ``pair_order_median_examples.csv``, as ``manifest.json`` states it."""


def median_examples(runs: pd.DataFrame, orders: Mapping[str, Orders],
                    tasks: Mapping[str, TaskInfo]) -> pd.DataFrame:
    """``pair_order_median_examples.csv``: one run per discipline at the median (Figure 28b).

    The median is over every scored run of ``runs`` (paper: 0.40 over the 1,155 scored
    public runs); per discipline, the candidate of :func:`example_runs` closest to it.

    Returns ``discipline, median, run_id, config, task_id, score, item, submitted_rank,
    measured_rank``, disciplines in name order.

    References
    ----------
    Paper appendix F and Figure 28b ("The same for one run per discipline at the median
    score of 0.40").
    """
    columns = ["discipline", "median", "run_id", "config", "task_id", "score", "item",
               "submitted_rank", "measured_rank"]
    scored = runs[runs["scored"].astype(bool)] if "scored" in runs else runs
    if scored.empty or "discipline" not in scored:
        return pd.DataFrame(columns=columns)
    median = float(scored["score_recovered"].median())
    candidates = _example_candidates(scored, orders, tasks)
    rows: list[dict[str, Any]] = []
    for discipline in sorted({str(c[0].discipline) for c in candidates}):
        pool = [c for c in candidates if str(c[0].discipline) == discipline]
        rows += _rank_rows(_closest(pool, median), {"discipline": discipline,
                                                     "median": median})
    return pd.DataFrame(rows, columns=columns)
