"""``spu grade`` (SPEC section 4); ``spu regrade`` is tracking's (:mod:`spu.tracking.cli`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add ``grade`` to the ``spu`` parser."""
    p = sub.add_parser("grade", help="grade a rankings.json against a task")
    p.add_argument("submission", type=Path, help="the rankings.json to grade")
    p.add_argument("--task", type=Path, required=True, help="task folder")
    p.add_argument("--answers", type=Path, default=None,
                   help="answer key (default: TASK/hidden/answers.json)")
    p.add_argument("--recover", action="store_true",
                   help="normalize the five schema departures of appendix E.1 first")
    p.add_argument("--json", action="store_true", help="print the SPEC section 4 JSON object")
    p.set_defaults(handler=grade_command)


def grade_command(args: argparse.Namespace) -> int:
    """Print the grade; exit 0 whatever the score, 2 when the task cannot be read."""
    from spu.grading.rules import AnswerKeyError, grade_submission
    from spu.grading.submission import read_submission_file
    from spu.tasks.package import TaskLoadError, load_answers, load_task

    try:
        task = load_task(args.task)
        answers_path = args.answers or task.answers_path()
        answers = load_answers(answers_path)
        data = read_submission_file(args.submission, follow_links=True)
        grade = grade_submission(task.contract, answers, data,
                                 recover=args.recover)
    except TaskLoadError as exc:
        print(f"spu grade: {exc}", file=sys.stderr)
        return 2
    except AnswerKeyError as exc:
        print(f"spu grade: {answers_path}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(grade.public_json()))
        return 0
    for line in grade_lines(grade):
        print(line)
    return 0


def grade_lines(grade: Any) -> list[str]:
    """The text of ``spu grade``: the score, each group, then what happened to the file.

    A recovered file was rejected by the strict rules and graded after its departures
    were renamed back: its first error is that rejection, said as such, so that the
    recovered score is never followed by an unqualified error.
    """
    recovered = grade.status.value == "recovered"
    head = f"task {grade.task_id}: score {grade.score:.6f} ({grade.status.value})"
    if recovered:
        head = (f"task {grade.task_id}: score {grade.score:.6f} (recovered; strict score "
                f"{grade.score_strict:.6f})")
    lines = [head]
    for g in grade.groups:
        note = f"  [{g.error}]" if g.error else ""
        lines.append(f"  {g.group_id:<12} weight {g.weight:.4f}  rho {g.rho:+.6f}{note}")
    errors = list(grade.errors)
    if recovered and errors:
        lines.append(f"  strict rules: file rejected ({errors.pop(0)})")
        lines.append(f"  recovery: {', '.join(grade.recovered_departures)} renamed back, "
                     f"no item moved; the file then graded as above")
    elif grade.recovered_departures:
        lines.append(f"  recovery: {', '.join(grade.recovered_departures)} renamed back")
    lines += [f"  error: {e}" for e in errors]
    return lines
