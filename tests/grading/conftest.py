"""A small hand-worked task for the grading rules.

G1 (4 experiments, measured a=1, b=2, c=3, d=4) and G2 (3 experiments, measured
p=10, q=20, r=20: a tie). The expected scores in the tests are worked by hand from
paper eq. (1); the arithmetic is written next to each one.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from spu.schema import AnswerKey, ComparisonGroup, Contract

TASK_ID = "spu-hand"
VERSION = "1.0"
G1_ITEMS = ["a", "b", "c", "d"]
G2_ITEMS = ["p", "q", "r"]
SQRT3_2 = math.sqrt(3) / 2
"""rho of G2 in measured order p, q, r: ranks x = (1, 2.5, 2.5) against y = (1, 2, 3);
centered x = (-1, .5, .5), y = (-1, 0, 1): cov = 1.5, Sxx = 1.5, Syy = 2, so
rho = 1.5 / sqrt(3) = sqrt(3)/2 = 0.8660254 (the group's attainable maximum)."""


def hand_contract(w1: float = 0.5, w2: float = 0.5) -> Contract:
    return Contract(task_id=TASK_ID, task_version=VERSION, groups=[
        ComparisonGroup(group_id="G1", endpoint="yield (%)", weight=w1, items=["c", "a", "d", "b"]),
        ComparisonGroup(group_id="G2", endpoint="purity (%)", weight=w2, items=["r", "p", "q"]),
    ])


def hand_answers() -> AnswerKey:
    return AnswerKey(task_id=TASK_ID, task_version=VERSION, groups={
        "G1": {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0},
        "G2": {"p": 10.0, "q": 20.0, "r": 20.0},
    })


def submission(g1: Any = G1_ITEMS, g2: Any = G2_ITEMS, **top: Any) -> dict[str, Any]:
    """A canonical submission object (``None`` leaves a group out)."""
    rankings = []
    if g1 is not None:
        rankings.append({"group_id": "G1", "order": list(g1)})
    if g2 is not None:
        rankings.append({"group_id": "G2", "order": list(g2)})
    return {"task_id": TASK_ID, "task_version": VERSION, "rankings": rankings, **top}


def as_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.fixture
def contract() -> Contract:
    return hand_contract()


@pytest.fixture
def answers() -> AnswerKey:
    return hand_answers()
