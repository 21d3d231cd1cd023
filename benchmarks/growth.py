"""What a run costs in an output root that has grown: each step at two sizes, and the ratio.

Usage::

    .venv/bin/python benchmarks/growth.py [--sizes 1000 100000] [--repeats 7]
        [--sweep-keys 30] [--sweep-repeats N] [--keep DIR]

Two synthetic output roots are built, one per size: ``runs/`` holding that many run
folders, ``ledger.jsonl`` that many signed, chained lines, and an MLflow store (SQLite)
holding that many runs, each a copy of one real run's record (its tags, params and
metrics) under its own run key. One real run (``model=random``, the example task, no
sandbox) gives the record and the folder the steps work on. Then each step of a run's life
that reads the root is timed at both sizes, the sizes taking turns timing by timing, and the
median printed:

- ``ledger append``: a sealed run's ledger line (:func:`spu.seal.ledger.append_entry`);
- ``ledger head``: the head hash a sweep prints (:func:`spu.seal.ledger.head_hash`);
- ``stage``: staging the run's task into its folder (:func:`spu.runner.stage`);
- ``resume check, one key``: what a relaunch of one run reads before it runs
  (:func:`spu.launch.resume.latest_recorded`);
- ``resume check, a sweep of N keys``: the same for a sweep (``--sweep-keys``, default 30: past
  20 keys the lookup reads the store once instead of once per key);
- ``log_run``: recording the run in MLflow (:func:`spu.tracking.store.log_run`).

Target: every ratio (largest size over smallest) at most 1.5. The machine's load average
is printed with the table; run it on an idle machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASK = REPO / "tasks" / "example-coupling-conditions"
TARGET_RATIO = 1.5
RUN_TABLES = ("tags", "params", "metrics", "latest_metrics")
"""The MLflow tables whose rows belong to one run (``run_uuid``), copied per synthetic run."""


@dataclass
class Root:
    """One synthetic output root and what its steps need."""

    size: int
    path: Path
    spec: object
    record: object
    target: object
    key: object
    sweep_keys: list[str]


def real_run(out: Path) -> tuple[object, object]:
    """One real run's spec and record (``model=random`` on the example task, no sandbox)."""
    from spu.config import EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
    from spu.runner import RunSpec, run_one

    spec = RunSpec(model=ModelConfig(name="random", provider="baseline"),
                   harness=HarnessConfig(name="baseline"), effort=EffortConfig(name="none"),
                   task_dir=TASK, output_root=out, sandbox=SandboxConfig(name="subprocess"))
    return spec, run_one(spec)


def write_ledger(root: Path, key: object, lines: int) -> None:
    """A valid chain of ``lines`` signed lines, written at once."""
    from spu.schema import LedgerEntry
    from spu.seal.keys import sign
    from spu.seal.ledger import GENESIS, entry_body, entry_line, ledger_path, line_sha256

    prev, chunks = GENESIS, []
    for seq in range(1, lines + 1):
        entry = LedgerEntry(seq=seq, run_key=f"{seq:016x}", manifest_sha256="0" * 64,
                            prev=prev, time="2026-01-01T00:00:00+00:00", signature="")
        line = entry_line(entry.model_copy(update={"signature": sign(key, entry_body(entry))}))
        chunks.append(line)
        prev = line_sha256(line)
    ledger_path(root).write_bytes(b"".join(chunks))


def copy_runs(db: Path, template: str, count: int) -> list[str]:
    """``count`` copies of the MLflow run ``template``, each under its own run key.

    Made inside SQLite (a recursive sequence), so that a store of 100,000 runs takes
    seconds. Returns the run keys.
    """
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        numbers = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                   f"WHERE i < {count}) ")
        uuid = "printf('%032x', 1000000000 + n.i)"
        columns = [row[1] for row in con.execute("PRAGMA table_info(runs)")]
        chosen = ", ".join(uuid if c == "run_uuid" else f"r.{c}" for c in columns)
        con.execute(f"INSERT INTO runs ({', '.join(columns)}) {numbers}SELECT {chosen} "
                    f"FROM runs r, n WHERE r.run_uuid = ?", (template,))
        for table in RUN_TABLES:
            columns = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
            chosen = ", ".join(
                uuid if c == "run_uuid" else
                ("CASE WHEN t.key = 'run_key' THEN printf('%016x', n.i) ELSE t.value END"
                 if (table, c) == ("tags", "value") else f"t.{c}") for c in columns)
            con.execute(f"INSERT INTO {table} ({', '.join(columns)}) {numbers}SELECT {chosen} "
                        f"FROM {table} t, n WHERE t.run_uuid = ?", (template,))
        con.commit()
    finally:
        con.close()
    return [f"{i:016x}" for i in range(1, count + 1)]


