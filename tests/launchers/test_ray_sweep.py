"""Sweeps on a local Ray (``hydra/launcher=ray_local``): real Ray, MLflow, sandboxes.

Each test starts ``python -m spu.main`` as a user would, on a private copy of the example
tasks, with outputs and the SQLite tracking store under a temporary folder.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import baseline_run_key
from tests.launchers.billed_harness import AGENT as BILLED_AGENT
from tests.launchers.conftest import (
    processes_mentioning,
    run_sweep,
    sandbox_name,
    start_sweep,
    tracked_runs,
    wait_for,
)

UNISOLATED = ("sandbox=subprocess", "sandbox.allow_unisolated=true")
"""The subprocess sandbox, which an agent run may use only when the command allows it."""


pytestmark = pytest.mark.slow

TASKS = ("example-coupling-conditions", "example-electrolytes-and-films")


def ray_sweep(out: Path, task_root: Path, *overrides: str) -> list[str]:
    return ["hydra/launcher=ray_local", f"output_root={out}", f"task_root={task_root}",
            "hydra.launcher.progress=lines", *overrides]


def run_records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/run.json"))]


def server_gone(out: Path) -> bool:
    return not processes_mentioning(str(out / "mlflow.db"))


def test_sweep_over_all_tasks_with_two_repeats_then_rerun_adds_nothing(task_root,
                                                                       tmp_path) -> None:
    out = tmp_path / "outputs"
    args = ray_sweep(out, task_root, "model=random", "repeat=0,1", f"sandbox={sandbox_name()}",
                     "hydra.launcher.init.num_gpus=2", "hydra.launcher.resources.gpus=1")
    first = run_sweep(*args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    records = tracked_runs(out)
    assert len(records) == len(TASKS) * 2
    assert len({r.run_key for r in records}) == len(TASKS) * 2
    assert Counter(r.repeat for r in records) == {0: 2, 1: 2}
    assert {(r.outcome, r.attempt, r.status) for r in records} == {("valid", 1, "FINISHED")}
    # Parallel runs tracked by the driver straight into the SQLite file, one at a time:
    # no server in front of it (hydra.launcher.tracking_server=always starts one).
    assert "tracking through" not in first.stdout
    assert server_gone(out)
    # Each run got one of the two (fake) GPUs Ray handed out, and says so.
    gpus = [r["sandbox"]["limits"]["gpus"] for r in run_records(out)]
    assert len(gpus) == 4 and all(g in (["0"], ["1"]) for g in gpus)
    assert "done 4/4 · running 0 · waiting 0 · failed 0" in first.stdout
    assert first.stdout.count(" · valid · score ") == 4  # one streamed line per run

    second = run_sweep(*args)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert len(tracked_runs(out)) == 4
    assert "0 ran now, 4 skipped" in second.stdout
    assert "none to launch on Ray (4 skipped" in second.stdout


def test_killing_the_driver_halfway_then_relaunching_finishes_without_duplicates(
        task_root, agents, tmp_path, background) -> None:
    """Invariant: kill -9 of the driver, then the same command: every run once, none twice."""
    out = tmp_path / "outputs"
    args = ray_sweep(out, task_root, "model=presented_order", "harness=command",
                     f"harness.entrypoint={agents.slow}", *UNISOLATED,
                     "repeat=0,1,2", "hydra.launcher.max_concurrent=1",
                     "hydra.launcher.tracking_server=always")
    total = len(TASKS) * 3
    bg = start_sweep(background, tmp_path / "first.log", *args)
    wait_for(lambda: len(list((out / "runs").glob("*/run.json"))) >= 2, 300,
             "two finished runs")
    bg.kill()
    finished_before = len(list((out / "runs").glob("*/run.json")))
    assert finished_before < total, "the sweep ended before it could be killed"
    wait_for(lambda: server_gone(out), 30, "the killed sweep's MLflow server to exit")

    second = run_sweep(*args)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert " to run, 1 at a time, " in second.stdout  # hydra.launcher.max_concurrent=1
    records = tracked_runs(out)
    keys = Counter(r.run_key for r in records)
    assert len(keys) == total and set(keys.values()) == {1}, keys
    assert {r.outcome for r in records} == {"valid"}
    skipped = int(second.stdout.split(" skipped (finished by an earlier")[0].rsplit(" ", 1)[1])
    assert finished_before - 1 <= skipped < total  # a run may die in the kill's instant


def test_a_run_whose_worker_dies_is_recorded_and_retried_once(task_root, agents,
                                                              tmp_path) -> None:
    """Invariant: an attempt lost with its worker stays recorded and the retry points to it.

    The sweep also runs with ``hydra.launcher.insecure=true``: every record says so.
    """
    out = tmp_path / "outputs"
    result = run_sweep(*ray_sweep(out, task_root, "model=presented_order", "harness=command",
                                  f"harness.entrypoint={agents.dies_once}",
                                  f"+harness.env.MARKER_DIR={agents.marker_dir}",
                                  *UNISOLATED, "hydra.launcher.insecure=true"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("worker lost (WorkerCrashedError") == 2
    records = tracked_runs(out)
    by_key: dict[str, list] = {}
    for r in records:
        by_key.setdefault(r.run_key, []).append(r)
    assert len(by_key) == len(TASKS)
    for attempts in by_key.values():
        attempts.sort(key=lambda r: r.attempt)
        assert [(r.attempt, r.outcome) for r in attempts] == [(1, "infra_error"),
                                                              (2, "valid")]
        assert attempts[1].retried_from == attempts[0].run_id
    for record in run_records(out):
        assert record["attempt"] == 2
        lost = json.loads((out / "runs" / record["run_key"] / "attempts" / "1" /
                           "run.json").read_text())
        assert lost["outcome"] == "infra_error"
        assert lost["process"]["error"].startswith("WorkerCrashedError")
        for noted in (record, lost):
            assert any(n.startswith("RAY WITHOUT TOKEN AUTHENTICATION") for n in noted["notes"])
    assert "retried 2 · skipped 0" in result.stdout
    assert "RAY WITHOUT TOKEN AUTHENTICATION" in result.stdout


def test_budget_stops_launching_once_finished_runs_cost_it(task_root, tmp_path) -> None:
    """Each run reports 100,000 input tokens; Opus 5 lists $5 per million: $0.50 a run.

    With one run at a time and budget.max_cost_usd=1: run 1 ($0.50), run 2 ($1.00, the
    cap reached), then no launch: 2 of the 4 runs are not launched.
    """
    out = tmp_path / "outputs"
    agent = tmp_path / "billed_agent"
    agent.write_text(BILLED_AGENT)
    agent.chmod(0o755)
    result = run_sweep(*ray_sweep(
        out, task_root, "model=opus5", "harness=command",
        "harness.name=tests.launchers.billed_harness:BilledHarness",
        f"harness.entrypoint={agent}", "+harness.env.BILLED_INPUT_TOKENS=100000",
        "repeat=0,1", f"sandbox={sandbox_name()}", "hydra.launcher.max_concurrent=1",
        "budget.max_cost_usd=1"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert ("budget.max_cost_usd=1 reached: $1.00 spent by 2 finished runs; 2 runs not "
            "launched") in result.stdout
    assert len(tracked_runs(out)) == 2
    assert [r["cost_usd"] for r in run_records(out)] == pytest.approx([0.5, 0.5], abs=1e-12)
    assert "2 ran now, 0 skipped" in result.stdout and "2 not launched" in result.stdout
    assert "cost $1.00 of $1.00" in result.stdout


def test_a_seeded_cost_counts_toward_the_budget_under_both_launchers(task_root,
                                                                     tmp_path) -> None:
    """Invariant: relaunching a sweep never resets what it has spent."""
    from spu.schema import Outcome, RunRecord, SandboxInfo
    from spu.tracking.store import TrackingTarget, log_run

    out = tmp_path / "outputs"
    key = baseline_run_key(task_root / TASKS[0])
    record = RunRecord(run_key=key, task_id=TASKS[0], task_version="1.0", model="random",
                       harness="baseline", effort="none", repeat=0, outcome=Outcome.valid,
                       scored=True, score_strict=0.2, score_recovered=0.2, cost_usd=3.0,
                       sandbox=SandboxInfo(backend="local"))
    run_dir = out / "runs" / key
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(record.model_dump_json())
    log_run(record, run_dir, TrackingTarget(uri=f"sqlite:///{out / 'mlflow.db'}",
                                            artifact_root=(out / "mlartifacts").as_uri(),
                                            experiment="spu-default"))
    common = [f"output_root={out}", f"task_root={task_root}", "model=random",
              f"task={TASKS[0]}", "repeat=0,1,2", "budget.max_cost_usd=2"]
    for launcher in ("hydra/launcher=basic", "hydra/launcher=ray_local"):
        result = run_sweep(launcher, *common)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "0 ran now, 1 skipped" in result.stdout and "2 not launched" in result.stdout
        assert "budget.max_cost_usd=2 reached: $3.00 spent by 1 finished runs" in \
            result.stdout + result.stderr
        assert len(tracked_runs(out)) == 1


def ray_processes(temp_dir: Path) -> list[int]:
    """Processes of the Ray whose temporary folder is ``temp_dir``."""
    return processes_mentioning(str(temp_dir))


def test_kill_9_of_the_driver_leaves_no_ray_process_and_ray_wants_its_token(
        task_root, agents, tmp_path, background) -> None:
    """Invariant: a local Ray turns away a client without the sweep's token, and none of
    its processes outlives a driver killed with SIGKILL (only the driver: no group kill)."""
    import os
    import shutil
    import signal
    import tempfile

    from hydra_plugins.spu_ray_launcher._security import accepts_without_token

    out = tmp_path / "outputs"
    # Short: Ray's socket paths must stay under 108 bytes.
    ray_dir = Path(tempfile.mkdtemp(prefix="spu-rk-", dir="/tmp"))
    args = ray_sweep(out, task_root, "model=presented_order", "harness=command",
                     f"harness.entrypoint={agents.slow}", f"sandbox={sandbox_name()}",
                     # Long enough to be still running when the checks below are done
                     # (it is killed then): 100 runs of a second, two at a time.
                     "repeat=range(0,50)", f"hydra.launcher.init.temp_dir={ray_dir}")
    bg = start_sweep(background, tmp_path / "sweep.log", *args)
    wait_for(lambda: len(list((out / "runs").glob("*/run.json"))) >= 1, 600, "a finished run")
    gcs = gcs_address(ray_dir)
    assert not accepts_without_token(gcs), "a client without the token joined the sweep's Ray"
    assert ray_processes(ray_dir), "no Ray process found to begin with"
    os.kill(bg.proc.pid, signal.SIGKILL)
    bg.proc.wait(timeout=60)
    wait_for(lambda: not ray_processes(ray_dir), 120, "every Ray process of the sweep to exit")
    shutil.rmtree(ray_dir, ignore_errors=True)


def gcs_address(ray_dir: Path) -> str:
    """The GCS address of the Ray running under ``ray_dir``, from its processes."""
    import re

    for pid in ray_processes(ray_dir):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        found = re.search(r"--gcs-address=([0-9.]+:[0-9]+)", cmdline.replace("\0", " "))
        if found:
            return found.group(1)
    raise AssertionError(f"no Ray process under {ray_dir} names its GCS address")
