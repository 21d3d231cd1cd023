"""Fixtures for sweep tests: a private task root, test agents, MLflow records by run key."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS, REPO, have_bwrap
from tests.launchers.agents import (
    BROKEN_AGENT,
    DIES_ONCE_AGENT,
    PRESENTED_ORDER_AGENT,
    SLOW_AGENT,
)


@dataclass(frozen=True)
class Agents:
    """Paths of the test agents."""

    presented_order: Path
    slow: Path
    dies_once: Path
    broken: Path
    marker_dir: Path


@pytest.fixture
def agents(tmp_path: Path) -> Agents:
    folder = tmp_path / "agents"
    folder.mkdir()
    paths = {}
    for name, text in (("presented_order", PRESENTED_ORDER_AGENT), ("slow", SLOW_AGENT),
                       ("dies_once", DIES_ONCE_AGENT), ("broken", BROKEN_AGENT)):
        path = folder / f"{name}_agent"
        path.write_text(text)
        path.chmod(0o755)
        paths[name] = path
    marker = tmp_path / "markers"
    marker.mkdir()
    return Agents(marker_dir=marker, **paths)


@pytest.fixture
def task_root(tmp_path: Path) -> Path:
    """A private task root holding the two example tasks (the real task set keeps growing)."""
    root = tmp_path / "tasks"
    for src in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        shutil.copytree(src, root / src.name)
    return root


def sandbox_name() -> str:
    """Bubblewrap where installed (the default backend), else the subprocess fallback."""
    return "local" if have_bwrap() else "subprocess"


@dataclass(frozen=True)
class Tracked:
    """One complete MLflow record (a run with its ``outcome`` tag)."""

    run_id: str
    run_key: str
    attempt: int
    outcome: str
    retried_from: str | None
    status: str
    repeat: int


def tracked_runs(out_root: Path, experiment: str = "spu-default") -> list[Tracked]:
    """Every complete record of an experiment in ``<out_root>/mlflow.db``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out_root / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return [Tracked(run_id=r.info.run_id, run_key=r.data.tags["run_key"],
                    attempt=int(r.data.tags["attempt"]), outcome=r.data.tags["outcome"],
                    retried_from=r.data.tags.get("retried_from"), status=r.info.status,
                    repeat=int(r.data.params["repeat"]))
            for r in client.search_runs([exp.experiment_id], max_results=10_000)
            if "outcome" in r.data.tags]


def sweep_command(*overrides: str) -> list[str]:
    """``python -m spu.main`` with overrides."""
    return [sys.executable, "-m", "spu.main", *overrides]


def run_sweep(*overrides: str, timeout: float = 600,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a sweep to its end from the repository root (``env`` added to this one's)."""
    return subprocess.run(sweep_command(*overrides), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})


@dataclass
class Background:
    """A sweep running in its own session, killable as a whole."""

    proc: subprocess.Popen[str]
    log: Path

    def kill(self) -> None:
        """SIGKILL the driver's whole process group (driver, Ray's GCS and raylet)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)


@pytest.fixture
def background(tmp_path: Path) -> Iterator[list[Background]]:
    """Start sweeps in the background; whatever is left is killed at the end."""
    started: list[Background] = []
    yield started
    for bg in started:
        if bg.proc.poll() is None:
            bg.kill()


def start_sweep(started: list[Background], log: Path, *overrides: str) -> Background:
    """Start a sweep in a new session, its output going to ``log``."""
    with open(log, "w") as out:
        proc = subprocess.Popen(sweep_command(*overrides), cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    bg = Background(proc, log)
    started.append(bg)
    return bg


def wait_for(predicate: object, timeout: float, what: str) -> None:
    """Poll ``predicate()`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def processes_mentioning(text: str) -> list[int]:
    """Process ids whose command line or environment contains ``text``.

    The environment counts: the sweep's tracking server gets its store there, not on
    its command line.
    """
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "environ", "status"]):
        info = proc.info  # None where a process was gone or unreadable
        if proc.pid == os.getpid() or info["status"] in (None, psutil.STATUS_ZOMBIE):
            continue
        environ = info["environ"] or {}
        seen = " ".join(info["cmdline"] or []) + "\0".join(f"{k}={v}" for k, v in
                                                           environ.items())
        if text in seen:
            found.append(proc.pid)
    return found


@pytest.fixture
def keyed_tasks(tmp_path: Path) -> tuple[Path, Path, str]:
    """The two example tasks with their keys in a separate answers root, marked by a canary."""
    canary = f"spu-canary-{secrets.token_hex(8)}"
    root, keys = tmp_path / "tasks", tmp_path / "keys"
    for src in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        shutil.copytree(src, root / src.name, ignore=shutil.ignore_patterns("hidden"))
        answers = json.loads((src / "hidden" / "answers.json").read_text())
        answers["source"] = {"title": f"{canary} {answers['task_id']}"}
        (keys / answers["task_id"]).mkdir(parents=True)
        (keys / answers["task_id"] / "answers.json").write_text(json.dumps(answers))
    return root, keys, canary
