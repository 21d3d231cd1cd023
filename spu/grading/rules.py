"""The grading rules of SPEC section 3 and paper sections 2.5 and E.1, as one pure function.

``grade_submission`` takes the trusted contract, the answer key and the submitted
bytes and returns a :class:`~spu.schema.Grade`. It opens no file, no socket and no
process, so that it can be tested on literal bytes and run in an isolated process.

The rules, in the order they are applied:

1. whole-file errors give the task score -1: missing file, over 1 MiB, not UTF-8,
   not JSON (or duplicate keys), not an object, wrong task identity, a schema
   departure, an unknown group;
2. group-confined errors give that group -1 and keep its weight: group absent,
   listed twice, ordering missing an experiment, repeating one or naming a foreign one;
3. every other group scores Spearman's rho between submitted positions and measured
   values (ties in the measured values take average ranks); the task score is the
   weighted sum.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spu.grading.recovery import RecoveryFailed, normalize_departures
from spu.schema import AnswerKey, Contract, Grade, GradeStatus, GroupGrade
from spu.strict_json import StrictJSONError, loads_strict
from spu.strict_json import shown as _shown

GRADER_VERSION = "1.1.0"
"""Bump on any change that can change a grade; stored with every grade.

1.1.0: a 4,300-digit integer no longer crashes the grader; a group whose rho is
undefined (one experiment, or all measured values equal) scores 0 without a group error;
the task score is added left to right in contract order (was ``math.fsum``; at most a
last-bit change), exactly as the chance draws add it.
"""

MAX_BYTES = 1_048_576
"""Largest accepted submission (1 MiB)."""

WHOLE_FILE_REJECTED = "file rejected"
"""The group error of every group when the whole file is rejected."""

GROUP_ABSENT = "group absent"
"""The group error of a group the file does not list."""


class AnswerKeyError(ValueError):
    """The answer key does not cover the contract: a fault of the task, not of the submission."""


def parse_submission(data: bytes) -> tuple[Any, str | None]:
    """Decode and parse submitted bytes under the whole-file rules.

    Returns the parsed object and ``None``, or ``None`` and the reason for rejection.
    A byte-order mark is rejected: the file must be plain UTF-8 JSON (RFC 8259 8.1).
    """
    if len(data) > MAX_BYTES:
        return None, f"file is over the 1 MiB limit ({len(data)} bytes read, {MAX_BYTES} allowed)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8: {exc.reason} at byte {exc.start}"
    try:
        obj = loads_strict(text)
    except StrictJSONError as exc:
        return None, str(exc)
    return obj, None


def check_answer_key(contract: Contract, answers: AnswerKey) -> None:
    """Check that ``answers`` holds a finite measured value for every experiment of the contract.

    Raises:
        AnswerKeyError: Naming the first group or experiment that is missing or not finite.
    """
    GradingKey.build(contract, answers)


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of ``values``, ties taking the average of the ranks they span.

    Examples
    --------
    >>> average_ranks([10.0, 30.0, 20.0, 30.0])
    [1.0, 3.5, 2.0, 3.5]
    """
    return [t / 2 for t in twice_ranks(values)]


def twice_ranks(values: Sequence[float]) -> list[int]:
    """Twice the average ranks: integers, so that every later sum is exact."""
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)
    twice = [0] * n
    start = 0
    for end in range(1, n + 1):
        if end == n or values[order[end]] != values[order[start]]:
            # Positions start..end-1 hold ranks start+1..end; twice their mean is start+end+1.
            for k in order[start:end]:
                twice[k] = start + end + 1
            start = end
    return twice


def rho_terms(n: int, sum_x: int, sum_xx: int) -> tuple[int, float] | None:
    """``(offset, denominator)`` with rho = (n * sum_xy - offset) / denominator.

    x are integers (twice the measured ranks) and y the positions 0..n-1; every sum
    is an exact integer, so rho depends only on the rounding of the square root and
    of the quotient: the same bits on every machine, and in the vectorized chance
    draws (see chance.py). ``None`` when rho is undefined (n < 2 or all x equal).
    """
    sum_y = n * (n - 1) // 2
    sum_yy = (n - 1) * n * (2 * n - 1) // 6
    var_x = n * sum_xx - sum_x * sum_x
    var_y = n * sum_yy - sum_y * sum_y
    if var_x == 0 or var_y == 0:
        return None
    return sum_x * sum_y, math.sqrt(var_x * var_y)


