"""The ``spu task`` commands (SPEC sections 4, 10, 15).

``validate``, ``review``, ``select``, ``retire``, ``threshold``, ``build``, ``export``,
``import``, ``new``, ``list`` and ``contamination``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add ``task`` and its subcommands to the ``spu`` parser."""
    task = sub.add_parser("task", help="validate, measure, build and list task packages")
    task_sub = task.add_subparsers(dest="task_command", metavar="SUBCOMMAND")
    task.set_defaults(handler=lambda args: (task.print_help(), 2)[1])
    _add_check_commands(task_sub)
    _add_package_commands(task_sub)
    _add_lifecycle_commands(task_sub)
    _add_list_command(task_sub)


def _add_check_commands(task_sub: Any) -> None:
    """``validate`` and ``threshold``: checking a package and its chance threshold."""
    p = task_sub.add_parser("validate", help="check task packages; exit 1 on any error",
                            description="Check task packages. A folder holding none of a "
                            "package's files (tasks/sources/, build specs) is skipped with a "
                            "note; exit 1 on any error, or when no folder given is a package.")
    p.add_argument("task_dirs", nargs="+", type=Path, metavar="TASK_DIR")
    p.add_argument("--answers", type=Path, default=None,
                   help="answer key (default: TASK_DIR/hidden/answers.json; one task only)")
    p.add_argument("--strict", action="store_true",
                   help="treat the construction screens' warnings as errors")
    _screen_options(p)
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(handler=validate_command)

    p = task_sub.add_parser("threshold", help="chance threshold, attainable maximum, "
                                              "presented-order score")
    p.add_argument("task_dir", type=Path, metavar="TASK_DIR")
    p.add_argument("--answers", type=Path, default=None,
                   help="answer key (default: TASK_DIR/hidden/answers.json)")
    p.add_argument("--draws", type=int, default=4000, help="random submissions (default 4000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    p.add_argument("--exact", action="store_true",
                   help="report the exact threshold as 'threshold' where one exists")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=threshold_command)


def _add_package_commands(task_sub: Any) -> None:
    """``build``, ``export``, ``import`` and ``new``: making and moving packages."""
    p = task_sub.add_parser("build", help="build a task package from a spec and a table")
    p.add_argument("spec", type=Path, metavar="SPEC.yaml")
    p.add_argument("--out", type=Path, required=True, help="task folder to write")
    p.add_argument("--cache", type=Path, default=None,
                   help="where downloaded packages are kept (default .cache/spu-tasks)")
    p.add_argument("--force", action="store_true", help="replace an existing task folder")
    p.add_argument("--strict", action="store_true", help="refuse on warnings too")
    _screen_options(p)
    p.set_defaults(handler=build_command)

    p = task_sub.add_parser("export", help="write a task as a Harbor task (SPEC section 10)")
    p.add_argument("task_dir", type=Path, metavar="TASK_DIR")
    p.add_argument("--format", choices=("harbor",), required=True, dest="format",
                   help="the format to write (harbor)")
    p.add_argument("--out", type=Path, required=True, help="folder of the Harbor task to write")
    p.add_argument("--answers", type=Path, default=None,
                   help="answer key (default: TASK_DIR/hidden/answers.json)")
    p.add_argument("--base-image", default=None,
                   help="FROM of environment/Dockerfile (default debian:bookworm-slim; "
                        "python3 is installed where the image lacks it)")
    p.add_argument("--force", action="store_true", help="replace an existing folder")
    p.set_defaults(handler=export_command)

    p = task_sub.add_parser("import", help="read a Harbor task written by spu task export "
                                           "back into a task package")
    p.add_argument("source", type=Path, metavar="DIR")
    p.add_argument("--from", choices=("harbor",), required=True, dest="from_format",
                   help="the format to read (harbor)")
    p.add_argument("--out", type=Path, required=True, help="task folder to write")
    p.add_argument("--force", action="store_true", help="replace an existing task folder")
    p.set_defaults(handler=import_command)

    p = task_sub.add_parser("new", help="start a new task: a build spec, a table and the "
                                        "package built from them",
                            description="Write TASK_ROOT/../sources-style files for a new task "
                            "(--sources/ID.yaml, a commented build spec, and --sources/ID.csv, "
                            "an illustrative table) and build --task-root/ID from them; "
                            "docs/writing-a-task.md walks on from there.")
    p.add_argument("task_id", metavar="ID", help="the task id (folder name, task=ID)")
    p.add_argument("--task-root", type=Path, default=Path("tasks"),
                   help="where the package is written (default tasks/)")
    p.add_argument("--sources", type=Path, default=None,
                   help="where the spec and table go (default TASK_ROOT/sources)")
    p.add_argument("--force", action="store_true", help="replace existing files")
    p.set_defaults(handler=new_command)


