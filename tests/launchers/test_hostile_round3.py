"""Hostile inputs, round three (issue 30, item 3), under ``hydra/launcher=ray_local``.

An agent writes eight sparse 250 MiB files in ``/output`` (0 bytes of its disk). They grew
the Ray worker to 6 GB and the driver to 3.9 GB, and were written dense on the driver; the
agent node's bundle now carries their data only and the driver writes them with holes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launchers.conftest import run_sweep, sandbox_name
from tests.sandbox.conftest import AGENTS

pytestmark = pytest.mark.slow


def test_sparse_files_of_an_agent_node_stay_sparse_on_the_driver(task_root: Path,
                                                                 tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    done = run_sweep("hydra/launcher=ray_local", f"output_root={out}", f"task_root={task_root}",
                     "hydra.launcher.progress=lines", "model=random", "harness=command",
                     f"harness.entrypoint={AGENTS / 'hostile3.py'}", "harness.args=[sparse]",
                     "task=example-coupling-conditions", f"sandbox={sandbox_name()}",
                     "limits.cpus=1", "limits.gpus=0", "limits.memory_gb=1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (record_path,) = (out / "runs").glob("*/run.json")
    record = json.loads(record_path.read_text())
    assert record["outcome"] == "valid" and record["node"], record["outcome"]
    for k in range(8):
        info = (record_path.parent / "output" / f"sparse{k}.bin").stat()
        assert info.st_size == 250 << 20 and info.st_blocks * 512 < 1 << 20, info
