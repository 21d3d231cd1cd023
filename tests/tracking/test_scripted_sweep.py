"""Export of a sweep of the real agent CLIs against the scripted model server."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from spu.cli import main
from spu.cost import costs_disagree
from spu.harness.npm_tools import installed, tools_dir
from spu.schema import Usage
from spu.tracking.export import SPEC_COLUMNS, load_record
from spu.tracking.trajectories import TRAJECTORY_FILE, iter_steps
from tests.conftest import REPO, run_module
from tests.tracking.conftest import sandbox_name

HARNESSES = ("claude_code", "codex")


def _cli_missing() -> str | None:
    """Why the agent CLIs (an external npm install) cannot run here, or None."""
    for harness in HARNESSES:
        cfg = yaml.safe_load((REPO / "conf" / "harness" / f"{harness}.yaml").read_text())
        if installed(cfg["cli_package"], str(cfg["version"]), tools_dir()) is None:
            return (f"{cfg['cli_package']}@{cfg['version']} is not installed in "
                    f"{tools_dir()} (python -m spu.harness.npm_tools conf/harness/{harness}.yaml)")
    return None


def _server_usage(run_dir: Path) -> Usage:
    """What the scripted server reported, summed over its responses."""
    total = Usage()
    for line in (run_dir / "logs" / "scripted_server.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("usage"):
            total = total + Usage(**event["usage"])
    return total


@pytest.mark.slow
@pytest.mark.cli
def test_scripted_sweep_exports_the_trajectories_and_the_servers_usage(tmp_path) -> None:
    missing = _cli_missing()
    if missing:
        pytest.skip(missing)
    out_root = tmp_path / "outputs"
    sweep = run_module(["spu.main", "-m", f"harness={','.join(HARNESSES)}", "model=scripted",
                        "task=example-coupling-conditions", f"output_root={out_root}",
                        f"sandbox={sandbox_name()}",
                        # the scripted model is free; nominal prices (USD per million)
                        "model.prices.input=1.0", "model.prices.cache_read=0.1",
                        "model.prices.cache_write_5m=1.25", "model.prices.cache_write_1h=2.0",
                        "model.prices.output=5.0"], timeout=600)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    out = tmp_path / "runs.parquet"
    assert main(["runs", "export", "--output-root", str(out_root), "--out", str(out)]) == 0
    df = pd.read_parquet(out)
    assert tuple(df.columns[:len(SPEC_COLUMNS)]) == SPEC_COLUMNS
    assert sorted(df["harness"]) == sorted(HARNESSES)
    for row in df.to_dict("records"):
        run_dir = out_root / "runs" / row["run_key"]
        record = load_record(run_dir / "run.json")
        assert row["outcome"] == "valid" and row["scored"]
        steps = Usage()
        for step in iter_steps(run_dir / TRAJECTORY_FILE):
            steps = steps + (step.usage or Usage())
        server = _server_usage(run_dir)
        tokens = (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"],
                  row["output_tokens"])
        assert tokens == (steps.input, steps.cache_read, steps.cache_write, steps.output)
        assert tokens == (server.input, server.cache_read, server.cache_write, server.output)
        assert tokens == (record.usage.input, record.usage.cache_read,
                          record.usage.cache_write, record.usage.output)
        assert all(t > 0 for t in tokens)
        # the nominal prices above, USD per million: input 1.0, cache read 0.1, cache
        # write 1.25 (5-minute) or 2.0 (1-hour), output 5.0. The default rule is the
        # paper's (E.6): every cache write at the five-minute price; the actual one bills
        # the one-hour writes at the one-hour price.
        u = record.usage
        five_minute = (u.input * 1.0 + u.cache_read * 0.1 + u.cache_write * 1.25
                       + u.output * 5.0) / 1e6
        actual = (u.input * 1.0 + u.cache_read * 0.1 + (u.cache_write - u.cache_write_1h)
                  * 1.25 + u.cache_write_1h * 2.0 + u.output * 5.0) / 1e6
        assert row["cost_usd"] == pytest.approx(five_minute, rel=1e-12)
        assert row["cost_five_minute_usd"] == pytest.approx(five_minute, rel=1e-12)
        assert row["cost_actual_usd"] == pytest.approx(actual, rel=1e-12)
        if not pd.isna(row["cli_cost_usd"]):
            assert row["cost_disagreement"] == costs_disagree(row["cost_usd"],
                                                              row["cli_cost_usd"])
        assert row["cli_version"] == record.cli_version is not None