def _rho_from_sums(n: int, sum_x: int, sum_xx: int, sum_xy: int) -> float:
    """Pearson correlation of integers x with positions 0..n-1 (``nan`` when undefined)."""
    terms = rho_terms(n, sum_x, sum_xx)
    if terms is None:
        return math.nan
    offset, denominator = terms
    return max(-1.0, min(1.0, (n * sum_xy - offset) / denominator))


def spearman_positions(measured: Sequence[float], positions: Sequence[int]) -> float:
    """Spearman's rho between measured values and submitted positions (paper eq. 1).

    Parameters
    ----------
    measured
        Measured values of the experiments, in any order.
    positions
        Submitted position of each experiment (a permutation of 0..n-1), lowest first.

    Returns
    -------
    float
        rho in [-1, 1]; ``nan`` when it is undefined (n < 2 or all values equal).
        Measured ties take average ranks; the sums are exact integers (twice an
        average rank is an integer).

    References
    ----------
    Paper section 2.5, eq. (1); scipy.stats.spearmanr gives the same value to 1e-12.

    Examples
    --------
    >>> spearman_positions([1.0, 2.0, 3.0], [0, 1, 2])
    1.0
    >>> round(spearman_positions([1.0, 1.0, 3.0], [2, 1, 0]), 12)  # hand-worked: -sqrt(3)/2
    -0.866025403784
    """
    n = len(measured)
    by_position = [0] * n
    for twice, position in zip(twice_ranks(measured), positions, strict=True):
        by_position[position] = twice
    return _rho_from_sums(
        n,
        sum(by_position),
        sum(t * t for t in by_position),
        sum(t * p for p, t in enumerate(by_position)),
    )


@dataclass(frozen=True)
class _MeasuredGroup:
    """What grading one comparison group needs from the answer key, computed once."""

    group_id: str
    weight: float
    items: tuple[str, ...]
    twice_rank: dict[str, int]
    """Twice the average measured rank of each experiment (an integer)."""
    sum_x: int
    sum_xx: int

    @classmethod
    def build(cls, group_id: str, weight: float, items: list[str],
              measured: dict[str, float] | None) -> _MeasuredGroup:
        if measured is None:
            raise AnswerKeyError(f"groups.{group_id}: group is missing")
        values = []
        for item in items:
            value = measured.get(item)
            if value is None:
                raise AnswerKeyError(f"groups.{group_id}.{item}: experiment is missing")
            if not math.isfinite(value):
                raise AnswerKeyError(f"groups.{group_id}.{item}: value {value} is not finite")
            values.append(value)
        twice = twice_ranks(values)
        return cls(group_id=group_id, weight=weight, items=tuple(items),
                   twice_rank=dict(zip(items, twice, strict=True)),
                   sum_x=sum(twice), sum_xx=sum(t * t for t in twice))

    def rho_terms(self) -> tuple[int, float] | None:
        """``(offset, denominator)``: rho = (n * sum(position x 2 rank) - offset) / denominator."""
        return rho_terms(len(self.items), self.sum_x, self.sum_xx)

    def grade(self, order: list[Any]) -> tuple[GroupGrade, str | None]:
        """The group's grade for one ordering, and a note when rho is undefined."""
        twice_rank = self.twice_rank
        seen: set[str] = set()
        sum_xy = 0
        for position, item in enumerate(order):
            if not isinstance(item, str) or item not in twice_rank:
                return self._failed(f"ordering names {_shown(item)}, which is not in the group")
            if item in seen:
                return self._failed(f"ordering repeats {_shown(item)}")
            seen.add(item)
            sum_xy += twice_rank[item] * position
        if len(seen) < len(self.items):
            missing = [i for i in self.items if i not in seen]
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            return self._failed(f"ordering misses {len(missing)} experiment(s): {shown}")
        rho = _rho_from_sums(len(order), self.sum_x, self.sum_xx, sum_xy)
        if math.isnan(rho):
            # Not the submitter's fault: a task validator refuses such groups, and a
            # random ranking scores 0 on them too (see chance.py).
            note = (f"group {self.group_id}: rho is undefined (fewer than two distinct "
                    "measured values); scored 0")
            return GroupGrade(group_id=self.group_id, weight=self.weight, rho=0.0), note
        return GroupGrade(group_id=self.group_id, weight=self.weight, rho=rho), None

    def _failed(self, reason: str) -> tuple[GroupGrade, None]:
        return GroupGrade(group_id=self.group_id, weight=self.weight, rho=-1.0, error=reason), None


