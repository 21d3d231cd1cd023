"""Trace benchmark: record a corpus of runs with their MLflow traces, and without.

Run: ``.venv/bin/python benchmarks/trace_bench.py [--runs 20] [--calls 40]``
(the paper-sized corpus: ``--runs 1155 --total-calls 227103``, about an hour).

Builds the corpus with :func:`spu.testing.corpus.make_corpus` (runs from the recorded
Claude Code and Codex sessions), each folder with what a run folder holds beside the
trajectory (the CLI's output, the model gateway's record, the tools' answers:
``run_files``; ``--bare`` leaves them out, as this benchmark did before), then records
every run twice into two SQLite stores in this one process, run by run in turn: with
``tracking.traces.enabled=false`` (the reference), and with traces and
``transcript.html``. Prints seconds per 1,000 tool calls
and store growth (database and artifacts) per 1,000 tool calls for each, and the ratio of
tracking times (issue 25's goal: traces add at most 20%, a ratio of at most 1.2).
``--spans store`` writes the spans as rows of the span table instead of ``traces.json``;
``--sqlite wal`` opens both stores in WAL mode with ``synchronous=NORMAL`` (commits that do
not wait for the disk), to see what cheaper commits do to the ratio.
It also prints where the traced store's extra time went, per 1,000 calls: the trace's one
store transaction (MLflow's ``start_trace``), building the spans, writing ``traces.json``,
the transcript, and the rest (reading the run folder, opening the artifact stores), the
untraced run's own MLflow calls beside the trace's ``start_trace``, and the floor: the
ratio were everything but MLflow's store calls for the trace free.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spu.config import SpansStore, TracesConfig
from spu.schema import RunRecord
from spu.testing.corpus import make_corpus
from spu.tracking.store import TrackingTarget, log_run

REPO = Path(__file__).resolve().parents[1]


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _target(out: Path, traces: bool, spans: str = "artifact") -> TrackingTarget:
    return TrackingTarget(uri=f"sqlite:///{out / 'mlflow.db'}",
                          artifact_root=(out / "mlartifacts").as_uri(), experiment="spu-bench",
                          traces=TracesConfig(enabled=traces, spans=SpansStore(spans)))


PARTS: dict[str, tuple[str, str | None, str]] = {
    "store transaction (start_trace)": ("mlflow.tracing.client", "TracingClient", "start_trace"),
    "span table rows (log_spans)": ("mlflow.tracing.client", "TracingClient", "log_spans"),
    "views built here (not aside)": ("spu.tracking.traces", None, "build_views"),
    "traces.json written": ("spu.tracking.traces", None, "put_artifact"),
    "trace and transcript in all": ("spu.tracking.traces", None, "log_views"),
}
"""The parts of a traced run's logging timed apart: (module, class or None, function)."""

RUN_CALLS: dict[str, tuple[str, str | None, str]] = {
    "create_run": ("mlflow.tracking.client", "MlflowClient", "create_run"),
    "log_batch": ("mlflow.tracking.client", "MlflowClient", "log_batch"),
    "set_terminated": ("mlflow.tracking.client", "MlflowClient", "set_terminated"),
}
"""The untraced run's own MLflow store calls, timed in the untraced store (to set beside
the trace's one ``start_trace``: each is a write transaction or more, as it is)."""


@contextmanager
def timed_parts(parts: dict[str, tuple[str, str | None, str]] | None = None,
                when: Callable[[], bool] = lambda: True) -> Iterator[dict[str, float]]:
    """Seconds spent in each of ``parts`` (:data:`PARTS`) while the block runs (wrapped, then
    restored), counted only while ``when()`` is true.

    ``put_artifact`` also writes ``transcript.html``: its time is counted apart.
    """
    import importlib

    spent: dict[str, float] = collections.defaultdict(float)
    restore = []
    for label, (module, cls, name) in (PARTS if parts is None else parts).items():
        owner: Any = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        original = getattr(owner, name, None)
        if original is None:  # an older SPU without that part
            continue

        def wrapper(*args: Any, _f: Callable[..., Any] = original, _label: str = label,
                    **kwargs: Any) -> Any:
            if not when():
                return _f(*args, **kwargs)
            start = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                key = _label
                if _label == "traces.json written" and args[1:2] == ("transcript.html",):
                    key = "transcript.html written"
                spent[key] += time.perf_counter() - start

        setattr(owner, name, functools.wraps(original)(wrapper))
        restore.append((owner, name, original))
    try:
        yield spent
    finally:
        for owner, name, original in restore:
            setattr(owner, name, original)


