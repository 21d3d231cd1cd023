"""Chance level of a task: the score distribution of uniformly random valid submissions.

References
----------
Paper section 2.5, "Chance level": 4,000 random valid submissions, each permuting every
group, and the 95th percentile of the resulting task scores.
"""

from __future__ import annotations

import numpy as np

from spu.grading.rules import GradingKey
from spu.schema import AnswerKey, Contract

DEFAULT_DRAWS = 4000
"""Random submissions per task (paper section 2.5)."""
DEFAULT_SEED = 0
"""Seed of the draws: the same task always gets the same threshold."""
QUANTILE = 0.95
"""The percentile of random submissions' scores that is the chance threshold."""


def random_task_scores(
    contract: Contract, answers: AnswerKey, draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED
) -> np.ndarray:
    """Task scores of ``draws`` uniformly random valid submissions (seeded).

    Each draw permutes every group uniformly and scores it exactly as the grader
    does, to the last bit: Spearman's rho against average measured ranks, weighted
    and added in contract order. A group whose rho is undefined (one experiment, or
    all values equal) scores 0, as in the grader.

    Parameters
    ----------
    contract, answers
        The task's contract and measured values.
    draws
        Number of random submissions.
    seed
        Seed of ``numpy.random.default_rng``: the same seed gives the same scores.

    Returns
    -------
    numpy.ndarray
        ``draws`` task scores.

    References
    ----------
    Paper section 2.5, "Chance level".

    Examples
    --------
    Two experiments: a random order is right or reversed, rho is 1 or -1.

    >>> from spu.schema import Contract, AnswerKey, ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[ComparisonGroup(
    ...     group_id="G", endpoint="y", weight=1.0, items=["a", "b"])])
    >>> a = AnswerKey(task_id="t", task_version="1", groups={"G": {"a": 1.0, "b": 2.0}})
    >>> sorted(set(random_task_scores(c, a, draws=100).tolist()))
    [-1.0, 1.0]
    """
    rng = np.random.default_rng(seed)
    total = np.zeros(draws)
    for group in GradingKey.build(contract, answers).groups:
        terms = group.rho_terms()
        if terms is None:
            continue  # rho undefined: the grader scores the group 0 whatever the order
        offset, denominator = terms
        twice = np.array([group.twice_rank[i] for i in group.items], dtype=float)
        # Row k of argsort(random) is a uniform permutation: the position of each item.
        positions = np.argsort(rng.random((draws, twice.size)), axis=1).astype(float)
        # The grader's integer sums (exact in float64: integers far below 2**53, whatever
        # the order of addition) and its two roundings (rules.rho_terms), so every draw
        # scores what grade_submission gives that ordering, to the last bit.
        rho = np.clip((twice.size * (positions @ twice) - offset) / denominator, -1.0, 1.0)
        total += group.weight * rho
    return np.clip(total, -1.0, 1.0)


def chance_threshold(
    contract: Contract, answers: AnswerKey, draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED
) -> float:
    """The chance threshold: 95th percentile of random valid submissions' task scores.

    A score above it beats random ranking at P < 0.05. The percentile is numpy's
    default (linear interpolation between order statistics).

    Parameters
    ----------
    contract, answers
        The task's contract and measured values.
    draws, seed
        Number of random submissions (4,000 in the paper) and the seed.

    Returns
    -------
    float
        The threshold.

    References
    ----------
    Paper section 2.5, "Chance level": 4,000 draws; thresholds between 0.71 and 0.80
    for tasks of fewer than seven experiments.

    Examples
    --------
    One group of five distinct values. Of the 120 orders, 1 scores rho = 1, 4 score
    0.9 and 3 score 0.8 (hand count), so P(rho >= 0.9) = 5/120 = 0.042 < 0.05 and
    P(rho >= 0.8) = 8/120 = 0.067: the 95th percentile is 0.8.

    >>> from spu.schema import Contract, AnswerKey, ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[ComparisonGroup(
    ...     group_id="G", endpoint="y", weight=1.0, items=list("abcde"))])
    >>> a = AnswerKey(task_id="t", task_version="1",
    ...               groups={"G": dict(zip("abcde", [1.0, 2.0, 3.0, 4.0, 5.0]))})
    >>> round(chance_threshold(c, a), 12)
    0.8
    """
    return float(np.quantile(random_task_scores(contract, answers, draws, seed), QUANTILE))


def tie_free_key(contract: Contract) -> AnswerKey:
    """A stand-in answer key with distinct values (each experiment's position in its group).

    Spearman's rho of a uniformly random order against any ranking without ties has
    one distribution, so this key gives the chance threshold of a task whose
    measurements are not known yet (they are assumed to have no ties).
    """
    return AnswerKey(task_id=contract.task_id, task_version=contract.task_version,
                     groups={g.group_id: {item: float(i) for i, item in enumerate(g.items)}
                             for g in contract.groups})


def chance_threshold_without_ties(contract: Contract, draws: int = DEFAULT_DRAWS,
                                  seed: int = DEFAULT_SEED) -> float:
    """The chance threshold of a task without an answer key, assuming no measured ties.

    The threshold :func:`chance_threshold` gives with :func:`tie_free_key`; it is
    recomputed from the real key when that arrives (``spu regrade``).

    Parameters
    ----------
    contract
        The task's contract.
    draws, seed
        Number of random submissions and the seed.

    Returns
    -------
    float
        The threshold.

    References
    ----------
    Paper section 2.5, "Chance level".

    Examples
    --------
    One group of five experiments: the same 0.8 as five distinct measured values give
    (the hand count of :func:`chance_threshold`).

    >>> from spu.schema import Contract, ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[ComparisonGroup(
    ...     group_id="G", endpoint="y", weight=1.0, items=list("edcba"))])
    >>> round(chance_threshold_without_ties(c), 12)
    0.8
    """
    return chance_threshold(contract, tie_free_key(contract), draws, seed)

