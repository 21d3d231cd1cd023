"""``spu grade``: grade one submission against a task (SPEC section 4)."""

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
    from spu.grading.rules import grade_submission
    from spu.tasks.package import TaskLoadError, load_answers, load_task

    try:
        task = load_task(args.task)
        answers = load_answers(args.answers or task.answers_path())
    except TaskLoadError as exc:
        print(f"spu grade: {exc}", file=sys.stderr)
        return 2
    try:
        data: bytes | None = args.submission.read_bytes()
    except FileNotFoundError:
        data = None
    except IsADirectoryError:
        data = b""
    grade = grade_submission(task.contract, answers, data, recover=args.recover)
    if args.json:
        print(json.dumps(grade.public_json()))
        return 0
    print(f"task {grade.task_id}: score {grade.score:.6f} ({grade.status.value})")
    for g in grade.groups:
        note = f"  [{g.error}]" if g.error else ""
        print(f"  {g.group_id:<12} weight {g.weight:.4f}  rho {g.rho:+.6f}{note}")
    for e in grade.errors:
        print(f"  error: {e}")
    if grade.recovered_departures:
        print(f"  recovered: {', '.join(grade.recovered_departures)}")
    return 0
