"""Recovery of the five schema departures of appendix E.1: no item moves, then strict rules."""

from __future__ import annotations

import pytest

from spu.grading.recovery import (
    ALTERNATIVE_GROUP_KEY,
    ALTERNATIVE_ORDER_KEY,
    ALTERNATIVE_TOP_LEVEL_KEY,
    DEPARTURES,
    OBJECT_KEYED_BY_GROUP,
    ORDER_KEYS,
    RENAMED_IDENTITY,
    RecoveryFailed,
    normalize_departures,
)
from spu.grading.rules import grade_submission
from spu.schema import GradeStatus
from tests.grading.conftest import SQRT3_2, TASK_ID, VERSION, as_bytes, submission

# G1 order b, a, c, d (rho 0.8) and G2 order q, p, r (rho 0): hand-worked in test_rules,
# task score 0.5 * 0.8 + 0.5 * 0 = 0.4.
G1 = ["b", "a", "c", "d"]
G2 = ["q", "p", "r"]
SCORE = 0.4

DEPARTED_FILES = {
    "object keyed by group, lists": (
        {"task_id": TASK_ID, "rankings": {"G1": G1, "G2": G2}}, [OBJECT_KEYED_BY_GROUP]),
    "object keyed by group, sub-objects": (
        {"task_id": TASK_ID, "rankings": {"G1": {"order": G1}, "G2": {"item_ids": G2}}},
        [OBJECT_KEYED_BY_GROUP, ALTERNATIVE_ORDER_KEY]),
    "alternative order key": (
        {"task_id": TASK_ID, "rankings": [{"group_id": "G1", "ranking": G1},
                                          {"group_id": "G2", "ordered_item_ids": G2}]},
        [ALTERNATIVE_ORDER_KEY]),
    "top-level groups": (
        {"task_id": TASK_ID, "groups": [{"group_id": "G1", "order": G1},
                                        {"group_id": "G2", "order": G2}]},
        [ALTERNATIVE_TOP_LEVEL_KEY]),
    "top-level predictions keyed by group": (
        {"task_id": TASK_ID, "predictions": {"G1": G1, "G2": G2}},
        [OBJECT_KEYED_BY_GROUP, ALTERNATIVE_TOP_LEVEL_KEY]),
    "group for group_id": (
        {"task_id": TASK_ID, "rankings": [{"group": "G1", "order": G1},
                                          {"group": "G2", "order": G2}]},
        [ALTERNATIVE_GROUP_KEY]),
    "task and version": (
        {"task": TASK_ID, "version": VERSION, "rankings": [{"group_id": "G1", "order": G1},
                                                           {"group_id": "G2", "order": G2}]},
        [RENAMED_IDENTITY]),
    "all five": (
        {"task": TASK_ID, "version": VERSION,
         "groups": [{"group": "G1", "items": G1}, {"group": "G2", "ranked_item_ids": G2}]},
        [ALTERNATIVE_ORDER_KEY, ALTERNATIVE_TOP_LEVEL_KEY, ALTERNATIVE_GROUP_KEY,
         RENAMED_IDENTITY]),
}


@pytest.mark.parametrize("name", list(DEPARTED_FILES))
def test_departure_is_rejected_strictly_and_recovered_on_request(contract, answers, name) -> None:
    obj, departures = DEPARTED_FILES[name]
    strict = grade_submission(contract, answers, as_bytes(obj))
    assert strict.status is GradeStatus.invalid and strict.score == -1.0
    recovered = grade_submission(contract, answers, as_bytes(obj), recover=True)
    assert recovered.status is GradeStatus.recovered
    assert recovered.score == pytest.approx(SCORE, abs=1e-15)
    assert recovered.score_strict == -1.0
    assert recovered.recovered_departures == departures
    assert recovered.errors[0] == strict.errors[0], "the strict reason is kept"
    canonical = grade_submission(contract, answers, as_bytes(submission(G1, G2)))
    assert recovered.groups == canonical.groups


def test_every_alternative_order_key_of_the_paper(contract, answers) -> None:
    for key in ORDER_KEYS:
        obj = {"task_id": TASK_ID, "rankings": [{"group_id": "G1", key: G1},
                                                {"group_id": "G2", key: G2}]}
        g = grade_submission(contract, answers, as_bytes(obj), recover=True)
        assert g.status is GradeStatus.recovered and g.score == pytest.approx(SCORE), key


