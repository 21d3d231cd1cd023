"""``analyze`` on tables that lack parts: every file keeps its columns, skips are noted."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from spu.report.build import build_report
from spu.stats.analysis import StatsOptions, analyze, write_stats
from spu.stats.means import CONFIG_COLUMNS
from spu.stats.runs_table import check_runs_table

OPTIONS = StatsOptions(resamples=50, simulations=50)


def test_private_only_table(paper_runs, tmp_path) -> None:
    result = analyze(check_runs_table(paper_runs[paper_runs["visibility"] == "private"]), OPTIONS)
    write_stats(result, tmp_path / "stats")
    build_report(result, tmp_path / "report")
    configs = pd.read_csv(tmp_path / "stats" / "configs.csv")
    assert configs.empty and set(CONFIG_COLUMNS) <= set(configs.columns)
    assert len(pd.read_csv(tmp_path / "stats" / "private.csv")) == 13
    assert any("no repeated runs" in n for n in result.notes)
    assert (tmp_path / "report" / "report.html").is_file()


def test_one_configuration(paper_runs) -> None:
    result = analyze(check_runs_table(paper_runs[paper_runs["config"] == "Astra Max"]), OPTIONS)
    assert result.tables["pairs.csv"].empty and "repeats.csv" in result.tables
    assert any("fewer than two configurations" in n for n in result.notes)
    assert result.tables["configs.csv"]["adjusted_mean"].iloc[0] == pytest.approx(
        result.tables["configs.csv"]["raw_mean"].iloc[0])


def test_run_sd_and_top_group_options(paper_runs) -> None:
    public = paper_runs[paper_runs["repeat"] == 0]  # no repeats: no run-to-run SD of its own
    assert "rank_stability.csv" not in analyze(check_runs_table(public), OPTIONS).tables
    result = analyze(check_runs_table(public), StatsOptions(
        resamples=50, simulations=50, run_sd=0.15, top_group_size=3))
    assert result.rank_stability is not None and result.rank_stability.top_group_size == 3
    assert result.rank_stability.run_sd == 0.15


@pytest.mark.parametrize("module", ["spu.stats.analysis", "spu.report.build", "spu.stats.cli",
                                    "spu.report.cli"])
def test_import_does_not_load_heavy_dependencies(module) -> None:
    code = (f"import sys, {module}; "
            "print(','.join(m for m in ('ray', 'mlflow', 'docker') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""
