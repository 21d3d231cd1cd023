"""``tracking=server``: a sweep tracked by ``mlflow server`` on PostgreSQL, artifacts proxied.

The PostgreSQL cluster is private to the test (:mod:`spu.testing.postgres`: ``initdb`` in
a temporary folder, 127.0.0.1, a free port, a password). The launcher starts the MLflow
server on it for the sweep, behind a token, and records every run from the driver with
several threads at once; what the database and the artifact store hold afterwards is
counted, not sampled.
"""

from __future__ import annotations

import json
import shutil

import pytest

from spu.schema import RunRecord
from spu.testing.postgres import PrivatePostgres
from spu.tracking.store import run_params
from tests.launchers.conftest import run_sweep, sandbox_name

pytestmark = pytest.mark.slow

RUNS = 64
TASKS = ("example-coupling-conditions", "example-electrolytes-and-films")


def stored(pg: PrivatePostgres, experiment: str) -> dict[str, list[tuple[str, str, int, int]]]:
    """Each run key's MLflow runs (uuid, status, metrics, params), read from the database."""
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=pg.port, user="spu", password=pg.password,
                         dbname="spu") as conn:
        rows = conn.execute(
            """SELECT t.value, r.run_uuid, r.status,
                      (SELECT count(*) FROM latest_metrics m WHERE m.run_uuid = r.run_uuid),
                      (SELECT count(*) FROM params p WHERE p.run_uuid = r.run_uuid)
               FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id
               JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'run_key'
               WHERE e.name = %s AND r.lifecycle_stage = 'active'""", (experiment,)).fetchall()
    out: dict[str, list[tuple[str, str, int, int]]] = {}
    for key, uuid, status, metrics, params in rows:
        out.setdefault(key, []).append((uuid, status, metrics, params))
    return out


def test_postgres_parallel_sweep_tracks_every_run_metric_and_artifact(postgres, task_root,
                                                                      tmp_path) -> None:
    """Invariant: 64 runs recorded by parallel writers: 64 runs, every metric, every file."""
    out = tmp_path / "outputs"
    artifacts = tmp_path / "artifacts"
    repeats = RUNS // len(TASKS)
    # As the README says: the password in PGPASSWORD, which psycopg reads, not in the URI.
    store = postgres.sqlalchemy_uri().replace(f":{postgres.password}@", "@")
    args = ["hydra/launcher=ray_local", f"output_root={out}", f"task_root={task_root}",
            "model=random", f"repeat=range(0,{repeats})", f"sandbox={sandbox_name()}",
            "tracking=server", f"tracking.server.backend_store_uri={store}",
            f"tracking.server.artifacts_destination={artifacts.as_uri()}",
            "hydra.launcher.settle_threads=8", "hydra.launcher.progress=lines",
            "experiment.name=pg"]
    done = run_sweep(*args, timeout=1500, env={"PGPASSWORD": postgres.password})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"done {RUNS}/{RUNS}" in done.stdout
    # The password never shows in what the sweep prints.
    assert postgres.password not in done.stdout + done.stderr

    records = {p.parent.name: json.loads(p.read_text())
               for p in (out / "runs").glob("*/run.json")}
    assert len(records) == RUNS
    held = stored(postgres, "pg")
    assert set(held) == set(records)
    uuids = set()
    for key, runs in held.items():
        record = records[key]
        # One MLflow run per attempt: an attempt that ended infra_error (a sandbox that
        # did not start, say) is FAILED and kept, its retry FINISHED (paper 3.1).
        statuses = sorted(status for _, status, _, _ in runs)
        assert statuses == ["FAILED"] * (record["attempt"] - 1) + ["FINISHED"], (key, runs)
        ((uuid, _, metrics, params),) = [r for r in runs if r[1] == "FINISHED"]
        uuids.add(uuid)
        groups = len(record["grade"]["groups"])
        # score, score_strict, score_recovered, 5 token counts, long_context_requests,
        # runtime_s, tool_calls, web_fetches, chance_threshold, n_items, cost_usd,
        # cost_full_input_usd, peak_memory_bytes (where measured), one rho per group.
        assert metrics >= 17 + groups, (key, runs)
        assert params == len(run_params(RunRecord.model_validate(record))), (key, runs)
    # Every finished run's artifacts went through the server's proxy into the destination.
    for name in ("run.json", "grade.json", "output/rankings.json"):
        holders = [p.relative_to(artifacts).parts[1]
                   for p in artifacts.glob(f"pg/*/artifacts/{name}")]
        assert set(holders) >= uuids, name

    # Resume from the tracking server alone: the run folders gone, nothing runs again.
    shutil.rmtree(out / "runs")
    again = run_sweep(*args, timeout=900, env={"PGPASSWORD": postgres.password})
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"none to launch on Ray ({RUNS} skipped" in again.stdout
    assert len(stored(postgres, "pg")) == RUNS
