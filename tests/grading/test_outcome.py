"""The outcome rules (SPEC section 5, paper 3.1), each worked by hand in a table of cases."""

from __future__ import annotations

import dataclasses

import pytest

from spu.grading.outcome import (
    EXCLUDED_OUTCOMES,
    LIMIT_OUTCOMES,
    RunEvidence,
    Verdict,
    is_scored,
    judge,
    no_group_ranked,
)
from spu.schema import Grade, GradeStatus, GroupGrade, Outcome, ProcessEvidence


def _grade(status: GradeStatus, *errors: str | None) -> Grade:
    groups = [GroupGrade(group_id=f"G{i}", weight=1.0, rho=0.5 if e is None else -1.0, error=e)
              for i, e in enumerate(errors or (None,))]
    return Grade(task_id="t", score=0.5, status=status, groups=groups, score_strict=0.5,
                 grader_version="test")


VALID = _grade(GradeStatus.valid)
RECOVERED = _grade(GradeStatus.recovered)
INVALID = _grade(GradeStatus.invalid, "bad file")
EMPTY = _grade(GradeStatus.valid, "group absent", "group absent")
"""A file that parses but ranks no group: counted as no file (paper E.1)."""
PARTLY = _grade(GradeStatus.valid, None, "group absent")
"""One group ranked, one absent: a valid file whose absent group scores -1."""

FILED = RunEvidence(submitted=True)

CASES = [
    # (evidence, grade, outcome, scored, why)
    (FILED, VALID, Outcome.valid, True, "a valid file is scored"),
    (FILED, RECOVERED, Outcome.recovered, True, "a recovered file is scored"),
    (FILED, INVALID, Outcome.rejected, False, "a rejected file is not scored"),
    (FILED, PARTLY, Outcome.valid, True, "one group absent is still a valid file"),
    (FILED, EMPTY, Outcome.no_file, False, "no group ranked counts as no file"),
    (RunEvidence(), INVALID, Outcome.no_file, False, "nothing submitted: no file"),
    (dataclasses.replace(FILED, timed_out=True), VALID, Outcome.timeout, True,
     "a timeout with a valid early file keeps its score (paper 3.1)"),
    (dataclasses.replace(FILED, policy_stop=True), VALID, Outcome.policy_stop, True,
     "a policy stop keeps the file it left"),
    (dataclasses.replace(FILED, oom_killed=True), VALID, Outcome.memory_limit, True,
     "a valid file before the memory limit is scored (issue 30)"),
    (dataclasses.replace(FILED, disk_full=True), VALID, Outcome.disk_limit, True,
     "a valid file before the disk limit is scored like the memory limit's"),
    (dataclasses.replace(FILED, refused=True), VALID, Outcome.refusal, False,
     "a refusal is never scored"),
    (dataclasses.replace(FILED, infra_error="API 529"), VALID, Outcome.infra_error, False,
     "an infrastructure error is never scored"),
    # Precedence: the first fact in SPEC section 5's order wins.
    (RunEvidence(infra_error="x", refused=True, oom_killed=True), VALID, Outcome.infra_error,
     False, "infra error before refusal"),
    (RunEvidence(refused=True, oom_killed=True, timed_out=True), VALID, Outcome.refusal, False,
     "refusal before memory limit"),
    (RunEvidence(oom_killed=True, disk_full=True), VALID, Outcome.memory_limit, True,
     "memory limit before disk limit"),
    (RunEvidence(disk_full=True, timed_out=True), VALID, Outcome.disk_limit, True,
     "disk limit before timeout"),
    (RunEvidence(submitted=True, timed_out=True, policy_stop=True), VALID, Outcome.timeout,
     True, "timeout before policy stop"),
    (RunEvidence(submitted=True, timed_out=True), INVALID, Outcome.timeout, False,
     "a timeout whose file is rejected scores nothing"),
]


@pytest.mark.parametrize(("evidence", "grade", "outcome", "scored", "why"), CASES,
                         ids=[c[-1] for c in CASES])
def test_outcome_table(evidence: RunEvidence, grade: Grade, outcome: Outcome, scored: bool,
                       why: str) -> None:
    """Each row: the outcome and the scored flag worked by hand from SPEC section 5."""
    assert judge(evidence, grade) == Verdict(outcome=outcome, scored=scored), why


def test_excluded_outcomes_are_never_scored() -> None:
    """Refusal, memory, disk, infrastructure and seal outcomes are unscored with a valid file."""
    assert EXCLUDED_OUTCOMES == {Outcome.refusal, Outcome.memory_limit, Outcome.disk_limit,
                                 Outcome.infra_error, Outcome.sealed, Outcome.seal_broken}
    for outcome in Outcome:
        # The paper's rule (sweep.retry_limits_with_file=true): every excluded outcome.
        assert is_scored(outcome, VALID, score_limits=False) is (outcome not in EXCLUDED_OUTCOMES)
        # The default: a file left before a resource limit is scored (issue 30, item 7).
        assert is_scored(outcome, VALID) is (outcome not in EXCLUDED_OUTCOMES - LIMIT_OUTCOMES)
    assert LIMIT_OUTCOMES == {Outcome.memory_limit, Outcome.disk_limit}
    assert not judge(RunEvidence(submitted=True, oom_killed=True), VALID,
                     score_limits=False).scored


def test_no_group_ranked() -> None:
    """Only an accepted file whose every group is absent ranks no group."""
    assert no_group_ranked(EMPTY)
    assert not no_group_ranked(PARTLY)
    assert not no_group_ranked(INVALID)


def test_evidence_from_process_takes_the_sandbox_error_first() -> None:
    """The sandbox's own error, else the harness's, is the infrastructure error."""
    process = ProcessEvidence(error="sandbox failed", oom_killed=True, timed_out=True)
    evidence = RunEvidence.from_process(process, submitted=True, infra_error="api",
                                        refused=True, policy_stop=True)
    assert evidence == RunEvidence(submitted=True, infra_error="sandbox failed", refused=True,
                                   oom_killed=True, timed_out=True, policy_stop=True)
    harness_only = RunEvidence.from_process(ProcessEvidence(), submitted=False, infra_error="api")
    assert harness_only.infra_error == "api"


def test_evidence_is_frozen() -> None:
    """Evidence is a value: it cannot be changed after the rules have seen it."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        FILED.submitted = False  # type: ignore[misc]
