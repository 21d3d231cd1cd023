"""One writer per run key (issue 12, point 5): concurrent sweeps on one ``output_root`` and a
``kill -9`` of the driver never duplicate a run, and a record cut short is closed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from spu.callbacks import RESULT_FILE
from spu.launch.job import ResultStatus, RunIdentity
from spu.launch.resume import latest_attempts
from spu.main import run_from_config
from spu.schema import Outcome, RunRecord, SandboxInfo
from spu.tracking.locks import holder, holder_lock, run_key_lock, take
from spu.tracking.store import TrackingTarget, client_for, log_run
from tests.launchers.conftest import (
    sandbox_name,
    start_sweep,
    tracked_runs,
    wait_for,
)

KEY = "0123456789abcdef"

HOLDER = """
import sys, time
from pathlib import Path
from spu.tracking.locks import holder_lock, take
lock = holder_lock(Path(sys.argv[1]))
assert take(lock, blocking=False)
print("held", flush=True)
time.sleep(600)
"""


def hold_in_another_process(path: Path) -> subprocess.Popen[str]:
    """A process that takes the lock at ``path`` and keeps it until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_is_exclusive_across_processes_and_dies_with_its_holder(tmp_path) -> None:
    path = tmp_path / "locks" / f"{KEY}.lock"
    holder_process = hold_in_another_process(path)
    try:
        lock = holder_lock(path)
        assert not take(lock, blocking=False)
        assert holder(lock) == str(holder_process.pid)
        assert not take(lock, timeout_s=0.3)
    finally:
        holder_process.send_signal(signal.SIGKILL)
        holder_process.wait()
    # kill -9 released it: the kernel drops flock locks with their file.
    assert take(lock, blocking=False)
    assert take(run_key_lock(tmp_path, KEY), blocking=False)  # reentrant in this process
    lock.release()
    assert lock.is_locked
    lock.release()
    assert not lock.is_locked
    with pytest.raises(ValueError, match="not a run key"):
        run_key_lock(tmp_path, "../../etc/x")


@pytest.mark.slow  # a real sandbox (spu.main, sandbox=local)
def test_a_key_held_by_another_process_is_skipped_not_run(compose, task_root, tmp_path,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("SPU_TASK_ROOT", str(task_root))
    out = tmp_path / "outputs"
    cfg = compose(f"task_root={task_root}", "task=example-coupling-conditions",
                  "experiment=single", f"sandbox={sandbox_name()}")
    identity = RunIdentity.from_config(cfg)
    assert identity is not None
    holder = hold_in_another_process(out / "locks" / f"{identity.run_key}.lock")
    try:
        result = run_from_config(cfg)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert result["status"] == ResultStatus.in_progress
    assert f"running in another process (pid {holder.pid})" in result["note"]
    assert not (out / "runs").exists() and not (out / "mlflow.db").exists()
    assert run_from_config(cfg)["status"] == ResultStatus.ran  # free again: it runs


def _record(attempt: int = 1) -> RunRecord:
    return RunRecord(run_key=KEY, task_id="spu-t", task_version="1.0", model="random",
                     harness="baseline", effort="none", repeat=0, outcome=Outcome.valid,
                     scored=True, score_strict=0.5, score_recovered=0.5,
                     sandbox=SandboxInfo(backend="local"), attempt=attempt)


def test_a_record_cut_short_is_closed_and_the_run_json_logged_once(tmp_path) -> None:
    """A process killed after creating its MLflow run, before logging the outcome: the next
    launch ends that record as KILLED and logs the finished ``run.json`` exactly once."""
    out = tmp_path / "outputs"
    target = TrackingTarget(uri=f"sqlite:///{out / 'mlflow.db'}",
                            artifact_root=(out / "mlartifacts").as_uri(), experiment="spu-x")
    run_dir = out / "runs" / KEY
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(_record().model_dump_json())
    client = client_for(target)
    exp = client.create_experiment("spu-x", artifact_location=target.artifact_root)
    cut = client.create_run(exp, tags={"run_key": KEY, "attempt": "1"}).info.run_id

    held = hold_in_another_process(out / "locks" / f"{KEY}.lock")
    try:  # while another process holds the key, nothing is repaired
        assert latest_attempts(target, out, [KEY]) == {}
        assert client.get_run(cut).info.status == "RUNNING"
    finally:
        held.send_signal(signal.SIGKILL)
        held.wait()

    latest = latest_attempts(target, out, [KEY])[KEY]
    assert client.get_run(cut).info.status == "KILLED"
    assert latest.outcome == "valid" and latest.tracking_id != cut
    again = latest_attempts(target, out, [KEY])[KEY]
    assert again.tracking_id == latest.tracking_id
    runs = client.search_runs([exp])
    assert sorted(r.info.status for r in runs) == ["FINISHED", "KILLED"]


def test_a_finished_run_in_another_experiment_is_not_logged_again(tmp_path) -> None:
    """Issue 14 item 3: ``experiment=single`` after the default sweep found the run folder
    of a finished run, missed its record (another experiment) and logged a second copy."""
    out = tmp_path / "outputs"
    default = TrackingTarget(uri=f"sqlite:///{out / 'mlflow.db'}",
                             artifact_root=(out / "mlartifacts").as_uri(),
                             experiment="spu-default")
    single = TrackingTarget(default.uri, default.artifact_root, "spu-single")
    run_dir = out / "runs" / KEY
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(_record().model_dump_json())
    first = log_run(_record(), run_dir, default)
    found = latest_attempts(single, out, [KEY])[KEY]
    assert found.tracking_id == first
    client = client_for(default)
    assert sum(len(client.search_runs([e.experiment_id]))
               for e in client.search_experiments()) == 1


def _complete_records(out: Path) -> list[tuple[str, str, str]]:
    """(run key, outcome, status) of every MLflow run of the store, every experiment."""
    client = client_for(f"sqlite:///{out / 'mlflow.db'}")
    found = []
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id], max_results=10_000):
            found.append((run.data.tags.get("run_key", "?"), run.data.tags.get("outcome", "-"),
                          run.info.status))
    return found


