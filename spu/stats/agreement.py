"""Agreement between configurations and the consensus ranking (paper 4.5, E.7, E.8).

- **Agreement** of two submissions on a task: the task score of one with the other's
  order in place of the measured ranks (paper 4.5), over the groups both order
  completely, weights renormalized over those groups. It is symmetric.
- **Consensus** of several submissions: each item's average position over them, sorted,
  ties broken by experiment id (E.7); it is graded like any submission.
- **Consensus gain** on a task: the consensus score minus the average score of the
  submissions. **Leave-one-out**: a configuration's score minus that of the consensus of
  the other configurations scored on the same task (E.8, Figure 27b).

Intervals are percentile bootstrap intervals over tasks.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from spu.grading.consensus import Orders, consensus_orders, is_complete  # noqa: F401
from spu.grading.rules import GradingKey, spearman_positions
from spu.schema import Contract
from spu.stats.resampling import DEFAULT_RESAMPLES, bootstrap_mean, rng_for
from spu.stats.submissions import TaskInfo
from spu.stats.ties import exact


def rank_agreement(contract: Contract, a: Orders, b: Orders) -> float:
    """Agreement of two submissions: ``a`` scored against ``b``'s order (paper 4.5).

    Groups that either submission does not order completely are left out and the
    weights of the others renormalized; NaN when no group is left.

    Examples
    --------
    >>> from spu.schema import ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[
    ...     ComparisonGroup(group_id="G1", endpoint="y", weight=0.5, items=["a", "b", "c"]),
    ...     ComparisonGroup(group_id="G2", endpoint="y", weight=0.5, items=["d", "e"])])
    >>> rank_agreement(c, {"G1": ["a", "b", "c"], "G2": ["d", "e"]},
    ...                   {"G1": ["a", "c", "b"], "G2": ["e", "d"]})  # (0.5 - 1) / 2
    -0.25
    """
    total = weight = 0.0
    for g in contract.groups:
        oa, ob = a.get(g.group_id), b.get(g.group_id)
        if not (is_complete(oa, g.items) and is_complete(ob, g.items)) or len(g.items) < 2:
            continue
        assert oa is not None and ob is not None
        position_b = {item: i for i, item in enumerate(ob)}
        rho = spearman_positions([float(position_b[i]) for i in oa], list(range(len(oa))))
        total += g.weight * rho
        weight += g.weight
    return total / weight if weight > 0 else np.nan


@dataclass(frozen=True)
class AgreementResult:
    """Per-task agreement and consensus, per-configuration leave-one-out, and summary."""

    tasks: pd.DataFrame
    """``agreement_tasks.csv``: one row per task."""
    leave_one_out: pd.DataFrame
    """``consensus_loo.csv``: one row per configuration."""
    summary: list[dict[str, object]]
    """Rows for ``summary.csv``."""


def agreement_analysis(
    runs: pd.DataFrame, orders: Mapping[str, Orders], tasks: Mapping[str, TaskInfo],
    order: list[str], seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
) -> AgreementResult:
    """Agreement, consensus and leave-one-out consensus over the official scored runs.

    Parameters
    ----------
    runs
        Official scored runs of the public tasks.
    orders
        Submitted orders by ``run_id``.
    tasks
        Task packages by id (answer keys needed for consensus scores).
    order
        Configurations in table order.
    seed, resamples
        Bootstrap seed and resamples (over tasks).

    References
    ----------
    Paper appendix E.8 ("Shared priors", "Consensus") and Figure 27.
    """
    task_rows = []
    loo: dict[str, list[tuple[float, float, float]]] = {c: [] for c in order}
    for task_id, group in runs.groupby("task_id"):
        info = tasks.get(str(task_id))
        if info is None:
            continue
        contract, answers = info.package.contract, info.answers
        subs = {r.config: (orders[r.run_id], r.score_recovered)
                for r in group.itertuples(index=False) if r.run_id in orders}
        configs = [c for c in order if c in subs]
        if len(configs) < 2:
            continue
        pair_agreement = [rank_agreement(contract, subs[a][0], subs[b][0])
                          for a, b in itertools.combinations(configs, 2)]
        score_mean = float(np.mean([subs[c][1] for c in configs]))
        consensus = np.nan
        if answers is not None:
            # The answer key's ranks are built once per task, not once per score.
            key = GradingKey.build(contract, answers)
            consensus = key.score_orders(
                consensus_orders(contract, [subs[c][0] for c in configs]))
            for c in configs:
                others = consensus_orders(contract, [subs[o][0] for o in configs if o != c])
                loo[c].append((subs[c][1], key.score_orders(others),
                               rank_agreement(contract, subs[c][0], others)))
        task_rows.append({"task_id": task_id, "n_configs": len(configs),
                          "agreement_mean": float(np.nanmean(pair_agreement)),
                          "score_mean": score_mean, "consensus_score": consensus,
                          "consensus_gain": consensus - score_mean})
    columns = ["task_id", "n_configs", "agreement_mean", "score_mean", "consensus_score",
               "consensus_gain"]
    per_task = pd.DataFrame(task_rows, columns=columns)

    loo_rows = []
    for c in order:
        if not loo[c]:
            continue
        own, cons, agree = (np.array(x) for x in zip(*loo[c], strict=True))
        diff = bootstrap_mean(own - cons, rng_for(seed, "consensus-loo", c), resamples)
        rho = sps.spearmanr(exact(agree), exact(own)).statistic if own.size >= 3 else np.nan
        loo_rows.append({"config": c, "n_tasks": own.size, "score_mean": own.mean(),
                         "consensus_mean": cons.mean(), "diff_mean": diff.estimate,
                         "diff_ci_low": diff.low, "diff_ci_high": diff.high,
                         "agreement_score_spearman": float(rho)})
    leave_one_out = pd.DataFrame(loo_rows, columns=[
        "config", "n_tasks", "score_mean", "consensus_mean", "diff_mean", "diff_ci_low",
        "diff_ci_high", "agreement_score_spearman"])

    summary: list[dict[str, object]] = []
    if len(per_task):
        for name, column in (("agreement_mean", "agreement_mean"),
                             ("score_mean", "score_mean"),
                             ("consensus_gain", "consensus_gain")):
            values = per_task[column].dropna().to_numpy()
            iv = bootstrap_mean(values, rng_for(seed, "agreement", name), resamples)
            summary.append({"analysis": "agreement", "statistic": name, "value": iv.estimate,
                            "ci_low": iv.low, "ci_high": iv.high, "n": values.size})
        summary.append({"analysis": "agreement", "statistic": "tasks_agreement_above_score",
                        "value": int((exact(per_task["agreement_mean"])
                                      > exact(per_task["score_mean"])).sum()),
                        "n": len(per_task)})
        gains = per_task["consensus_gain"].dropna()
        summary.append({"analysis": "agreement", "statistic": "tasks_consensus_above_mean",
                        "value": int((exact(gains) > 0).sum()), "n": len(gains)})
        if len(per_task) >= 3:
            rho = sps.spearmanr(exact(per_task["agreement_mean"]),
                                exact(per_task["score_mean"])).statistic
            summary.append({"analysis": "agreement", "statistic": "agreement_score_spearman",
                            "value": float(rho), "n": len(per_task)})
    return AgreementResult(per_task, leave_one_out, summary)


def repeat_orders_table(
    runs: pd.DataFrame, orders: Mapping[str, Orders], tasks: Mapping[str, TaskInfo]
) -> pd.DataFrame:
    """``repeats_orders.csv``: did every scored repeat submit the same order for a group?

    Parameters
    ----------
    runs
        Scored repeated runs (``repeat >= 1``).
    orders
        Submitted orders by ``run_id``.
    tasks
        Task packages by id (the groups and their experiments).

    Returns
    -------
    pandas.DataFrame
        ``task_id, group_id, n_items, identical_in_all_repeats, config, n_repeats``: one
        row per configuration, task and group with at least two complete orders among its
        scored repeats (``n_repeats`` counts them).

    References
    ----------
    Paper 4.5 ("Of the 156 comparison groups in these 29 tasks, 39 received an identical
    order in every scored repeat of their task ... None of the 45 groups with ten or more
    items") and Figure 19a.

    Examples
    --------
    >>> from spu.schema import ComparisonGroup
    >>> from spu.tasks.package import TaskPackage
    >>> c = Contract(task_id="t", task_version="1", groups=[
    ...     ComparisonGroup(group_id="G", endpoint="y", weight=0.5, items=["a", "b"]),
    ...     ComparisonGroup(group_id="H", endpoint="y", weight=0.5, items=["c", "d", "e"])])
    >>> info = TaskInfo(TaskPackage(path=None, meta=None, contract=c), None)
    >>> runs = pd.DataFrame({"run_id": ["r1", "r2"], "config": "A", "task_id": "t"})
    >>> orders = {"r1": {"G": ["a", "b"], "H": ["c", "d", "e"]},
    ...           "r2": {"G": ["a", "b"], "H": ["e", "d", "c"]}}
    >>> repeat_orders_table(runs, orders, {"t": info})[["group_id",
    ...     "identical_in_all_repeats"]].values.tolist()
    [['G', True], ['H', False]]
    """
    rows = []
    for (config, task_id), group in runs.groupby(["config", "task_id"], sort=True):
        info = tasks.get(str(task_id))
        if info is None:
            continue
        submitted = [orders[r] for r in group["run_id"] if r in orders]
        for g in info.package.contract.groups:
            complete = [tuple(s[g.group_id]) for s in submitted
                        if is_complete(s.get(g.group_id), g.items)]
            if len(complete) < 2:
                continue
            rows.append({"task_id": task_id, "group_id": g.group_id, "n_items": len(g.items),
                         "identical_in_all_repeats": len(set(complete)) == 1,
                         "config": config, "n_repeats": len(complete)})
    return pd.DataFrame(rows, columns=["task_id", "group_id", "n_items",
                                       "identical_in_all_repeats", "config", "n_repeats"])


def repeat_agreement(
    runs: pd.DataFrame, orders: Mapping[str, Orders], tasks: Mapping[str, TaskInfo],
    seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
) -> tuple[pd.DataFrame, list[dict[str, object]]]:
    """Agreement between repeats against agreement with the other configurations.

    For each task with repeats: the mean agreement (:func:`rank_agreement`) over pairs of
    scored repeats, and the mean agreement of a scored repeat with the scored official
    run of every other configuration; the gap is the first minus the second.

    Parameters
    ----------
    runs
        Scored runs of the public tasks, official and repeated.
    orders, tasks
        Submitted orders by ``run_id``; task packages by id.
    seed, resamples
        Bootstrap seed and resamples (over tasks) of the mean gap.

    Returns
    -------
    tuple
        ``repeats_agreement.csv`` (``config, task_id, n_repeats, n_pairs,
        identical_pairs, within, between, gap``) and ``summary.csv`` rows: the mean gap
        with its interval, the tasks with a positive gap and the identical pairs.

    References
    ----------
    Paper 4.5 ("two scored repeats of the same task agree with each other more closely
    than a repeat agrees with the official run of another configuration ... 27 of the
    261 pairs of repeats submitted identical rankings. The gap runs the same way on 27
    of the 29 tasks and averages 0.173 (95% CI 0.120 to 0.231)") and Figure 12c.
    """
    repeated = runs[runs["repeat"] >= 1]
    official = runs[runs["repeat"] == 0]
    rows = []
    for (config, task_id), group in repeated.groupby(["config", "task_id"], sort=True):
        info = tasks.get(str(task_id))
        if info is None:
            continue
        contract = info.package.contract
        mine = [orders[r] for r in group["run_id"] if r in orders]
        others = [orders[r] for r in official.loc[(official["task_id"] == task_id)
                                                  & (official["config"] != config), "run_id"]
                  if r in orders]
        if len(mine) < 2:
            continue
        pairs = list(itertools.combinations(mine, 2))
        within = [rank_agreement(contract, a, b) for a, b in pairs]
        between = [rank_agreement(contract, a, b) for a in mine for b in others]
        w = float(np.nanmean(within)) if np.isfinite(within).any() else np.nan
        b = float(np.nanmean(between)) if between and np.isfinite(between).any() else np.nan
        rows.append({"config": config, "task_id": task_id, "n_repeats": len(mine),
                     "n_pairs": len(pairs), "identical_pairs": sum(a == b for a, b in pairs),
                     "within": w, "between": b, "gap": w - b})
    table = pd.DataFrame(rows, columns=["config", "task_id", "n_repeats", "n_pairs",
                                        "identical_pairs", "within", "between", "gap"])
    summary: list[dict[str, object]] = []
    gaps = table["gap"].dropna().to_numpy(dtype=float)
    if gaps.size:
        iv = bootstrap_mean(gaps, rng_for(seed, "repeat-agreement"), resamples)
        summary += [
            {"analysis": "repeats", "statistic": "agreement_gap", "value": iv.estimate,
             "ci_low": iv.low, "ci_high": iv.high, "n": gaps.size},
            {"analysis": "repeats", "statistic": "tasks_gap_positive",
             "value": int((gaps > 0).sum()), "n": gaps.size},
            {"analysis": "repeats", "statistic": "identical_repeat_pairs",
             "value": int(table["identical_pairs"].sum()), "n": int(table["n_pairs"].sum())},
        ]
    return table, summary