def _add_lifecycle_commands(task_sub: Any) -> None:
    """``review``, ``select``, ``retire`` and ``contamination``: the lifecycle (SPEC 15)."""
    from spu.tasks.review import CHECK_RESULTS, CHECKLIST, SCREEN_CODES

    items = "; ".join(f"{name}: {what}" for name, what in CHECKLIST.items())
    p = task_sub.add_parser(
        "review", help="write the review before freezing (review.yaml) from a checklist",
        description="Record the independent review of a task before it is frozen (paper 2.3, "
        "step 3) in TASK_DIR/review.yaml, with the digest of the files reviewed. Each answer "
        "not given as an option is asked for on a terminal (and is an error otherwise). "
        f"The checklist: {items}.")
    p.add_argument("task_dir", type=Path, metavar="TASK_DIR")
    p.add_argument("--reviewer", default=None, help="who reviewed the task")
    p.add_argument("--date", default=None, help="day of the review, YYYY-MM-DD (default today)")
    p.add_argument("--verdict", choices=("accept", "reject"), default=None)
    p.add_argument("--check", action="append", default=[], metavar="NAME=RESULT",
                   help=f"result of a checklist item ({'|'.join(CHECK_RESULTS)}); repeatable")
    p.add_argument("--note", action="append", default=[], metavar="NAME=TEXT",
                   help="what a check compared, or why it was left open; repeatable")
    p.add_argument("--issue", action="append", default=[], metavar="TEXT",
                   help="a blocking issue found; repeatable, paired in order with --fix")
    p.add_argument("--fix", action="append", default=[], metavar="TEXT",
                   help="how the issue of the same position was fixed")
    p.add_argument("--waive", action="append", default=[], metavar="SCREEN=REASON",
                   help=f"accept a screen that fires ({', '.join(SCREEN_CODES)}) with its "
                        f"reason; repeatable")
    p.add_argument("--no-input", action="store_true",
                   help="never prompt: a missing answer is an error")
    _screen_options(p)
    p.set_defaults(handler=review_command)

    p = task_sub.add_parser(
        "select", help="choose tasks from pilot runs: one per subfield, then by composite score",
        description="Choose tasks by pilot runs (paper 2.3, step 4): --per-subfield tasks of "
        "each subfield first, then the highest composite scores (difficulty, spread across "
        "the pilot configurations, computational demand; the rule is printed) up to --n. "
        "Writes OUT/tasks.txt, the chosen list for a sweep (-m task=$(cat OUT/tasks.txt)), "
        "and OUT/selection.csv, every candidate with why it was kept or left.")
    p.add_argument("runs", type=Path, metavar="RUNS", help="runs table of the pilot runs "
                   "(spu runs export)")
    p.add_argument("--tasks", type=Path, required=True, metavar="TASK_ROOT",
                   help="task root of the candidates (retired tasks are not candidates)")
    p.add_argument("--n", type=int, default=100, help="tasks to keep at most (default 100)")
    p.add_argument("--per-subfield", type=int, default=1,
                   help="tasks kept first from each subfield (default 1)")
    p.add_argument("--weights", default="0.4,0.4,0.2", metavar="D,S,C",
                   help="weights of difficulty, spread and demand (default 0.4,0.4,0.2)")
    p.add_argument("--reviewed-only", action="store_true",
                   help="leave out tasks without a current accepted review (review.yaml), "
                        "as step 4 follows step 3")
    p.add_argument("--out", type=Path, required=True, help="folder to write to")
    p.set_defaults(handler=select_command)

    p = task_sub.add_parser("retire", help="retire a task: out of glob sweeps and the "
                                           "official statistics, its runs kept",
                            description="Add retired: {date, reason} to TASK_DIR/task.yaml "
                            "(SPEC 15). The task leaves task='glob(*)', spu task list and "
                            "select, and every table of spu stats but retired.csv; task=<id> "
                            "still runs it and no run is deleted.")
    p.add_argument("task_dir", type=Path, metavar="TASK_DIR")
    p.add_argument("--reason", required=True, help="why, in one line")
    p.add_argument("--date", default=None, help="day of the retirement, YYYY-MM-DD "
                                                "(default today)")
    p.set_defaults(handler=retire_command)

    p = task_sub.add_parser(
        "contamination", help="what models remember of each task, from harness=recall runs",
        description="One row per task and model from the recall probes under RUNS "
        "(harness=recall, harness.options.probe=source and order): source recalled, recall score, "
        "above chance, and the tasks to retire by the rule the command prints.")
    p.add_argument("runs", type=Path, metavar="RUNS", help="an output root or its runs/")
    p.add_argument("--tasks", type=Path, default=None, metavar="ROOT",
                   help="task root: report its tasks only, and name those not probed")
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="write the table as CSV (SPEC section 15)")
    p.set_defaults(handler=contamination_command)


