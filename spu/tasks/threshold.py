"""Chance level of a task, sampled as the paper does and, where feasible, exactly.

The paper's chance threshold is the 95th percentile of the task score over 4,000
random valid submissions (section 2.5); :mod:`spu.grading.chance` draws them. This
module adds the exact distribution of the task score under uniformly random
orderings:

- a group of at most :data:`ENUMERATION_MAX_ITEMS` experiments is **enumerated**
  (every permutation scored);
- a larger group of at most :data:`EXACT_MAX_ITEMS` experiments is counted by
  **dynamic programming** over the subsets of experiments already placed;
- the groups of a task are independent, so the task score's distribution is the
  **convolution** of the weighted per-group distributions.

The exact threshold is the smallest attainable score ``q`` with
``P(S <= q) >= 0.95``; a score above it beats random ranking at ``P < 0.05``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from spu.grading.chance import DEFAULT_DRAWS, DEFAULT_SEED, QUANTILE, chance_threshold
from spu.grading.rules import GradingKey, rho_terms, twice_ranks
from spu.schema import AnswerKey, Contract

ENUMERATION_MAX_ITEMS = 8
"""Groups up to this size are enumerated permutation by permutation (8! = 40,320)."""

EXACT_MAX_ITEMS = 14
"""Groups up to this size get an exact distribution (dynamic programming above 8).

