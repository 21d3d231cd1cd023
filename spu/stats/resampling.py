"""Seeded resampling: percentile bootstrap intervals and the Wilson interval.

Every random draw of the statistics goes through :func:`rng_for`, which derives an
independent generator from the user's seed and the name of the analysis, so one
analysis gives the same numbers whatever else runs and in whatever order.
"""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 10_000
"""Bootstrap resamples of paper section 3.1."""

LEVEL = 0.95
"""Coverage of every interval."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval."""

    estimate: float
    low: float
    high: float


def rng_for(seed: int, *keys: str) -> np.random.Generator:
    """A generator for one analysis, derived from ``seed`` and the analysis' name.

    Examples
    --------
    >>> a = rng_for(0, "raw", "Astra Max").random()
    >>> b = rng_for(0, "raw", "Astra Max").random()
    >>> a == b, a == rng_for(0, "raw", "Opus 5").random()
    (True, False)
    """
    return np.random.default_rng([int(seed), *(zlib.crc32(k.encode("utf-8")) for k in keys)])


def percentile_interval(draws: np.ndarray, level: float = LEVEL, axis: int = 0) -> np.ndarray:
    """Percentile interval of bootstrap ``draws`` along ``axis``; NaN draws are ignored.

    Returns an array whose first axis holds the low and the high end.

    Examples
    --------
    >>> percentile_interval(np.arange(101.0)).round(6).tolist()
    [2.5, 97.5]
    """
    tail = 100 * (1 - level) / 2
    draws = np.asarray(draws, dtype=float)
    if draws.shape[axis] == 0 or np.isnan(draws).all():
        shape = np.delete(np.array(draws.shape), axis)
        return np.full((2, *shape), np.nan)
    with warnings.catch_warnings():  # a column of NaN draws gives a NaN interval
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanpercentile(draws, [tail, 100 - tail], axis=axis)


def bootstrap_mean(
    values: np.ndarray, rng: np.random.Generator, resamples: int = DEFAULT_RESAMPLES,
    level: float = LEVEL,
) -> Interval:
    """Mean of ``values`` with a percentile bootstrap interval, resampling the values.

    Parameters
    ----------
    values
        One value per resampled unit (a task, or a run).
    rng
        Seeded generator (see :func:`rng_for`).
    resamples
        Number of bootstrap resamples.
    level
        Coverage of the interval.

    Returns
    -------
    Interval
        NaN everywhere for no values.

    References
    ----------
    Efron and Tibshirani (1993), *An Introduction to the Bootstrap*, ch. 13; paper
    section 3.1 (10,000 resamples of tasks).

    Examples
    --------
    With two values every resampled mean is one of them or their average, so the
    95% interval spans them (paper Table 2, Fable 5.1 on two private tasks):

    >>> iv = bootstrap_mean(np.array([-0.524, 0.952]), rng_for(0, "doc"))
    >>> round(iv.estimate, 3), iv.low, iv.high
    (0.214, -0.524, 0.952)
    """
    values = np.asarray(values, dtype=float)
    n = values.size
    if n == 0:
        return Interval(np.nan, np.nan, np.nan)
    means = values[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    low, high = percentile_interval(means, level)
    return Interval(float(values.mean()), float(low), float(high))


def resample_counts(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """How often each of ``n`` units is drawn in each resample: ``(resamples, n)`` counts.

    Drawing ``n`` units with replacement is a multinomial draw of the counts; a
    weighted statistic with these counts equals the statistic of the resampled data.
    The units drawn are counted with one ``bincount`` (three times faster than numpy's
    multinomial sampler at 10,000 x 100).

    Examples
    --------
    >>> c = resample_counts(5, 3, np.random.default_rng(0))
    >>> c.shape, c.sum(axis=1).tolist()
    ((3, 5), [5.0, 5.0, 5.0])
    """
    if n == 0:
        return np.zeros((resamples, 0))
    drawn = rng.integers(0, n, size=(resamples, n)) + n * np.arange(resamples)[:, None]
    return np.bincount(drawn.ravel(), minlength=resamples * n).reshape(resamples, n).astype(
        float)


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a proportion.

    Parameters
    ----------
    successes, n
        Count of successes and of trials.
    level
        Coverage.

    Returns
    -------
    tuple of float
        Low and high end; NaN for ``n == 0``.

    References
    ----------
    Wilson, E. B. (1927), JASA 22, 209-212; paper Figure 9c. Computed by
    ``statsmodels.stats.proportion.proportion_confint(method="wilson")``.

    Examples
    --------
    Hand-worked for 52 of 100 at 95% (z = 1.959964, z^2 = 3.841459): centre
    (52 + 1.920729) / 103.841459 = 0.519260, half-width
    1.959964 / 103.841459 * sqrt(52 * 48 / 100 + 0.960365) = 0.096097:

    >>> [round(x, 4) for x in wilson_interval(52, 100)]
    [0.4232, 0.6154]
    """
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return (np.nan, np.nan)
    low, high = proportion_confint(successes, n, alpha=1 - level, method="wilson")
    return (float(low), float(high))
