"""``spu runs export``, ``spu ui``, ``spu regrade`` and ``spu grade-bundle``.

``spu runs export`` writes the runs table of SPEC section 5, from MLflow or from run
folders; ``spu ui`` serves the MLflow UI on an output root's store, opened on the SPU view.
Regrading and grading a bundle span stages (the grader, the seals, the tracking store):
they live here, in the stage they end in, not in the grader or the seals, which record
nothing (STYLE, "Imports that must not exist").
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spu.config import GraderIsolation
from spu.printable import printable


def register(sub: Any) -> None:
    """Add ``runs export``, ``ui``, ``regrade`` and ``grade-bundle`` to the ``spu`` parser."""
    runs = sub.add_parser("runs", help="the runs table (input of spu stats)")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="COMMAND")
    p = runs_sub.add_parser(
        "export",
        help="export one row per run to CSV or Parquet",
        description="Export the runs table (SPEC section 5) from MLflow: one official row "
        "per run key (its latest attempt); --all-attempts adds earlier attempts of "
        "retried runs with official=false.",
    )
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: sqlite:///OUTPUT_ROOT/mlflow.db)")
    p.add_argument("--output-root", type=Path, default=Path("outputs"),
                   help="output_root of the runs, for the default tracking URI")
    p.add_argument("--experiment", default=None,
                   help="one MLflow experiment (default: every experiment of the store)")
    p.add_argument("--runs-dir", type=Path, default=None,
                   help="read OUTPUT_ROOT/runs/*/run.json instead of MLflow "
                   "(for runs made with tracking=none)")
    p.add_argument("--all-attempts", action="store_true",
                   help="also export earlier attempts of retried runs (official=false)")
    p.add_argument("--out", type=Path, required=True, help="runs.csv or runs.parquet")
    p.set_defaults(handler=export_command)
    t = runs_sub.add_parser(
        "log-traces",
        help="add an MLflow trace and transcript.html to runs recorded without them",
        description="Log the trajectory of each recorded run that has no trace yet as an "
        "MLflow trace linked to its run, and its transcript.html (runs with a trace are "
        "left as they are, so running it again logs nothing).",
    )
    t.add_argument("output_root", type=Path, metavar="OUTPUT_ROOT",
                   help="output_root of the runs (runs/<run_key>/ and the default store)")
    t.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: sqlite:///OUTPUT_ROOT/mlflow.db)")
    t.add_argument("--max-chars", type=int, default=None,
                   help="characters kept of each span's text (default: tracking.traces')")
    t.add_argument("--spans", choices=["artifact", "store"], default="artifact",
                   help="where the spans go: one traces.json per trace (default) or the "
                        "store's span table (span search, slower)")
    t.set_defaults(handler=log_traces_command)
    runs.set_defaults(handler=lambda args: (runs.print_help(), 2)[1])
    u = sub.add_parser(
        "ui", help="open the MLflow UI on the runs of an output root",
        description="Start the MLflow UI on OUTPUT_ROOT's tracking store (127.0.0.1, a free "
        "port) and print the address of the latest experiment's runs table in the SPU view "
        "(configuration, task, repeat, outcome, scores, cost, runtime). Ctrl-C stops it.")
    u.add_argument("output_root", type=Path, nargs="?", default=Path("outputs"),
                   metavar="OUTPUT_ROOT", help="output_root of the runs (default: outputs)")
    u.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: sqlite:///OUTPUT_ROOT/mlflow.db)")
    u.set_defaults(handler=ui_command)

    _register_regrade(sub)
    _register_grade_bundle(sub)



def _register_regrade(sub: Any) -> None:
    """``spu regrade``: the grader's verdicts again, recorded in the runs and the store."""
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


def _register_grade_bundle(sub: Any) -> None:
    """``spu grade-bundle``: a bundle of sealed runs, verified, graded and recorded."""
    g = sub.add_parser(
        "grade-bundle", help="verify a bundle of sealed runs and grade it with local keys",
        description="Unpack FILE under OUTPUT_ROOT/bundles/, verify its chain and seals, "
        "grade each run in the isolated grader with the local answer keys and record it in "
        "the local tracking; a run whose sealed files changed ends seal_broken.")
    g.add_argument("bundle", type=Path, metavar="FILE")
    g.add_argument("--task-root", type=Path, required=True, help="the tasks, found by id")
    g.add_argument("--answers-root", type=Path, default=None,
                   help="answer keys as <root>/<task_id>/answers.json (default: each task's "
                   "hidden/answers.json)")
    g.add_argument("--output-root", type=Path, default=Path("outputs"),
                   help="local output root (default: outputs)")
    g.add_argument("--public-key", type=Path, default=None,
                   help="the lab's published public key (default: the bundle's own)")
    g.add_argument("--tracking-uri", default=None,
                   help="MLflow store (default: sqlite:///OUTPUT_ROOT/mlflow.db)")
    g.add_argument("--no-tracking", action="store_true", help="record run.json files only")
    g.set_defaults(handler=grade_bundle_command)


