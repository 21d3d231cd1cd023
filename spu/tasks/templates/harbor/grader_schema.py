"""The records the vendored SPU grader needs, in the standard library only.

``spu task export --format harbor`` copies the grading rules (``spu/grading/rules.py``,
``recovery.py``, ``submission.py`` and ``spu/strict_json.py``) unchanged into the task's
``tests/grader/`` and writes this file there as ``spu/schema.py``, in place of the
pydantic models of :mod:`spu.schema`, so that the verifier runs on any ``python3``
(3.11 or later) without installing anything. Each class keeps the fields and methods
the rules use, with the same names; the round-trip tests grade every fixture with both
and compare.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class TrustedFileError(ValueError):
    """The task's own contract or answer key is malformed (a fault of the export)."""


class GradeStatus(str, Enum):
    """File-level status of a graded submission (SPEC section 4)."""

    valid = "valid"
    recovered = "recovered"
    invalid = "invalid"


@dataclass(frozen=True)
class ComparisonGroup:
    """One comparison group of the contract."""

    group_id: str
    endpoint: str
    weight: float
    items: list[str]


@dataclass(frozen=True)
class Contract:
    """``contract.json``: the groups, their weights and experiment ids."""

    task_id: str
    task_version: str
    groups: list[ComparisonGroup]

    @classmethod
    def from_json(cls, obj: Any) -> Contract:
        """Read a parsed ``contract.json``; raise :class:`TrustedFileError` on a departure."""
        try:
            groups = [ComparisonGroup(group_id=_text(g["group_id"]), endpoint=_text(g["endpoint"]),
                                      weight=_number(g["weight"]),
                                      items=[_text(i) for i in g["items"]])
                      for g in obj["groups"]]
            return cls(task_id=_text(obj["task_id"]), task_version=_text(obj["task_version"]),
                       groups=groups)
        except (KeyError, TypeError) as exc:
            raise TrustedFileError(f"contract.json: malformed ({exc!r})") from None


@dataclass(frozen=True)
class AnswerKey:
    """``answers.json``: the measured value of each experiment, by group."""

    task_id: str
    task_version: str
    groups: dict[str, dict[str, float]]

    @classmethod
    def from_json(cls, obj: Any) -> AnswerKey:
        """Read a parsed answer key; raise :class:`TrustedFileError` on a departure."""
        try:
            groups = {_text(gid): {_text(eid): _number(v) for eid, v in values.items()}
                      for gid, values in obj["groups"].items()}
            return cls(task_id=_text(obj["task_id"]), task_version=_text(obj["task_version"]),
                       groups=groups)
        except (KeyError, TypeError, AttributeError) as exc:
            raise TrustedFileError(f"answers.json: malformed ({exc!r})") from None


@dataclass
class GroupGrade:
    """Score of one comparison group."""

    group_id: str
    weight: float
    rho: float
    error: str | None = None


@dataclass
class Grade:
    """What the grader decides about one submission."""

    task_id: str
    score: float
    status: GradeStatus
    score_strict: float
    grader_version: str
    groups: list[GroupGrade] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    recovered_departures: list[str] = field(default_factory=list)
    isolation: str | None = None

    def model_copy(self, update: dict[str, Any] | None = None) -> Grade:
        """A shallow copy with ``update`` applied (pydantic's ``model_copy``)."""
        return dataclasses.replace(self, **(update or {}))

    def public_json(self) -> dict[str, Any]:
        """The exact object of ``spu grade --json`` (SPEC section 4)."""
        return {
            "task_id": self.task_id,
            "score": self.score,
            "status": self.status.value,
            "groups": [
                {"group_id": g.group_id, "weight": g.weight, "rho": g.rho, "error": g.error}
                for g in self.groups
            ],
            "errors": list(self.errors),
        }


def _text(value: Any) -> str:
    # A version written as a JSON number (1.0) is the text "1.0", as in spu.schema.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"expected text, found {type(value).__name__}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"expected a finite number, found {value!r}")
    return float(value)