@dataclass(frozen=True)
class GradingKey:
    """A trusted contract with its measured ranks, prepared once to grade many submissions.

    ``grade_submission`` builds one per call; code that grades many files against one
    task (a regrade, a benchmark) builds it once and calls :meth:`grade`.
    """

    contract: Contract
    groups: tuple[_MeasuredGroup, ...]

    @classmethod
    def build(cls, contract: Contract, answers: AnswerKey) -> GradingKey:
        """Rank the measured values of every group of ``contract``.

        Raises:
            AnswerKeyError: When the key names another task or lacks a finite value
                for an experiment of the contract (the message names group and experiment).
        """
        if answers.task_id != contract.task_id:
            raise AnswerKeyError(
                f"task_id {answers.task_id!r} does not match the contract's {contract.task_id!r}"
            )
        return cls(contract=contract, groups=tuple(
            _MeasuredGroup.build(g.group_id, g.weight, g.items, answers.groups.get(g.group_id))
            for g in contract.groups
        ))

    def score_orders(self, orders: Mapping[str, Sequence[str]]) -> float:
        """Task score of orderings by group id: what a file listing exactly them would get.

        A group missing from ``orders`` is absent (-1, weight kept); a group id the
        contract does not have rejects the whole file (-1), as in :meth:`grade`.

        Examples
        --------
        >>> from spu.schema import ComparisonGroup
        >>> c = Contract(task_id="t", task_version="1", groups=[
        ...     ComparisonGroup(group_id="G", endpoint="y", weight=0.5, items=["a", "b"]),
        ...     ComparisonGroup(group_id="H", endpoint="y", weight=0.5, items=["c", "d"])])
        >>> a = AnswerKey(task_id="t", task_version="1",
        ...               groups={"G": {"a": 1.0, "b": 2.0}, "H": {"c": 1.0, "d": 2.0}})
        >>> GradingKey.build(c, a).score_orders({"G": ["a", "b"]})  # 0.5 x 1 + 0.5 x -1
        0.0
        """
        known = {g.group_id for g in self.groups}
        if any(gid not in known for gid in orders):
            return -1.0
        rhos = [g.grade(list(orders[g.group_id]))[0].rho if g.group_id in orders else -1.0
                for g in self.groups]
        return task_score([g.weight for g in self.groups], rhos)

    def grade(self, data: bytes | None, recover: bool = False) -> Grade:
        """Grade submitted bytes: see :func:`grade_submission`."""
        contract = self.contract
        if data is None:
            return _rejected(contract, "missing file: no rankings.json was submitted")
        obj, reason = parse_submission(data)
        if reason is not None:
            return _rejected(contract, reason)
        strict, recoverable = _grade_canonical(obj, contract, self.groups)
        if not (recover and recoverable):
            return strict
        try:
            normalized, departures = normalize_departures(obj)
        except RecoveryFailed as exc:
            strict.errors.append(f"recovery failed: {exc}")
            return strict
        recovered, _ = _grade_canonical(normalized, contract, self.groups)
        if recovered.status is GradeStatus.invalid:
            errors = [strict.errors[0], *recovered.errors, "recovery did not yield a valid file"]
            return recovered.model_copy(update={"recovered_departures": departures,
                                                "errors": errors})
        return recovered.model_copy(
            update={
                "status": GradeStatus.recovered,
                "score_strict": -1.0,
                "recovered_departures": departures,
                "errors": [strict.errors[0], *recovered.errors],
            }
        )


def task_score(weights: Sequence[float], rhos: Sequence[float]) -> float:
    """Sum of weight x group score, added in contract order, kept within [-1, 1].

    Added left to right, as the vectorized chance draws add them, so that a score
    and the chance threshold it is compared with agree to the last bit.

    Examples
    --------
    >>> task_score([0.5, 0.5], [0.8, 0.0])
    0.4
    """
    total = 0.0
    for weight, rho in zip(weights, rhos, strict=True):
        total += weight * rho
    return max(-1.0, min(1.0, total))