def build(size: int, work: Path, sweep_keys: int) -> Root:
    """A root of ``size`` run folders, ledger lines and MLflow runs."""
    from spu.seal.keys import signing_key
    from spu.tracking.store import TrackingTarget, log_run, sqlite_path

    path = work / f"root-{size}"
    spec, record = real_run(path)
    run_dir = path / "runs" / record.run_key  # type: ignore[attr-defined]
    target = TrackingTarget(uri=f"sqlite:///{path / 'mlflow.db'}",
                            artifact_root=(path / "mlartifacts").as_uri(), experiment="growth")
    template = log_run(record, run_dir, target)  # type: ignore[arg-type]
    db = sqlite_path(target.uri)
    assert db is not None
    keys = copy_runs(db, template, size - 1)
    for key in keys:
        (path / "runs" / key).mkdir()
    write_ledger(path, signing_key(path), size)
    return Root(size, path, spec, record, target, signing_key(path),
                [record.run_key, *keys[:sweep_keys - 1]])  # type: ignore[attr-defined]


def steps(root: Root) -> dict[str, Callable[[], object]]:
    """The steps timed, each a call on ``root``."""
    from dataclasses import replace

    from spu.launch.resume import latest_recorded
    from spu.runner import prepare_run, stage
    from spu.seal.ledger import append_entry, head_hash
    from spu.tracking.store import log_run

    record = root.record
    run_dir = root.path / "runs" / record.run_key  # type: ignore[attr-defined]
    counter = iter(range(10**9))

    def staged() -> object:
        run = prepare_run(replace(root.spec, attempt=2), check=False)  # type: ignore[type-var]
        return stage(run)

    return {
        "ledger append": lambda: append_entry(
            root.path, root.key, run_key=f"{next(counter):016x}",  # type: ignore[arg-type]
            manifest_sha256="0" * 64, time="2026-01-01T00:00:00+00:00"),
        "ledger head": lambda: head_hash(root.path),
        "stage": staged,
        "resume check, one key": lambda: latest_recorded(
            root.target, root.path,  # type: ignore[arg-type]
            {record.run_key: record.identity}),  # type: ignore[attr-defined]
        f"resume check, a sweep of {len(root.sweep_keys)} keys": lambda: latest_recorded(
            root.target, root.path, dict.fromkeys(root.sweep_keys)),  # type: ignore[arg-type]
        "log_run": lambda: log_run(record, run_dir, root.target),  # type: ignore[arg-type]
    }


def medians_ms(calls: list[Callable[[], object]], repeats: int) -> list[float]:
    """The median of ``repeats`` timings of each call, milliseconds (one warm-up left out).

    The calls take turns, one timing each per round, so that a drift of the machine
    (another process, the page cache) weighs on every size alike.
    """
    for call in calls:
        call()
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeats):
        for call, taken in zip(calls, times, strict=True):
            start = time.perf_counter()
            call()
            taken.append(time.perf_counter() - start)
    return [statistics.median(taken) * 1000 for taken in times]


def main() -> int:
    """Build the roots, time every step at each size, print the table and the verdict."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[1000, 100_000],
                        help="the two root sizes (run folders, ledger lines, MLflow runs)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sweep-keys", type=int, default=30)
    parser.add_argument("--sweep-repeats", type=int, default=None,
                        help="timings of the sweep's resume check (default: --repeats; an "
                             "older store that reads every run takes minutes per check)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the roots here and keep them (default: a temporary folder)")
    args = parser.parse_args()
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    work = args.keep or Path(tempfile.mkdtemp(prefix="spu-growth-"))
    try:
        started = time.perf_counter()
        roots = [build(size, work, args.sweep_keys) for size in sorted(args.sizes)]
        print(f"built roots of {' and '.join(f'{r.size:,}' for r in roots)} runs in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        table = {name: [] for name in steps(roots[0])}  # type: ignore[var-annotated]
        for name in table:
            repeats = (args.sweep_repeats or args.repeats) if name.startswith(
                "resume check, a sweep") else args.repeats
            table[name] = medians_ms([steps(root)[name] for root in roots], repeats)
        load = os.getloadavg()[0]
        small, large = roots[0].size, roots[-1].size
        print(f"median of {args.repeats} (ms); load average {load:.1f} on "
              f"{os.cpu_count()} CPUs")
        print(f"  {'step':<36} {f'{small:,} runs':>12} {f'{large:,} runs':>14} {'ratio':>7}")
        worst = 0.0
        for name, (at_small, at_large) in table.items():
            ratio = at_large / at_small if at_small else float("inf")
            worst = max(worst, ratio)
            print(f"  {name:<36} {at_small:12.2f} {at_large:14.2f} {ratio:7.2f}")
        print(f"  target: every ratio <= {TARGET_RATIO}: "
              f"{'met' if worst <= TARGET_RATIO else 'NOT met'} (largest {worst:.2f})")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
