"""Seeded permutation tests of a difference in means, plain and within strata.

Several analyses of the paper ask whether runs marked one way (recovered files, runs
flagged for exposure, tasks a configuration did not complete) score differently from the
others, and answer by permuting the marks (paper 3.2, 3.3, 3.7). The null distribution
is built from relabelings of the observed values:

- **exact** when the number of distinct relabelings, ``C(n, k)`` (within strata, their
  product), is at most ``draws``: every relabeling once, ``p = #{|T| >= |t|} / N``;
- **Monte Carlo** otherwise: ``draws`` uniformly random relabelings from a seeded
  generator, ``p = (1 + #{|T| >= |t|}) / (1 + draws)`` (Phipson and Smyth 2010), so the
  observed labeling counts as one of the draws and no p-value is 0.

Two-sided tests compare ``|T|`` with ``|t|``: a difference in means has mean 0 under
every relabeling, so this is the usual two-sided permutation p.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DRAWS = 10_000
"""Relabelings of a Monte Carlo permutation test."""

_TOL = 1e-12


@dataclass(frozen=True)
class PermutationResult:
    """A permutation test: the observed statistic, its p-value and how the null was built."""

    statistic: float
    """The observed statistic."""
    p_value: float
    """Two-sided p (``|T| >= |t|``), or one-sided where the caller asked for it."""
    draws: int
    """Relabelings in the null distribution."""
    exact: bool
    """Whether every relabeling was enumerated."""


def p_from_null(null: np.ndarray, observed: float, exact: bool,
                alternative: str = "two-sided") -> float:
    """The p-value of ``observed`` against null draws (see the module docstring).

    Examples
    --------
    Exact: 2 of 4 relabelings reach |t| = 2; Monte Carlo: (1 + 2) / (1 + 4):

    >>> null = np.array([2.0, -2.0, 0.5, 1.0])
    >>> p_from_null(null, 2.0, exact=True), p_from_null(null, 2.0, exact=False)
    (0.5, 0.6)
    """
    null = np.asarray(null, dtype=float)
    if not np.isfinite(observed) or null.size == 0:
        return math.nan
    tol = _TOL * max(1.0, abs(observed))
    if alternative == "two-sided":
        hits = int((np.abs(null) >= abs(observed) - tol).sum())
    elif alternative == "greater":
        hits = int((null >= observed - tol).sum())
    elif alternative == "less":
        hits = int((null <= observed + tol).sum())
    else:
        raise ValueError(f"alternative {alternative!r} is not two-sided, greater or less")
    return hits / null.size if exact else (1 + hits) / (1 + null.size)


def relabelings(labels: np.ndarray, rng: np.random.Generator,
                draws: int = DRAWS) -> tuple[np.ndarray, bool]:
    """Relabelings of a boolean vector: every one when there are at most ``draws``.

    Returns a ``(N, n)`` boolean array and whether it is the exact enumeration.

    Examples
    --------
    >>> r, exact = relabelings(np.array([True, False, False]), np.random.default_rng(0))
    >>> r.astype(int).tolist(), exact
    ([[1, 0, 0], [0, 1, 0], [0, 0, 1]], True)
    """
    labels = np.asarray(labels, dtype=bool)
    n, k = labels.size, int(labels.sum())
    if math.comb(n, k) <= draws:
        out = np.zeros((math.comb(n, k), n), dtype=bool)
        for row, chosen in enumerate(itertools.combinations(range(n), k)):
            out[row, list(chosen)] = True
        return out, True
    return rng.permuted(np.broadcast_to(labels, (draws, n)), axis=1), False


def _mean_difference(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean of the marked values minus the mean of the others, per row of ``labels``."""
    labels = np.atleast_2d(labels)
    k = labels.sum(axis=1)
    marked = labels @ values
    return marked / k - (values.sum() - marked) / (values.size - k)


def mean_difference_test(
    values: np.ndarray, labels: np.ndarray, rng: np.random.Generator, draws: int = DRAWS,
    alternative: str = "two-sided",
) -> PermutationResult:
    """Permutation test of the mean of the marked values minus that of the others.

    Parameters
    ----------
    values
        One value per unit (a run, a task).
    labels
        True for the marked units.
    rng, draws
        Seeded generator and the number of Monte Carlo relabelings.
    alternative
        ``two-sided``, ``greater`` or ``less``.

    Returns
    -------
    PermutationResult
        NaN when one side is empty.

    References
    ----------
    Fisher (1935), *The Design of Experiments*, section 21; Phipson and Smyth (2010),
    Stat. Appl. Genet. Mol. Biol. 9, 39 (the ``+1`` of Monte Carlo p-values); the same
    test as ``scipy.stats.permutation_test(permutation_type="independent")``.

    Examples
    --------
    Hand-worked: values (1, 2, 3, 10) with 10 marked: the difference is 10 - 2 = 8, and of
    the 4 relabelings only the observed one reaches |8|, so p = 1/4:

    >>> r = mean_difference_test(np.array([1.0, 2.0, 3.0, 10.0]),
    ...                          np.array([False, False, False, True]),
    ...                          np.random.default_rng(0))
    >>> r.statistic, r.p_value, r.exact
    (8.0, 0.25, True)
    """
    values = np.asarray(values, dtype=float)
    labels = np.asarray(labels, dtype=bool)
    k = int(labels.sum())
    if k == 0 or k == values.size:
        return PermutationResult(math.nan, math.nan, 0, False)
    observed = float(_mean_difference(values, labels)[0])
    null_labels, exact = relabelings(labels, rng, draws)
    null = _mean_difference(values, null_labels)
    return PermutationResult(observed, p_from_null(null, observed, exact, alternative),
                             null.size, exact)


