"""The private tasks (paper 3.4, Table 2): means and the test against random rankings.

Each configuration's mean over its scored private tasks is compared, one-sided, with the
mean that uniformly random valid rankings of the same tasks would score, and the p-values
are Holm-corrected over the configurations. The null distribution of that mean:

- **exact task nulls** (``monte-carlo``), when the task packages and answer keys are
  given: for every task, ``draws`` task scores of random submissions (each group permuted
  uniformly, scored as the grader scores, :func:`spu.grading.chance.random_task_scores`);
  the null mean averages one independent draw per task, and
  ``p = (1 + #{null mean >= observed}) / (1 + draws)``.
- **normal approximation** (``normal``), from the runs table alone: a random submission
  scores 0 on average, and the task's chance threshold is the 95th percentile of its
  scores, so its spread is taken as ``threshold / z_0.95``; the mean of ``n`` tasks is then
  normal with SD ``sqrt(sum sd_t^2) / n``. It is rough for tasks of very few experiments;
  pass the task packages for the exact null.

Pairs of configurations on the private tasks use the exact sign-flip test (3.4).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from spu.grading.chance import random_task_scores
from spu.stats.means import above_chance
from spu.stats.paired import ALPHA, holm, sign_flip_p
from spu.stats.resampling import DEFAULT_RESAMPLES, bootstrap_mean, rng_for, wilson_interval
from spu.stats.submissions import TaskInfo

NULL_DRAWS = 40_000
"""Random submissions per task for the exact null."""


def random_ranking_null(
    tasks: Mapping[str, TaskInfo], task_ids: list[str], seed: int = 0, draws: int = NULL_DRAWS
) -> dict[str, np.ndarray]:
    """Task scores of ``draws`` random valid submissions for each task that has answers."""
    out = {}
    for task_id in task_ids:
        info = tasks.get(task_id)
        if info is None or info.answers is None:
            continue
        task_seed = int(rng_for(seed, "private-null", task_id).integers(2**62))
        out[task_id] = random_task_scores(info.package.contract, info.answers, draws, task_seed)
    return out


def p_above_random(
    scores: np.ndarray, thresholds: np.ndarray, null: list[np.ndarray] | None = None
) -> tuple[float, str]:
    """One-sided p of a mean score above that of uniformly random rankings of the same tasks.

    Parameters
    ----------
    scores
        The configuration's scores on its scored tasks.
    thresholds
        The chance thresholds of those tasks (used by the normal approximation).
    null
        Random-submission scores of each of those tasks, same order and length, or
        ``None`` for the normal approximation.

    Returns
    -------
    tuple
        The p-value and the method (``monte-carlo``, ``normal``, or ``""`` when no test).

    References
    ----------
    Paper section 3.4 and Table 2 ("P vs random").

    Examples
    --------
    Normal approximation, hand-worked: thresholds 0.329 give SD 0.329 / 1.645 = 0.2 per
    task, so the mean of 4 tasks has SD 0.1 and a mean of 0.2 sits 2 SD above 0:

    >>> p, how = p_above_random(np.full(4, 0.2), np.full(4, 0.329))
    >>> round(p, 3), how
    (0.023, 'normal')
    """
    scores = np.asarray(scores, dtype=float)
    n = scores.size
    if n == 0:
        return (np.nan, "")
    observed = scores.mean()
    if null is not None:
        null_mean = np.mean(np.vstack(null), axis=0)
        hits = int((null_mean >= observed - 1e-12).sum())
        return ((1 + hits) / (1 + null_mean.size), "monte-carlo")
    thresholds = np.asarray(thresholds, dtype=float)
    if not np.all(np.isfinite(thresholds) & (thresholds > 0)):
        return (np.nan, "")
    sd = np.sqrt(np.sum((thresholds / sps.norm.ppf(0.95)) ** 2)) / n
    return (float(sps.norm.sf(observed / sd)), "normal")


def private_table(
    runs: pd.DataFrame, order: list[str], null: Mapping[str, np.ndarray] | None = None,
    seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
) -> pd.DataFrame:
    """``private.csv``: the private-task results of each configuration (Table 2).

    Parameters
    ----------
    runs
        Official runs of the private tasks.
    order
        Configurations in table order (those without private runs are left out).
    null
        Random-submission scores by task (:func:`random_ranking_null`); a configuration
        is tested on them when every one of its scored tasks has them.
    seed, resamples
        Bootstrap seed and resamples (over the configuration's scored tasks).

    References
    ----------
    Paper section 3.4, Table 2.
    """
    null = null or {}
    rows = []
    for config in [c for c in order if c in set(runs["config"])]:
        own = runs[runs["config"] == config]
        scored = own[own["scored"]]
        values = scored["score_recovered"].to_numpy()
        thresholds = scored["threshold"].to_numpy()
        raw = bootstrap_mean(values, rng_for(seed, "private", config), resamples)
        above, known = above_chance(values, thresholds)
        low, high = wilson_interval(above, known)
        tasks = list(scored["task_id"])
        exact = [null[t] for t in tasks] if tasks and all(t in null for t in tasks) else None
        p, method = p_above_random(values, thresholds, exact)
        rows.append({
            "config": config, "n_runs": len(own), "n_scored": len(scored),
            "raw_mean": raw.estimate, "raw_ci_low": raw.low, "raw_ci_high": raw.high,
            "above_chance": above, "above_chance_share": above / known if known else np.nan,
            "above_chance_ci_low": low, "above_chance_ci_high": high,
            "p_vs_random": p, "null_method": method,
        })
    columns = ["config", "n_runs", "n_scored", "raw_mean", "raw_ci_low", "raw_ci_high",
               "above_chance", "above_chance_share", "above_chance_ci_low",
               "above_chance_ci_high", "p_vs_random", "null_method"]
    table = pd.DataFrame(rows, columns=columns)
    table.insert(11, "p_holm", holm(table["p_vs_random"].to_numpy()))
    table.insert(12, "significant", table["p_holm"] < ALPHA)
    return table


def private_pairs_table(matrix: pd.DataFrame, order: list[str], seed: int = 0) -> pd.DataFrame:
    """``private_pairs.csv``: pairs on their shared scored private tasks, exact sign-flip test.

    References
    ----------
    Paper section 3.4 ("No pair of configurations differs detectably ... exact
    sign-flip test").

    Examples
    --------
    Four shared tasks, all differences positive: 2 of the 16 sign vectors reach the
    observed |sum|, so p = 0.125:

    >>> m = pd.DataFrame({"A": [0.5, 0.6, 0.7, 0.4], "B": [0.1, 0.2, 0.3, 0.2]})
    >>> private_pairs_table(m, ["A", "B"])[["n_shared", "p_value"]].iloc[0].tolist()
    [4.0, 0.125]
    """
    order = [c for c in order if c in matrix.columns]
    rows = []
    for a, b in itertools.combinations(order, 2):
        both = matrix[[a, b]].dropna()
        d = (both[a] - both[b]).to_numpy()
        rows.append({
            "config_a": a, "config_b": b, "n_shared": d.size,
            "mean_diff": float(d.mean()) if d.size else np.nan,
            "p_value": sign_flip_p(d, rng_for(seed, "private-pairs", a, b)),
        })
    table = pd.DataFrame(rows, columns=["config_a", "config_b", "n_shared", "mean_diff",
                                        "p_value"])
    table["p_holm"] = holm(table["p_value"].to_numpy())
    table["significant"] = table["p_holm"] < ALPHA
    return table


def private_task_table(runs: pd.DataFrame) -> pd.DataFrame:
    """``private_tasks.csv``: the configurations' scores on each private task (E.5, Figure 10).

    Parameters
    ----------
    runs
        Official runs of the private tasks.

    Returns
    -------
    pandas.DataFrame
        ``task_id, discipline, subfield, n_runs, n_scored, task_mean, task_sd, task_min,
        task_max, excluded`` (excluded runs by outcome, e.g. ``refusal:3;timeout:1``),
        tasks grouped by subfield (the series of 2.4).

    References
    ----------
    Paper 3.4 ("On ionic conductivity, all thirteen configurations score between 0.89 and
    0.95"), E.5 ("Scores by task": "The electrochemical window task has a mean of
    -0.347") and Figure 10.

    Examples
    --------
    >>> runs = pd.DataFrame({"task_id": "v1", "discipline": "biology", "subfield": "VHH",
    ...     "config": ["A", "B", "C"], "scored": [True, True, False],
    ...     "outcome": ["valid", "valid", "refusal"], "score_recovered": [0.5, 0.1, -1.0]})
    >>> private_task_table(runs)[["task_id", "n_scored", "task_mean", "excluded"]
    ...     ].values.tolist()
    [['v1', 2, 0.3, 'refusal:1']]
    """
    rows = []
    for task_id, group in runs.groupby("task_id", sort=True):
        scores = group.loc[group["scored"], "score_recovered"].to_numpy(dtype=float)
        excluded = group.loc[~group["scored"], "outcome"].value_counts().sort_index()
        rows.append({
            "task_id": task_id, "discipline": group["discipline"].iloc[0],
            "subfield": group["subfield"].iloc[0] if "subfield" in group else "",
            "n_runs": len(group), "n_scored": int(scores.size),
            "task_mean": float(scores.mean()) if scores.size else np.nan,
            "task_sd": float(scores.std(ddof=1)) if scores.size >= 2 else np.nan,
            "task_min": float(scores.min()) if scores.size else np.nan,
            "task_max": float(scores.max()) if scores.size else np.nan,
            "excluded": ";".join(f"{k}:{v}" for k, v in excluded.items()),
        })
    table = pd.DataFrame(rows, columns=["task_id", "discipline", "subfield", "n_runs",
                                        "n_scored", "task_mean", "task_sd", "task_min",
                                        "task_max", "excluded"])
    return table.sort_values(["subfield", "task_id"], kind="stable").reset_index(drop=True)
