"""Hostile inputs, round three (issue 30, item 3): a planted session file of a gigabyte.

The agent writes its CLI's session files; the framework reads them on the host after the
run. 400 MB of tool results (40 of 10 MB) must not cost the host their size: the reading
is capped in total bytes (``MAX_TOTAL_BYTES``) with a warning that says so, and each tool
result kept is cut at ``MAX_TOOL_OUTPUT_CHARS``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spu.harness.trajectory.jsonl import MAX_TOOL_OUTPUT_CHARS, MAX_TOTAL_BYTES
from tests.conftest import REPO

pytestmark = pytest.mark.slow

READ = """
import json, resource, sys
from pathlib import Path
from spu.harness.trajectory.claude_code import read_claude_code_sessions
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
reading = read_claude_code_sessions(Path(sys.argv[1]))
outputs = [len(c.output or "") for s in reading.trajectory.steps for c in s.tool_calls]
print(json.dumps({"grown": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before,
                  "warnings": reading.warnings, "outputs": outputs}))
"""


def test_a_planted_gigabyte_of_session_is_read_within_the_total_cap(tmp_path: Path) -> None:
    projects = tmp_path / "projects" / "-workspace"
    projects.mkdir(parents=True)
    result = "x" * (10 << 20)
    with open(projects / "planted.jsonl", "w", encoding="utf-8") as f:
        for k in range(40):
            f.write(json.dumps({"type": "assistant", "timestamp": f"2026-01-01T00:00:{k:02d}Z",
                                "message": {"id": f"m{k}", "role": "assistant", "content": [
                                    {"type": "tool_use", "id": f"t{k}", "name": "Bash",
                                     "input": {"command": "cat big"}}]}}) + "\n")
            f.write(json.dumps({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{k}", "content": result}]}}) + "\n")
    probe = subprocess.run([sys.executable, "-c", READ, str(tmp_path / "projects")],
                           capture_output=True, text=True, timeout=600, check=False, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    # Held at once: a line or two of 10 MB while parsing, plus the tool results kept, cut.
    kept = len(found["outputs"]) * MAX_TOOL_OUTPUT_CHARS
    assert found["grown"] < kept + 8 * len(result) + (64 << 20), found["grown"]
    assert max(found["outputs"]) <= MAX_TOOL_OUTPUT_CHARS + 64
    assert len(found["outputs"]) <= MAX_TOTAL_BYTES // len(result) + 1 < 40
    assert any(f"total of {MAX_TOTAL_BYTES} bytes was read" in w for w in found["warnings"])
