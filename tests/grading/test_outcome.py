"""The outcome rules (SPEC section 5, paper 3.1), each worked by hand in a table of cases."""

from __future__ import annotations

import dataclasses

import pytest

from spu.grading.outcome import (
    EXCLUDED_OUTCOMES,
    LIMIT_OUTCOMES,
    REFUSALS_AFTER_FILE_RULES,
    RunEvidence,
    Verdict,
    is_scored,
    judge,
    no_group_ranked,
    refused_after_file,
    scored_under_rule,
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
    verdict = judge(evidence, grade)
    assert (verdict.outcome, verdict.scored) == (outcome, scored), why
    assert verdict == Verdict(outcome=outcome, scored=scored,
                              refusal_after_file=verdict.refusal_after_file), why


AFTER_FILE_CASES = [
    # (evidence, grade, refusal after a file, why)
    (dataclasses.replace(FILED, refused=True), VALID, True,
     "a refusal after a valid file: excluded, its grade kept (paper 3.1, Table 6's note)"),
    (dataclasses.replace(FILED, refused=True), RECOVERED, True,
     "a refusal after a recoverable file"),
    (dataclasses.replace(FILED, refused=True), INVALID, False,
     "a refusal after a rejected file scores nothing either way"),
    (dataclasses.replace(FILED, refused=True), EMPTY, False,
     "a refusal after a file ranking no group: no file"),
    (RunEvidence(refused=True), None, False, "a refusal without a file"),
    (FILED, VALID, False, "a valid run is no refusal"),
    (dataclasses.replace(FILED, refused=True, infra_error="x"), VALID, False,
     "an infrastructure error comes first"),
]


@pytest.mark.parametrize(("evidence", "grade", "after_file", "why"), AFTER_FILE_CASES,
                         ids=[c[-1] for c in AFTER_FILE_CASES])
def test_refusal_after_a_file_table(evidence: RunEvidence, grade: Grade | None,
                                    after_file: bool, why: str) -> None:
    """Each row worked by hand: the flag, and the run stays unscored under the paper's rule."""
    verdict = judge(evidence, grade)
    assert verdict.refusal_after_file is after_file, why
    assert refused_after_file(verdict.outcome, grade) is after_file, why
    if after_file:
        assert verdict.outcome is Outcome.refusal and not verdict.scored, why


@pytest.mark.parametrize(("scored", "after_file", "rule", "counts"), [
    (True, False, "exclude", True), (False, False, "exclude", False),
    (False, True, "exclude", False), (False, True, "score", True),
    (False, False, "score", False), (True, False, "score", True)])
def test_scored_under_the_refusal_rule(scored: bool, after_file: bool, rule: str,
                                       counts: bool) -> None:
    """``exclude`` (the paper's) leaves the flag as recorded; ``score`` counts the file."""
    assert scored_under_rule(scored, after_file, rule) is counts
    assert REFUSALS_AFTER_FILE_RULES[0] == "exclude"


def test_an_unknown_refusal_rule_is_named() -> None:
    """A rule outside the two is one clear error."""
    with pytest.raises(ValueError, match="'keep' is not one of exclude, score"):
        scored_under_rule(False, True, "keep")


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
