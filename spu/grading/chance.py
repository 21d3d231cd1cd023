"""Chance level of a task: the score distribution of uniformly random valid submissions.

References
----------
Paper section 2.5, "Chance level": 4,000 random valid submissions, each permuting every
group, and the 95th percentile of the resulting task scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spu.grading.rules import average_ranks
from spu.schema import AnswerKey, Contract

DEFAULT_DRAWS = 4000
DEFAULT_SEED = 0


@dataclass(frozen=True)
class GroupArrays:
    """Centered measured ranks of one group, in contract item order, and its weight."""

    weight: float
    centered_ranks: np.ndarray
    norm: float


def group_arrays(contract: Contract, answers: AnswerKey) -> list[GroupArrays]:
    """Per-group centered measured ranks, the input of every vectorized score."""
    out = []
    for g in contract.groups:
        measured = [answers.groups[g.group_id][i] for i in g.items]
        ranks = np.asarray(average_ranks(measured), dtype=float)
        centered = ranks - ranks.mean()
        n = len(ranks)
        positions_ss = n * (n * n - 1) / 12.0  # sum of squared centered positions 0..n-1
        norm = float(np.sqrt((centered**2).sum() * positions_ss))
        out.append(GroupArrays(weight=g.weight, centered_ranks=centered, norm=norm))
    return out


def random_task_scores(
    contract: Contract, answers: AnswerKey, draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED
) -> np.ndarray:
    """Task scores of ``draws`` uniformly random valid submissions (seeded).

    Examples
    --------
    >>> from spu.schema import Contract, AnswerKey, ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[ComparisonGroup(
    ...     group_id="G", endpoint="y", weight=1.0, items=["a", "b"])])
    >>> a = AnswerKey(task_id="t", task_version="1", groups={"G": {"a": 1.0, "b": 2.0}})
    >>> sorted(set(random_task_scores(c, a, draws=100).tolist()))
    [-1.0, 1.0]
    """
    rng = np.random.default_rng(seed)
    total = np.zeros(draws)
    for g in group_arrays(contract, answers):
        n = g.centered_ranks.size
        if n < 2 or g.norm == 0:
            continue
        # Row k of argsort(random) is a uniform permutation: position of each item.
        positions = np.argsort(rng.random((draws, n)), axis=1).astype(float)
        positions -= (n - 1) / 2.0
        total += g.weight * (positions @ g.centered_ranks) / g.norm
    return total


def chance_threshold(
    contract: Contract, answers: AnswerKey, draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED
) -> float:
    """95th percentile of random valid submissions' task scores (paper section 2.5)."""
    return float(np.quantile(random_task_scores(contract, answers, draws, seed), 0.95))
