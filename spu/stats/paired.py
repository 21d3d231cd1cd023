"""Paired comparisons of configurations on their shared scored tasks (paper 3.3, E.2).

For every pair: the tasks scored for both, the mean difference (a minus b), the
two-sided Wilcoxon signed-rank test with scipy's defaults, Holm's correction over all
pairs, and the difference detectable with 80% power, ``z * s_d / sqrt(n)`` with ``z``
the sum of the normal quantiles of the power and of the two-sided level.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from spu.stats.ties import exact

ALPHA = 0.05
"""Family-wise level of the tests."""

POWER = 0.8
"""Power of the detectable difference."""

EXACT_SIGN_FLIP_MAX = 16
"""Largest number of pairs whose 2**n sign flips are enumerated exactly."""


def detectable_difference_z(alpha: float, power: float = POWER) -> float:
    """``z`` of the detectable difference: normal quantiles of the level and the power.

    Parameters
    ----------
    alpha
        Two-sided test level.
    power
        Power to detect the difference.

    Returns
    -------
    float
        ``Phi^-1(1 - alpha / 2) + Phi^-1(power)``.

    References
    ----------
    Paper appendix E.2, "Detectable differences" (4.26 at 0.05/78, 2.80 at 0.05).

    Examples
    --------
    >>> round(detectable_difference_z(0.05 / 78), 2), round(detectable_difference_z(0.05), 2)
    (4.26, 2.8)
    """
    return float(sps.norm.isf(alpha / 2) + sps.norm.ppf(power))


def holm(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values; NaN entries stay NaN and are not counted.

    Parameters
    ----------
    p_values
        Unadjusted p-values of one family.

    Returns
    -------
    numpy.ndarray
        Adjusted p-values in the input order: the running maximum of
        ``(m - i) * p_(i)`` over the sorted p-values, capped at 1.

    References
    ----------
    Holm, S. (1979), Scand. J. Statist. 6, 65-70; paper 3.1 (78 pairs). The steps of
    ``statsmodels.stats.multitest.multipletests(method="holm")``, which the tests match.

    Examples
    --------
    Hand-worked: sorted 0.01, 0.02, 0.04 times 3, 2, 1 give 0.03, 0.04, 0.04:

    >>> holm([0.04, 0.01, 0.02]).round(6).tolist()
    [0.04, 0.03, 0.04]
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    known = np.isfinite(p)
    if known.any():
        # statsmodels' own steps (multipletests, method="holm"), without the full
        # gc.collect() it makes after them (0.4 s in a process holding a few runs tables).
        order = np.argsort(p[known])
        ranked = p[known][order] * np.arange(order.size, 0, -1)
        adjusted = np.minimum(np.maximum.accumulate(ranked), 1.0)
        values = np.empty_like(adjusted)
        values[order] = adjusted
        out[known] = values
    return out


def wilcoxon_p(differences: np.ndarray) -> tuple[float, float]:
    """Two-sided Wilcoxon signed-rank statistic and p with scipy's defaults.

    NaN when there is no nonzero difference to rank.

    References
    ----------
    Wilcoxon, F. (1945), Biometrics Bull. 1, 80-83; ``scipy.stats.wilcoxon``; paper 3.1.

    Examples
    --------
    >>> wilcoxon_p(np.array([0.1, -0.2, 0.3, 0.0, 0.5]))
    (2.0, 0.375)
    """
    d = exact(differences)  # a zero or tied difference is one at the tie precision
    if d.size == 0 or not np.any(d != 0):
        return (np.nan, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = sps.wilcoxon(d)
    return (float(result.statistic), float(result.pvalue))


def sign_flip_p(
    differences: np.ndarray, rng: np.random.Generator | None = None, draws: int = 100_000
) -> float:
    """Two-sided sign-flip (permutation) test of a zero mean paired difference.

    Exact over all ``2**n`` sign vectors up to :data:`EXACT_SIGN_FLIP_MAX` pairs, and a
    seeded Monte Carlo estimate ``(1 + hits) / (1 + draws)`` beyond.

    References
    ----------
    Fisher (1935), *The Design of Experiments*, section 21; paper 3.4 (exact
    sign-flip test for pairs on the private tasks).

    Examples
    --------
    Hand-worked for d = (1, 2, 3): of the 8 sign vectors only +++ and --- reach
    |sum| = 6, so p = 2/8:

    >>> sign_flip_p(np.array([1.0, 2.0, 3.0]))
    0.25
    """
    # Not scipy.stats.permutation_test, which the tests match exactly: its exact path is
    # 10-100 times slower here (12-16 pairs: 0.1-2 s against 1-90 ms), and its Monte
    # Carlo p-value doubles the smaller one-sided count, so seeded results would change.
    d = np.asarray(differences, dtype=float)
    n = d.size
    if n == 0:
        return np.nan
    observed = abs(d.sum())
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    if n <= EXACT_SIGN_FLIP_MAX:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        sums = (1 - 2 * bits) @ d
        return float((np.abs(sums) >= observed - tol).mean())
    rng = rng if rng is not None else np.random.default_rng(0)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(draws, n))
    hits = int((np.abs(signs @ d) >= observed - tol).sum())
    return (1 + hits) / (1 + draws)


def paired_table(
    matrix: pd.DataFrame, order: list[str], alpha: float = ALPHA, power: float = POWER
) -> pd.DataFrame:
    """``pairs.csv``: every pair of configurations on their shared scored tasks.

    Parameters
    ----------
    matrix
        Scores of scored runs, tasks x configurations (NaN where not scored).
    order
        Configurations in table order; ``config_a`` precedes ``config_b``.
    alpha, power
        Family-wise level and power of the detectable differences.

    Returns
    -------
    pandas.DataFrame
        Columns ``config_a, config_b, n_shared, mean_diff, p_value, p_holm, significant,
        mde, mde_uncorrected`` then ``sd_diff, statistic``. ``mde`` uses the level
        ``alpha / number of pairs``, the strictest the Holm correction applies.

    References
    ----------
    Paper 3.1 and 3.3 ("Paired comparisons"), appendix E.2 and Figure 25.

    Examples
    --------
    >>> m = pd.DataFrame({"A": [0.5, 0.6, 0.7, 0.2], "B": [0.1, 0.3, 0.2, 0.1]})
    >>> row = paired_table(m, ["A", "B"]).iloc[0]
    >>> int(row.n_shared), round(float(row.mean_diff), 3), round(float(row.p_value), 3)
    (4, 0.325, 0.125)
    """
    pairs = list(itertools.combinations(order, 2))
    z_corrected = detectable_difference_z(alpha / max(len(pairs), 1), power)
    z_uncorrected = detectable_difference_z(alpha, power)
    rows = []
    for a, b in pairs:
        both = matrix[[a, b]].dropna()
        d = (both[a] - both[b]).to_numpy()
        n = d.size
        statistic, p = wilcoxon_p(d)
        sd = float(np.std(d, ddof=1)) if n >= 2 else np.nan
        rows.append({
            "config_a": a,
            "config_b": b,
            "n_shared": n,
            "mean_diff": float(d.mean()) if n else np.nan,
            "p_value": p,
            "mde": z_corrected * sd / np.sqrt(n) if n >= 2 else np.nan,
            "mde_uncorrected": z_uncorrected * sd / np.sqrt(n) if n >= 2 else np.nan,
            "sd_diff": sd,
            "statistic": statistic,
        })
    columns = ["config_a", "config_b", "n_shared", "mean_diff", "p_value", "mde",
               "mde_uncorrected", "sd_diff", "statistic"]
    table = pd.DataFrame(rows, columns=columns)
    table.insert(5, "p_holm", holm(table["p_value"].to_numpy()))
    table.insert(6, "significant", table["p_holm"] < alpha)
    return table[["config_a", "config_b", "n_shared", "mean_diff", "p_value", "p_holm",
                  "significant", "mde", "mde_uncorrected", "sd_diff", "statistic"]]
