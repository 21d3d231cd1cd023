"""Contamination probes (``harness=recall``) enter no table of the official statistics."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from spu.stats.analysis import StatsOptions, analyze
from spu.stats.runs_table import read_runs_table
from tests.stats.conftest import run_row


def _table() -> pd.DataFrame:
    rows = []
    for i, task in enumerate(("t1", "t2", "t3")):
        rows.append(run_row("opus5-max", task, 0.1 * (i + 1), harness="claude_code",
                            model="opus5"))
        # A probe of the same model that "remembers" the measured order: a score of 1.0.
        rows.append({**run_row("opus5-none-recall", task, 1.0, harness="recall",
                               model="opus5"), "run_id": f"probe-{task}"})
    return pd.DataFrame(rows)


def test_probes_are_left_out_of_every_table_and_said_so(tmp_path: Path) -> None:
    _table().to_csv(tmp_path / "runs.csv", index=False)
    result = analyze(read_runs_table(tmp_path / "runs.csv"), StatsOptions(seed=0, resamples=200))
    configs = result.tables["configs.csv"]
    assert list(configs["config"]) == ["opus5-max"]
    # The official configuration's mean is its own runs' (0.1, 0.2, 0.3): the probes' 1.0
    # changes nothing.
    assert abs(configs["raw_mean"].iloc[0] - 0.2) < 1e-12
    assert "3 contamination probe run(s) (harness=recall) are left out of every table" in \
        " ".join(result.notes)
    assert set(result.runs["harness"]) == {"claude_code"}
