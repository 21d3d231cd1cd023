"""Marked against unmarked runs of the same configuration, each relative to the others.

Recovered files against valid submissions (paper 3.2, Figure 6c) and runs flagged by the
exposure detector against unflagged ones (3.7, Figure 13d) are compared the same way:

1. each scored official run is measured against the other configurations on its task,
   its score minus the mean score of the other configurations scored there
   (:func:`relative_scores`), which removes task difficulty;
2. within each configuration, the mean of the marked runs minus that of the unmarked runs,
   with a percentile bootstrap interval (marked and unmarked runs resampled separately)
   and a permutation p (the marks permuted among the configuration's runs), Holm-corrected
   over the configurations;
3. the pooled difference, the configurations' differences weighted by their marked runs,
   with the same bootstrap and a permutation p that permutes within every configuration
   (:func:`spu.stats.permutation.stratified_mean_difference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from spu.stats.paired import holm
from spu.stats.permutation import DRAWS, stratified_mean_difference
from spu.stats.resampling import DEFAULT_RESAMPLES, percentile_interval, resample_counts, rng_for


def relative_scores(matrix: pd.DataFrame) -> pd.DataFrame:
    """Each score minus the mean of the other configurations scored on the same task.

    NaN where the run is not scored or no other configuration is scored on the task.

    References
    ----------
    Paper 3.2 ("each run's score taken relative to the mean of the other configurations
    on the same task") and 3.7.

    Examples
    --------
    A: 0.6 - (0.4 + 0.1) / 2 = 0.35; B: 0.4 - 0.35 = 0.05; C: 0.1 - 0.5 = -0.4; the second
    task has one scored configuration, so nothing to compare with:

    >>> m = pd.DataFrame({"A": [0.6, 0.2], "B": [0.4, np.nan], "C": [0.1, np.nan]})
    >>> relative_scores(m).round(3).values.tolist()
    [[0.35, 0.05, -0.4], [nan, nan, nan]]
    """
    values = matrix.to_numpy(dtype=float)
    known = np.isfinite(values)
    total = np.where(known, values, 0.0).sum(axis=1, keepdims=True)
    count = known.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        others = (total - np.where(known, values, 0.0)) / (count - 1)
    out = np.where(known & (count > 1), values - others, np.nan)
    return pd.DataFrame(out, index=matrix.index, columns=matrix.columns)


@dataclass(frozen=True)
class WithinConfigResult:
    """Per-configuration and pooled differences between marked and unmarked runs."""

    table: pd.DataFrame
    """One row per configuration with both kinds of run."""
    pooled: dict[str, Any]
    """The pooled difference: ``diff``, ``ci_low``, ``ci_high``, ``p_perm``, counts."""


COLUMNS = ("config", "n_marked", "n_unmarked", "marked_mean", "unmarked_mean", "diff",
           "ci_low", "ci_high", "p_perm", "p_holm", "exact")


def within_config_difference(
    frame: pd.DataFrame, order: list[str], key: str, seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES, draws: int = DRAWS,
) -> WithinConfigResult:
    """Marked minus unmarked mean of ``relative`` within each configuration, and pooled.

    Parameters
    ----------
    frame
        One row per scored run: ``config``, ``relative`` (score relative to the other
        configurations, :func:`relative_scores`) and ``marked`` (bool); rows with a NaN
        ``relative`` are left out.
    order
        Configurations in table order.
    key
        Name of the analysis (seeds its draws).
    seed, resamples, draws
        Seed, bootstrap resamples and permutation draws.

    Returns
    -------
    WithinConfigResult
        Columns of :data:`COLUMNS`; the pool weights each configuration by its marked runs.

    References
    ----------
    Paper 3.2 and Figure 6c (recovered files), 3.7, E.4 and Figure 13d (flagged runs);
    Efron and Tibshirani (1993), ch. 8 (two-sample bootstrap).

    Examples
    --------
    Configuration A: marked 0.5 and 0.3 against unmarked 0.1 and -0.1, a difference of
    0.4; B: marked 0.2 against 0.0 and 0.2, a difference of 0.1. Pooled, weighted 2:1:
    (2 * 0.4 + 0.1) / 3 = 0.3.

    >>> f = pd.DataFrame({"config": list("AAAABBB"),
    ...     "relative": [0.5, 0.3, 0.1, -0.1, 0.2, 0.0, 0.2],
    ...     "marked": [True, True, False, False, True, False, False]})
    >>> r = within_config_difference(f, ["A", "B"], "doc", resamples=200, draws=200)
    >>> r.table["diff"].round(3).tolist(), round(r.pooled["diff"], 3)
    ([0.4, 0.1], 0.3)
    """
    groups = _marked_groups(frame, order)
    rows, boot = _bootstrap_rows(groups, key, seed, resamples)
    values, labels, strata = _stacked(groups)
    test = stratified_mean_difference(values, labels, strata, rng_for(seed, key, "permutation"),
                                      draws)
    for row, result in zip(rows, test.per_stratum, strict=True):
        row["p_perm"] = result.p_value
        row["exact"] = result.exact
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "p_holm"])
    table.insert(9, "p_holm", holm(table["p_perm"].to_numpy()))
    pooled: dict[str, Any] = {"n_configs": len(groups),
                              "n_marked": int(sum(m.size for _, m, _ in groups)),
                              "n_unmarked": int(sum(u.size for _, _, u in groups)),
                              "diff": test.pooled.statistic, "ci_low": np.nan,
                              "ci_high": np.nan, "p_perm": test.pooled.p_value,
                              "draws": test.pooled.draws, "exact": test.pooled.exact}
    if groups:
        w = test.weights
        pooled_boot = np.vstack(boot).T @ w / w.sum()
        pooled["ci_low"], pooled["ci_high"] = (float(x) for x in percentile_interval(pooled_boot))
    return WithinConfigResult(table, pooled)


MarkedGroup = tuple[str, np.ndarray, np.ndarray]
"""A configuration with its marked and its unmarked ``relative`` scores."""


def _marked_groups(frame: pd.DataFrame, order: list[str]) -> list[MarkedGroup]:
    """The configurations with both kinds of run, in table order (NaN ``relative`` left out)."""
    frame = frame[np.isfinite(frame["relative"].to_numpy(dtype=float))]
    groups: list[MarkedGroup] = []
    for config in order:
        own = frame[frame["config"] == config]
        marked = own["marked"].to_numpy(dtype=bool)
        values = own["relative"].to_numpy(dtype=float)
        if marked.any() and (~marked).any():
            groups.append((config, values[marked], values[~marked]))
    return groups


def _bootstrap_rows(groups: list[MarkedGroup], key: str, seed: int, resamples: int
                    ) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Each configuration's means and difference with its interval, and its bootstrap draws.

    The marked and unmarked runs are resampled separately (a two-sample bootstrap).
    """
    rows, boot = [], []
    for config, m, u in groups:
        rng = rng_for(seed, key, "bootstrap", config)
        bm = resample_counts(m.size, resamples, rng) @ m / m.size
        bu = resample_counts(u.size, resamples, rng) @ u / u.size
        boot.append(bm - bu)
        low, high = percentile_interval(bm - bu)
        rows.append({"config": config, "n_marked": m.size, "n_unmarked": u.size,
                     "marked_mean": float(m.mean()), "unmarked_mean": float(u.mean()),
                     "diff": float(m.mean() - u.mean()), "ci_low": low, "ci_high": high})
    return rows, boot


def _stacked(groups: list[MarkedGroup]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values, marked labels and configuration strata of every group, end to end."""
    values = np.concatenate([np.r_[m, u] for _, m, u in groups]) if groups else np.zeros(0)
    labels = np.concatenate([np.r_[np.ones(m.size), np.zeros(u.size)]
                             for _, m, u in groups]).astype(bool) if groups else np.zeros(0, bool)
    strata = np.concatenate([np.full(m.size + u.size, c, dtype=object)
                             for c, m, u in groups]) if groups else np.zeros(0, object)
    return values, labels, strata