def export_command(args: argparse.Namespace) -> int:
    """Write the runs table; exit 1 when there is no run to export, 2 on a bad input.

    Exit 2: the store, a run or the output is unusable; exit 1: no run (nothing written).
    """
    from spu.tracking.export import (
        RunsExportError,
        runs_table,
        runs_table_from_records,
        write_runs_table,
    )

    try:
        if args.runs_dir is not None:
            if args.tracking_uri or args.experiment:
                raise RunsExportError("--runs-dir reads run.json files: it takes neither "
                                      "--tracking-uri nor --experiment")
            df = runs_table_from_records(args.runs_dir, all_attempts=args.all_attempts)
            source = str(args.runs_dir)
        else:
            uri = args.tracking_uri or f"sqlite:///{(args.output_root / 'mlflow.db').resolve()}"
            df = runs_table(uri, args.experiment, all_attempts=args.all_attempts)
            source = uri + (f" (experiment {args.experiment})" if args.experiment else "")
        if df.empty:
            print(f"spu runs export: {no_rows(args, source)}; nothing written to {args.out}",
                  file=sys.stderr)
            return 1
        out = write_runs_table(df, args.out)
    except RunsExportError as exc:
        print(f"spu runs export: {exc}", file=sys.stderr)
        return 2
    official = int(df["official"].sum())
    earlier = len(df) - official
    print(f"wrote {len(df)} rows ({official} official"
          + (f", {earlier} earlier attempts" if earlier else "")
          + f") from {source} to {out}")
    return 0


def no_rows(args: argparse.Namespace, source: str) -> str:
    """What is missing when an export finds no run, and where the runs may be instead.

    ``--runs-dir`` takes the folder of run folders (``OUTPUT_ROOT/runs``); given the
    output root itself, it finds none, and says so.
    """
    if args.runs_dir is None:
        return f"no recorded run in {source}"
    runs = Path(args.runs_dir)
    where = f"no run.json in the folders under {runs}"
    if any((runs / "runs").glob("*/run.json")):
        return f"{where} ({runs} looks like an output root: its runs are in " \
               f"--runs-dir {runs / 'runs'})"
    return f"{where} (--runs-dir takes OUTPUT_ROOT/runs, the folder of run folders)"


def log_traces_command(args: argparse.Namespace) -> int:
    """Backfill traces; exit 2 when the store is unusable, 1 when a trace failed."""
    from spu.config import SpansStore, TracesConfig
    from spu.tracking.store import TrackingStoreError
    from spu.tracking.traces import backfill_traces

    if not (args.output_root / "runs").is_dir() and args.tracking_uri is None:
        print(f"spu runs log-traces: {args.output_root}/runs is not a folder of runs",
              file=sys.stderr)
        return 2
    settings = TracesConfig(enabled=True, spans=SpansStore(args.spans))
    if args.max_chars is not None:
        settings.max_chars = args.max_chars
    try:
        done = backfill_traces(args.output_root, args.tracking_uri, settings)
    except TrackingStoreError as exc:
        print(f"spu runs log-traces: {exc}", file=sys.stderr)
        return 2
    print(f"logged {done.logged} traces; {done.present} runs had one already"
          + (f"; {done.missing} runs without a run folder" if done.missing else "")
          + (f"; {done.failed} failed (see the warnings)" if done.failed else ""))
    return 1 if done.failed else 0


class UIError(RuntimeError):
    """The UI cannot show anything; the message says what is missing."""


