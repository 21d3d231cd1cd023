"""``spu analyze --task ID``: Figures 18e (orders against settings) and 19b (repeat orders)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from scipy import stats as sps

from spu.analysis.detail_tasks import modal_order, task_repeat_orders, task_settings
from spu.cli import main
from spu.report.trajectory_figures import write_figures
from spu.stats.simulate import PAPER_CONFIGS, SimulationParameters, simulate_study
from spu.stats.submissions import load_task_set
from tests.stats.conftest import write_task

MEASURED = {"a": 1.0, "b": 3.0, "c": 2.0, "d": 4.0}
SETTINGS = {"a": {"temp": 10, "label": "x"}, "b": {"temp": 40, "label": "y"},
            "c": {"temp": 20, "label": "z"}, "d": {"temp": 30, "label": "w"}}


def _runs() -> list[dict]:
    orders = {"A0": ["a", "b", "c", "d"], "A1": ["a", "b", "c", "d"], "A2": ["b", "a", "c", "d"],
              "B0": ["d", "c", "b", "a"]}
    return [{"run_key": k, "task_id": "t", "config": k[0], "repeat": int(k[1]),
             "score": 0.1 * i, "submitted": {"G": o}} for i, (k, o) in enumerate(orders.items())]


def test_orders_against_settings_by_hand(tmp_path) -> None:
    write_task(tmp_path, "t", {"G": MEASURED}, settings=SETTINGS)
    table = task_settings(_runs(), load_task_set([tmp_path]), ["t"])
    assert set(table["setting"]) == {"temp"}  # the text column is no setting
    rho = table.set_index("run_key")["rho"]
    # measured order a, c, b, d: temps 10, 20, 40, 30 -> ranks 1, 2, 4, 3: rho 0.8
    assert rho["measured"] == pytest.approx(0.8)
    assert table["run_key"].iloc[0] == "measured"  # at the top
    # A0 submits a, b, c, d: temps 10, 40, 20, 30 -> ranks 1, 4, 2, 3: rho 0.4
    assert rho["A0"] == pytest.approx(0.4)
    assert rho["A0"] == pytest.approx(sps.spearmanr([0, 1, 2, 3], [10, 40, 20, 30]).statistic)
    assert rho["B0"] == pytest.approx(-0.4)


def test_repeat_orders_by_hand(tmp_path) -> None:
    write_task(tmp_path, "t", {"G": MEASURED}, settings=SETTINGS)
    table = task_repeat_orders(_runs(), load_task_set([tmp_path]), ["t"])
    assert set(table["config"]) == {"A"}  # the configuration with the most runs
    assert len(table) == 3 * 4 and set(table["modal_rule"]) == {"most common"}
    a2 = table[table["run_key"] == "A2"]
    # A2 submitted b first; b's place in the most common order (a, b, c, d) is 2
    assert a2["item"].tolist() == ["b", "a", "c", "d"]
    assert a2["modal_position"].tolist() == [2, 1, 3, 4]
    assert modal_order([["a", "b"], ["b", "a"], ["b", "a"]]) == ["b", "a"]


@pytest.mark.slow  # more than a few seconds
def test_spu_analyze_writes_and_draws_them(tmp_path) -> None:
    """On a simulated study with repeats: the files, their rules, and both figures."""
    params = SimulationParameters(configs=tuple(c for c in PAPER_CONFIGS
                                                if c.label in ("Astra Max", "Doubao")))
    runs = simulate_study(tmp_path / "study", params, seed=2)
    repeated = runs[(runs["repeat"] > 0) & runs["scored"]]["task_id"].value_counts()
    task = str(repeated.index[0])
    out = tmp_path / "analysis"
    assert main(["analyze", str(tmp_path / "study" / "outputs"), "--out", str(out),
                 "--tasks", str(tmp_path / "study" / "tasks"), "--resamples", "20",
                 "--trees", "5", "--jobs", "1", "--all-repeats", "--task", task]) == 0
    settings = pd.read_csv(out / "task_settings.csv")
    orders = pd.read_csv(out / "task_repeat_orders.csv")
    assert settings["run_key"].iloc[0] == "measured" and set(settings["task_id"]) == {task}
    assert set(orders["config"]) == {"Astra Max"}  # the repeated configuration, by default
    assert orders["run_key"].nunique() == int(repeated.iloc[0]) + 1  # repeats + official
    outputs = json.loads((out / "manifest.json").read_text())["outputs"]
    assert "18e" in outputs["task_settings.csv"]["rule"]
    assert "most common order" in outputs["task_repeat_orders.csv"]["rule"]
    for name in ("fig18e_task_settings", "fig19b_task_repeat_orders"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 0
    tables = {"task_settings.csv": settings, "task_repeat_orders.csv": orders}
    written, missing = write_figures(tables, tmp_path / "figs")
    assert {p.stem for p in written} == {"fig18e_task_settings", "fig19b_task_repeat_orders"}
    assert all(p.stat().st_size > 0 for p in written)
