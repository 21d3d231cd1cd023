"""``harness=command``: any executable as the agent (bring your own agent, SPEC section 4)."""

from __future__ import annotations

import json

import pytest

from spu.main import spec_from_config
from spu.runner import RunConfigError, run_one
from spu.sandbox import get_sandbox
from spu.schema import Outcome
from tests.conftest import EXAMPLE_TASK

AGENT = """#!/usr/bin/env python3
import json, os, sys
out = os.environ["SPU_OUTPUT_DIR"]
task = os.environ["SPU_TASK_DIR"]
contract = json.load(open(os.path.join(task, "contract.json")))
json.dump({"argv": sys.argv, "env": {k: v for k, v in os.environ.items()
                                     if k.startswith(("SPU_", "MY_"))}},
          open(os.path.join(out, "seen.json"), "w"))
json.dump({"task_id": contract["task_id"], "task_version": contract["task_version"],
           "rankings": [{"group_id": g["group_id"], "order": g["items"][::-1]}
                        for g in contract["groups"]]},
          open(os.path.join(out, "rankings.json"), "w"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["local", "subprocess"])
def test_own_agent_is_copied_in_and_gets_the_spu_environment(sandbox, compose, tmp_path):
    ok, why = get_sandbox(sandbox).available()
    if not ok:
        pytest.skip(f"sandbox={sandbox} unavailable: {why}")
    agent = tmp_path / "my_agent.py"
    agent.write_text(AGENT)
    agent.chmod(0o644)  # not executable on the host: the copy in the sandbox is
    cfg = compose("harness=command", f"harness.entrypoint={agent}", "harness.args=[--fast,7]",
                  "+harness.env.MY_SETTING=on", f"sandbox={sandbox}",
                  f"sandbox.allow_unisolated={sandbox == 'subprocess'}",
                  f"task={EXAMPLE_TASK.name}", "limits.time_s=120", "limits.gpus=0")
    record = run_one(spec_from_config(cfg))
    assert record.outcome is Outcome.valid and record.scored
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    seen = json.loads((run_dir / "output" / "seen.json").read_text())
    workspace = "/workspace" if sandbox == "local" else str(run_dir / "workspace")
    assert seen["argv"] == [f"{workspace}/.agent/my_agent.py", "--fast", "7"]
    env = seen["env"]
    assert env["SPU_TASK_ID"] == EXAMPLE_TASK.name
    assert env["SPU_TIME_LIMIT_S"] == "120"
    assert env["SPU_TASK_DIR"] == ("/task" if sandbox == "local" else str(run_dir / "task"))
    assert env["SPU_OUTPUT_DIR"] == ("/output" if sandbox == "local" else str(run_dir / "output"))
    assert env["MY_SETTING"] == "on"
    assert agent.read_text() == AGENT and not agent.stat().st_mode & 0o111


def test_missing_entrypoint_is_a_config_error_naming_the_key(compose, tmp_path):
    cfg = compose("harness=command", f"task={EXAMPLE_TASK.name}")
    with pytest.raises(RunConfigError, match="harness.entrypoint"):
        run_one(spec_from_config(cfg))
    cfg = compose("harness=command", f"harness.entrypoint={tmp_path / 'nope'}",
                  f"task={EXAMPLE_TASK.name}")
    with pytest.raises(RunConfigError, match=r"harness.entrypoint .*nope.* is not a file"):
        run_one(spec_from_config(cfg))
    assert not (tmp_path / "outputs" / "runs").exists(), "nothing is written"
