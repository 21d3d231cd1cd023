"""Permutation tests: seeded Monte Carlo against exact enumeration, and against scipy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from spu.stats.permutation import (
    mean_difference_test,
    p_from_null,
    relabelings,
    stratified_mean_difference,
)


def _exact_two_sided(values: np.ndarray, labels: np.ndarray) -> float:
    """Every relabeling enumerated by hand: share with |difference| >= observed."""
    n, k = values.size, int(labels.sum())

    def diff(marked: np.ndarray) -> float:
        return values[marked].mean() - values[~marked].mean()

    observed = abs(diff(labels))
    hits = total = 0
    for chosen in itertools.combinations(range(n), k):
        marked = np.zeros(n, dtype=bool)
        marked[list(chosen)] = True
        hits += abs(diff(marked)) >= observed - 1e-12
        total += 1
    return hits / total


def test_monte_carlo_p_matches_exact_enumeration() -> None:
    """20 values, 6 marked (38,760 relabelings): the seeded Monte Carlo p with 20,000 draws
    is within 3 standard errors (sqrt(p(1 - p) / 20,000), about 0.01) of the exact p."""
    rng = np.random.default_rng(3)
    values = rng.normal(size=20)
    labels = np.zeros(20, dtype=bool)
    labels[[1, 4, 6, 9, 15, 18]] = True
    values[labels] += 0.7
    exact = _exact_two_sided(values, labels)
    enumerated = mean_difference_test(values, labels, np.random.default_rng(0), draws=40_000)
    assert enumerated.exact and enumerated.p_value == pytest.approx(exact, abs=1e-12)
    sampled = mean_difference_test(values, labels, np.random.default_rng(0), draws=20_000)
    assert not sampled.exact
    se = np.sqrt(exact * (1 - exact) / 20_000)
    assert abs(sampled.p_value - exact) < 3 * se
    again = mean_difference_test(values, labels, np.random.default_rng(0), draws=20_000)
    assert again.p_value == sampled.p_value  # fixed seed, same p


def test_statistic_and_null_agree_with_scipy_permutation_test() -> None:
    """scipy.stats.permutation_test enumerates the same relabelings: its one-sided p
    ('greater') equals ours exactly (exact case, 12 values, 4 marked)."""
    rng = np.random.default_rng(5)
    values = rng.normal(size=12)
    labels = np.zeros(12, dtype=bool)
    labels[:4] = True
    ours = mean_difference_test(values, labels, rng, draws=1000, alternative="greater")
    reference = sps.permutation_test(
        (values[labels], values[~labels]), lambda a, b: np.mean(a) - np.mean(b),
        permutation_type="independent", alternative="greater", n_resamples=np.inf)
    assert ours.exact and ours.statistic == pytest.approx(reference.statistic, abs=1e-12)
    assert ours.p_value == pytest.approx(reference.pvalue, abs=1e-12)


def test_stratified_pool_matches_exact_enumeration() -> None:
    """Three strata (8, 8 and 6 units with 3, 2 and 2 marked: 56 * 28 * 15 = 23,520 joint
    relabelings). The pooled statistic weights each stratum's difference by its marked
    units; the Monte Carlo p (20,000 draws) is within 3 standard errors of the exact p
    enumerated here by brute force."""
    rng = np.random.default_rng(8)
    sizes, marked = (8, 8, 6), (3, 2, 2)
    values = rng.normal(size=sum(sizes))
    strata = np.repeat(["a", "b", "c"], sizes)
    labels = np.zeros(values.size, dtype=bool)
    start = 0
    for n, k in zip(sizes, marked, strict=True):
        labels[start:start + k] = True
        start += n
    values[labels] += 0.5

    def stratum_diff(s: str, lab: np.ndarray) -> float:
        inside = strata == s
        return values[inside & lab].mean() - values[inside & ~lab].mean()

    observed = float(np.dot(marked, [stratum_diff(s, labels) for s in "abc"]) / sum(marked))
    # The joint relabelings are every combination of one relabeling per stratum; the pooled
    # statistic of a combination is the weighted sum of its strata's differences.
    per_stratum = []
    for s, k in zip("abc", marked, strict=True):
        diffs = []
        for chosen in itertools.combinations(np.flatnonzero(strata == s), k):
            lab = np.zeros(values.size, dtype=bool)
            lab[list(chosen)] = True
            diffs.append(stratum_diff(s, lab))
        per_stratum.append(diffs)
    null = [np.dot(marked, combo) / sum(marked) for combo in itertools.product(*per_stratum)]
    exact = float(np.mean(np.abs(null) >= abs(observed) - 1e-12))

    enumerated = stratified_mean_difference(values, labels, strata, np.random.default_rng(0),
                                            draws=30_000)
    assert enumerated.pooled.exact
    assert enumerated.pooled.statistic == pytest.approx(observed, abs=1e-12)
    assert enumerated.pooled.p_value == pytest.approx(exact, abs=1e-12)
    sampled = stratified_mean_difference(values, labels, strata, np.random.default_rng(0),
                                         draws=20_000)
    assert not sampled.pooled.exact
    assert abs(sampled.pooled.p_value - exact) < 3 * np.sqrt(exact * (1 - exact) / 20_000)
    assert list(sampled.weights) == [3.0, 2.0, 2.0]


def test_strata_without_both_kinds_are_left_out() -> None:
    r = stratified_mean_difference(np.arange(6.0), np.array([1, 0, 1, 1, 0, 0], dtype=bool),
                                   ["a", "a", "b", "b", "c", "c"], np.random.default_rng(0))
    assert r.strata == ("a",)
    empty = mean_difference_test(np.arange(3.0), np.zeros(3, dtype=bool),
                                 np.random.default_rng(0))
    assert np.isnan(empty.p_value)


def test_relabelings_and_one_sided_p() -> None:
    r, exact = relabelings(np.array([True, True, False, False]), np.random.default_rng(0))
    assert exact and r.shape == (6, 4) and (r.sum(axis=1) == 2).all()
    assert len({tuple(x) for x in r}) == 6
    sampled, exact = relabelings(np.ones(30, dtype=bool) & (np.arange(30) < 10),
                                 np.random.default_rng(0), draws=50)
    assert not exact and sampled.shape == (50, 30) and (sampled.sum(axis=1) == 10).all()
    null = np.array([-3.0, -1.0, 0.0, 1.0, 2.0])
    assert p_from_null(null, 1.0, exact=True, alternative="greater") == 2 / 5
    assert p_from_null(null, -1.0, exact=True, alternative="less") == 2 / 5
    assert p_from_null(null, 2.0, exact=False) == (1 + 2) / (1 + 5)
