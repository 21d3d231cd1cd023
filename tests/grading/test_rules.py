"""Every rule of SPEC section 3 (paper 2.5) on literal files, with hand-worked scores."""

from __future__ import annotations

import json
import math

import pytest

from spu.grading.rules import (
    GRADER_VERSION,
    MAX_BYTES,
    WHOLE_FILE_REJECTED,
    AnswerKeyError,
    average_ranks,
    grade_submission,
    spearman_positions,
)
from spu.schema import AnswerKey, ComparisonGroup, Contract, GradeStatus
from tests.grading.conftest import (
    SQRT3_2,
    TASK_ID,
    as_bytes,
    hand_answers,
    hand_contract,
    submission,
)


def grade(contract, answers, data, recover=False):
    return grade_submission(contract, answers, data, recover)


def assert_whole_file_rejected(g, reason_part: str) -> None:
    assert g.status is GradeStatus.invalid
    assert g.score == -1.0 and g.score_strict == -1.0
    assert [x.rho for x in g.groups] == [-1.0, -1.0]
    assert all(x.error == WHOLE_FILE_REJECTED for x in g.groups)
    assert reason_part in g.errors[0], g.errors


# ------------------------------------------------------------------ scores of valid files


def test_measured_order_scores_the_attainable_maximum(contract, answers) -> None:
    # G1 in measured order: rho 1. G2 in measured order: sqrt(3)/2 (tie p<q=r, see conftest).
    # Task: 0.5 * 1 + 0.5 * 0.8660254 = 0.9330127.
    g = grade(contract, answers, as_bytes(submission()))
    assert g.status is GradeStatus.valid and g.errors == []
    assert [x.rho for x in g.groups] == pytest.approx([1.0, SQRT3_2], abs=1e-15)
    assert g.score == pytest.approx(0.5 + 0.5 * SQRT3_2, abs=1e-15)
    assert g.score == g.score_strict and g.grader_version == GRADER_VERSION


def test_one_adjacent_swap(contract, answers) -> None:
    # G1 order b, a, c, d: by experiment, a is submitted 2nd (measured rank 1), b 1st (rank 2),
    # c and d in place: sum d^2 = 1 + 1 = 2, rho = 1 - 6*2/(4*15) = 0.8.
    # G2 order q, p, r: centered x (q .5, p -1, r .5) . y (-1, 0, 1) = -.5 + 0 + .5 = 0: rho 0.
    # Task: 0.5 * 0.8 + 0.5 * 0 = 0.4.
    g = grade(contract, answers, as_bytes(submission(["b", "a", "c", "d"], ["q", "p", "r"])))
    assert [x.rho for x in g.groups] == pytest.approx([0.8, 0.0], abs=1e-15)
    assert g.score == pytest.approx(0.4, abs=1e-15)


def test_reversed_orders_and_unequal_weights(answers) -> None:
    # Weights 0.7 / 0.3. G1 reversed: rho -1. G2 order r, q, p: cov = .5*-1 + .5*0 + -1*1 = -1.5,
    # rho = -sqrt(3)/2. Task: 0.7 * -1 + 0.3 * -0.8660254 = -0.9598076.
    g = grade(hand_contract(0.7, 0.3), answers,
              as_bytes(submission(["d", "c", "b", "a"], ["r", "q", "p"])))
    assert [x.weight for x in g.groups] == [0.7, 0.3]
    assert g.score == pytest.approx(-0.7 - 0.3 * SQRT3_2, abs=1e-15)


def test_task_version_is_optional_and_a_json_number_matches(contract, answers) -> None:
    """A file that omits task_version, or writes it as the number 1.0, states version "1.0"."""
    without = submission()
    del without["task_version"]
    as_number = {**submission(), "task_version": 1.0}
    for obj in (without, as_number):
        assert grade(contract, answers, as_bytes(obj)).status is GradeStatus.valid


def test_extra_keys_are_not_graded(contract, answers) -> None:
    """Keys the schema does not name (notes, confidences) change nothing."""
    obj = submission(note="see report.md", confidence={"G1": 0.9})
    obj["rankings"][0]["rationale"] = "steric bulk"
    assert grade(contract, answers, as_bytes(obj)).score == pytest.approx(0.5 + 0.5 * SQRT3_2)


def test_exactly_one_mebibyte_is_accepted(contract, answers) -> None:
    data = as_bytes(submission())
    data += b" " * (MAX_BYTES - len(data))
    assert len(data) == 1_048_576
    assert grade(contract, answers, data).status is GradeStatus.valid


# ------------------------------------------------------------------ whole-file errors


def test_missing_file(contract, answers) -> None:
    assert_whole_file_rejected(grade(contract, answers, None), "missing file")


