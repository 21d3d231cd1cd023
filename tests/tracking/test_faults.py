"""Operator faults end cleanly (issue 12, point 7): a corrupted, locked or full tracking
store, and a full disk, each give one line naming the file and what to do (exit 2), leave
no half-staged run folder and no MLflow run stuck in RUNNING, and lose no finished run.json.

The full-disk cases mount a size-limited tmpfs (root only); elsewhere they skip, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, run_module
from tests.launchers.conftest import sandbox_name

TASK = EXAMPLE_TASK.name


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[object]:
    """``mount(name, mib)``: a size-limited tmpfs under tmp_path, unmounted afterwards."""
    mounted: list[Path] = []

    def mount(name: str, mib: int) -> Path:
        point = tmp_path / name
        point.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a size-limited tmpfs needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs",
                               str(point)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def fill(disk: Path, leave_bytes: int) -> Path:
    """Fill ``disk`` until ``leave_bytes`` are free (about: tmpfs counts pages)."""
    st = os.statvfs(disk)
    size = max(0, st.f_bavail * st.f_frsize - leave_bytes)
    filler = disk / "filler"
    with open(filler, "wb") as f:
        if size:
            os.posix_fallocate(f.fileno(), 0, size)
    return filler


def spu_main(out: Path, store: Path, *overrides: str, task_root: Path | None = None,
             ) -> subprocess.CompletedProcess[str]:
    root = task_root or EXAMPLE_TASK.parent
    return run_module(["spu.main", "experiment=single", "model=random", f"task_root={root}",
                       f"task={TASK}", f"output_root={out}", f"tracking.uri=sqlite:///{store}",
                       f"sandbox={sandbox_name()}", *overrides], timeout=600)


def one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The single ``spu:`` line of a run that ended on a fault; no traceback anywhere."""
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("spu:")]
    assert len(lines) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def store_runs(store: Path) -> list[tuple[str, str, str]]:
    """(run key, outcome, status) of every MLflow run in a SQLite store, read with sqlite3."""
    db = sqlite3.connect(store)
    try:
        rows = db.execute(
            "select r.run_uuid, r.status, "
            "(select value from tags t where t.run_uuid = r.run_uuid and t.key = 'run_key'), "
            "(select value from tags t where t.run_uuid = r.run_uuid and t.key = 'outcome') "
            "from runs r").fetchall()
    finally:
        db.close()
    return [(key or "?", outcome or "-", status) for _, status, key, outcome in rows]


def staged_leftovers(out: Path) -> list[Path]:
    """Run folders without a run.json and staging folders (what a fault must not leave)."""
    runs = out / "runs"
    if not runs.is_dir():
        return []
    return [p for p in runs.iterdir() if p.name.startswith(".") or not (p / "run.json").exists()]


def finished(out: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in out.glob("runs/*/run.json")}


@pytest.mark.slow
def test_a_corrupted_store_is_one_line_and_moving_it_aside_recovers(tmp_path) -> None:
    out, store = tmp_path / "outputs", tmp_path / "mlflow.db"
    assert spu_main(out, store).returncode == 0
    before = finished(out)
    store.write_bytes(os.urandom(4096))  # a disk error, a bad copy, a truncated backup
    line = one_line(spu_main(out, store, "repeat=1"), str(store), "is corrupted",
                    f"mv {store} {store}.broken")
    assert line.startswith(f"spu: tracking store {store}")
    assert finished(out) == before and staged_leftovers(out) == []
    # What the line says to do works: the relaunch logs the finished run again.
    store.rename(store.with_name("mlflow.db.broken"))
    again = spu_main(out, store)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [(o, s) for _, o, s in store_runs(store)] == [("valid", "FINISHED")]
    assert finished(out) == before


