"""The default job: three baselines on every task, tracked in MLflow, with a results table."""

from __future__ import annotations

import pytest

from tests.conftest import run_module


@pytest.mark.slow
def test_default_job_runs_baselines_and_tracks_them(tmp_path, repo_root) -> None:
    out_root = tmp_path / "outputs"
    out = run_module(["spu.main", f"output_root={out_root}"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SPU sweep" in out.stdout and "outcome" in out.stdout
    from spu.tasks import discover_tasks

    n_tasks = len(discover_tasks(repo_root / "tasks"))
    runs = sorted((out_root / "runs").iterdir())
    assert len(runs) == 3 * n_tasks  # 3 baselines x every task

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out_root / 'mlflow.db'}")
    exp = client.get_experiment_by_name("spu-default")
    assert exp is not None
    found = client.search_runs([exp.experiment_id])
    assert len(found) == 3 * n_tasks
    for run in found:
        assert "score" in run.data.metrics
        assert run.data.tags["outcome"] == "valid"
        assert {"model", "harness", "effort", "task", "repeat"} <= set(run.data.params)
    models = {r.data.params["model"] for r in found}
    assert models == {"random", "presented_order", "monotone_prior"}
    artifacts = {a.path for a in client.list_artifacts(found[0].info.run_id)}
    assert {"run.json", "grade.json", "output"} <= artifacts
