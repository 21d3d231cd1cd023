"""``spu grade`` (SPEC section 4) and ``spu regrade``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spu.config import GraderIsolation


def register(sub: Any) -> None:
    """Add ``grade`` and ``regrade`` to the ``spu`` parser."""
    p = sub.add_parser("grade", help="grade a rankings.json against a task")
    p.add_argument("submission", type=Path, help="the rankings.json to grade")
    p.add_argument("--task", type=Path, required=True, help="task folder")
    p.add_argument("--answers", type=Path, default=None,
                   help="answer key (default: TASK/hidden/answers.json)")
    p.add_argument("--recover", action="store_true",
                   help="normalize the five schema departures of appendix E.1 first")
    p.add_argument("--json", action="store_true", help="print the SPEC section 4 JSON object")
    p.set_defaults(handler=grade_command)

    r = sub.add_parser(
        "regrade",
        help="re-score the stored submissions of finished runs (agents are not re-run)",
        description="Grade every run under OUTPUT_ROOT/runs again from its stored "
        "output/rankings.json, in the isolated grading process; update run.json and "
        "grade.json, keeping the replaced grades; with --tracking-uri, update the MLflow runs.",
    )
    r.add_argument("output_root", type=Path, nargs="?", default=Path("outputs"),
                   help="output root holding runs/<run_key>/ (default: outputs)")
    r.add_argument("--task-root", type=Path, default=Path("tasks"),
                   help="where the tasks are found by id (default: tasks)")
    r.add_argument("--answers-root", type=Path, default=None,
                   help="answer keys as <root>/<task_id>/answers.json "
                        "(default: each task's hidden/answers.json)")
    r.add_argument("--run-key", action="append", default=None, dest="run_keys",
                   help="regrade only this run (repeatable)")
    r.add_argument("--tracking-uri", default=None,
                   help="also update the MLflow runs in this tracking store")
    r.add_argument("--isolation", default="auto", choices=[m.value for m in GraderIsolation],
                   help="isolation of the grading process (default: the strongest available)")
    r.add_argument("--reason", default=None, help="why, kept with the replaced grades")
    r.add_argument("--accept-version-change", action="store_true",
                   help="grade runs of an older task version against the current key")
    r.add_argument("--json", action="store_true", help="print one JSON object per run")
    r.set_defaults(handler=regrade_command)


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


def regrade_command(args: argparse.Namespace) -> int:
    """Regrade; exit 0 when every run was regraded or unchanged, 1 when one failed.

    A missing ``--answers-root`` or ``--task-root`` is one line and exit 2, before any run.
    """
    from spu.tracking.regrade import regrade_runs

    # A folder that is not there fails every run the same way: said once, before any run.
    for flag, folder in (("--answers-root", args.answers_root), ("--task-root", args.task_root)):
        if folder is not None and not folder.is_dir():
            what = "does not exist" if not folder.exists() else "is not a folder"
            print(f"spu regrade: {flag} {folder}: {what}; no run was regraded", file=sys.stderr)
            return 2
    results = regrade_runs(
        args.output_root, args.task_root, answers_root=args.answers_root,
        run_keys=args.run_keys, isolation=args.isolation, reason=args.reason,
        tracking_uri=args.tracking_uri, accept_version_change=args.accept_version_change,
    )
    for r in results:
        if args.json:
            print(json.dumps(asdict(r)))
        elif r.status == "failed":
            print(f"{r.run_key}  FAILED  {r.error}", file=sys.stderr)
        else:
            tracked = f"  mlflow runs {r.tracking_runs}" if args.tracking_uri else ""
            print(f"{r.run_key}  {r.task_id}  {r.status:<9}  score {r.old_score:+.6f} -> "
                  f"{r.new_score:+.6f}  outcome {r.old_outcome} -> {r.new_outcome}  "
                  f"grader {r.grader_version} ({r.isolation}){tracked}"
                  + (f"  [{r.error}]" if r.error else ""))
    if not results:
        print(f"spu regrade: no finished runs under {args.output_root / 'runs'}", file=sys.stderr)
    return 1 if any(r.status == "failed" or r.error for r in results) else 0