def test_departures_are_listed_in_appendix_order() -> None:
    assert DEPARTURES == (OBJECT_KEYED_BY_GROUP, ALTERNATIVE_ORDER_KEY,
                          ALTERNATIVE_TOP_LEVEL_KEY, ALTERNATIVE_GROUP_KEY, RENAMED_IDENTITY)


def test_valid_file_is_not_touched_by_recovery(contract, answers) -> None:
    data = as_bytes(submission(G1, G2))
    assert grade_submission(contract, answers, data, recover=True) == \
        grade_submission(contract, answers, data)


def test_recovered_file_is_then_graded_strictly(contract, answers) -> None:
    """Recovery renames keys only; a group-confined error in the recovered file still costs the
    group: G1 misses d (-1), G2 in measured order (sqrt(3)/2): 0.5 * -1 + 0.5 * 0.866 = -0.067."""
    obj = {"task_id": TASK_ID, "rankings": {"G1": ["a", "b", "c"], "G2": ["p", "q", "r"]}}
    g = grade_submission(contract, answers, as_bytes(obj), recover=True)
    assert g.status is GradeStatus.recovered
    assert g.groups[0].rho == -1.0 and "misses" in g.groups[0].error
    assert g.score == pytest.approx(-0.5 + 0.5 * SQRT3_2, abs=1e-15)


@pytest.mark.parametrize(
    ("obj", "reason", "normalized"),
    [
        # Rejected for its identity before any departure is looked at: nothing to recover.
        ({"task_id": "spu-other", "rankings": {"G1": G1, "G2": G2}}, "wrong task identity", []),
        ({"task_id": TASK_ID, "rankings": {"G1": G1, "G9": G2}}, "unknown group 'G9'",
         [OBJECT_KEYED_BY_GROUP]),
        ({"task": "spu-other", "rankings": [{"group_id": "G1", "order": G1}]},
         "wrong task identity", [RENAMED_IDENTITY]),
    ],
)
def test_recovery_does_not_excuse_whole_file_errors(contract, answers, obj, reason,
                                                    normalized) -> None:
    g = grade_submission(contract, answers, as_bytes(obj), recover=True)
    assert g.status is GradeStatus.invalid and g.score == -1.0
    assert any(reason in e for e in g.errors)
    assert g.recovered_departures == normalized
    if normalized:
        assert g.errors[-1] == "recovery did not yield a valid file"


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({"task_id": TASK_ID, "rankings": [{"group_id": "G1", "item_ids": G1, "ranking": G1}]},
         "cannot tell the ordering list (item_ids, ranking)"),
        ({"task_id": TASK_ID, "groups": [], "predictions": []}, "not exactly one of"),
        ({"task_id": TASK_ID, "rankings": {"G1": "b,a,c,d"}}, "neither a list nor an object"),
        ({"task_id": TASK_ID, "rankings": [{"name": "G1", "order": G1}]}, "names no group"),
        ({"task_id": TASK_ID, "rankings": "G1: b a c d"}, "rankings is a str"),
        ([{"group_id": "G1", "order": G1}], "not a JSON object"),
    ],
)
def test_ambiguous_or_unknown_structures_are_not_guessed(contract, answers, obj, reason) -> None:
    with pytest.raises(RecoveryFailed, match=reason.replace("(", r"\(").replace(")", r"\)")):
        normalize_departures(obj)
    g = grade_submission(contract, answers, as_bytes(obj), recover=True)
    assert g.status is GradeStatus.invalid and g.score == -1.0
    assert g.errors[-1].startswith("recovery failed")


def test_normalization_moves_no_item() -> None:
    obj = {"task": TASK_ID, "predictions": {"G1": {"ordering": ["z", "y", "x", "y"]}}}
    normalized, departures = normalize_departures(obj)
    assert normalized == {"task_id": TASK_ID,
                          "rankings": [{"group_id": "G1", "order": ["z", "y", "x", "y"]}]}
    assert departures == [OBJECT_KEYED_BY_GROUP, ALTERNATIVE_ORDER_KEY,
                          ALTERNATIVE_TOP_LEVEL_KEY, RENAMED_IDENTITY]