def record_all(folders: list[Path], root: Path, spans: str = "artifact",
               parts: dict[str, float] | None = None,
               run_calls: dict[str, float] | None = None, aside: bool = True,
               cpu: dict[str, float] | None = None) -> tuple[float, int, float, int]:
    """Record every run into two fresh stores under ``root``, without and with traces.

    The two are interleaved run by run (which goes first alternating), so a machine whose
    load changes during the benchmark slows both alike. With ``aside`` the runs are
    recorded as a sweep records them, with a trace builder process open
    (:mod:`spu.tracking.builder`); without, each run's views are built inline.

    Returns:
        (seconds, bytes) without traces, then (seconds, bytes) with traces. ``parts``, when
        given, is filled with the seconds of each of :data:`PARTS` in the traced store;
        ``run_calls`` with those of :data:`RUN_CALLS` in the untraced store; ``cpu`` with
        the CPU seconds of each store's recording (``plain``, ``traced``: this process's)
        and the builder process's (``builder``).
    """
    from spu.tracking.builder import building_views

    builder = building_views() if aside else contextlib.nullcontext(None)
    with builder as b:
        result = _record_all(folders, root, spans, parts, run_calls, cpu, b is not None)
        if cpu is not None:  # less the untimed warm-up build
            cpu["builder"] = b.cpu_s - cpu.pop("warm cpu") if b is not None else 0.0
            cpu["built aside"] = b.built - 1 if b is not None else 0
        return result


def _record_all(folders: list[Path], root: Path, spans: str,
                parts: dict[str, float] | None, run_calls: dict[str, float] | None,
                cpu: dict[str, float] | None, aside: bool) -> tuple[float, int, float, int]:
    plain, traced = _target(root / "plain", False), _target(root / "traced", True, spans)
    records = [RunRecord.model_validate_json((f / "run.json").read_text()) for f in folders]
    for target in (plain, traced):  # opens the stores: schema creation not timed
        log_run(records[0], folders[0], target)
    if aside:  # a sweep's second run starts the builder; its start is not timed (a store
        # of its own, so that the two measured stores hold the same runs)
        warm = _target(root / "warm", True, spans)
        log_run(records[0], folders[0], warm)
        _wait_for_builder(records[0], folders[0], warm)
        if cpu is not None:
            from spu.tracking import builder

            cpu["warm cpu"] = builder.open_builder().cpu_s
    seconds = {plain.uri: 0.0, traced.uri: 0.0}
    spent_cpu = {plain.uri: 0.0, traced.uri: 0.0}
    current = [plain]
    with timed_parts() as spent, \
            timed_parts(RUN_CALLS, when=lambda: current[0] is plain) as own:
        for n, (record, folder) in enumerate(zip(records[1:], folders[1:], strict=True)):
            for target in (plain, traced) if n % 2 == 0 else (traced, plain):
                current[0] = target
                start, start_cpu = time.perf_counter(), time.process_time()
                log_run(record, folder, target)
                seconds[target.uri] += time.perf_counter() - start
                spent_cpu[target.uri] += time.process_time() - start_cpu
    if parts is not None:
        parts.update(spent)
    if run_calls is not None:
        run_calls.update(own)
    if cpu is not None:
        cpu.update(plain=spent_cpu[plain.uri], traced=spent_cpu[traced.uri])
    return (seconds[plain.uri], _size(root / "plain"), seconds[traced.uri],
            _size(root / "traced"))


def _wait_for_builder(record: RunRecord, folder: Path, target: TrackingTarget) -> None:
    """Until the builder process is up (it starts at a sweep's second run, in the
    background): the timed runs are those of a sweep under way."""
    from spu.tracking import builder

    b = builder.open_builder()
    if not b.wait_started(timeout=60):
        raise SystemExit("the trace builder process did not start in 60 s")
    log_run(record, folder, target)  # one build aside, untimed: the process is warm


def _wal_normal() -> None:
    """Open every SQLite connection of this process in WAL mode with ``synchronous=NORMAL``.

    Commits then write the log without waiting for the disk (safe against a crash of the
    process, not of the machine); both stores alike. For this benchmark only.
    """
    import sqlalchemy
    from sqlalchemy import event

    def pragmas(dbapi_connection: Any, _record: Any) -> None:
        if type(dbapi_connection).__module__.startswith("sqlite3"):
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    event.listen(sqlalchemy.engine.Engine, "connect", pragmas)


