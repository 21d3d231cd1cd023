"""The scripted model is free (issue 40, item 7): a local server that no provider bills.

Before, ``conf/model/scripted.yaml`` carried nominal prices and every scripted run cost
about $0.01; billing itself is tested at nominal prices given on the command line
(``model.prices.*``, tests/gateway).
"""

from __future__ import annotations

import json

from tests.conftest import EXAMPLE_TASK, run_module


def test_the_scripted_model_costs_nothing() -> None:
    proc = run_module(["spu", "cost", "estimate", "--model", "scripted", "--input", "100000",
                       "--cache-read", "100000", "--cache-write", "100000", "--output",
                       "100000", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cost_usd"] == 0
    plan = run_module(["spu.main", "model=scripted", "harness=claude_code",
                       f"task={EXAMPLE_TASK.name}", "dry_run=true"], env={"COLUMNS": "200"})
    assert plan.returncode == 0, plan.stderr
    assert "expected cost $0.00;" in plan.stdout and "$0.01" not in plan.stdout
