"""MLflow shows a run as a user reads it (issue 24): the agent's times, a name that survives
truncation, the identity as params, and the experiment's address when a UI is up.

Runs go through the real command line into MLflow on SQLite; MLflow's own client reads
them back.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, run_module


@pytest.fixture
def one_task_root(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    shutil.copytree(EXAMPLE_TASK, root / EXAMPLE_TASK.name)
    return root


def _only_run(uri: str):  # noqa: ANN202 - an mlflow Run
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "spu-default"]
    (run,) = client.search_runs([experiment.experiment_id])
    return experiment, run


@pytest.mark.slow  # a real sandbox (sandbox=local)
def test_the_mlflow_run_has_the_agents_times_a_readable_name_and_identity_params(
        one_task_root, tmp_path) -> None:
    """Start and end are the agent's (Duration is its runtime, not the 40-150 ms of
    logging); the name reads config · task · repeat; the identity is in params."""
    out = tmp_path / "out"
    proc = run_module(["spu.main", "model=presented_order", f"task={EXAMPLE_TASK.name}",
                       "repeat=2", f"task_root={one_task_root}", f"output_root={out}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    _, run = _only_run(f"sqlite:///{out / 'mlflow.db'}")
    started = int(datetime.fromisoformat(record["started_at"]).timestamp() * 1000)
    assert run.info.start_time == started
    assert run.info.end_time - run.info.start_time == round(record["runtime_s"] * 1000)
    assert run.info.run_name == f"presented_order-none · {EXAMPLE_TASK.name} · r2"
    params = run.data.params
    identity = record["identity"]
    assert params["identity.task_digest"] == identity["task"]["task_digest"]
    assert params["identity.key_scheme"] == identity["key_scheme"]
    assert params["run_key"] == record["run_key"]


@pytest.mark.slow
def test_a_sweep_prints_its_experiments_address_when_a_ui_is_up(one_task_root,
                                                                 tmp_path) -> None:
    """Tracked through a server (its own UI), the sweep ends with the experiment's page;
    on SQLite with ``tracking.ui_url`` at a UI on the same store, the same; with no UI
    up, the command that starts one (``spu ui``)."""
    from spu.launch.server import TrackingServer, free_port

    out = tmp_path / "out"
    backend = f"sqlite:///{out / 'mlflow.db'}"
    base = ["spu.main", "model=random", f"task={EXAMPLE_TASK.name}",
            f"task_root={one_task_root}", f"output_root={out}"]
    with TrackingServer(backend, (out / "mlartifacts").as_uri(), tmp_path / "server.log",
                        token=None) as server:
        proc = run_module([*base, f"tracking.uri={server.uri}"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        experiment, _ = _only_run(backend)
        page = f"{server.uri}/#/experiments/{experiment.experiment_id}"
        assert f"compare in MLflow: {page}" in proc.stdout
        again = run_module([*base, f"tracking.ui_url={server.uri}/"])
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"compare in MLflow: {page}" in again.stdout
    down = run_module([*base, f"tracking.ui_url=http://127.0.0.1:{free_port()}"])
    assert down.returncode == 0, down.stderr[-3000:]
    assert f"compare in MLflow: spu ui {out}" in down.stdout