Counting 14 experiments takes about 0.3 s and 16 about 4 s on one core; larger groups
are sampled only."""

CONVOLUTION_MAX_SUPPORT = 20_000_000
"""Largest product of support sizes convolved exactly; beyond it only the sample is given."""

_ROUND = 12
"""Decimals to which scores are merged: distinct scores differ by far more than 1e-12."""


@dataclass(frozen=True)
class ScoreDistribution:
    """A discrete distribution of scores: sorted distinct values and their probabilities."""

    values: np.ndarray
    probabilities: np.ndarray
    method: str
    """``enumeration``, ``dynamic-programming`` or ``convolution``."""

    def quantile(self, q: float = QUANTILE) -> float:
        """Smallest value whose cumulative probability reaches ``q`` (inverse CDF)."""
        cdf = np.cumsum(self.probabilities)
        index = int(np.searchsorted(cdf, q - 1e-12, side="left"))
        return float(self.values[min(index, self.values.size - 1)])

    def tail_probability(self, score: float) -> float:
        """``P(S >= score)`` under uniformly random orderings."""
        return float(self.probabilities[self.values >= score - 1e-12].sum())


@dataclass(frozen=True)
class ThresholdReport:
    """The chance level of one task (SPEC ``spu task threshold --json``, plus the exact part)."""

    task_id: str
    threshold: float
    """The chance threshold in use: the sampled one unless the exact one was asked for."""
    threshold_method: str
    """Which one ``threshold`` is: ``sampled`` or ``exact``."""
    sampled_threshold: float
    """95th percentile of ``draws`` seeded random submissions (paper section 2.5)."""
    draws: int
    seed: int
    attainable_max: float
    """Score of a perfect strict ordering; below 1 when measured values tie."""
    presented_order_score: float
    """Score of submitting every group in its ``targets.csv`` row order."""
    exact_threshold: float | None
    """Exact 95th percentile (inverse CDF), or None when no exact method applies."""
    exact_method: str | None
    """``enumeration``, ``dynamic-programming`` or ``convolution``; None when not exact."""
    exact_note: str = ""
    """Why no exact threshold was computed, when none was."""
    group_methods: dict[str, str] = field(default_factory=dict)
    """Exact method of each group (``sampled`` where the group is too large)."""

    @property
    def presented_order_beats_chance(self) -> bool:
        """Whether the presented order scores above ``threshold`` (paper E.4: 6 of 100 tasks)."""
        return self.presented_order_score > self.threshold

    def public_json(self) -> dict[str, object]:
        """The object printed by ``spu task threshold --json``."""
        return {
            "task_id": self.task_id,
            "threshold": self.threshold,
            "threshold_method": self.threshold_method,
            "sampled_threshold": self.sampled_threshold,
            "draws": self.draws,
            "seed": self.seed,
            "attainable_max": self.attainable_max,
            "presented_order_score": self.presented_order_score,
            "presented_order_beats_chance": self.presented_order_beats_chance,
            "exact_threshold": self.exact_threshold,
            "exact_method": self.exact_method,
            "exact_note": self.exact_note,
            "group_methods": dict(self.group_methods),
        }


def _twice_ranks(measured: Sequence[float]) -> np.ndarray:
    # The grader's integer ranks (twice the average ranks): sums over them are exact.
    return np.array(twice_ranks(list(measured)), dtype=np.int64)


def _distribution_of_sums(counts: np.ndarray, twice: np.ndarray, offset: int,
                          method: str) -> ScoreDistribution:
    """Scores of the sums ``offset + k`` (k where ``counts`` > 0), as the grader scores them."""
    counts_arr = np.asarray(counts, dtype=np.float64)
    support = np.nonzero(counts_arr)[0]
    probs = counts_arr[support] / counts_arr[support].sum()
    n = twice.size
    terms = rho_terms(n, int(twice.sum()), int((twice * twice).sum()))
    if terms is None:
        # rho undefined (one experiment, or all values equal): the grader scores 0.
        return ScoreDistribution(values=np.zeros(1), probabilities=np.ones(1), method=method)
    rho_offset, denominator = terms
    # The grader's exact integer numerator and its one division (rules.rho_terms).
    sums = support.astype(np.int64) + offset
    rho = np.clip((n * sums - rho_offset) / denominator, -1.0, 1.0)
    return _merge(rho, probs, method)


def _merge(values: np.ndarray, probabilities: np.ndarray, method: str) -> ScoreDistribution:
    keys = np.round(values, _ROUND)
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    merged = np.zeros(unique.size)
    np.add.at(merged, inverse, probabilities)
    return ScoreDistribution(values=values[first], probabilities=merged, method=method)


def enumerate_rho(measured: Sequence[float]) -> ScoreDistribution:
    """Distribution of Spearman's rho over every permutation of a small group.

    Parameters
    ----------
    measured
        The measured values of the group (ties allowed).

    Returns
    -------
    ScoreDistribution
        Each distinct rho with its probability under a uniformly random ordering.

    References
    ----------
    Paper section 2.5 (group score, eq. 1; chance level). Kendall, M. G. (1970),
    *Rank Correlation Methods*, ch. 5: the null distribution of Spearman's rho.

    Examples
    --------
    Four distinct values: rho is 1 for one of the 24 orderings and 0.8 for three,
    so ``P(rho >= 0.8) = 4/24`` (hand-worked; Kendall's table gives the same).

    >>> d = enumerate_rho([1.0, 2.0, 3.0, 4.0])
    >>> round(d.tail_probability(0.8) * 24)
    4
    >>> d.quantile(0.95)
    0.8
    """
    twice = _twice_ranks(measured)
    n = twice.size
    perms = np.array(list(itertools.permutations(range(n))), dtype=np.int64)
    # Row i of perms is an ordering: position k holds item perms[i, k].
    sums = (twice[perms] * np.arange(n, dtype=np.int64)).sum(axis=1)
    low = int(sums.min())
    counts = np.bincount(sums - low)
    return _distribution_of_sums(counts, twice, low, "enumeration")


def count_rho(measured: Sequence[float]) -> ScoreDistribution:
    """Exact distribution of Spearman's rho by dynamic programming over placed subsets.

    Positions are filled from 0 upwards; the state is the set of experiments already
    placed, and it carries the count of orderings reaching each partial sum of
    ``position x 2 x rank``. Counts are whole numbers held exactly in float64 for
    ``n <= 18``.

    References
    ----------
    Paper section 2.5; Kendall (1970), *Rank Correlation Methods*, ch. 5.

    Examples
    --------
    Thirteen distinct items, as in the paper's Figure 2 task (chance threshold 0.47):

    >>> round(count_rho(range(13)).quantile(0.95), 4)
    0.478
    """
    twice = _twice_ranks(list(measured))
    n = twice.size
    if n > 18:
        raise ValueError(f"count_rho handles up to 18 experiments, not {n}")
    # layer k: all masks with k bits; rows of `counts` follow `masks`.
    masks = np.array([0], dtype=np.int64)
    counts = np.ones((1, 1))
    for k in range(n):
        next_masks = np.array(
            sorted({m | (1 << j) for m in masks.tolist() for j in range(n) if not m >> j & 1}),
            dtype=np.int64,
        )
        row_of = {m: i for i, m in enumerate(next_masks.tolist())}
        width = counts.shape[1] + k * int(twice.max())
        nxt = np.zeros((next_masks.size, width))
        for j in range(n):
            has_j = (masks >> j) & 1
            src = np.nonzero(has_j == 0)[0]
            if src.size == 0:
                continue
            dst = np.array([row_of[int(m) | (1 << j)] for m in masks[src]], dtype=np.int64)
            shift = k * int(twice[j])
            nxt[dst, shift:shift + counts.shape[1]] += counts[src]
        masks, counts = next_masks, nxt
    return _distribution_of_sums(counts[0], twice, 0, "dynamic-programming")


def group_distribution(measured: Sequence[float]) -> ScoreDistribution | None:
    """Exact rho distribution of one group, or None when the group is too large."""
    n = len(measured)
    if n <= ENUMERATION_MAX_ITEMS:
        return enumerate_rho(measured)
    if n <= EXACT_MAX_ITEMS:
        return count_rho(measured)
    return None


def convolve(parts: Sequence[tuple[float, ScoreDistribution]]) -> ScoreDistribution:
    """Distribution of ``sum(weight x score)`` of independent weighted distributions.

    Examples
    --------
    Two groups of two experiments, weights 0.5: each rho is -1 or 1 with
    probability 1/2, so the task score is -1, 0 or 1 with 1/4, 1/2, 1/4.

    >>> two = enumerate_rho([1.0, 2.0])
    >>> d = convolve([(0.5, two), (0.5, two)])
    >>> d.values.tolist(), d.probabilities.tolist()
    ([-1.0, 0.0, 1.0], [0.25, 0.5, 0.25])
    """
    if len(parts) == 1:
        weight, dist = parts[0]
        return _merge(weight * dist.values, dist.probabilities, dist.method)
    values = np.zeros(1)
    probs = np.ones(1)
    for weight, dist in parts:
        values = np.add.outer(values, weight * dist.values).ravel()
        probs = np.multiply.outer(probs, dist.probabilities).ravel()
        merged = _merge(values, probs, "convolution")
        values, probs = merged.values, merged.probabilities
    return ScoreDistribution(values=values, probabilities=probs, method="convolution")


def exact_task_distribution(
    contract: Contract, answers: AnswerKey
) -> tuple[ScoreDistribution | None, dict[str, str], str]:
    """Exact task-score distribution where every group allows it.

    Returns the distribution (or None), the method of each group, and a note saying
    why no exact distribution was computed when none was.
    """
    parts: list[tuple[float, ScoreDistribution]] = []
    methods: dict[str, str] = {}
    support = 1
    too_large: list[str] = []
    for g in contract.groups:
        measured = [answers.groups[g.group_id][i] for i in g.items]
        dist = group_distribution(measured)
        if dist is None:
            methods[g.group_id] = "sampled"
            too_large.append(f"{g.group_id} ({len(measured)} experiments)")
            continue
        methods[g.group_id] = dist.method
        parts.append((g.weight, dist))
        support *= dist.values.size
    if too_large:
        note = (f"groups above {EXACT_MAX_ITEMS} experiments have no exact distribution "
                f"here: {', '.join(too_large)}")
        return None, methods, note
    if support > CONVOLUTION_MAX_SUPPORT:
        return None, methods, (f"the convolution would span {support} score combinations "
                               f"(limit {CONVOLUTION_MAX_SUPPORT})")
    return convolve(parts), methods, ""


def attainable_max(contract: Contract, answers: AnswerKey) -> float:
    """Score of the best strict ordering: 1 without ties, slightly less with them."""
    orders = {}
    for g in contract.groups:
        measured = answers.groups[g.group_id]
        orders[g.group_id] = sorted(g.items, key=measured.__getitem__)
    return GradingKey.build(contract, answers).score_orders(orders)


def presented_orders(contract: Contract, presented: Sequence[str]) -> dict[str, list[str]]:
    """Each group's experiments in the order the task presents them: the one input order.

    The presented order (paper 3.7, 4.2, E.4, E.7: "the input order") is the order of
    the rows of ``targets.csv``, whatever order the contract lists a group's items in;
    the presented-order score, the ``presented_order`` baseline, ``spu stats`` and the
    first-draft detection of ``spu analyze`` all take it from here. ``presented`` lists
    experiment ids in file order; ids of a group missing from it keep their contract
    order at the end.

    Examples
    --------
    >>> from spu.schema import ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[
    ...     ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["a", "b", "c"])])
    >>> presented_orders(c, ["c", "x", "a"])
    {'G': ['c', 'a', 'b']}
    """
    where = {eid: k for k, eid in enumerate(presented)}
    return {
        g.group_id: sorted(g.items, key=lambda i: where.get(i, len(where) + g.items.index(i)))
        for g in contract.groups
    }


def presented_order_score(
    contract: Contract, answers: AnswerKey, presented: Sequence[str]
) -> float:
    """Score of submitting each group in the order its experiments are presented.

    ``presented`` lists experiment ids in file order (``targets.csv``); the orders are
    :func:`presented_orders`.
    """
    return GradingKey.build(contract, answers).score_orders(presented_orders(contract, presented))


def task_threshold(
    contract: Contract,
    answers: AnswerKey,
    presented: Sequence[str],
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
    prefer_exact: bool = False,
) -> ThresholdReport:
    """Sampled and exact chance thresholds, attainable maximum and presented-order score.

    Parameters
    ----------
    contract, answers
        The task's contract and measured values.
    presented
        Experiment ids in ``targets.csv`` row order.
    draws, seed
        Random valid submissions drawn for the sampled threshold (paper: 4,000).
    prefer_exact
        Make ``threshold`` the exact one where it exists (``threshold_method`` says
        which was used); by default it is the sampled one, as in the paper and in
        the run records.

    Returns
    -------
    ThresholdReport
        ``exact_threshold`` is given whenever every group can be enumerated or
        counted exactly, whichever ``threshold`` holds.

    References
    ----------
    Paper section 2.5, "Chance level" and "Scoring" (attainable maximum with ties).

    Examples
    --------
    >>> from spu.schema import ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[ComparisonGroup(
    ...     group_id="G", endpoint="y", weight=1.0, items=list("abcde"))])
    >>> a = AnswerKey(task_id="t", task_version="1",
    ...               groups={"G": dict(zip("abcde", [3.0, 1.0, 4.0, 1.5, 9.0]))})
    >>> r = task_threshold(c, a, presented=list("abcde"))

    Measured ranks in presented order are 3, 1, 4, 2, 5, so the squared rank
    differences sum to 10 and rho = 1 - 6 x 10 / (5 x 24) = 0.5 (hand-worked):

    >>> r.exact_threshold, r.exact_method, r.presented_order_score
    (0.8, 'enumeration', 0.5)
    """
    sampled = chance_threshold(contract, answers, draws=draws, seed=seed)
    dist, methods, note = exact_task_distribution(contract, answers)
    exact = None if dist is None else dist.quantile(QUANTILE)
    use_exact = prefer_exact and exact is not None
    return ThresholdReport(
        task_id=contract.task_id,
        threshold=exact if use_exact and exact is not None else sampled,
        threshold_method="exact" if use_exact else "sampled",
        sampled_threshold=sampled,
        draws=draws,
        seed=seed,
        attainable_max=attainable_max(contract, answers),
        presented_order_score=presented_order_score(contract, answers, presented),
        exact_threshold=exact,
        # convolve() names one group's method, or "convolution" for several groups.
        exact_method=None if dist is None else dist.method,
        exact_note=note,
        group_methods=methods,
    )
