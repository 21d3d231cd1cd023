"""Figures 17c, 24e and 19c of ``spu report --analysis``, from small hand-made tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spu.report.trajectory_figures import (
    FLIP_QUANTITIES,
    REVISION_CHANGE,
    trajectory_figures,
    write_figures,
)


def _intervals() -> pd.DataFrame:
    """``revision_intervals.csv`` by hand: A's two runs changed +0.1 and +0.3 (mean 0.2)."""
    rows = []
    for config, mean in (("A", 0.2), ("B", -0.1), ("all", 0.1)):
        rows.append({"config": config, "quantity": REVISION_CHANGE, "n_runs": 2, "n_tasks": 2,
                     "mean": mean, "ci_low": mean - 0.1, "ci_high": mean + 0.1})
        for q, value in zip(FLIP_QUANTITIES, (0.6, 0.45, 0.15), strict=True):
            rows.append({"config": config, "quantity": q, "n_runs": 2, "n_tasks": 2,
                         "mean": value, "ci_low": value - 0.05, "ci_high": value + 0.05})
    return pd.DataFrame(rows)


def _revisions() -> pd.DataFrame:
    return pd.DataFrame({"run_key": ["a1", "a2", "b1", "b2"], "config": ["A", "A", "B", "B"],
                         "change": [0.1, 0.3, -0.2, 0.0], "revisions": 1,
                         "submission_differs": True,
                         "first_draft_score": 0.3, "score": [0.4, 0.6, 0.1, 0.3],
                         "pairs_flipped": 4, "flipped_into_measured": [0.5, 0.75, 0.5, 0.5],
                         "flipped_expected_share": 0.45})


def _repeat_methods() -> pd.DataFrame:
    """``repeat_methods.csv`` by hand: dft varied on four tasks (gap mean 0.1), xtb on one."""
    rows = [{"family": "dft", "task_id": f"t{i}", "config": "A", "n_tasks": 1, "n_runs": 5,
             "n_used": i, "diff": d, "ci_low": np.nan, "ci_high": np.nan, "shown": False}
            for i, d in zip(range(1, 5), (0.0, 0.1, 0.2, 0.1), strict=True)]
    rows.append({"family": "dft", "task_id": "all", "config": "all", "n_tasks": 4,
                 "n_runs": 20, "n_used": 10, "diff": 0.1, "ci_low": 0.0, "ci_high": 0.2,
                 "shown": True})
    rows.append({"family": "semiempirical_qm", "task_id": "all", "config": "all",
                 "n_tasks": 1, "n_runs": 5, "n_used": 2, "diff": 0.3, "ci_low": np.nan,
                 "ci_high": np.nan, "shown": False})
    return pd.DataFrame(rows)


def _tables() -> dict[str, pd.DataFrame]:
    return {"revisions.csv": _revisions(), "revision_intervals.csv": _intervals(),
            "repeat_methods.csv": _repeat_methods()}


def _diamonds(fig) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for ax in fig.axes for line in ax.get_lines()
            if line.get_marker() == "D" for x, y in zip(line.get_xdata(), line.get_ydata(),
                                                          strict=True)]


def test_figures_17c_24e_19c_are_written_and_not_empty(tmp_path) -> None:
    written, missing = write_figures(_tables(), tmp_path)
    names = {p.name for p in written}
    for name in ("fig17c_revisions", "fig24e_flips", "fig19c_repeat_methods"):
        for suffix in (".png", ".svg"):
            assert f"{name}{suffix}" in names and (tmp_path / f"{name}{suffix}").stat().st_size
        assert name not in missing


def test_the_intervals_are_the_tables(tmp_path) -> None:
    draw, _ = trajectory_figures(_tables())
    # 17c: a diamond at each configuration's mean, all runs last
    assert _diamonds(draw["fig17c_revisions"]()) == [(0.2, 0.0), (-0.1, 1.0), (0.1, 2.0)]
    # 24e: the difference panel's diamonds are the made-minus-expected means
    assert [x for x, _ in _diamonds(draw["fig24e_flips"]())] == pytest.approx([0.15] * 3)
    # 19c: only dft is shown (four tasks); its mean gap 0.1, the hand-computed mean
    fig = draw["fig19c_repeat_methods"]()
    assert _diamonds(fig) == [(pytest.approx(np.mean([0.0, 0.1, 0.2, 0.1])), 0.0)]
    heat = fig.axes[0].images[0].get_array()
    assert heat.tolist() == [[1.0, 2.0, 3.0, 4.0]]


def test_17c_and_21b_draw_the_runs_whose_submission_differs() -> None:
    """A run that went back to its draft is no point of 17c or 21b; a table written before
    ``submission_differs`` existed draws neither and says to run spu analyze again."""
    tables = _tables()
    tables["revisions.csv"].loc[0, "submission_differs"] = False
    draw, _ = trajectory_figures(tables)
    fig = draw["fig21b_draft_vs_submission"]()
    points = [line for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "o"]
    assert [len(line.get_xdata()) for line in points] == [3]
    tables["revisions.csv"] = tables["revisions.csv"].drop(columns="submission_differs")
    draw, missing = trajectory_figures(tables)
    assert "fig17c_revisions" not in draw and "fig21b_draft_vs_submission" not in draw
    assert "run it again" in missing["fig17c_revisions"]


def test_without_varying_families_19c_says_what_it_needs() -> None:
    tables = _tables()
    tables["repeat_methods.csv"] = tables["repeat_methods.csv"].assign(shown=False)
    draw, missing = trajectory_figures(tables)
    assert "fig19c_repeat_methods" not in draw
    assert "--all-repeats" in missing["fig19c_repeat_methods"]


@pytest.mark.slow  # more than a few seconds
def test_spu_report_analysis_draws_them(tmp_path) -> None:
    """``spu report RUNS --analysis DIR`` puts the three figures into the report."""
    from spu.cli import main
    from tests.stats.conftest import run_row

    analysis = tmp_path / "analysis"
    analysis.mkdir()
    for name, table in _tables().items():
        table.to_csv(analysis / name, index=False)
    pd.DataFrame({"run_key": ["a1"], "config": ["A"], "scored": [True]}).to_csv(
        analysis / "runs_features.csv", index=False)
    rows = [run_row(c, f"t{i}", 0.1 * i + (0.2 if c == "A" else 0.0))
            for i in range(4) for c in ("A", "B")]
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "runs.csv"), "--out", str(out), "--resamples", "20",
                 "--simulations", "20", "--null-draws", "20", "--analysis",
                 str(analysis)]) == 0
    for name in ("fig17c_revisions", "fig24e_flips", "fig19c_repeat_methods"):
        found = list(out.rglob(f"{name}.png"))
        assert found and found[0].stat().st_size > 0, name