def test_one_byte_over_one_mebibyte(contract, answers) -> None:
    data = as_bytes(submission())
    data += b" " * (MAX_BYTES + 1 - len(data))
    assert_whole_file_rejected(grade(contract, answers, data), "over the 1 MiB limit")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (as_bytes(submission()).replace(b'"a"', b'"\xff"'), "not UTF-8"),
        (json.dumps(submission()).encode("utf-16"), "not UTF-8"),
        (b"\xef\xbb\xbf" + as_bytes(submission()), "byte-order mark"),
        (as_bytes(submission())[:-1], "not JSON"),
        (b"", "not JSON"),
        (as_bytes(submission()).replace(b'"rankings"', b'"x": NaN, "rankings"'), "NaN"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    ],
    ids=["latin-byte", "utf-16", "bom", "truncated", "empty", "nan", "deep"],
)
def test_undecodable_or_unparsable(contract, answers, data, reason) -> None:
    assert_whole_file_rejected(grade(contract, answers, data), reason)


@pytest.mark.parametrize(
    "data",
    [
        b'{"task_id": "spu-hand", "task_id": "spu-hand", "rankings": []}',
        b'{"task_id": "spu-hand", "rankings": [{"group_id": "G1", "order": ["a", "b", "c", "d"],'
        b' "order": ["d", "c", "b", "a"]}]}',
    ],
    ids=["top-level", "inside-a-group"],
)
def test_duplicate_keys(contract, answers, data) -> None:
    """Duplicate keys are refused, never resolved to the last value as json.loads would."""
    assert_whole_file_rejected(grade(contract, answers, data), "duplicate key")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"task_id": "spu-other"}, "task_id 'spu-other'"),
        ({"task_version": "2.0"}, "task_version '2.0'"),
        ({"task_version": 1}, "task_version 1"),
        ({"task_version": True}, "task_version True"),
        ({"task_id": None}, "task_id None"),
    ],
)
def test_wrong_task_identity(contract, answers, change, reason) -> None:
    g = grade(contract, answers, as_bytes({**submission(), **change}))
    assert_whole_file_rejected(g, "wrong task identity")
    assert reason in g.errors[0]


def test_missing_task_id(contract, answers) -> None:
    obj = submission()
    del obj["task_id"]
    assert_whole_file_rejected(grade(contract, answers, as_bytes(obj)), "task_id is missing")


def test_unknown_group_rejects_the_whole_file(contract, answers) -> None:
    """A group the contract does not have gives -1 to the task, even beside perfect groups."""
    obj = submission()
    obj["rankings"].append({"group_id": "G3", "order": ["a"]})
    assert_whole_file_rejected(grade(contract, answers, as_bytes(obj)), "unknown group 'G3'")


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ([{"group_id": "G1", "order": ["a"]}], "not a JSON object"),
        ("rankings", "not a JSON object"),
        ({"task_id": TASK_ID}, "'rankings' is missing"),
        ({"task_id": TASK_ID, "rankings": {"G1": ["a", "b", "c", "d"]}}, "is a dict"),
        ({"task_id": TASK_ID, "rankings": ["G1"]}, "rankings[0] is not an object"),
        ({"task_id": TASK_ID, "rankings": [{"group": "G1", "order": []}]}, "'group_id'"),
        ({"task_id": TASK_ID, "rankings": [{"group_id": 1, "order": []}]}, "'group_id'"),
        ({"task_id": TASK_ID, "rankings": [{"group_id": "G1", "item_ids": []}]}, "'order'"),
        ({"task_id": TASK_ID, "rankings": [{"group_id": "G1", "order": "a,b,c,d"}]}, "'order'"),
    ],
)
def test_schema_departures_reject_the_whole_file(contract, answers, obj, reason) -> None:
    assert_whole_file_rejected(grade(contract, answers, as_bytes(obj)), reason)


# ------------------------------------------------------------------ group-confined errors


def test_absent_group_keeps_its_weight(contract, answers) -> None:
    # G1 perfect (1), G2 absent (-1): 0.5 * 1 + 0.5 * -1 = 0.
    g = grade(contract, answers, as_bytes(submission(g2=None)))
    assert g.status is GradeStatus.valid
    assert [(x.rho, x.error) for x in g.groups] == [(1.0, None), (-1.0, "group absent")]
    assert g.score == 0.0


def test_group_listed_twice(contract, answers) -> None:
    # G2 twice, even with identical orderings: -1. Task: 0.5 * 1 + 0.5 * -1 = 0.
    obj = submission()
    obj["rankings"].append({"group_id": "G2", "order": ["p", "q", "r"]})
    g = grade(contract, answers, as_bytes(obj))
    assert g.groups[1].rho == -1.0 and "listed 2 times" in g.groups[1].error
    assert g.score == 0.0


@pytest.mark.parametrize(
    ("g1", "reason"),
    [
        (["a", "b", "c"], "misses 1 experiment(s): d"),
        ([], "misses 4 experiment(s)"),
        (["a", "b", "c", "c", "d"], "repeats 'c'"),
        (["a", "b", "c", "d", "p"], "names 'p'"),
        (["a", "b", "c", "x"], "names 'x'"),
        (["a", "b", "c", 4], "names 4"),
        (["a", "b", "c", ["d"]], "names ['d']"),
    ],
)
def test_faulty_ordering_fails_only_its_group(contract, answers, g1, reason) -> None:
    # G1 -1, G2 in measured order sqrt(3)/2: 0.5 * -1 + 0.5 * 0.8660254 = -0.0669873.
    g = grade(contract, answers, as_bytes(submission(g1=g1)))
    assert g.status is GradeStatus.valid
    assert g.groups[0].rho == -1.0 and reason in g.groups[0].error
    assert g.groups[1].error is None
    assert g.score == pytest.approx(-0.5 + 0.5 * SQRT3_2, abs=1e-15)


