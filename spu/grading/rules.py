"""The grading rules of SPEC section 3 and paper sections 2.5 and E.1, as one pure function.

``grade_submission`` takes the trusted contract, the answer key and the submitted
bytes and returns a :class:`~spu.schema.Grade`. It opens no file, no socket and no
process, so that it can be tested on literal bytes and run in an isolated process.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from spu.grading.recovery import RecoveryFailed, normalize_departures
from spu.schema import AnswerKey, Contract, Grade, GradeStatus, GroupGrade

GRADER_VERSION = "1.0.0"
"""Bump on any change that can change a score; stored with every grade."""

MAX_BYTES = 1_048_576
"""Largest accepted submission (1 MiB)."""

WHOLE_FILE_REJECTED = "file rejected"


class _DuplicateKey(ValueError):
    pass


class _BadConstant(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _reject_constant(name: str) -> Any:
    raise _BadConstant(name)


def parse_submission(data: bytes) -> tuple[Any, str | None]:
    """Decode and parse submitted bytes under the whole-file rules.

    Returns the parsed object and ``None``, or ``None`` and the reason for rejection.
    """
    if len(data) > MAX_BYTES:
        return None, f"file is {len(data)} bytes, over the 1 MiB limit ({MAX_BYTES} bytes)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8: {exc.reason} at byte {exc.start}"
    try:
        obj = json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant
        )
    except _DuplicateKey as exc:
        return None, f"duplicate key {exc.args[0]!r}"
    except _BadConstant as exc:
        return None, f"not JSON: {exc.args[0]} is not a JSON value"
    except json.JSONDecodeError as exc:
        hint = " (the file starts with a byte-order mark)" if text.startswith("\ufeff") else ""
        return None, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{hint}"
    except RecursionError:
        return None, "not JSON: nested too deeply"
    return obj, None


def _identity_error(obj: dict[str, Any], contract: Contract) -> str | None:
    if "task_id" not in obj:
        return "task_id is missing"
    if obj["task_id"] != contract.task_id:
        return f"wrong task identity: task_id {obj['task_id']!r}, expected {contract.task_id!r}"
    if "task_version" in obj:
        version = obj["task_version"]
        as_text = str(version) if isinstance(version, (int, float, str)) else None
        if isinstance(version, bool) or as_text != contract.task_version:
            return (
                f"wrong task identity: task_version {version!r}, "
                f"expected {contract.task_version!r}"
            )
    return None


def _schema_departure(obj: dict[str, Any]) -> str | None:
    rankings = obj.get("rankings")
    if "rankings" not in obj:
        return "schema departure: 'rankings' is missing"
    if not isinstance(rankings, list):
        return f"schema departure: 'rankings' is a {type(rankings).__name__}, not a list"
    for i, entry in enumerate(rankings):
        if not isinstance(entry, dict):
            return f"schema departure: rankings[{i}] is not an object"
        if not isinstance(entry.get("group_id"), str):
            return f"schema departure: rankings[{i}] has no string 'group_id'"
        if not isinstance(entry.get("order"), list):
            return f"schema departure: rankings[{i}] has no list 'order'"
    return None


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of ``values``, ties taking the average of the ranks they span.

    Examples
    --------
    >>> average_ranks([10.0, 30.0, 20.0, 30.0])
    [1.0, 3.5, 2.0, 3.5]
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        rank = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = rank
        i = j + 1
    return ranks


def spearman_positions(measured: Sequence[float], positions: Sequence[int]) -> float:
    """Spearman's rho between measured values and submitted positions (paper eq. 1).

    Measured ties take average ranks; positions are a permutation of 0..n-1. The
    sums are taken in integers (twice the average ranks are integers), so the
    result is the correctly rounded quotient: the same bits on every machine.

    Examples
    --------
    >>> spearman_positions([1.0, 2.0, 3.0], [0, 1, 2])
    1.0
    >>> round(spearman_positions([1.0, 1.0, 3.0], [2, 1, 0]), 12)  # hand-worked: -sqrt(3)/2
    -0.866025403784
    """
    n = len(measured)
    twice = [int(round(2 * r)) for r in average_ranks(measured)]
    sx = sum(twice)
    sy = sum(positions)
    sxx = sum(x * x for x in twice)
    syy = sum(p * p for p in positions)
    sxy = sum(x * p for x, p in zip(twice, positions, strict=True))
    cov = n * sxy - sx * sy
    var_x = n * sxx - sx * sx
    var_y = n * syy - sy * sy
    if var_x == 0 or var_y == 0:
        return math.nan
    # Both variances are exact integers; one square root of their product keeps it exact.
    return max(-1.0, min(1.0, cov / math.sqrt(var_x * var_y)))


def _group_grade(
    group_id: str, weight: float, items: list[str], measured: dict[str, float], order: Any
) -> GroupGrade:
    def failed(reason: str) -> GroupGrade:
        return GroupGrade(group_id=group_id, weight=weight, rho=-1.0, error=reason)

    if not isinstance(order, list):
        return failed("ordering is not a list")
    members = set(items)
    seen: set[str] = set()
    for item in order:
        if not isinstance(item, str) or item not in members:
            return failed(f"ordering names {item!r}, which is not in the group")
        if item in seen:
            return failed(f"ordering repeats {item!r}")
        seen.add(item)
    missing = [i for i in items if i not in seen]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        return failed(f"ordering misses {len(missing)} experiment(s): {shown}")
    rho = spearman_positions([measured[i] for i in order], list(range(len(order))))
    if math.isnan(rho):
        # The validator refuses such groups; a grader must still not crash on one.
        return GroupGrade(
            group_id=group_id, weight=weight, rho=0.0, error="measured values are all equal"
        )
    return GroupGrade(group_id=group_id, weight=weight, rho=rho)


def _rejected(contract: Contract, reason: str, **extra: Any) -> Grade:
    groups = [
        GroupGrade(group_id=g.group_id, weight=g.weight, rho=-1.0, error=WHOLE_FILE_REJECTED)
        for g in contract.groups
    ]
    return Grade(
        task_id=contract.task_id,
        score=-1.0,
        score_strict=-1.0,
        status=GradeStatus.invalid,
        groups=groups,
        errors=[reason],
        grader_version=GRADER_VERSION,
        **extra,
    )


def _grade_canonical(obj: Any, contract: Contract, answers: AnswerKey) -> tuple[Grade, bool]:
    """Grade a parsed object strictly. The flag says whether a schema departure rejected it."""
    if not isinstance(obj, dict):
        return _rejected(contract, "schema departure: the file is not a JSON object"), True
    departure = _schema_departure(obj)
    identity = _identity_error(obj, contract)
    if identity is not None:
        # A renamed identity key is itself a departure that recovery can normalize.
        renamed = "task_id" not in obj and "task" in obj
        return _rejected(contract, identity), renamed
    if departure is not None:
        return _rejected(contract, departure), True

    known = {g.group_id for g in contract.groups}
    by_group: dict[str, list[Any]] = {}
    for entry in obj["rankings"]:
        gid = entry["group_id"]
        if gid not in known:
            return _rejected(contract, f"unknown group {gid!r}"), False
        by_group.setdefault(gid, []).append(entry["order"])

    groups: list[GroupGrade] = []
    for g in contract.groups:
        listed = by_group.get(g.group_id, [])
        if not listed:
            groups.append(GroupGrade(group_id=g.group_id, weight=g.weight, rho=-1.0,
                                     error="group absent"))
        elif len(listed) > 1:
            groups.append(GroupGrade(group_id=g.group_id, weight=g.weight, rho=-1.0,
                                     error=f"group listed {len(listed)} times"))
        else:
            measured = answers.groups[g.group_id]
            groups.append(_group_grade(g.group_id, g.weight, g.items, measured, listed[0]))
    score = math.fsum(g.weight * g.rho for g in groups)
    score = max(-1.0, min(1.0, score))
    errors = [] if by_group else ["no group is ranked"]
    grade = Grade(
        task_id=contract.task_id,
        score=score,
        score_strict=score,
        status=GradeStatus.valid,
        groups=groups,
        errors=errors,
        grader_version=GRADER_VERSION,
    )
    return grade, False


def grade_submission(
    contract: Contract, answers: AnswerKey, data: bytes | None, recover: bool = False
) -> Grade:
    """Grade submitted ``rankings.json`` bytes against a trusted contract and answer key.

    Parameters
    ----------
    contract, answers
        The trusted copy of the task's contract and measured values.
    data
        The submitted bytes, or ``None`` when no file was written.
    recover
        Also normalize the five schema departures of appendix E.1 (moving no item)
        and grade the normalized file; ``score`` is then the recovered score and
        ``score_strict`` keeps the strict one.

    Returns
    -------
    Grade
        Never raises on any input bytes.

    References
    ----------
    Paper sections 2.5 (scoring, valid submissions) and E.1 (recovery); SPEC section 3.
    """
    if data is None:
        return _rejected(contract, "missing file: no rankings.json was submitted")
    obj, reason = parse_submission(data)
    if reason is not None:
        return _rejected(contract, reason)
    strict, by_departure = _grade_canonical(obj, contract, answers)
    if not (recover and by_departure):
        return strict
    try:
        normalized, departures = normalize_departures(obj)
    except RecoveryFailed as exc:
        strict.errors.append(f"recovery failed: {exc}")
        return strict
    recovered, still_departure = _grade_canonical(normalized, contract, answers)
    if recovered.status is GradeStatus.invalid:
        recovered.errors.insert(0, strict.errors[0])
        recovered.errors.append("recovery did not yield a valid file")
        return recovered.model_copy(update={"recovered_departures": departures})
    return recovered.model_copy(
        update={
            "status": GradeStatus.recovered,
            "score_strict": -1.0,
            "recovered_departures": departures,
            "errors": [strict.errors[0], *recovered.errors],
        }
    )


def grade_json(
    contract: Contract, answers: AnswerKey, data: bytes | None, recover: bool = False
) -> str:
    """``grade_submission`` as the JSON text of ``spu grade --json``."""
    return json.dumps(grade_submission(contract, answers, data, recover).public_json())
