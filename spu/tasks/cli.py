"""``spu task validate | threshold | build | export | import | list | contamination``.

SPEC sections 4, 10 and 15.
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
    p.set_defaults(handler=list_command)

    p = task_sub.add_parser(
        "contamination", help="what models remember of each task, from harness=recall runs",
        description="One row per task and model from the recall probes under RUNS "
        "(harness=recall, harness.probe=source and order): source recalled, recall score, "
        "above chance, and the tasks to retire by the rule the command prints.")
    p.add_argument("runs", type=Path, metavar="RUNS", help="an output root or its runs/")
    p.add_argument("--tasks", type=Path, default=None, metavar="ROOT",
                   help="task root: report its tasks only, and name those not probed")
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="write the table as CSV (SPEC section 15)")
    p.set_defaults(handler=contamination_command)


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
                             on_broken=lambda b: print(f"spu task list: {b}", file=sys.stderr))
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
                           "n_items": t.n_items, "n_groups": len(t.contract.groups)}
                          for t in tasks], indent=1))
    else:
        for t in tasks:
            print(f"{t.path.name:<34} {t.meta.discipline.value:<18} "
                  f"{t.meta.visibility.value:<8} {t.n_items:>4} items "
                  f"{len(t.contract.groups):>3} groups  {t.meta.title}")
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
