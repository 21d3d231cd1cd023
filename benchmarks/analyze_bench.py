"""Speed and memory of ``spu analyze`` (paper 4: 1,155 runs, 227,103 tool calls).

    .venv/bin/python benchmarks/analyze_bench.py [--runs 1155] [--calls 227103] [--keep DIR]
                                                 [--repeat N] [--jobs 2]
    .venv/bin/python benchmarks/analyze_bench.py --memory   # peak RSS, 100 MB vs 1 GB trajectory

Speed: builds a corpus of the paper's shape (``--calls`` tool calls in all, exactly) from
the recorded Claude Code and Codex sessions (``spu.testing.corpus``), then times, in this
process, (a) the reference: a plain pandas pass over the decoded JSON (every trajectory
line ``json.loads``-ed, the tool calls flattened into one DataFrame and counted per run)
and (b) ``spu analyze`` (every table, 10,000 task resamples, the 500-tree classifier,
the CSV files; figures not drawn). Prints both, wall and CPU time, the ratio and the load
average (the machine may be shared: compare ratios, and run several ``--repeat`` rounds).
Target: ``spu analyze`` under 60 s on 2 cores.

Memory: writes one trajectory whose tool outputs add up to 100 MB and one of 1 GB
(compressible text, so writing takes seconds), reads each with ``read_run`` in a fresh
process and prints the peak resident memory of each: streaming keeps it flat.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def reference_pass(runs_dir: Path) -> tuple[float, int]:
    """A plain pandas pass: decode every trajectory line, flatten calls, count per run."""
    import pandas as pd

    start = time.perf_counter()
    rows = []
    for path in sorted(runs_dir.glob("runs/*/trajectory.jsonl.gz")):
        run = path.parent.name
        with gzip.open(path, "rt", encoding="utf-8") as f:
            f.readline()
            for line in f:
                step = json.loads(line)
                for k, call in enumerate(step.get("tool_calls", [])):
                    rows.append((run, step.get("index"), k, call.get("name"),
                                 step.get("timestamp")))
    calls = pd.DataFrame(rows, columns=["run_key", "step", "call_index", "tool", "timestamp"])
    calls.groupby(["run_key", "tool"]).size()
    return time.perf_counter() - start, len(calls)


def _cpu() -> float:
    """CPU seconds of this process and of its finished child processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def speed(args: argparse.Namespace) -> None:
    import os
    import statistics

    from spu.analysis.trajectory_analysis import AnalyzeOptions, analyze_runs, write_analysis
    from spu.testing.corpus import make_corpus

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        if not (root / "runs").is_dir():
            t = time.perf_counter()
            make_corpus(root, args.runs, REPO / "tasks", total_calls=args.calls, seed=0)
            print(f"corpus: {args.runs} runs written in {time.perf_counter() - t:.1f} s")
        ratios = []
        for round_ in range(1, args.repeat + 1):
            load = os.getloadavg()[0]
            cpu, start = _cpu(), time.perf_counter()
            ref_s, n_calls = reference_pass(root)
            ref_cpu = _cpu() - cpu
            cpu, start = _cpu(), time.perf_counter()
            result = analyze_runs(root, AnalyzeOptions(task_roots=(REPO / "tasks",),
                                                       jobs=args.jobs))
            write_analysis(result, root / "analysis")
            took, took_cpu = time.perf_counter() - start, _cpu() - cpu
            ratios.append(took / ref_s)
            print(f"round {round_} (load average {load:.1f} on {os.cpu_count()} cores before, "
                  f"{os.getloadavg()[0]:.1f} after):")
            print(f"  reference (json.loads + pandas): {n_calls:,} calls in {ref_s:.1f} s "
                  f"({ref_cpu:.1f} s CPU)")
            print(f"  spu analyze: {result.manifest['runs']} runs, "
                  f"{result.manifest['calls']:,} calls in {took:.1f} s ({took_cpu:.1f} s CPU "
                  f"with {args.jobs} worker processes): {took / ref_s:.2f}x the reference; "
                  f"target under 60 s on 2 cores")
            print(f"  by phase (s): {result.manifest['seconds']}")
        if len(ratios) > 1:
            print(f"median ratio over {len(ratios)} rounds: {statistics.median(ratios):.2f}x")


def _child(path: str) -> None:
    from spu.analysis.runs import read_run

    start = time.perf_counter()
    reading = read_run(Path(path))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"calls": len(reading.calls), "peak_mb": peak,
                      "seconds": time.perf_counter() - start}))


def write_big_run(folder: Path, total_bytes: int, chunk: int = 1 << 20) -> None:
    """A run folder whose trajectory has ``total_bytes`` of tool output, 1 MiB per call."""
    from spu.schema import ToolCall, TrajectoryStep
    from spu.tracking.trajectories import TRAJECTORY_FILE

    (folder / "task").mkdir(parents=True)
    (folder / "output").mkdir()
    contract = {"task_id": "t", "task_version": "1", "groups": [
        {"group_id": "G1", "endpoint": "y", "weight": 1.0, "items": ["E1", "E2", "E3"]}]}
    (folder / "task" / "contract.json").write_text(json.dumps(contract))
    (folder / "run.json").write_text(json.dumps({"run_key": folder.name, "task_id": "t",
                                                 "model": "m", "effort": "max",
                                                 "harness": "claude_code"}))
    blob = ("ranked E1 E2 E3 by energy " * (chunk // 26 + 1))[:chunk]
    with open(folder / TRAJECTORY_FILE, "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz:
        gz.write(json.dumps({"schema_version": "1", "harness": "claude_code"}).encode() + b"\n")
        for i in range(total_bytes // chunk):
            step = TrajectoryStep(index=i, timestamp=f"2026-11-01T00:{i // 60 % 60:02d}:"
                                  f"{i % 60:02d}Z", tool_calls=[ToolCall(
                                      name="Bash", arguments={"command": "python3 run.py"},
                                      output=blob)])
            gz.write(step.model_dump_json(exclude_defaults=True).encode() + b"\n")


def memory() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for label, size in (("100 MB", 100 << 20), ("1 GB", 1 << 30)):
            folder = Path(tmp) / f"run-{size}"
            t = time.perf_counter()
            write_big_run(folder, size)
            made = time.perf_counter() - t
            out = subprocess.run([sys.executable, __file__, "--child", str(folder)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out)
            print(f"{label} of tool output ({r['calls']} calls): peak RSS {r['peak_mb']:.0f} MB, "
                  f"read in {r['seconds']:.1f} s (written in {made:.1f} s)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1155)
    p.add_argument("--calls", type=int, default=227_103)
    p.add_argument("--keep", default=None, help="build (or reuse) the corpus in this folder")
    p.add_argument("--repeat", type=int, default=1, help="rounds of reference + analyze")
    p.add_argument("--jobs", type=int, default=2, help="processes of spu analyze")
    p.add_argument("--memory", action="store_true")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args.child)
    elif args.memory:
        memory()
    else:
        speed(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
