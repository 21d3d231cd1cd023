"""The outcome of a run and whether it is scored: a pure function of evidence and a grade.

The rules of SPEC section 5 and paper 3.1 in one place, with no run, sandbox or
harness behind them: the caller (the runner, the regrade, later the model gateway)
gathers what it knows into a :class:`RunEvidence` and gets a :class:`Verdict` back.
"""

from __future__ import annotations

from dataclasses import dataclass

from spu.schema import AnswerKey, Contract, Grade, GradeStatus, Outcome, ProcessEvidence

EXCLUDED_OUTCOMES = frozenset({Outcome.refusal, Outcome.memory_limit, Outcome.disk_limit,
                               Outcome.infra_error, Outcome.sealed, Outcome.seal_broken})
"""Outcomes never scored, even with a valid file (paper 3.1, Table 6); ``disk_limit``
(the run filled ``limits.disk_gb``) is excluded and retried like ``memory_limit``, unless
it left a file (:data:`LIMIT_OUTCOMES`); ``sealed`` (no key yet) and ``seal_broken`` (a
sealed file changed) are never scored and are counted apart."""

LIMIT_OUTCOMES = frozenset({Outcome.memory_limit, Outcome.disk_limit})
"""Resource limits: with a valid or recoverable file written before the limit, the run is
scored from that file like a timeout and not retried (an agent cannot exclude itself by
allocating memory or disk once it has written a file it dislikes); with
``sweep.retry_limits_with_file=true`` it is excluded and rerun, as the paper did (3.1)."""

RERUN_NOTE = ("ended {outcome} with a file: excluded and rerun "
              "(sweep.retry_limits_with_file=true)")
"""The note of a run :data:`LIMIT_OUTCOMES` excluded under the paper's rule (regrade reads it)."""

REFUSALS_AFTER_FILE_RULES = ("exclude", "score")
"""How the statistics treat a refusal that came after a valid or recoverable file
(``spu stats --refusals-after-file``): ``exclude`` is the paper's rule (3.1, Table 6: "five
runs wrote a valid file and then refused, so all five runs are excluded as refusals"),
``score`` counts the file's grade as a timeout's is."""

REFUSAL_AFTER_FILE_NOTE = ("refused after writing a {status} file: excluded as a refusal "
                           "(paper 3.1); its file's grade is kept (score_strict, "
                           "score_recovered) and spu stats --refusals-after-file=score "
                           "scores it")
"""The note of a run :func:`refused_after_file` holds."""

KEPT_AT_REFUSAL_NOTE = ("graded on rankings.json as the model gateway kept it when the "
                        "refused request arrived: the run's file at its end was {final}")
"""The note of a refusal graded on the file it had when the model refused (the agent then
removed or spoiled it)."""

FILE_OUTCOMES = frozenset({Outcome.valid, Outcome.recovered, Outcome.rejected, Outcome.no_file,
                           Outcome.sealed})
"""Outcomes decided by the submitted file alone (``sealed``: its grade waits for the key);
the others (refusal, timeout...) come from how the agent ended."""


@dataclass(frozen=True)
class RunEvidence:
    """What is known about how a run ended, from every source that saw it."""

    submitted: bool = False
    """A submission file was found in the run's output folder."""
    infra_error: str | None = None
    """Why the sandbox, the harness or the grader failed (an API error, a crashed CLI)."""
    refused: bool = False
    """The model refused the task (its refusal label, or the harness's reading)."""
    oom_killed: bool = False
    """The memory limit killed the agent."""
    disk_full: bool = False
    """The run filled its disk and was stopped."""
    timed_out: bool = False
    """The wall-clock limit fired."""
    policy_stop: bool = False
    """The tools policy stopped the run (a flagged fetch under ``tools.policy=stop``)."""
    cost_limit: bool = False
    """The model gateway refused further requests at ``limits.max_cost_usd``."""

    @classmethod
    def from_process(cls, process: ProcessEvidence, *, submitted: bool,
                     infra_error: str | None = None, refused: bool = False,
                     policy_stop: bool = False, cost_limit: bool = False) -> RunEvidence:
        """Evidence from the sandbox's process facts plus what the harness read back.

        ``infra_error`` is the harness's; the process's own ``error`` counts as well.
        """
        return cls(
            submitted=submitted,
            infra_error=process.error or infra_error,
            refused=refused,
            oom_killed=process.oom_killed,
            disk_full=process.disk_full,
            timed_out=process.timed_out,
            policy_stop=policy_stop,
            cost_limit=cost_limit,
        )


@dataclass(frozen=True)
class Verdict:
    """How a run ended and whether its score counts."""

    outcome: Outcome
    """The run's outcome (SPEC section 5)."""
    scored: bool
    """The run's score counts in the statistics (paper 3.1)."""
    refusal_after_file: bool = False
    """A refusal that left a valid or recoverable file (:func:`refused_after_file`):
    unscored by the paper's rule, its file's grade kept in the record."""


def counts_as_file(grade: Grade | None) -> bool:
    """A valid or recoverable file that ranks a group: a file a run can be scored on."""
    return (grade is not None and grade.status in (GradeStatus.valid, GradeStatus.recovered)
            and not no_group_ranked(grade))


