"""The paper's cost rule: every cache write at the five-minute price (E.6, Table 3).

``cost.cache_write_rate`` (``five_minute`` by default and in ``experiment=paper``,
``actual`` on request) prices the run; the record says which rule did and keeps the
other rule's figure; ``spu stats`` bills by the paper's rule whatever priced the run.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from spu.config import CostConfig
from spu.runner import run_one
from spu.stats.runs_table import check_runs_table
from spu.tracking.export import runs_table_from_records
from tests.tracking.conftest import session_spec

REQUESTS = [
    {"input": 10_000, "cache_read": 200_000, "cache_write": 40_000, "cache_write_1h": 30_000,
     "output": 3_000},
    {"input": 2_000, "cache_read": 240_000, "cache_write": 0, "output": 1_000},
]
"""Opus 5 (Table 7: 5.00 input, 0.50 cache read, 6.25 cache write, 10.00 one-hour, 25.00
output), per million tokens:
five-minute rule: 0.012 x 5 + 0.44 x 0.5 + 0.04 x 6.25 + 0.004 x 25
                = 0.06 + 0.22 + 0.25 + 0.1 = 0.63
actual rule: the 30,000 one-hour writes at 10.00 instead: 0.63 + 0.03 x (10 - 6.25) = 0.7425."""
FIVE_MINUTE_USD = 0.63
ACTUAL_USD = 0.7425


@pytest.mark.slow
def test_the_run_record_says_which_rule_priced_it_and_stats_use_the_papers(
        tmp_path, answers_root, compose) -> None:
    from spu.cost.catalogue import load_model_config

    base = session_spec(tmp_path, answers_root, cli_cost=ACTUAL_USD, page="<html></html>")
    harness = replace(base.harness, args=["--usage", json.dumps(REQUESTS), "--cli-cost",
                                          str(ACTUAL_USD)])
    spec = replace(base, model=load_model_config("opus5"), harness=harness)

    paper = run_one(spec)
    assert paper.cache_write_rate == "five_minute"
    assert paper.cost_usd == pytest.approx(FIVE_MINUTE_USD, abs=1e-9)
    assert paper.cost_by_cache_write_rate == pytest.approx(
        {"five_minute": FIVE_MINUTE_USD, "actual": ACTUAL_USD}, abs=1e-9)
    assert not paper.cost_disagreement  # the CLI reports what the provider bills

    actual = run_one(replace(spec, repeat=1, cost=CostConfig(cache_write_rate="actual")))
    assert actual.cache_write_rate == "actual"
    assert actual.cost_usd == pytest.approx(ACTUAL_USD, abs=1e-9)

    table = runs_table_from_records(tmp_path / "outputs" / "runs")
    by_repeat = table.set_index("repeat")
    assert list(by_repeat.loc[[0, 1], "cache_write_rate"]) == ["five_minute", "actual"]
    assert by_repeat.loc[1, "cost_usd"] == pytest.approx(ACTUAL_USD, abs=1e-9)
    checked = check_runs_table(table).set_index("repeat")
    assert list(checked.loc[[0, 1], "cost_usd"]) == pytest.approx([FIVE_MINUTE_USD] * 2,
                                                                    abs=1e-9)

    # The paper's experiment and the default both select the five-minute rule.
    assert compose("experiment=paper").cost.cache_write_rate == "five_minute"
    assert compose().cost.cache_write_rate == "five_minute"
