"""Issue 14, item 3: one run key is one official record, whatever experiment ran it."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS, run_module
from tests.launchers.conftest import sandbox_name


@pytest.mark.slow
def test_a_single_run_after_the_default_sweep_logs_no_second_copy(tmp_path) -> None:
    """``make demo`` then ``experiment=single model=presented_order task=...``: before, the
    single run found the demo's run folder, missed its record (another experiment), logged
    a second copy with a false "left untracked" warning, and ``spu stats`` refused the
    export. Now the run is skipped, the store and the export hold each key once, and the
    statistics run on the default export."""
    root, out = tmp_path / "tasks", tmp_path / "outputs"
    for task in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        shutil.copytree(task, root / task.name)
    common = [f"task_root={root}", f"output_root={out}", f"sandbox={sandbox_name()}"]
    demo = run_module(["spu.main", *common], timeout=900)
    assert demo.returncode == 0, demo.stderr[-3000:]
    single = run_module(["spu.main", "experiment=single", "model=presented_order",
                         f"task={EXAMPLE_TASK.name}", *common], timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    assert "left untracked" not in single.stdout + single.stderr
    assert "skipped" in single.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    names = sorted(e.name for e in client.search_experiments())
    assert "spu-default" in names and "default" not in names  # never beside MLflow's Default
    exported = tmp_path / "runs.csv"
    done = run_module(["spu", "runs", "export", "--output-root", str(out), "--out",
                       str(exported)])
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(exported)
    assert len(table) == 6 and table["run_key"].is_unique
    stats = run_module(["spu", "stats", str(exported), "--out", str(tmp_path / "stats"),
                        "--resamples", "200"])
    assert stats.returncode == 0, stats.stderr[-3000:]
