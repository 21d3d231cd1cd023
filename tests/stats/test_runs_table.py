"""Reading and checking the runs table: errors name the file, the column and the line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from spu.stats.runs_table import REQUIRED_COLUMNS, RunsTableError, read_runs_table
from tests.stats.conftest import run_row


def _write(tmp_path: Path, rows: list[dict[str, object]], name: str = "runs.csv") -> Path:
    path = tmp_path / name
    frame = pd.DataFrame(rows)
    if name.endswith(".parquet"):
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
    return path


def test_csv_and_parquet_read_the_same(tmp_path, paper_runs) -> None:
    csv = read_runs_table(_write(tmp_path, paper_runs.to_dict("records")))
    parquet = read_runs_table(_write(tmp_path, paper_runs.to_dict("records"), "runs.parquet"))
    columns = list(REQUIRED_COLUMNS)
    pd.testing.assert_frame_equal(csv[columns], parquet[columns], check_dtype=False)
    assert csv["scored"].dtype == bool and csv["repeat"].dtype.kind == "i"
    assert len(csv) == 1653


def test_missing_column_is_named(tmp_path) -> None:
    rows = [run_row("A", "t1", 0.5)]
    for r in rows:
        del r["threshold"]
    path = _write(tmp_path, rows)
    with pytest.raises(RunsTableError, match=r"runs\.csv: missing column\(s\) 'threshold'"):
        read_runs_table(path)


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("scored", "maybe", r"column 'scored', line 3 \(run_id A-t2-0\): 'maybe' is not true"),
        ("outcome", "exploded", r"column 'outcome', line 3 .*'exploded' is not one of"),
        ("visibility", "secret", r"column 'visibility', line 3 .*not one of private, public"),
        ("repeat", "1.5", r"column 'repeat', line 3 .*not a whole number"),
        ("score_recovered", "1.7", r"column 'score_recovered', line 3 .*outside \[-1, 1\]"),
        ("threshold", "high", r"column 'threshold', line 3 .*'high' is not a number"),
        ("config", "", r"column 'config', line 3 .*empty"),
    ],
)
def test_bad_value_names_file_column_and_line(tmp_path, column, value, message) -> None:
    rows = [run_row("A", "t1", 0.5), run_row("A", "t2", 0.3)]
    rows[1][column] = value
    with pytest.raises(RunsTableError, match=message):
        read_runs_table(_write(tmp_path, rows))


def test_scored_run_needs_a_score(tmp_path) -> None:
    rows = [run_row("A", "t1", 0.5)]
    rows[0]["score_recovered"] = ""
    with pytest.raises(RunsTableError, match="a scored run needs a score"):
        read_runs_table(_write(tmp_path, rows))


def test_duplicate_run_names_both_lines(tmp_path) -> None:
    rows = [run_row("A", "t1", 0.5), run_row("B", "t1", 0.2), run_row("A", "t1", 0.4)]
    rows[2]["run_id"] = "again"
    with pytest.raises(RunsTableError, match=r"line 2 .* and line 4 \(run_id again\) are both "
                                             r"config 'A', task 't1', repeat 0"):
        read_runs_table(_write(tmp_path, rows))


def test_superseded_attempts_are_dropped(tmp_path) -> None:
    """``spu runs export --all-attempts`` marks earlier attempts official=false."""
    rows = [run_row("A", "t1", 0.5, official="true"),
            run_row("A", "t1", -1.0, outcome="infra_error", official="false")]
    rows[1]["scored"] = False
    table = read_runs_table(_write(tmp_path, rows))
    assert len(table) == 1 and table["score_recovered"].iloc[0] == 0.5


def test_missing_file(tmp_path) -> None:
    with pytest.raises(RunsTableError, match="runs table does not exist"):
        read_runs_table(tmp_path / "nope.csv")
