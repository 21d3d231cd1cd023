"""An agent run refuses to start unisolated unless the command allows it (issue 23).

Through the real command line: ``sandbox=subprocess harness=command`` is refused in one line
(exit 2) before anything runs; with ``sandbox.allow_unisolated=true`` it runs and its
``run.json`` says so. A baseline (no agent) runs in the subprocess sandbox as before.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, REPO, run_module

pytestmark = pytest.mark.slow

MY_AGENT = REPO / "docs" / "examples" / "my_agent.py"


def spu_run(root: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python -m spu.main`` on the example task, one run, in the subprocess sandbox."""
    return run_module(["spu.main", "experiment=single", f"task={EXAMPLE_TASK.name}",
                       f"task_root={root / 'tasks'}", f"output_root={root / 'outputs'}",
                       "tracking=none", "sandbox=subprocess", f"hydra.run.dir={root / 'hydra'}",
                       *overrides], cwd=root)


def test_an_agent_run_refuses_the_subprocess_sandbox_unless_allowed(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE_TASK, tmp_path / "tasks" / EXAMPLE_TASK.name)
    agent = ["harness=command", f"harness.entrypoint={MY_AGENT}"]
    refused = spu_run(tmp_path, *agent)
    assert refused.returncode == 2, (refused.stdout[-2000:], refused.stderr[-2000:])
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "sandbox.allow_unisolated" in lines[0] and "sandbox=subprocess" in lines[0]
    assert not (tmp_path / "outputs" / "runs").exists()  # nothing ran, nothing written

    allowed = spu_run(tmp_path, *agent, "sandbox.allow_unisolated=true")
    assert allowed.returncode == 0, (allowed.stdout[-2000:], allowed.stderr[-2000:])
    found = sorted((tmp_path / "outputs" / "runs").glob("**/run.json"))
    assert len(found) == 1, found
    saved = json.loads(found[0].read_text())
    assert saved["outcome"] == "valid"
    assert saved["sandbox"]["backend"] == "subprocess"
    assert saved["sandbox"]["unisolated_allowed"] is True
    assert any(w.startswith("UNISOLATED RUN") for w in saved["sandbox"]["warnings"])
    assert any(n.startswith("UNISOLATED RUN") for n in saved["notes"])

    baseline = spu_run(tmp_path, "model=random", "harness=baseline", "repeat=1")
    assert baseline.returncode == 0, baseline.stderr[-2000:]
