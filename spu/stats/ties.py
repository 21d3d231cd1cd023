"""Ties decided exactly: every value compared for a tie is rounded at one stated precision.

A task score is a weighted sum of Spearman correlations; a task mean averages such scores.
Two task means that are equal as numbers (32/65 and 32/65) can differ in the last bit of
their float sums, and a rank test, a sign test or a ``>`` then breaks a tie the paper's
arithmetic keeps (3.3: the Kruskal-Wallis test over task means ranks tied means alike).
Every value a statistic compares for a tie (ranked, compared with ``>`` or ``==``, or
tested for a zero difference) is therefore rounded to :data:`TIE_DECIMALS` decimals
first:

- float noise in a sum or mean of up to thousands of scores is below 1e-12, so the same
  number computed two ways rounds to the same value;
- two scores that differ as numbers differ by far more than 1e-9 (a Spearman correlation
  of n items has a denominator of n(n^2 - 1); a task of 500 items gives about 1e-8).

Where a statistic is a permutation count, :func:`spu.stats.permutation.p_from_null`
compares with a relative tolerance of 1e-12 instead (the same idea at the null's scale).

References
----------
Paper 3.3 ("a Kruskal-Wallis test over these task means"); Kruskal and Wallis (1952),
JASA 47, 583-621 (ties take average ranks and the tie correction).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

TIE_DECIMALS = 9
"""Decimals at which values are compared for ties (1e-9)."""

TIE_RULE = (f"values compared for ties (ranks, signs, comparisons with a threshold) are "
            f"rounded to {TIE_DECIMALS} decimals first, so equal means computed by "
            "different float sums tie")
"""The tie rule as the manifest states it."""


def exact(values: Iterable[float] | np.ndarray | float) -> np.ndarray:
    """``values`` rounded to :data:`TIE_DECIMALS` decimals (NaN kept), as a float array.

    Examples
    --------
    Two task means equal to 32/65, (2/65 + 1 + 29/65) / 3 and (-34/65 + 1 + 1) / 3, differ
    in the last bit of their float sums and tie after rounding:

    >>> a = np.mean([2 / 65, 1.0, 29 / 65]); b = np.mean([-34 / 65, 1.0, 1.0])
    >>> bool(a == b), bool(exact(a) == exact(b))
    (False, True)
    """
    return np.round(np.asarray(values, dtype=float), TIE_DECIMALS)


def exact_mean(values: Iterable[float] | np.ndarray) -> float:
    """The mean of ``values`` from a correctly rounded sum (``math.fsum``), then :func:`exact`.

    NaN for no values.

    Examples
    --------
    >>> exact_mean([0.1, 0.2, 0.3]) == exact_mean([0.3, 0.2, 0.1]) == 0.2
    True
    >>> math.isnan(exact_mean([]))
    True
    """
    array = np.asarray(list(values) if not isinstance(values, np.ndarray) else values,
                       dtype=float)
    if array.size == 0:
        return math.nan
    return float(exact(math.fsum(array.tolist()) / array.size))
