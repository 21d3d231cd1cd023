"""Grader fuzz against an independent oracle (issue 12: the 4,400-case fuzz that held).

Generated submissions start from a valid file and mutate each group the ways agents get it
wrong (leave it out, list it twice, drop, repeat or borrow an experiment, reorder), then
perhaps break the whole file (task identity, an unknown group, a schema departure, bytes
that are not strict JSON). The oracle below restates SPEC section 3 in a few lines, apart
from the grader's code: whole-file errors give -1; otherwise each group scores scipy's
Spearman rho of its submitted positions, or -1 for a group-confined error, with its weight
kept. Bounded and derandomized: 1,500 cases, the same on every run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from spu.grading.rules import grade_submission
from spu.schema import GradeStatus
from tests.grading.conftest import TASK_ID, VERSION, hand_answers, hand_contract

CONTRACT = hand_contract(0.7, 0.3)
ANSWERS = hand_answers()
ITEMS = {g.group_id: list(g.items) for g in CONTRACT.groups}
WEIGHTS = {g.group_id: g.weight for g in CONTRACT.groups}
FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=1500,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

GROUP_MUTATIONS = ["keep", "absent", "twice", "drop", "repeat", "foreign", "unknown-item"]
FILE_MUTATIONS = ["none", "wrong-id", "wrong-version", "unknown-group", "not-a-list",
                  "entry-not-object", "nan", "duplicate-key", "truncated"]


@st.composite
def fuzzed(draw: Any) -> tuple[bytes, dict[str, str], str]:
    entries: list[dict[str, Any]] = []
    plan: dict[str, str] = {}
    for gid, items in ITEMS.items():
        order = list(draw(st.permutations(items)))
        mutation = draw(st.sampled_from(GROUP_MUTATIONS))
        plan[gid] = mutation
        if mutation == "absent":
            continue
        if mutation == "drop":
            order.pop(draw(st.integers(0, len(order) - 1)))
        elif mutation == "repeat":
            order.insert(draw(st.integers(0, len(order))), draw(st.sampled_from(items)))
        elif mutation == "foreign":
            other = next(i for g, i in ITEMS.items() if g != gid)
            order[draw(st.integers(0, len(order) - 1))] = draw(st.sampled_from(other))
        elif mutation == "unknown-item":
            order.append("zz")
        entries.append({"group_id": gid, "order": order})
        if mutation == "twice":
            entries.append({"group_id": gid, "order": list(draw(st.permutations(items)))})
    entries = draw(st.permutations(entries))
    obj: dict[str, Any] = {"task_id": TASK_ID, "task_version": VERSION, "rankings": entries}
    broken = draw(st.sampled_from(FILE_MUTATIONS))
    if broken == "wrong-id":
        obj["task_id"] = "spu-other"
    elif broken == "wrong-version":
        obj["task_version"] = "2.0"
    elif broken == "unknown-group":
        entries.append({"group_id": "G7", "order": ["a"]})
    elif broken == "not-a-list":
        obj["rankings"] = {"G1": ITEMS["G1"]}
    elif broken == "entry-not-object":
        entries.append("G1")
    text = json.dumps(obj)
    if broken == "nan":
        text = text[:-1] + ', "confidence": NaN}'
    elif broken == "duplicate-key":
        text = text[:-1] + f', "task_id": "{TASK_ID}"}}'
    elif broken == "truncated":
        text = text[: draw(st.integers(0, len(text) - 1))]
    return text.encode(), plan, broken


def oracle(plan: dict[str, str], broken: str, data: bytes) -> tuple[float, dict[str, float]]:
    """SPEC section 3 restated: the task score and each group's score."""
    if broken != "none":
        return -1.0, {}
    rankings = json.loads(data)["rankings"]
    rho: dict[str, float] = {}
    for gid, items in ITEMS.items():
        listed = [e["order"] for e in rankings if e["group_id"] == gid]
        if len(listed) != 1 or sorted(listed[0]) != sorted(items):
            rho[gid] = -1.0
            continue
        values = [ANSWERS.groups[gid][i] for i in listed[0]]
        rho[gid] = float(spearmanr(range(len(values)), values).statistic)
    if all(plan[g] == "absent" for g in ITEMS):
        return -1.0, rho  # empty rankings: no group ranked
    return sum(WEIGHTS[g] * r for g, r in rho.items()), rho


@pytest.mark.slow
@FUZZ
@given(case=fuzzed())
def test_the_grader_agrees_with_the_rules_on_fuzzed_submissions(case) -> None:
    data, plan, broken = case
    grade = grade_submission(CONTRACT, ANSWERS, data)
    score, rho = oracle(plan, broken, data)
    assert grade.score == pytest.approx(score, abs=1e-12), (plan, broken, grade)
    assert -1.0 <= grade.score <= 1.0
    if broken != "none":
        assert grade.status is GradeStatus.invalid
        return
    assert grade.status is GradeStatus.valid
    for g in grade.groups:
        assert g.rho == pytest.approx(rho[g.group_id], abs=1e-12), (plan, g)
        assert (g.error is None) == (rho[g.group_id] != -1.0 or plan[g.group_id] == "keep")
        assert g.weight == WEIGHTS[g.group_id]  # a failed group keeps its weight