def _rejected(contract: Contract, reason: str) -> Grade:
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
    )


def _identity_error(obj: dict[str, Any], contract: Contract) -> str | None:
    if "task_id" not in obj:
        return "wrong task identity: task_id is missing"
    if obj["task_id"] != contract.task_id:
        return (f"wrong task identity: task_id {_shown(obj['task_id'])}, "
                f"expected {contract.task_id!r}")
    if "task_version" in obj:
        version = obj["task_version"]
        # A version written as a JSON number (1.0) matches the text "1.0".
        as_text = str(version) if isinstance(version, (int, float, str)) else None
        if isinstance(version, bool) or as_text != contract.task_version:
            return (f"wrong task identity: task_version {_shown(version)}, "
                    f"expected {contract.task_version!r}")
    return None


def _schema_departure(obj: dict[str, Any]) -> str | None:
    if "rankings" not in obj:
        return "schema departure: 'rankings' is missing"
    rankings = obj["rankings"]
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


def _grade_canonical(
    obj: Any, contract: Contract, measured: tuple[_MeasuredGroup, ...]
) -> tuple[Grade, bool]:
    """Grade a parsed object strictly. The flag says whether recovery may apply to it."""
    if not isinstance(obj, dict):
        return _rejected(contract, "schema departure: the file is not a JSON object"), True
    identity = _identity_error(obj, contract)
    if identity is not None:
        # Renamed identity keys (task/version) are departure 5, which recovery normalizes.
        renamed = "task_id" not in obj and "task" in obj
        return _rejected(contract, identity), renamed
    departure = _schema_departure(obj)
    if departure is not None:
        return _rejected(contract, departure), True

    known = {g.group_id for g in measured}
    by_group: dict[str, list[list[Any]]] = {}
    for entry in obj["rankings"]:
        group_id = entry["group_id"]
        if group_id not in known:
            return _rejected(contract, f"unknown group {_shown(group_id)}"), False
        by_group.setdefault(group_id, []).append(entry["order"])

    groups: list[GroupGrade] = []
    notes: list[str] = [] if by_group else ["no group is ranked"]
    for group in measured:
        listed = by_group.get(group.group_id, [])
        if len(listed) == 1:
            group_grade, note = group.grade(listed[0])
            groups.append(group_grade)
            if note:
                notes.append(note)
        else:
            error = GROUP_ABSENT if not listed else f"group listed {len(listed)} times"
            groups.append(GroupGrade(group_id=group.group_id, weight=group.weight, rho=-1.0,
                                     error=error))
    score = task_score([g.weight for g in groups], [g.rho for g in groups])
    return Grade(
        task_id=contract.task_id,
        score=score,
        score_strict=score,
        status=GradeStatus.valid,
        groups=groups,
        errors=notes,
        grader_version=GRADER_VERSION,
    ), False


def grade_submission(
    contract: Contract, answers: AnswerKey, data: bytes | None, recover: bool = False
) -> Grade:
    """Grade submitted ``rankings.json`` bytes against a trusted contract and answer key.

    Args:
        contract: The trusted copy of the task's contract.
        answers: The measured values (checked: see :meth:`GradingKey.build`).
        data: The submitted bytes, or ``None`` when no file was written.
        recover: Also normalize the five schema departures of appendix E.1 (moving no
            item) and grade the normalized file strictly; ``score`` is then the
            recovered score, ``score_strict`` keeps the strict one and
            ``recovered_departures`` names what was normalized.

    Returns:
        The grade. Any submitted bytes give a grade, never an exception.

    Raises:
        AnswerKeyError: When the answer key does not cover the contract.

    References:
        Paper sections 2.5 (scoring, valid submissions) and E.1 (recovery); SPEC section 3.
    """
    return GradingKey.build(contract, answers).grade(data, recover)


def grade_json(
    contract: Contract, answers: AnswerKey, data: bytes | None, recover: bool = False
) -> str:
    """``grade_submission`` as the JSON text of ``spu grade --json`` (SPEC section 4)."""
    return json.dumps(grade_submission(contract, answers, data, recover).public_json())