def counts_without_key(contract: Contract, data: bytes | None) -> bool:
    """Whether ``data`` is a file a run can be scored on, judged before any key is read.

    A file's status (valid, recoverable, rejected) and the groups it ranks depend on the
    contract alone, not on the measured values: the file is graded against a placeholder
    key (each experiment measured at its place in the contract), whose scores mean
    nothing and are dropped. The model gateway keeps, at a refusal, only files that count.

    Examples
    --------
    >>> from spu.schema import ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[ComparisonGroup(
    ...     group_id="G1", endpoint="yield", weight=1.0, items=["a", "b"])])
    >>> counts_without_key(c, b'{"task_id": "t", "task_version": "1", '
    ...                       b'"rankings": [{"group_id": "G1", "order": ["b", "a"]}]}')
    True
    >>> counts_without_key(c, b'{"rankings": []}'), counts_without_key(c, None)
    (False, False)
    """
    from spu.grading.rules import grade_submission

    placeholder = AnswerKey(task_id=contract.task_id, task_version=contract.task_version,
                            groups={g.group_id: {item: float(k) for k, item in enumerate(g.items)}
                                    for g in contract.groups})
    return counts_as_file(grade_submission(contract, placeholder, data, recover=True))


def no_group_ranked(grade: Grade) -> bool:
    """A file accepted but ranking no group (paper E.1: an empty list counts as no file)."""
    return grade.status is not GradeStatus.invalid and all(
        g.error == "group absent" for g in grade.groups
    )


def decide_outcome(evidence: RunEvidence, grade: Grade | None) -> Outcome:
    """The outcome of a run, from facts in a fixed order of precedence (SPEC section 5).

    An infrastructure error comes first, then a refusal, the memory limit, the disk
    limit, the time limit, the spend cap, a policy stop; only then does the file decide:
    none (or one ranking no group) is ``no_file``, else the grade's status, or
    ``sealed`` when there is no grade because the task has no answer key yet (SPEC 13).
    """
    if evidence.infra_error:
        return Outcome.infra_error
    if evidence.refused:
        return Outcome.refusal
    if evidence.oom_killed:
        return Outcome.memory_limit
    if evidence.disk_full:
        return Outcome.disk_limit
    if evidence.timed_out:
        return Outcome.timeout
    if evidence.cost_limit:
        return Outcome.cost_limit
    if evidence.policy_stop:
        return Outcome.policy_stop
    if not evidence.submitted or (grade is not None and no_group_ranked(grade)):
        return Outcome.no_file
    if grade is None:
        return Outcome.sealed
    if grade.status is GradeStatus.valid:
        return Outcome.valid
    if grade.status is GradeStatus.recovered:
        return Outcome.recovered
    return Outcome.rejected


def is_scored(outcome: Outcome, grade: Grade | None, score_limits: bool = True) -> bool:
    """Scored: a valid or recoverable file, not excluded by the outcome (paper 3.1).

    Args:
        outcome: How the run ended.
        grade: The grade of its file; None without an answer key (never scored).
        score_limits: Score a file left before ``memory_limit`` or ``disk_limit``, as a
            timeout's is (the default); False is the paper's rule (excluded, rerun).
    """
    if grade is None:
        return False
    excluded = outcome in EXCLUDED_OUTCOMES and not (score_limits and outcome in LIMIT_OUTCOMES)
    return (
        grade.status in (GradeStatus.valid, GradeStatus.recovered)
        and not excluded
        and not no_group_ranked(grade)
    )


def refused_after_file(outcome: Outcome, grade: Grade | None) -> bool:
    """A refusal that left a valid or recoverable file, one that ranks a group.

    The paper excludes such runs as refusals (3.1, Table 6's note) while its grader still
    scored their files for the "mean at -1" column; the record keeps the file's grade and
    this flag, so that the rule stays visible and an analyst can score them instead
    (:func:`scored_under_rule`). An agent can provoke a real refusal after a file it
    dislikes; the count of such runs is reported (``outcomes.csv``).
    """
    return outcome is Outcome.refusal and counts_as_file(grade)


def scored_under_rule(scored: bool, refusal_after_file: bool, rule: str) -> bool:
    """Whether a run counts, under a :data:`REFUSALS_AFTER_FILE_RULES` rule.

    Args:
        scored: The record's flag (the paper's rule: a refusal is never scored).
        refusal_after_file: The record's :func:`refused_after_file` flag.
        rule: ``exclude`` (the paper's) or ``score`` (its file counts).

    Raises:
        ValueError: an unknown rule.
    """
    if rule not in REFUSALS_AFTER_FILE_RULES:
        raise ValueError(f"refusals after a file: {rule!r} is not one of "
                         f"{', '.join(REFUSALS_AFTER_FILE_RULES)}")
    return scored or (rule == "score" and refusal_after_file)


def judge(evidence: RunEvidence, grade: Grade | None, score_limits: bool = True) -> Verdict:
    """The outcome of a run and whether it is scored, from its evidence and recovered grade.

    ``grade`` is None for a run of a task without an answer key: a file makes it ``sealed``.

    ``score_limits`` is :func:`is_scored`'s: False under ``sweep.retry_limits_with_file``.
    """
    outcome = decide_outcome(evidence, grade)
    return Verdict(outcome=outcome, scored=is_scored(outcome, grade, score_limits),
                   refusal_after_file=refused_after_file(outcome, grade))