def main(argv: list[str] | None = None) -> int:
    """Build the corpus, record it twice, print the comparison."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--calls", type=int, default=40, help="mean working steps per run")
    p.add_argument("--total-calls", type=int, default=None)
    p.add_argument("--spans", choices=[s.value for s in SpansStore], default="artifact",
                   help="tracking.traces.spans of the traced store")
    p.add_argument("--sqlite", choices=["as-is", "wal"], default="as-is",
                   help="both stores as MLflow opens them (rollback journal, synchronous="
                        "FULL), or in WAL mode with synchronous=NORMAL (an experiment: what "
                        "cheaper commits do to the ratio)")
    p.add_argument("--inline", action="store_true",
                   help="build each run's trace and transcript in this process, not in the "
                        "builder process a sweep opens (spu.tracking.builder)")
    p.add_argument("--bare", action="store_true",
                   help="run folders without the CLI's output, the gateway's record and the "
                        "tools' answers (only what the trace is made from)")
    args = p.parse_args(argv)
    if args.sqlite == "wal":
        _wal_normal()
    with tempfile.TemporaryDirectory(prefix="spu-trace-bench-") as tmp:
        root = Path(tmp)
        folders = make_corpus(root / "corpus", args.runs, REPO / "tasks", args.calls, seed=0,
                              total_calls=args.total_calls, run_files=not args.bare)
        calls = sum(RunRecord.model_validate_json((f / "run.json").read_text()).tool_calls
                    for f in folders[1:])
        parts: dict[str, float] = {}
        own: dict[str, float] = {}
        cpu: dict[str, float] = {}
        plain_s, plain_b, traced_s, traced_b = record_all(folders, root, args.spans, parts,
                                                          own, aside=not args.inline, cpu=cpu)
    per = 1000 / max(calls, 1)
    print(f"{len(folders) - 1} runs timed, {calls} tool calls, run folders "
          + ("bare (the trajectory, audit log and submission)" if args.bare else
             "as run_one leaves them (with logs/, model/, tools/calls/, grade.json)")
          + (", views built inline" if args.inline else
             f", views built in the builder process ({cpu['built aside']:.0f} of "
             f"{len(folders) - 1})"))
    print(f"without traces: {plain_s * per:8.2f} s per 1,000 calls, "
          f"store {plain_b * per / 1e6:8.2f} MB per 1,000 calls")
    print(f"with traces:    {traced_s * per:8.2f} s per 1,000 calls, "
          f"store {traced_b * per / 1e6:8.2f} MB per 1,000 calls")
    print(f"ratio (with / without): time {traced_s / plain_s:.2f}, "
          f"store {traced_b / max(plain_b, 1):.2f} (goal: time at most 1.20)")
    traced_cpu = cpu["traced"] + cpu["builder"]
    print(f"CPU (this process and the builder's): without traces {cpu['plain'] * per:.2f} s, "
          f"with {traced_cpu * per:.2f} s per 1,000 calls (builder {cpu['builder'] * per:.2f}"
          f"); ratio {traced_cpu / cpu['plain']:.2f}")
    extra = traced_s - plain_s
    print(f"the traced store's extra {extra * per:.2f} s per 1,000 calls "
          f"({extra / plain_s:.0%} of the untraced time), by part:")
    total = parts.pop("trace and transcript in all", 0.0)
    for label, spent in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {label:32s} {spent * per:6.3f} s per 1,000 calls "
              f"({spent / plain_s:4.0%} of the untraced time)")
    print(f"  {'the rest of the trace':32s} {(total - sum(parts.values())) * per:6.3f} s per "
          f"1,000 calls (waiting for the builder, the stores opened)")
    runs = max(len(folders) - 1, 1)
    store = parts.get("store transaction (start_trace)", 0.0) + parts.get(
        "span table rows (log_spans)", 0.0)
    print("the untraced run's own MLflow calls, ms per run: " + ", ".join(
        f"{name} {own.get(name, 0.0) / runs * 1e3:.1f}" for name in RUN_CALLS)
        + f"; the trace's: {store / runs * 1e3:.1f} (start_trace"
        + (", log_spans" if args.spans == "store" else "") + ")")
    print(f"floor: the trace's MLflow store calls alone give a ratio of "
          f"{(plain_s + store) / plain_s:.2f}, were all else free")
    return 0


if __name__ == "__main__":
    sys.exit(main())
