"""Grading: the paper's rules as a pure function, recovery, chance level and isolation."""

from spu.grading.chance import chance_threshold, random_task_scores
from spu.grading.isolated import IsolatedGrades, grade_isolated
from spu.grading.recovery import DEPARTURES, RecoveryFailed, normalize_departures
from spu.grading.rules import (
    GRADER_VERSION,
    MAX_BYTES,
    AnswerKeyError,
    GradingKey,
    check_answer_key,
    grade_json,
    grade_submission,
)

__all__ = [
    "DEPARTURES",
    "GRADER_VERSION",
    "MAX_BYTES",
    "AnswerKeyError",
    "GradingKey",
    "IsolatedGrades",
    "RecoveryFailed",
    "chance_threshold",
    "check_answer_key",
    "grade_isolated",
    "grade_json",
    "grade_submission",
    "normalize_departures",
    "random_task_scores",
]
