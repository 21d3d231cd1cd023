"""Properties of the grader over generated inputs (hypothesis, derandomized: same run, same cases).

- any byte string gives a grade, never an exception; the score lies in [-1, 1];
- the same input gives the same grade;
- a permutation-valid submission scores the weighted scipy.stats.spearmanr of its groups;
- a recovered file's orderings and grade equal those of the canonical file.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from spu.grading.recovery import normalize_departures
from spu.grading.rules import grade_submission
from spu.schema import AnswerKey, ComparisonGroup, Contract, GradeStatus
from tests.grading.conftest import TASK_ID, VERSION, hand_answers, hand_contract

SETTINGS = settings(derandomize=True, deadline=None, database=None, max_examples=300,
                    suppress_health_check=[HealthCheck.too_slow])

CONTRACT = hand_contract()
ANSWERS = hand_answers()

# JSON values built from the words a submission uses, so that generated files reach past
# the parser into the identity, schema, group and ordering rules.
WORDS = ["task_id", "task_version", "task", "version", "rankings", "groups", "predictions",
         "group_id", "group", "order", "item_ids", "ranking", "items", TASK_ID, VERSION,
         "G1", "G2", "G3", "a", "b", "c", "d", "p", "q", "r", "x"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False)
    | st.sampled_from(WORDS),
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.sampled_from(WORDS), inner, max_size=5),
    max_leaves=25,
)


def check_grade(data: bytes, recover: bool) -> None:
    g = grade_submission(CONTRACT, ANSWERS, data, recover)
    assert -1.0 <= g.score <= 1.0 and -1.0 <= g.score_strict <= 1.0
    assert all(-1.0 <= x.rho <= 1.0 for x in g.groups)
    assert [x.group_id for x in g.groups] == ["G1", "G2"]
    assert g == grade_submission(CONTRACT, ANSWERS, data, recover), "same input, same grade"
    json.dumps(g.public_json())  # the CLI can always print it


@SETTINGS
@given(data=st.binary(max_size=300), recover=st.booleans())
def test_any_bytes_give_a_grade(data: bytes, recover: bool) -> None:
    check_grade(data, recover)


@SETTINGS
@given(obj=json_values, recover=st.booleans())
def test_any_json_value_gives_a_grade(obj: Any, recover: bool) -> None:
    check_grade(json.dumps(obj).encode(), recover)


@SETTINGS
@given(
    g1=st.permutations(["a", "b", "c", "d"]),
    g2=st.permutations(["p", "q", "r"]),
    shape=st.sampled_from(["canonical", "keyed", "keyed-sub", "groups", "group", "task"]),
    recover=st.booleans(),
)
def test_near_canonical_files_give_a_grade(g1, g2, shape, recover) -> None:
    obj = canonical(g1, g2)
    departed = depart(obj, shape)
    check_grade(json.dumps(departed).encode(), recover)


# ------------------------------------------------------------------ agreement with scipy


@st.composite
def tasks_and_permutations(draw):
    n_groups = draw(st.integers(1, 4))
    raw = [draw(st.integers(1, 10)) for _ in range(n_groups)]
    weights = [w / sum(raw) for w in raw]
    groups, measured, rankings = [], {}, []
    for k in range(n_groups):
        n = draw(st.integers(2, 12))
        items = [f"E{k}_{i}" for i in range(n)]
        # Small integer values make ties common; at least two distinct values keep rho defined.
        values = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)
                      .filter(lambda v: len(set(v)) > 1))
        groups.append(ComparisonGroup(group_id=f"G{k}", endpoint="y", weight=weights[k],
                                      items=items))
        measured[f"G{k}"] = dict(zip(items, map(float, values), strict=True))
        rankings.append({"group_id": f"G{k}", "order": draw(st.permutations(items))})
    contract = Contract(task_id="t", task_version="1", groups=groups)
    answers = AnswerKey(task_id="t", task_version="1", groups=measured)
    return contract, answers, rankings


@SETTINGS
@given(case=tasks_and_permutations())
def test_valid_submission_equals_weighted_scipy_spearman(case) -> None:
    contract, answers, rankings = case
    data = json.dumps({"task_id": "t", "rankings": rankings}).encode()
    g = grade_submission(contract, answers, data)
    assert g.status is GradeStatus.valid
    expected = 0.0
    for group, entry in zip(contract.groups, rankings, strict=True):
        order = entry["order"]
        rho = spearmanr(range(len(order)), [answers.groups[group.group_id][i] for i in order])[0]
        expected += group.weight * rho
        got = next(x.rho for x in g.groups if x.group_id == group.group_id)
        assert got == pytest.approx(rho, abs=1e-12)
    assert g.score == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------ recovery


def canonical(g1: list[str], g2: list[str]) -> dict[str, Any]:
    return {"task_id": TASK_ID, "task_version": VERSION,
            "rankings": [{"group_id": "G1", "order": g1}, {"group_id": "G2", "order": g2}]}


def depart(obj: dict[str, Any], shape: str, order_key: str = "item_ids",
           top_key: str = "groups") -> dict[str, Any]:
    """Apply one departure of appendix E.1 to a canonical file."""
    entries = obj["rankings"]
    if shape == "keyed":
        return {"task_id": TASK_ID, "rankings": {e["group_id"]: e["order"] for e in entries}}
    if shape == "keyed-sub":
        return {"task_id": TASK_ID,
                "rankings": {e["group_id"]: {order_key: e["order"]} for e in entries}}
    if shape == "order-key":
        return {"task_id": TASK_ID,
                "rankings": [{"group_id": e["group_id"], order_key: e["order"]} for e in entries]}
    if shape == "groups":
        return {"task_id": TASK_ID, top_key: entries}
    if shape == "group":
        return {"task_id": TASK_ID,
                "rankings": [{"group": e["group_id"], "order": e["order"]} for e in entries]}
    if shape == "task":
        return {"task": TASK_ID, "version": VERSION, "rankings": entries}
    return obj


@SETTINGS
@given(
    g1=st.permutations(["a", "b", "c", "d"]),
    g2=st.permutations(["p", "q", "r"]),
    shape=st.sampled_from(["keyed", "keyed-sub", "order-key", "groups", "group", "task"]),
    order_key=st.sampled_from(["item_ids", "ranking", "ranked_item_ids", "items", "ordering",
                               "ordered_item_ids"]),
    top_key=st.sampled_from(["groups", "predictions"]),
)
def test_recovered_orderings_equal_the_canonical_file(g1, g2, shape, order_key, top_key) -> None:
    obj = canonical(g1, g2)
    departed = depart(obj, shape, order_key, top_key)
    normalized, departures = normalize_departures(departed)
    assert departures
    assert [(e["group_id"], e["order"]) for e in normalized["rankings"]] == \
        [(e["group_id"], e["order"]) for e in obj["rankings"]]
    strict = grade_submission(CONTRACT, ANSWERS, json.dumps(obj).encode())
    recovered = grade_submission(CONTRACT, ANSWERS, json.dumps(departed).encode(), recover=True)
    assert recovered.status is GradeStatus.recovered
    assert recovered.groups == strict.groups
    assert recovered.score == strict.score, "identical bits, not merely close"
    assert not math.isnan(recovered.score)