def _add_list_command(task_sub: Any) -> None:
    """``list``: the packages of a task root, filtered."""
    p = task_sub.add_parser("list", help="list task packages, filtered by discipline, "
                                         "visibility or subfield")
    p.add_argument("--task-root", type=Path, default=Path("tasks"),
                   help="folder of task packages (default tasks/)")
    p.add_argument("--discipline", default=None,
                   help="chemistry, 'materials science', biology or medicine")
    p.add_argument("--visibility", default=None, help="public or private")
    p.add_argument("--subfield", default=None)
    p.add_argument("--format", choices=("table", "hydra", "json"), default="table",
                   help="hydra: a comma list for python -m spu.main -m task=...")
    p.add_argument("--include-retired", action="store_true",
                   help="list retired tasks too (task.yaml retired:; left out by default, as "
                        "task='glob(*)' leaves them out)")
    p.set_defaults(handler=list_command)


def _screen_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--monotone-rho", type=float, default=0.95,
                   help="warn when |Spearman rho| with one setting reaches this (0.95)")
    p.add_argument("--min-relative-spread", type=float, default=0.05,
                   help="warn when (max - min) / max|value| of a group is below this (0.05)")


def _screens(args: argparse.Namespace) -> Any:
    from spu.tasks.validate import ScreenSettings

    return ScreenSettings(monotone_rho=args.monotone_rho,
                          min_relative_spread=args.min_relative_spread)


def validate_command(args: argparse.Namespace) -> int:
    """Print each finding with its file; exit 1 when any package has an error."""
    from spu.tasks.validate import is_task_package, validate_task

    if args.answers is not None and len(args.task_dirs) > 1:
        print("spu task validate: --answers applies to one task folder only", file=sys.stderr)
        return 2
    skipped = [d for d in args.task_dirs if d.is_dir() and not is_task_package(d)]
    folders = [d for d in args.task_dirs if d not in skipped]
    for d in skipped:
        print(f"{d}: skipped (not a task package: no task.yaml, contract.json, targets.csv "
              f"or hidden/)", file=sys.stderr)
    if not folders:
        print("spu task validate: no task package among the folders given", file=sys.stderr)
        return 1
    reports = [validate_task(d, args.answers, strict=args.strict, screens=_screens(args))
               for d in folders]
    if args.json:
        print(json.dumps([{
            "task_dir": str(r.task_dir), "ok": r.ok,
            "findings": [{"severity": f.severity.value, "file": f.file, "code": f.code,
                          "message": f.message} for f in r.findings],
        } for r in reports], indent=1))
    else:
        for r in reports:
            status = "OK" if r.ok else "FAILED"
            print(f"{r.task_dir}: {status} ({len(r.errors)} error(s), "
                  f"{len(r.warnings)} warning(s))")
            for f in r.findings:
                print(f"  {f}")
    return 0 if all(r.ok for r in reports) else 1


