"""Round five: an agent that wrote its file tries to pass as a sandbox that did not start.

The start is bubblewrap's handshake (``--json-status-fd``) or the engine's state, and the
``/bin/sh`` start check's report carries a per-exec nonce the agent never sees
(spu/sandbox/local.py ``start_check_argv``). Whole runs through ``run_one`` with the real
``conf/`` on both isolating backends: each attack must leave a valid, scored run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from spu.main import spec_from_config
from spu.runner import run_one
from spu.schema import Outcome
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import require_backend

BACKENDS = [pytest.param("local", marks=pytest.mark.slow),  # a real sandbox
            pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow])]
AGENT = Path(__file__).parent / "agents" / "starter.py"


def _run(compose, backend: str, mode: str):
    spec = spec_from_config(compose(
        "harness=command", f"harness.entrypoint={AGENT}", f"sandbox={backend}",
        f"task={EXAMPLE_TASK.name}", "limits.cpus=1", "limits.gpus=0",
        "limits.memory_gb=1", "limits.time_s=120"))
    spec = dataclasses.replace(spec, harness=dataclasses.replace(spec.harness, args=[mode]))
    record = run_one(spec)
    return record, spec.output_root / "runs" / record.run_key


@pytest.mark.parametrize("mode", ["nonce", "fds", "kill1", "exit125", "exit126", "exit127", "deep"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_with_a_file_cannot_pass_as_a_sandbox_that_did_not_start(
        request: pytest.FixtureRequest, compose, backend: str, mode: str) -> None:
    require_backend(request, backend)
    record, run_dir = _run(compose, backend, mode)
    notes = json.loads((run_dir / "output" / "notes.json").read_text())
    assert notes["mode"] == mode  # the agent ran
    assert not notes.get("found"), notes  # it never saw a start check's nonce
    assert record.outcome is Outcome.valid and record.scored, (record.outcome, record.notes)