def _job_results(sweep_dir: Path) -> list[dict]:
    """The result of each job of a sweep, as its job folder keeps it (``result.json``)."""
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob(f"*/{RESULT_FILE}"))]


@pytest.mark.slow
def test_two_concurrent_sweeps_on_one_output_root_run_every_key_once(
        task_root, tmp_path, background) -> None:
    """Attack: two sweeps started together on one ``output_root`` (basic launcher, the three
    baselines, SQLite). Before: schema creation collided, keys ran twice, some recorded as
    ``no_file``. Now every key runs once, in one of the two, and is recorded once."""
    out = tmp_path / "outputs"
    common = (f"task_root={task_root}", f"output_root={out}", f"sandbox={sandbox_name()}")
    # Own sweep folders: started in the same second, both would get the same default one.
    sweeps = [start_sweep(background, tmp_path / f"sweep{i}.log", *common,
                          f"hydra.sweep.dir={tmp_path / f'sweep{i}'}") for i in (0, 1)]
    for sweep in sweeps:
        assert sweep.proc.wait(timeout=900) == 0, sweep.log.read_text()[-4000:]
    logs = [s.log.read_text() for s in sweeps]
    assert not any("Traceback" in text for text in logs), logs
    records = _complete_records(out)
    keys = Counter(key for key, _, _ in records)
    assert len(keys) == 6 and set(keys.values()) == {1}, records  # 3 baselines x 2 tasks
    assert {(outcome, status) for _, outcome, status in records} == {("valid", "FINISHED")}
    folders = sorted(p.name for p in (out / "runs").iterdir())
    assert folders == sorted(keys)  # no staging or half-written folder left
    for key in keys:
        assert json.loads((out / "runs" / key / "run.json").read_text())["outcome"] == "valid"
        assert not (out / "runs" / key / "attempts").exists()
    # Each (task, model) ran in exactly one sweep; the other skipped it.
    ran = Counter((r["task"], r["model"]) for i in (0, 1)
                  for r in _job_results(tmp_path / f"sweep{i}") if r["status"] == "ran")
    assert len(ran) == 6 and set(ran.values()) == {1}, logs


@pytest.mark.slow
def test_kill_9_of_a_basic_launcher_sweep_then_relaunch_runs_every_key_once(
        task_root, agents, tmp_path, background) -> None:
    """Attack: ``kill -9`` of the driver mid-sweep, then the same command again. Every run
    key ends with exactly one complete record and one ``run.json``; no record stays RUNNING."""
    out = tmp_path / "outputs"
    overrides = ("-m", "model=random", "harness=command", f"harness.entrypoint={agents.slow}",
                 f"task_root={task_root}", f"output_root={out}", f"sandbox={sandbox_name()}",
                 "task=glob(*)", "repeat=0,1,2")
    first = start_sweep(background, tmp_path / "first.log", *overrides)
    wait_for(lambda: len(list(out.glob("runs/*/run.json"))) >= 2, 600, "two finished runs")
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=60)
    done_before = len(list(out.glob("runs/*/run.json")))
    assert done_before < 6, "the sweep finished before it was killed: nothing was tested"

    again = start_sweep(background, tmp_path / "again.log", *overrides,
                        f"hydra.sweep.dir={tmp_path / 'again'}")
    assert again.proc.wait(timeout=900) == 0, again.log.read_text()[-4000:]
    records = _complete_records(out)
    complete = Counter(key for key, outcome, _ in records if outcome != "-")
    assert len(complete) == 6 and set(complete.values()) == {1}, records
    assert all(status != "RUNNING" for _, _, status in records), records
    assert len(tracked_runs(out)) == 6
    for key in complete:
        record = json.loads((out / "runs" / key / "run.json").read_text())
        assert (record["attempt"], record["outcome"]) == (1, "valid")
    assert not list(out.glob("runs/.*"))  # no staging folder left by the kill
    rows = _job_results(tmp_path / "again")
    # What finished before the kill is skipped (logged now if the kill beat its tracking).
    assert len(rows) == 6 and sum(r["status"] == "skipped" for r in rows) == done_before
