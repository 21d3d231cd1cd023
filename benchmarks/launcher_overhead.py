"""Scheduling overhead of the launchers, and tracking write time per run.

Usage::

    .venv/bin/python benchmarks/launcher_overhead.py [--runs 200] [--records 50]

1. Launchers: a sweep of ``--runs`` runs of a no-op agent (it exits at once; every run
   is graded as ``no_file``) on one example task, with tracking off, under Hydra's basic
   launcher (the reference) and under ``hydra/launcher=ray_local``. Each sweep is one
   ``python -m spu.main`` call, timed from start to exit, so start-up is spread over the
   runs as it is in a real sweep. Prints runs per minute and the ratio Ray / basic.
2. Tracking: ``--records`` run records written with ``log_run`` straight into SQLite (the
   reference) and through the MLflow server a parallel sweep starts. Prints milliseconds
   per record and the ratio server / SQLite.

Both references are measured in the same call, on the same machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASK = REPO / "tasks" / "example-coupling-conditions"
NOOP_AGENT = "#!/bin/sh\nexit 0\n"


def sweep_seconds(launcher: str, runs: int, work: Path, sandbox: str) -> float:
    """Wall time of one sweep of ``runs`` no-op runs under ``launcher``."""
    out = work / f"out-{launcher.replace('/', '_')}"
    argv = [sys.executable, "-m", "spu.main", f"hydra/launcher={launcher}",
            f"task_root={work / 'tasks'}", f"output_root={out}", f"task={TASK.name}",
            "model=random", "harness=command", f"harness.entrypoint={work / 'noop_agent'}",
            f"sandbox={sandbox}", "tracking=none", f"repeat=range(0,{runs})"]
    if launcher.startswith("ray"):
        argv.append("hydra.launcher.progress=off")
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{launcher} sweep failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    finished = len(list((out / "runs").glob("*/run.json")))
    if finished != runs:
        sys.exit(f"{launcher} sweep left {finished} runs, not {runs}")
    return seconds


def tracking_ms(records: int, work: Path) -> tuple[float, float]:
    """Milliseconds per ``log_run`` into SQLite directly, and through an MLflow server."""
    from spu.launch.server import TrackingServer
    from spu.schema import Outcome, RunRecord, SandboxInfo
    from spu.tracking.store import TrackingTarget, log_run

    run_dir = work / "record"
    run_dir.mkdir()
    record = RunRecord(run_key="0" * 16, task_id="t", task_version="1", model="random",
                       harness="baseline", effort="none", outcome=Outcome.valid, scored=True,
                       score_strict=0.1, score_recovered=0.1, sandbox=SandboxInfo(backend="x"))
    (run_dir / "run.json").write_text(record.model_dump_json())

    def per_record(target: TrackingTarget) -> float:
        log_run(record, run_dir, target)  # warm-up: creates the experiment
        start = time.perf_counter()
        for _ in range(records):
            log_run(record, run_dir, target)
        return (time.perf_counter() - start) / records * 1000

    direct = work / "direct"
    sqlite_ms = per_record(TrackingTarget(uri=f"sqlite:///{direct / 'mlflow.db'}",
                                          artifact_root=(direct / "art").as_uri(),
                                          experiment="bench"))
    served = work / "served"
    with TrackingServer(f"sqlite:///{served / 'mlflow.db'}", (served / "art").as_uri(),
                        served / "server.log") as server:
        server_ms = per_record(TrackingTarget(uri=server.uri,
                                              artifact_root=(served / "art").as_uri(),
                                              experiment="bench"))
    return sqlite_ms, server_ms


def main() -> int:
    """Run both measurements and print them with their ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--records", type=int, default=50)
    parser.add_argument("--sandbox", default="subprocess",
                        help="sandbox of the no-op runs (default subprocess: measures the "
                             "launcher, not bubblewrap)")
    args = parser.parse_args()
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    with tempfile.TemporaryDirectory(prefix="spu-bench-") as tmp:
        work = Path(tmp)
        shutil.copytree(TASK, work / "tasks" / TASK.name)
        (work / "noop_agent").write_text(NOOP_AGENT)
        (work / "noop_agent").chmod(0o755)
        print(f"launcher scheduling overhead: no-op agent, {args.runs} runs, "
              f"sandbox={args.sandbox}, tracking off, {os.cpu_count()} CPUs")
        basic = sweep_seconds("basic", args.runs, work, args.sandbox)
        ray = sweep_seconds("ray_local", args.runs, work, args.sandbox)
        for name, seconds in (("basic (reference)", basic), ("ray_local", ray)):
            print(f"  {name:<18} {args.runs} runs in {seconds:7.1f} s = "
                  f"{args.runs / seconds * 60:7.1f} runs/min ({seconds / args.runs:.3f} s/run)")
        print(f"  ratio ray_local / basic (runs per minute): {basic / ray:.2f}")
        sqlite_ms, server_ms = tracking_ms(args.records, work)
        print(f"tracking write time per run: {args.records} records")
        print(f"  sqlite direct (reference) {sqlite_ms:7.1f} ms/run")
        print(f"  through mlflow server     {server_ms:7.1f} ms/run")
        print(f"  ratio server / sqlite: {server_ms / sqlite_ms:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