def _ask(question: str, interactive: bool, missing: str) -> str:
    """One answer from the terminal; a ReviewError naming the option when there is none."""
    from spu.tasks.review import ReviewError

    if not interactive:
        raise ReviewError(f"{missing}: no answer given (pass it, or run on a terminal to "
                          f"be asked)")
    try:
        return input(question).strip()
    except EOFError:
        raise ReviewError(f"{missing}: no answer given") from None


def _review_answers(args: argparse.Namespace, interactive: bool) -> dict[str, Any]:
    """The review's answers: options first, the rest asked for (terminal only)."""
    import datetime

    from spu.tasks.review import CHECK_RESULTS, CHECKLIST, ReviewError, parse_assignments

    checks = parse_assignments(args.check, "--check")
    notes = parse_assignments(args.note, "--note")
    waivers = parse_assignments(args.waive, "--waive")
    if len(args.fix) > len(args.issue):
        raise ReviewError(f"--fix {args.fix[len(args.issue)]!r}: no --issue of its position")
    issues = [(issue, args.fix[i] if i < len(args.fix) else "")
              for i, issue in enumerate(args.issue)]
    reviewer = args.reviewer or _ask("reviewer: ", interactive, "--reviewer")
    for name, what in CHECKLIST.items():
        if name not in checks:
            checks[name] = _ask(f"{name} ({what})\n  result [{'/'.join(CHECK_RESULTS)}]: ",
                                interactive, f"--check {name}")
            if interactive and name not in notes:
                notes[name] = _ask("  note (what was compared; empty for none): ",
                                   interactive, f"--note {name}")
    verdict = args.verdict or _ask("verdict [accept/reject]: ", interactive, "--verdict")
    try:
        date = datetime.date.fromisoformat(args.date) if args.date else None
    except ValueError:
        raise ReviewError(f"--date {args.date!r}: not a day YYYY-MM-DD") from None
    return {"reviewer": reviewer, "verdict": verdict, "checks": checks, "check_notes": notes,
            "issues": issues, "waivers": waivers, "date": date}


def review_command(args: argparse.Namespace) -> int:
    """Write ``review.yaml``; exit 1 (writing nothing) when an answer or the task is wrong."""
    from spu.tasks.package import TaskLoadError
    from spu.tasks.review import SCREEN_CODES, ReviewError, make_review, write_review
    from spu.tasks.validate import Severity, validate_task

    report = validate_task(args.task_dir, screens=_screens(args))
    for f in report.findings:
        print(f"  {f}")
    interactive = not args.no_input and sys.stdin.isatty()
    try:
        answers = _review_answers(args, interactive)
        record = make_review(args.task_dir, **answers)
        if record.verdict == "accept":
            if report.errors:
                raise ReviewError(f"verdict accept: the package has {len(report.errors)} "
                                  f"validation error(s) (above); fix them first")
            fired = sorted({f.code for f in report.findings if f.severity is Severity.warning
                            and f.code in SCREEN_CODES} - set(answers["waivers"]))
            if fired:
                raise ReviewError(f"verdict accept: screen {fired[0]} fires (above); fix the "
                                  f"task or waive it with --waive {fired[0]}=REASON")
    except (ReviewError, TaskLoadError) as exc:
        print(f"spu task review: {exc}", file=sys.stderr)
        return 1
    path = write_review(args.task_dir, record)
    print(f"wrote {path} (verdict {record.verdict}, digest {record.task_digest[:12]}; a change "
          f"to the task's public files makes it stale)")
    return 0


