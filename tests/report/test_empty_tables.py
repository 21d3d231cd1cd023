"""An empty runs table is said in one line and exits 1, writing nothing (issue 40, item 4).

``spu runs export`` of an output root with no finished run writes a table of headers
only; ``spu stats``, ``spu report`` and ``spu leaderboard`` on it rendered empty pages and
exited 0, which read as a result.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spu.stats.simulate import simulate_runs
from tests.conftest import run_module


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("empty")
    runs = simulate_runs(seed=1)
    paths = {"empty": folder / "empty.csv", "repeats": folder / "repeats.csv"}
    runs.iloc[:0].to_csv(paths["empty"], index=False)
    runs[runs["repeat"] >= 1].to_csv(paths["repeats"], index=False)
    return paths


@pytest.mark.parametrize("command", ["stats", "report", "leaderboard"])
@pytest.mark.parametrize(("table", "words"), [
    ("empty", "the table has no rows"),
    ("repeats", "no official run (repeat 0)"),
])
def test_an_empty_table_is_one_line_and_exit_1(tables, tmp_path, command, table, words) -> None:
    out = tmp_path / "out"
    done = run_module(["spu", command, str(tables[table]), "--out", str(out),
                       "--resamples", "20"], timeout=600)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"spu {command}: {tables[table]}: ")
    assert words in lines[0] and "spu runs export" in lines[0]
    assert not out.exists()
