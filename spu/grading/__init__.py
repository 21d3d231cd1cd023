"""Grading: the paper's rules as a pure function, recovery, chance level and isolation."""

from spu.grading.recovery import DEPARTURES, RecoveryFailed, normalize_departures
from spu.grading.rules import GRADER_VERSION, MAX_BYTES, grade_json, grade_submission

__all__ = [
    "DEPARTURES",
    "GRADER_VERSION",
    "MAX_BYTES",
    "RecoveryFailed",
    "grade_json",
    "grade_submission",
    "normalize_departures",
]