@dataclass(frozen=True)
class StratifiedResult:
    """Per-stratum differences and their weighted pool, each with a permutation p."""

    strata: tuple[str, ...]
    """Strata with both marked and unmarked units, in the order given."""
    per_stratum: tuple[PermutationResult, ...]
    """The test within each stratum."""
    weights: np.ndarray
    """Weight of each stratum in the pool (its marked units)."""
    pooled: PermutationResult
    """The weighted mean of the stratum differences, labels permuted within every stratum."""


def stratified_mean_difference(
    values: np.ndarray, labels: np.ndarray, strata: Sequence[str] | np.ndarray,
    rng: np.random.Generator, draws: int = DRAWS,
) -> StratifiedResult:
    """Marked minus unmarked mean within each stratum, and their pool weighted by marked units.

    The labels are permuted within each stratum, independently, so the pooled null keeps
    every stratum's count of marked units (a stratified permutation test). Strata without
    both kinds of unit are left out. The pooled null is Monte Carlo (``draws``
    relabelings of every stratum at once) unless the product of the strata's relabelings
    is at most ``draws``.

    References
    ----------
    Paper 3.2 (recovered files, "weighted by the number of recovered files ...
    permutation P=0.36") and 3.7 (flagged runs, "permutation P=0.094"); Good (2005),
    *Permutation, Parametric and Bootstrap Tests of Hypotheses*, section 3.6 (tests
    within strata).

    Examples
    --------
    Two strata, each with one marked unit among two: the pool of (3 - 1) and (5 - 4),
    weighted 1:1, is 1.5; of the 4 joint relabelings, the observed and the fully
    reversed one reach |1.5|, so p = 2/4:

    >>> r = stratified_mean_difference(np.array([1.0, 3.0, 4.0, 5.0]),
    ...     np.array([False, True, False, True]), ["a", "a", "b", "b"],
    ...     np.random.default_rng(0))
    >>> [x.statistic for x in r.per_stratum], r.pooled.statistic, r.pooled.p_value
    ([2.0, 1.0], 1.5, 0.5)
    """
    values = np.asarray(values, dtype=float)
    labels = np.asarray(labels, dtype=bool)
    strata = np.asarray(strata, dtype=object)
    names, weights, sizes, parts = [], [], [], []
    for name in dict.fromkeys(strata.tolist()):
        inside = strata == name
        v, lab = values[inside], labels[inside]
        k = int(lab.sum())
        if k == 0 or k == v.size:
            continue
        names.append(str(name))
        weights.append(float(k))
        sizes.append(math.comb(v.size, k))
        parts.append((v, lab))
    w = np.array(weights)
    if not names:
        return StratifiedResult((), (), w, PermutationResult(math.nan, math.nan, 0, False))
    # One set of relabelings per stratum serves its own test and the pool: the rows of
    # independent strata's relabelings, side by side, are relabelings of all strata.
    results, nulls = [], []
    for v, lab in parts:
        null_labels, exact = relabelings(lab, rng, draws)
        null = _mean_difference(v, null_labels)
        observed = float(_mean_difference(v, lab)[0])
        results.append(PermutationResult(observed, p_from_null(null, observed, exact),
                                         null.size, exact))
        nulls.append((null, exact))
    observed = float(np.dot(w, [r.statistic for r in results]) / w.sum())
    exact = math.prod(sizes) <= draws
    if exact:
        grid = np.array(list(itertools.product(*(null for null, _ in nulls))))
        pooled_null = grid @ w / w.sum()
    else:
        pooled_null = np.zeros(draws)
        for (null, stratum_exact), weight in zip(nulls, w, strict=True):
            # An enumerated stratum contributes uniformly drawn relabelings.
            rows = rng.integers(0, null.size, draws) if stratum_exact else slice(None)
            pooled_null += weight * null[rows]
        pooled_null /= w.sum()
    pooled = PermutationResult(observed, p_from_null(pooled_null, observed, exact),
                               pooled_null.size, exact)
    return StratifiedResult(tuple(names), tuple(results), w, pooled)


def multiset_permutations(codes: Sequence[int]) -> np.ndarray:
    """Every distinct ordering of a sequence with repeated values, ``(N, n)``.

    ``N`` is the multinomial coefficient ``n! / prod(count!)``: each assignment of the
    labels to positions once (the exact null of a label permutation).

    Examples
    --------
    >>> multiset_permutations([0, 0, 1]).tolist()
    [[0, 0, 1], [0, 1, 0], [1, 0, 0]]
    """
    values = sorted(codes)
    out: list[list[int]] = []

    def extend(prefix: list[int], remaining: list[int]) -> None:
        if not remaining:
            out.append(prefix)
            return
        for i, v in enumerate(remaining):
            if i and remaining[i - 1] == v:
                continue
            extend([*prefix, v], remaining[:i] + remaining[i + 1:])

    extend([], values)
    return np.array(out, dtype=int).reshape(len(out), len(values))