def select_command(args: argparse.Namespace) -> int:
    """Write the chosen list and the selection table; exit 2 when an input cannot be used."""
    from spu.overrides import folder_problem
    from spu.stats.runs_table import RunsTableError, read_runs_table
    from spu.stats.selection import Candidate, select_tasks_by_pilot
    from spu.tasks.package import TaskLoadError, select_tasks

    def refuse(message: str) -> int:
        print(f"spu task select: {message}", file=sys.stderr)
        return 2

    if args.n < 1 or args.per_subfield < 0:
        return refuse("--n must be at least 1 and --per-subfield at least 0")
    try:
        weights = tuple(float(w) for w in args.weights.split(","))
    except ValueError:
        return refuse(f"--weights {args.weights!r}: three numbers D,S,C")
    if len(weights) != 3 or any(not w >= 0 for w in weights):
        return refuse(f"--weights {args.weights!r}: three numbers >= 0 (difficulty, spread, "
                      f"demand)")
    problem = folder_problem(args.out)
    if problem:
        return refuse(f"--out {args.out}: {problem}")
    try:
        runs = read_runs_table(args.runs)
        tasks = select_tasks(args.tasks, on_broken=lambda b: print(f"spu task select: {b}",
                                                                   file=sys.stderr))
    except (RunsTableError, TaskLoadError) as exc:
        return refuse(str(exc))
    if not tasks:
        return refuse(f"--tasks {args.tasks}: no task package to choose from")
    from spu.tasks.review import review_state

    def excluded(task: Any) -> str | None:
        if not args.reviewed_only:
            return None
        state = review_state(task.path, task.meta)
        required = state.problems or not (task.path / "review.yaml").is_file()
        return f"not reviewed ({state.problems[0][0] if state.problems else 'no review'})" \
            if required else None

    candidates = [Candidate(t.path.name, t.id, t.meta.discipline.value, t.meta.subfield,
                            excluded(t)) for t in tasks]
    selection = select_tasks_by_pilot(runs, candidates, args.n, args.per_subfield, weights)
    if not selection.chosen:
        return refuse(f"{args.runs}: no run of any task under {args.tasks} (the runs table's "
                      f"task_id is the task.yaml id)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tasks.txt").write_text(selection.sweep_list() + "\n", encoding="utf-8")
    selection.table.to_csv(args.out / "selection.csv", index=False)
    print(f"rule: {selection.rule}")
    print(f"kept {len(selection.chosen)} of {len(candidates)} candidate tasks "
          f"({int((selection.table['n_runs'] == 0).sum())} without a pilot run)")
    print(f"wrote {args.out / 'tasks.txt'} (sweep: -m task=$(cat {args.out / 'tasks.txt'})) "
          f"and {args.out / 'selection.csv'}")
    return 0


def retire_command(args: argparse.Namespace) -> int:
    """Retire a task; exit 1 (changing nothing) when it cannot be."""
    import datetime

    from spu.tasks.package import TaskLoadError
    from spu.tasks.review import ReviewError, retire_task

    try:
        day = datetime.date.fromisoformat(args.date) if args.date else None
    except ValueError:
        print(f"spu task retire: --date {args.date!r}: not a day YYYY-MM-DD", file=sys.stderr)
        return 1
    try:
        meta = retire_task(args.task_dir, args.reason, day)
    except (ReviewError, TaskLoadError) as exc:
        print(f"spu task retire: {exc}", file=sys.stderr)
        return 1
    assert meta.retired is not None
    print(f"retired {meta.id} on {meta.retired.date.isoformat()}: {meta.retired.reason} "
          f"(its runs are kept; spu stats --tasks lists it in retired.csv)")
    return 0


