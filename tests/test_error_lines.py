"""Errors a newcomer met, one line each (issue 24): through the real command line.

Each was several lines (a Hydra message, 94 lines of FAILED, 48 notes) or said nothing
about the fix.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, REPO, run_module


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def baseline_runs(tmp_path_factory) -> Path:
    """Two finished baseline runs (no tool calls) on one task."""
    out = tmp_path_factory.mktemp("runs") / "outputs"
    root = out.parent / "tasks"
    shutil.copytree(EXAMPLE_TASK, root / EXAMPLE_TASK.name)
    proc = run_module(["spu.main", "-m", "model=random,presented_order",
                       f"task={EXAMPLE_TASK.name}", f"task_root={root}", f"output_root={out}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_regrade_with_a_missing_answers_root_is_one_line(baseline_runs, tmp_path) -> None:
    """It was a FAILED line per run and exit 1; now one line, exit 2, no run touched."""
    missing = tmp_path / "keys"
    before = {p: p.read_bytes() for p in baseline_runs.glob("runs/*/run.json")}
    line = _one_line(run_module(["spu", "regrade", str(baseline_runs), "--task-root",
                                 str(baseline_runs.parent / "tasks"), "--answers-root",
                                 str(missing)]))
    assert line == f"spu regrade: --answers-root {missing}: does not exist; no run was regraded"
    assert {p: p.read_bytes() for p in baseline_runs.glob("runs/*/run.json")} == before


def test_analyze_on_runs_without_tool_calls_says_what_it_needs(baseline_runs,
                                                               tmp_path) -> None:
    """It was a note per figure and table; now one line naming an agent harness."""
    line = _one_line(run_module(["spu", "analyze", str(baseline_runs), "--out",
                                 str(tmp_path / "analysis")]))
    assert line.startswith("spu analyze: none of the 2 runs under ")
    assert "agent harness (harness=claude_code or harness=codex" in line
    assert not (tmp_path / "analysis").exists()


@pytest.mark.parametrize(("override", "expected"), [
    ("harness.args=--fast", "harness.args=--fast: harness.args takes a list; write "
                            "harness.args=[--fast]"),
    ("limits.time_s=abc", "limits.time_s=abc: limits.time_s takes a number (float), "
                          "not 'abc'"),
    ("limits.cpus=2.5", "limits.cpus=2.5: limits.cpus takes a whole number (int), not '2.5'"),
    ("tracking.enabled=maybe", "tracking.enabled=maybe: tracking.enabled takes true or false "
                               "(bool), not 'maybe'"),
])
def test_a_value_of_the_wrong_type_names_the_key_and_the_type(override, expected,
                                                              tmp_path) -> None:
    """Hydra said "could not be converted to Float" and "str is not a ListConfig"."""
    line = _one_line(run_module(["spu.main", "harness=command",
                                 f"harness.entrypoint={REPO / 'docs/examples/my_agent.py'}",
                                 override, f"task={EXAMPLE_TASK.name}",
                                 f"output_root={tmp_path / 'out'}"]))
    assert line == f"spu: {expected}"
