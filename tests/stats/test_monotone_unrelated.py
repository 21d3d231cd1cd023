"""4.2: where the measured order is nearly unrelated to a group's numeric settings, the
share of the submitted groups that still follow one (|rho| >= 0.9), by hand, on task
packages and run folders written to disk."""

from __future__ import annotations

import inspect
import math

import pandas as pd
import pytest

from spu.stats.analysis import StatsOptions, analyze
from spu.stats.monotone import FOLLOWS, UNRELATED, monotone_prior, unrelated_rule
from spu.stats.runs_table import check_runs_table
from spu.stats.submissions import load_task_set
from tests.stats.conftest import run_row, write_run, write_task

TEMPS = {"e1": 10, "e2": 20, "e3": 30, "e4": 40, "e5": 50}
MEASURED_G = {"e1": 3.0, "e2": 5.0, "e3": 1.0, "e4": 2.0, "e5": 4.0}
"""Ranks 3, 5, 1, 2, 4 along temperatures 10..50: d = 2, 3, -2, -2, -1, sum d^2 = 22,
rho = 1 - 6 * 22 / 120 = -0.1: nearly unrelated (|rho| 0.1 <= 0.2)."""
MEASURED_K = {"k1": 1.0, "k2": 2.0, "k3": 3.0, "k4": 4.0}
"""Along temperature exactly (|rho| 1): related, left out."""
SUBMITTED = {
    "A": {"G": ["e1", "e2", "e3", "e4", "e5"], "K": ["k4", "k3", "k2", "k1"]},
    "B": {"G": ["e3", "e4", "e1", "e5", "e2"], "K": ["k1", "k2", "k3", "k4"]},
    "C": {"G": ["e5", "e4", "e3", "e2", "e1"], "K": ["k2", "k1", "k3", "k4"]},
}
"""On G, A follows temperature (|rho| 1), B submits the measured order (0.1), C its
reverse (|rho| 1): two of the three submissions of the unrelated group follow it."""


def _task(root) -> None:
    settings: dict[str, dict[str, object]] = {e: {"temp": t} for e, t in TEMPS.items()}
    settings.update({k: {"temp": i + 1} for i, k in enumerate(MEASURED_K)})
    write_task(root, "t1", {"G": MEASURED_G, "K": MEASURED_K}, settings=settings)


def test_share_following_a_setting_the_measured_order_is_unrelated_to(tmp_path) -> None:
    _task(tmp_path / "tasks")
    tasks = load_task_set([tmp_path / "tasks"])
    runs = check_runs_table(pd.DataFrame([run_row(c, "t1", 0.1) for c in SUBMITTED]))
    orders = {f"{c}-t1-0": o for c, o in SUBMITTED.items()}
    result = monotone_prior(runs, orders, tasks, list(SUBMITTED))
    groups = result.groups.set_index(["group_id", "config"])
    assert groups.loc[("G", "A"), "measured_abs_rho"] == pytest.approx(0.1)
    assert groups.xs("G")["measured_unrelated"].all()
    assert not groups.xs("K")["measured_unrelated"].any()
    assert groups.xs("G")["submitted_follows"].to_dict() == {"A": True, "B": False, "C": True}
    table = result.unrelated.set_index("config")
    assert list(table.index) == ["all", "A", "B", "C"]
    assert table.loc["all", ["n_tasks", "n_groups", "n_submitted", "n_follow"]].tolist() == [
        1, 1, 3, 2]
    assert table.loc["all", "share"] == pytest.approx(2 / 3)
    assert table["share"].drop("all").tolist() == [1.0, 0.0, 1.0]
    summary = {r["statistic"]: r for r in result.summary}
    row = summary["submitted_follow_share_where_measured_unrelated"]
    assert row["value"] == pytest.approx(2 / 3) and row["n"] == 3
    # below 0.1, G is no longer nearly unrelated: nothing left to count
    strict = monotone_prior(runs, orders, tasks, list(SUBMITTED), unrelated=0.05).unrelated
    assert strict["config"].tolist() == ["all"] and strict["n_submitted"].iloc[0] == 0
    assert math.isnan(strict["share"].iloc[0])


def test_the_papers_rule_is_the_default_and_named_in_the_manifest(tmp_path) -> None:
    """0.9 is the paper's; 0.2 for "nearly unrelated" is our reading, an option
    (``--unrelated-below``), and the manifest says so."""
    assert FOLLOWS == 0.9 and UNRELATED == 0.2
    assert StatsOptions().unrelated_below == UNRELATED
    assert inspect.signature(monotone_prior).parameters["unrelated"].default == UNRELATED
    _task(tmp_path / "tasks")
    out = tmp_path / "outputs"
    rows = []
    for config, groups in SUBMITTED.items():
        write_run(out, f"key-{config}", "t1",
                  [{"group_id": g, "order": o} for g, o in groups.items()])
        rows.append(run_row(config, "t1", 0.1, run_key=f"key-{config}"))
    runs = check_runs_table(pd.DataFrame(rows))
    result = analyze(runs, StatsOptions(resamples=20, simulations=20, null_draws=20,
                                        task_roots=(tmp_path / "tasks",), runs_dir=out))
    entry = result.manifest["outputs"]["monotone_unrelated.csv"]
    assert entry["written"] and entry["section"] == "4.2"
    assert entry["rule"] == unrelated_rule() and "at most 0.2" in entry["rule"]
    assert "at least 0.9" in entry["rule"]
    table = result.tables["monotone_unrelated.csv"].set_index("config")
    assert table.loc["all", "share"] == pytest.approx(2 / 3)
    looser = analyze(runs, StatsOptions(resamples=20, simulations=20, null_draws=20,
                                        task_roots=(tmp_path / "tasks",), runs_dir=out,
                                        unrelated_below=0.05))
    assert "at most 0.05" in looser.manifest["outputs"]["monotone_unrelated.csv"]["rule"]
    assert looser.manifest["unrelated_below"] == 0.05
    assert result.manifest["unrelated_below"] == 0.2


def test_unrelated_below_out_of_range_is_one_line(tmp_path, capsys) -> None:
    from spu.cli import main

    table = tmp_path / "runs.csv"
    check_runs_table(pd.DataFrame([run_row(c, "t1", 0.1) for c in SUBMITTED])).to_csv(
        table, index=False)
    code = main(["stats", str(table), "--out", str(tmp_path / "out"),
                 "--unrelated-below", "1.5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and err == [
        "spu stats: --unrelated-below must be at least 0 and below 1"]