def threshold_command(args: argparse.Namespace) -> int:
    """Print the chance level; exit 2 when the task cannot be read."""
    from spu.grading.rules import AnswerKeyError, check_answer_key
    from spu.tasks.package import TaskLoadError, load_answers, load_task
    from spu.tasks.threshold import task_threshold

    try:
        task = load_task(args.task_dir)
        answers_path = args.answers or task.answers_path()
        answers = load_answers(answers_path)
        check_answer_key(task.contract, answers)
        presented = [r.experiment_id for r in task.targets()]
    except TaskLoadError as exc:
        print(f"spu task threshold: {exc}", file=sys.stderr)
        return 2
    except AnswerKeyError as exc:
        print(f"spu task threshold: {answers_path}: {exc}", file=sys.stderr)
        return 2
    report = task_threshold(task.contract, answers, presented, draws=args.draws,
                            seed=args.seed, prefer_exact=args.exact)
    if args.json:
        print(json.dumps(report.public_json()))
        return 0
    print(f"task {report.task_id}")
    print(f"  chance threshold: {report.threshold:.4f} ({report.threshold_method})")
    print(f"  chance threshold (sampled, {report.draws} draws, seed {report.seed}): "
          f"{report.sampled_threshold:.4f}")
    if report.exact_threshold is not None:
        print(f"  chance threshold (exact, {report.exact_method}): {report.exact_threshold:.4f}")
    else:
        print(f"  exact threshold: not computed ({report.exact_note})")
    print(f"  attainable maximum: {report.attainable_max:.4f}")
    side = "above" if report.presented_order_beats_chance else "not above"
    print(f"  presented-order score: {report.presented_order_score:.4f} ({side} the chance "
          f"threshold; paper E.4: a shuffled task is above it about 1 time in 20)")
    return 0


def build_command(args: argparse.Namespace) -> int:
    """Build a package; exit 1 (writing nothing) when the spec or validation fails."""
    from spu.tasks.builder import BuildError, build_task

    try:
        result = build_task(args.spec, args.out, cache=args.cache, force=args.force,
                            strict=args.strict, screens=_screens(args))
    except BuildError as exc:
        print(f"spu task build: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {result.path} ({result.n_items} experiments, shuffle {result.attempt}; "
          f"presented-order score {result.presented_order_score:.4f}, chance threshold "
          f"{result.chance_threshold:.4f})")
    for f in result.report.findings:
        print(f"  {f}")
    return 0


def export_command(args: argparse.Namespace) -> int:
    """Write the Harbor task; exit 1 (writing nothing) when the task fails validation."""
    from spu.tasks.harbor import DEFAULT_BASE_IMAGE, HARBOR_VERSION, HarborError, export_harbor

    try:
        result = export_harbor(args.task_dir, args.out, answers=args.answers,
                               base_image=args.base_image or DEFAULT_BASE_IMAGE,
                               force=args.force)
    except HarborError as exc:
        print(f"spu task export: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {result.path} (Harbor {HARBOR_VERSION} task format, {len(result.files)} "
          f"files; the answer key is in tests/ only)")
    for w in result.warnings:
        print(f"  {w}")
    return 0


def import_command(args: argparse.Namespace) -> int:
    """Write the task package; exit 1 (writing nothing) when the Harbor task is not one."""
    from spu.tasks.harbor import HarborError, import_harbor

    try:
        result = import_harbor(args.source, args.out, force=args.force)
    except HarborError as exc:
        print(f"spu task import: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {result.path}")
    for note in result.notes:
        print(f"  note: {note}")
    return 0


