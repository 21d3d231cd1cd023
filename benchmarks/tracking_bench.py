"""Tracking benchmark: log 1,000 runs to MLflow on SQLite and export the runs table.

Run: ``.venv/bin/python benchmarks/tracking_bench.py [--runs 1000] [--reference-runs 50]``

Prints, from one process and one store:

- tracking time per run of :func:`spu.tracking.store.log_run` (params, metrics and
  tags in one batch, then the artifacts of a realistic run folder: run.json,
  grade.json, a 200-step compressed trajectory, the submission and the logs), against
  a reference logging the same values one call per value (``log_param`` /
  ``log_metric`` / ``set_tag``) plus the same artifacts with ``log_artifacts``;
- export time of :func:`spu.tracking.export.runs_table` for all runs, against
  MLflow's own ``mlflow.search_runs`` DataFrame of the same experiment (which reads
  the same rows but builds no runs table).

Ratios above 1 mean the reference is slower.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from spu.schema import (
    Grade,
    GradeStatus,
    GroupGrade,
    Outcome,
    RunRecord,
    SandboxInfo,
    ToolCall,
    Trajectory,
    TrajectoryStep,
    Usage,
)
from spu.tracking.export import runs_table
from spu.tracking.store import (
    TrackingTarget,
    client_for,
    experiment_id,
    log_run,
    run_metrics,
    run_params,
    run_tags,
)
from spu.tracking.trajectories import TRAJECTORY_FILE, write_trajectory


def make_run_folder(root: Path) -> Path:
    """A run folder shaped like a real one (agent outputs, logs, compressed trajectory)."""
    run = root / "run"
    (run / "output" / "scripts").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / "output" / "rankings.json").write_text(json.dumps(
        {"task_id": "t", "rankings": [{"group_id": "G1", "order": [f"E{i}" for i in range(20)]}]}))
    (run / "output" / "report.md").write_text("# Report\n" + "reasoning\n" * 200)
    (run / "output" / "sources.json").write_text("[]")
    (run / "output" / "scripts" / "fit.py").write_text("print('fit')\n" * 50)
    (run / "logs" / "agent.stdout").write_text("".join(f'{{"event": {i}}}\n' for i in range(3000)))
    (run / "logs" / "agent.stderr").write_text("")
    steps = [TrajectoryStep(index=i, message_id=f"m{i}", text="thinking " * 20,
                            tool_calls=[ToolCall(name="Bash", arguments={"command": "ls"},
                                                 output="file\n" * 100)],
                            usage=Usage(input=100, cache_read=50_000, cache_write=500, output=300))
             for i in range(200)]
    total = Usage()
    for s in steps:
        total = total + (s.usage or Usage())
    write_trajectory(run / TRAJECTORY_FILE, Trajectory(harness="claude_code", steps=steps,
                                                       usage=total))
    (run / "grade.json").write_text("{}")
    return run


def make_record(i: int) -> RunRecord:
    """Run ``i`` of a sweep: 13 configurations x tasks, three groups per task."""
    groups = [GroupGrade(group_id=f"G{g}", weight=1 / 3, rho=((i * 7 + g) % 200) / 100 - 1)
              for g in range(3)]
    score = sum(g.weight * g.rho for g in groups)
    return RunRecord(
        run_key=f"{i:016x}", task_id=f"spu-{i // 13:04d}", task_version="1.0",
        discipline="chemistry", subfield="catalysis", visibility="public",
        model=f"model{i % 13}", harness="claude_code", effort="max", config=f"model{i % 13}-max",
        outcome=Outcome.valid, scored=True, score_strict=score, score_recovered=score,
        grade=Grade(task_id="t", score=score, status=GradeStatus.valid, groups=groups,
                    score_strict=score, grader_version="1"),
        threshold=0.5, n_items=20,
        usage=Usage(input=20_000, cache_read=10_000_000, cache_write=100_000, output=60_000),
        cost_usd=1.0 + i / 1000, runtime_s=3600.0 + i, tool_calls=100, web_fetches=10,
        sandbox=SandboxInfo(backend="local"),
    )


def log_reference(client, exp: str, record: RunRecord, run_dir: Path) -> None:
    """One call per value, then whole folders: how a straightforward logger does it."""
    run_id = client.create_run(exp).info.run_id
    for k, v in run_params(record).items():
        client.log_param(run_id, k, v)
    for k, v in run_metrics(record).items():
        client.log_metric(run_id, k, v)
    for k, v in run_tags(record).items():
        client.set_tag(run_id, k, v)
    for name in ("run.json", "grade.json", TRAJECTORY_FILE):
        client.log_artifact(run_id, str(run_dir / name))
    for folder in ("output", "logs"):
        client.log_artifacts(run_id, str(run_dir / folder), artifact_path=folder)
    client.set_terminated(run_id)


def main() -> int:
    """Run the benchmark and print the timings and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--reference-runs", type=int, default=50)
    args = parser.parse_args()

    import mlflow

    with tempfile.TemporaryDirectory(prefix="spu-bench-") as tmp:
        root = Path(tmp)
        run_dir = make_run_folder(root)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        target = TrackingTarget(uri=uri, artifact_root=(root / "art").as_uri(), experiment="bench")
        client = client_for(target)
        experiment_id(client, target)  # create the store (schema migrations) outside timing
        (run_dir / "run.json").write_text(make_record(0).model_dump_json())

        start = time.perf_counter()
        for i in range(args.runs):
            log_run(make_record(i), run_dir, target)
        ours = (time.perf_counter() - start) / args.runs

        ref_target = TrackingTarget(uri=uri, artifact_root=target.artifact_root,
                                    experiment="reference")
        ref_exp = experiment_id(client, ref_target)
        start = time.perf_counter()
        for i in range(args.reference_runs):
            log_reference(client, ref_exp, make_record(i), run_dir)
        reference = (time.perf_counter() - start) / args.reference_runs

        mlflow.set_tracking_uri(uri)
        export_s, search_s = [], []
        for _ in range(5):  # alternate, keep the best of five: both read a warm store
            start = time.perf_counter()
            table = runs_table(uri, "bench")
            export_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            raw = mlflow.search_runs(experiment_names=["bench"], max_results=50_000)
            search_s.append(time.perf_counter() - start)
        assert len(table) == len(raw) == args.runs
        export_best, search_best = min(export_s), min(search_s)

    print(f"runs logged:                  {args.runs}")
    print(f"tracking time per run:        {ours * 1000:8.1f} ms (log_run: one batch + artifacts)")
    print(f"reference per run:            {reference * 1000:8.1f} ms (one call per value, "
          f"{args.reference_runs} runs)")
    print(f"ratio reference / log_run:    {reference / ours:8.2f}")
    print(f"export of {args.runs} runs:       {export_best:8.2f} s (runs_table, best of 5)")
    print(f"mlflow.search_runs:           {search_best:8.2f} s (same rows, raw DataFrame)")
    print(f"ratio export / search_runs:   {export_best / search_best:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