def ui_command(args: argparse.Namespace) -> int:
    """Serve the MLflow UI until Ctrl-C; exit 1 when there is no store or no SPU run."""
    from spu.launch.server import TrackingServer, TrackingServerError
    from spu.tracking.ui import view_url

    root = args.output_root.expanduser().resolve()
    uri = args.tracking_uri or f"sqlite:///{root / 'mlflow.db'}"
    try:
        experiment_id = latest_spu_experiment(uri, root)
    except UIError as exc:
        print(f"spu ui: {exc}", file=sys.stderr)
        return 1
    server = TrackingServer(uri, (root / "mlartifacts").as_uri(), root / "mlflow-ui.log",
                            token=None)
    try:
        base = server.start()
        print(f"MLflow UI on {uri}: {view_url(base, experiment_id)}", flush=True)
        print("(the SPU view: configuration, task, repeat, outcome, scores, cost, runtime; "
              "Ctrl-C stops the UI)", flush=True)
        return wait_for_interrupt(server)
    except TrackingServerError as exc:
        print(f"spu ui: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # while the server was starting
        return 0
    finally:
        server.stop()


def wait_for_interrupt(server: Any) -> int:
    """Wait until Ctrl-C or SIGTERM (exit 0) or until the server exits on its own (exit 1).

    SIGINT is handled even where the shell started this command with it ignored (a
    background job), and SIGTERM the same way, so the server is always stopped.
    """
    import signal
    import time

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        while server.exit_status() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nspu ui: stopped", flush=True)
        return 0
    print(f"spu ui: the MLflow UI exited (status {server.exit_status()}); see "
          f"{server.log_path}", file=sys.stderr)
    return 1


def latest_spu_experiment(uri: str, root: Path) -> str:
    """The id of the SPU experiment with the latest run; each gets its kind and SPU view.

    SPU's experiments are ``spu-<name>``, and any that carries the SPU view (one named by
    ``tracking.experiment``).

    Raises:
        UIError: no store there, or no SPU experiment with a run in it.
    """
    from spu.tracking.store import (
        EXPERIMENT_PREFIX,
        TrackingStoreError,
        client_for,
        ensure_ui_tags,
        sqlite_path,
    )
    from spu.tracking.ui import SAVED_VIEW_TAG_PREFIX, SPU_VIEW_ID

    db = sqlite_path(uri)
    if db is not None and not db.is_file():
        raise UIError(f"no tracking store at {db} (run a sweep first, e.g. python -m spu.main "
                      f"output_root={root}, or pass the OUTPUT_ROOT that holds mlflow.db)")
    try:
        client = client_for(uri)
        latest: tuple[int, str] | None = None
        for experiment in client.search_experiments():
            if not (experiment.name.startswith(EXPERIMENT_PREFIX)
                    or SAVED_VIEW_TAG_PREFIX + SPU_VIEW_ID in (experiment.tags or {})):
                continue  # not SPU's (named by tracking.experiment, SPU's carry the view)
            runs = client.search_runs([experiment.experiment_id], max_results=1000,
                                      order_by=["attributes.start_time DESC"])
            if not runs:
                continue
            ensure_ui_tags(client, experiment, lengths={
                "name": max(len(r.info.run_name or "") for r in runs),
                "config": max(len(r.data.params.get("config", "")) for r in runs),
                "task": max(len(r.data.params.get("task", "")) for r in runs)})
            started = max(int(r.info.start_time or 0) for r in runs)
            if latest is None or started > latest[0]:
                latest = (started, str(experiment.experiment_id))
    except TrackingStoreError as exc:
        raise UIError(str(exc)) from None
    if latest is None:
        raise UIError(f"no SPU run recorded in {uri} (experiments named "
                      f"{EXPERIMENT_PREFIX}*); run a sweep first")
    return latest[1]


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


def grade_bundle_command(args: argparse.Namespace) -> int:
    """Grade the bundle; 1 when it is refused, 0 otherwise (broken runs are recorded)."""
    from spu.seal.bundle import BundleError
    from spu.tracking.bundles import grade_bundle

    uri = None if args.no_tracking else (
        args.tracking_uri or f"sqlite:///{(args.output_root / 'mlflow.db').resolve()}")
    try:
        graded = grade_bundle(args.bundle, args.task_root, args.output_root,
                              answers_root=args.answers_root, public_key=args.public_key,
                              tracking_uri=uri)
    except (BundleError, OSError) as exc:
        print(f"spu grade-bundle: {exc}", file=sys.stderr)
        return 1
    for run in graded.runs:
        score = "-" if run.score is None else f"{run.score:.3f}"
        print(printable(f"{run.run_key}  {run.outcome:<12} {score:>7}  {run.note}".rstrip()))
    print(f"{graded.root}: {len(graded.runs)} runs; ledger head {graded.head}")
    return 0