def new_command(args: argparse.Namespace) -> int:
    """Scaffold a task; exit 2 when it cannot be written or built (nothing is left then)."""
    from spu.tasks.builder import BuildError
    from spu.tasks.scaffold import ScaffoldError, new_task

    sources = args.sources or args.task_root / "sources"
    try:
        made = new_task(args.task_id, args.task_root, sources, force=args.force)
    except (ScaffoldError, BuildError) as exc:
        print(f"spu task new: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {made.spec} (build spec) and {made.table} (ILLUSTRATIVE values)")
    print(f"built {made.task_dir}: spu task validate {made.task_dir} passes")
    print(f"next: edit both, then spu task build {made.spec} --out {made.task_dir} --force "
          f"(docs/writing-a-task.md)")
    return 0


def list_command(args: argparse.Namespace) -> int:
    """List the selected tasks; exit 1 when none matches (so a sweep never runs empty)."""
    from spu.tasks.package import TaskLoadError, select_tasks

    try:
        tasks = select_tasks(args.task_root, discipline=args.discipline,
                             visibility=args.visibility, subfield=args.subfield,
                             on_broken=lambda b: print(f"spu task list: {b}", file=sys.stderr),
                             include_retired=args.include_retired)
    except TaskLoadError as exc:
        print(f"spu task list: {exc}", file=sys.stderr)
        return 2
    if not tasks:
        print(f"spu task list: no task under {args.task_root} matches", file=sys.stderr)
        return 1
    # Hydra selects a task by its folder name (task=<folder>).
    if args.format == "hydra":
        print(",".join(t.path.name for t in tasks))
    elif args.format == "json":
        print(json.dumps([{"task": t.path.name, "id": t.id, "version": t.version,
                           "title": t.meta.title, "discipline": t.meta.discipline.value,
                           "subfield": t.meta.subfield, "visibility": t.meta.visibility.value,
                           "n_items": t.n_items, "n_groups": len(t.contract.groups),
                           "retired": t.meta.retired.model_dump(mode="json")
                           if t.meta.retired else None}
                          for t in tasks], indent=1))
    else:
        for t in tasks:
            print(f"{t.path.name:<34} {t.meta.discipline.value:<18} "
                  f"{t.meta.visibility.value:<8} {t.n_items:>4} items "
                  f"{len(t.contract.groups):>3} groups  {t.meta.title}"
                  + (f"  [retired {t.meta.retired.date.isoformat()}]" if t.meta.retired else ""))
    return 0


def contamination_command(args: argparse.Namespace) -> int:
    """Print the contamination table and the rule; exit 1 when no probe was found."""
    from spu.analysis.contamination import (
        RETIRE_RULE,
        contamination_table,
        format_table,
        read_probe_runs,
        write_table,
    )
    from spu.tasks.package import scan_task_root

    if not args.runs.is_dir():
        print(f"spu task contamination: {args.runs}: no such folder of runs", file=sys.stderr)
        return 2
    task_ids: list[str] | None = None
    if args.tasks is not None:
        if not args.tasks.is_dir():
            print(f"spu task contamination: --tasks {args.tasks}: no such folder",
                  file=sys.stderr)
            return 2
        scan = scan_task_root(args.tasks)
        for broken in scan.broken:
            print(f"spu task contamination: --tasks: {broken.path}: skipped ({broken.reason})",
                  file=sys.stderr)
        task_ids = sorted(meta.id for meta in scan.tasks.values())
    probes, notes = read_probe_runs(args.runs)
    for note in notes:
        print(f"spu task contamination: {note}", file=sys.stderr)
    rows = contamination_table(probes, task_ids)
    if not rows:
        print(f"spu task contamination: no counted harness=recall run under {args.runs}",
              file=sys.stderr)
        return 1
    print(format_table(rows))
    if task_ids is not None:
        unprobed = sorted(set(task_ids) - {r.task_id for r in rows})
        if unprobed:
            print(f"not probed: {', '.join(unprobed)}")
    retire = sorted({r.task_id for r in rows if r.retire})
    print(f"rule: {RETIRE_RULE}")
    print(f"retire: {', '.join(retire) if retire else 'none'}")
    if args.out is not None:
        print(f"wrote {write_table(rows, args.out)}")
    return 0