@pytest.mark.slow
def test_a_store_locked_by_another_program_is_one_line(tmp_path) -> None:
    out, store = tmp_path / "outputs", tmp_path / "mlflow.db"
    assert spu_main(out, store).returncode == 0
    before = finished(out)
    holder = sqlite3.connect(store, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # e.g. a backup tool, or a stuck mlflow ui
    try:
        result = spu_main(out, store, "repeat=1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    one_line(result, str(store), "is locked by another process", "relaunch")
    assert finished(out) == before and staged_leftovers(out) == []
    assert all(status != "RUNNING" for _, _, status in store_runs(store))


@pytest.mark.slow
def test_a_full_store_is_one_line_and_the_finished_run_is_logged_next_time(
        tmp_path, small_disk) -> None:
    """The store's disk fills up while the run is recorded: ``run.json`` is kept, no
    record stays RUNNING, and the relaunch logs the run once without running it again."""
    disk = small_disk("store", 8)
    out, store = tmp_path / "outputs", disk / "mlflow.db"
    assert spu_main(out, store).returncode == 0
    filler = fill(disk, 0)
    result = spu_main(out, store, "repeat=1")
    one_line(result, str(store), "disk is full", "relaunch")
    records = finished(out)
    assert len(records) == 2  # the second run finished: its record is on disk
    assert staged_leftovers(out) == []
    filler.unlink()
    again = spu_main(out, store, "repeat=1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipped" in again.stdout
    runs = store_runs(store)
    complete = sorted(key for key, outcome, _ in runs if outcome != "-")
    assert complete == sorted(records) and all(s != "RUNNING" for _, _, s in runs), runs
    assert finished(out) == records  # not run again


@pytest.mark.slow
def test_a_full_disk_before_the_run_is_one_line_and_writes_nothing(tmp_path,
                                                                   small_disk) -> None:
    disk = small_disk("out", 4)
    fill(disk, 0)
    result = spu_main(disk / "outputs", tmp_path / "mlflow.db")
    one_line(result, "no space left on the device", "free space there")
    assert not (disk / "outputs" / "runs").exists()
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_a_disk_that_fills_while_staging_leaves_no_half_staged_folder(tmp_path,
                                                                      small_disk) -> None:
    """A task with a 24 MiB public file on a disk with about 20 MiB free: staging fails,
    nothing half-copied stays, the finished run beside it is intact."""
    disk = small_disk("out", 64)
    out, store = disk / "outputs", tmp_path / "mlflow.db"
    root = tmp_path / "tasks"
    shutil.copytree(EXAMPLE_TASK, root / TASK)
    assert spu_main(out, store, task_root=root).returncode == 0
    before = finished(out)
    (root / TASK / "files").mkdir(exist_ok=True)
    (root / TASK / "files" / "structure.bin").write_bytes(b"\1" * (24 << 20))
    fill(disk, 20 << 20)
    result = spu_main(out, store, "repeat=1", task_root=root)
    one_line(result, "no space left on the device", "relaunch")
    assert finished(out) == before
    assert staged_leftovers(out) == []
    assert [(o, s) for _, o, s in store_runs(store)] == [("valid", "FINISHED")]
    json.loads(next(iter(before.values())))  # still a whole record


def test_spu_processes_queue_on_a_sqlite_store_and_a_stuck_one_is_named(
        tmp_path, monkeypatch) -> None:
    """SPU's processes take turns at ``<db>.lock`` instead of failing on "database is
    locked"; a turn that never comes ends in one line naming the holder."""
    from spu.tracking import store as store_module
    from spu.tracking.store import TrackingStoreError, store_lock
    from tests.launchers.test_one_writer import hold_in_another_process

    db = tmp_path / "mlflow.db"
    holder = hold_in_another_process(tmp_path / "mlflow.db.lock")
    monkeypatch.setattr(store_module, "STORE_LOCK_TIMEOUT_S", 0.5)
    try:
        with pytest.raises(TrackingStoreError, match=rf"{db} has been busy .*process "
                                                      rf"{holder.pid} holds"):
            with store_lock(f"sqlite:///{db}"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with store_lock(f"sqlite:///{db}"):  # the holder is gone: the turn comes at once
        pass