def test_empty_rankings_score_minus_one(contract, answers) -> None:
    """An empty list of rankings is a file, but every group is absent: -1 (paper E.1)."""
    g = grade(contract, answers, as_bytes(submission(g1=None, g2=None)))
    assert g.status is GradeStatus.valid and g.score == -1.0
    assert g.errors == ["no group is ranked"]


# ------------------------------------------------------------------ ties and degenerate groups


def test_average_ranks_of_ties() -> None:
    # 5 and 5 share ranks 2 and 3: 2.5 each; the three 7s share 4, 5, 6: 5 each.
    assert average_ranks([1.0, 5.0, 7.0, 5.0, 7.0, 7.0]) == [1.0, 2.5, 5.0, 2.5, 5.0, 5.0]


def test_spearman_positions_matches_the_no_tie_formula() -> None:
    # Without ties rho = 1 - 6 sum d^2 / (n (n^2 - 1)). Measured (3, 1, 2) at positions 0, 1, 2:
    # measured ranks (3, 1, 2) vs (1, 2, 3): d^2 = 4 + 1 + 1 = 6, rho = 1 - 36/24 = -0.5.
    assert spearman_positions([3.0, 1.0, 2.0], [0, 1, 2]) == pytest.approx(-0.5, abs=1e-15)


def test_group_without_two_distinct_values_scores_zero_without_error() -> None:
    """rho is undefined when all measured values are equal: the group scores 0 (as a random
    ranking does), carries no group error, and the grade says why in a note."""
    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="flat", endpoint="y", weight=0.5, items=["a", "b"]),
        ComparisonGroup(group_id="one", endpoint="y", weight=0.25, items=["c"]),
        ComparisonGroup(group_id="ok", endpoint="y", weight=0.25, items=["d", "e"]),
    ])
    answers = AnswerKey(task_id="t", task_version="1", groups={
        "flat": {"a": 3.0, "b": 3.0}, "one": {"c": 1.0}, "ok": {"d": 1.0, "e": 2.0}})
    obj = {"task_id": "t", "rankings": [{"group_id": "flat", "order": ["b", "a"]},
                                        {"group_id": "one", "order": ["c"]},
                                        {"group_id": "ok", "order": ["d", "e"]}]}
    g = grade(contract, answers, as_bytes(obj))
    # 0.5 * 0 + 0.25 * 0 + 0.25 * 1 = 0.25
    assert [(x.rho, x.error) for x in g.groups] == [(0.0, None), (0.0, None), (1.0, None)]
    assert g.score == 0.25
    assert len(g.errors) == 2 and all("undefined" in e for e in g.errors)


# ------------------------------------------------------------------ regressions


def test_a_4300_digit_integer_does_not_crash_the_grader(contract, answers) -> None:
    """Invariant: any bytes give a grade. Python refuses int() of more than 4,300 digits with a
    ValueError that json.loads lets through; as an extra key the number is simply not graded."""
    big = b"1" * 5000
    data = as_bytes(submission()).replace(b'"rankings"', b'"note": ' + big + b', "rankings"')
    g = grade(contract, answers, data)
    assert g.status is GradeStatus.valid and g.score == pytest.approx(0.5 + 0.5 * SQRT3_2)
    g = grade(contract, answers, as_bytes(submission()).replace(b'"1.0"', big))
    assert_whole_file_rejected(g, "task_version")


def test_error_messages_stay_short_whatever_is_submitted(contract, answers) -> None:
    """Invariant: a grade quotes at most a short excerpt of submitted content."""
    huge = "x" * 500_000
    g = grade(contract, answers, as_bytes(submission(g1=["a", "b", "c", huge])))
    assert len(g.groups[0].error) < 200
    nested = b"[" * 980 + b"]" * 980
    data = b'{"task_id": "spu-hand", "rankings": [{"group_id": "G1", "order": [' + nested + b"]}]}"
    g = grade(contract, answers, data)
    assert g.groups[0].rho == -1.0 and len(g.groups[0].error) < 200


def test_answer_key_that_misses_an_experiment_is_a_task_error(contract) -> None:
    """A broken key is the task's fault: a clear error naming the group and experiment, never a
    grade that would blame the submission."""
    broken = hand_answers()
    del broken.groups["G2"]["q"]
    with pytest.raises(AnswerKeyError, match=r"groups\.G2\.q: experiment is missing"):
        grade(contract, broken, as_bytes(submission()))
    nan = hand_answers()
    nan.groups["G1"]["a"] = math.nan
    with pytest.raises(AnswerKeyError, match=r"groups\.G1\.a: value nan is not finite"):
        grade(contract, nan, None)
