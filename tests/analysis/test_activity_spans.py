"""Figure 14a: each call's time spread over its span of the run (paper E.7), by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import integrate, stats

from spu.analysis.runs import CLASSES
from spu.analysis.trajectory_analysis import GRID, SMOOTHING_SD, activity_time

A, B = CLASSES[0], CLASSES[1]


def _two_halves() -> tuple[pd.DataFrame, pd.DataFrame]:
    """One run: a call of class A over the first half, one of class B over the second."""
    calls = pd.DataFrame({"run_key": ["r", "r"], "t_norm": [0.0, 0.5],
                          "t_end_norm": [0.5, 1.0], "time_s": [10.0, 10.0],
                          "activity_class": [A, B]})
    return calls, pd.DataFrame({"run_key": ["r"]})


def _at(table: pd.DataFrame, t: float) -> pd.Series:
    return table.loc[int(np.argmin(np.abs(table["t"].to_numpy() - t)))]


def test_a_call_fills_its_span_by_hand() -> None:
    """At 0.25 only A runs (share 1; at its start it would be 0.5, the two kernels equal);
    at 0.52 B's share is the mass of the kernel past 0.5 within B's span: Phi(1)."""
    calls, runs = _two_halves()
    spread = activity_time(calls, runs)
    assert math.isclose(_at(spread, 0.25)[A], 1.0, abs_tol=1e-12)
    assert math.isclose(_at(spread, 0.50)[A], 0.5, abs_tol=1e-12)
    assert math.isclose(_at(spread, 0.52)[B], 0.8413447460685429, abs_tol=1e-9)
    at_start = activity_time(calls, runs, over_duration=False)
    assert math.isclose(_at(at_start, 0.25)[A], 0.5, abs_tol=1e-12)
    assert _at(at_start, 0.52)[B] > 0.999


def test_the_spread_is_the_kernel_integrated_over_the_span() -> None:
    """Two overlapping calls of different classes against numerical integration (scipy)."""
    spans = [(0.1, 0.37, 4.0, A), (0.3, 0.42, 1.5, B)]
    calls = pd.DataFrame({"run_key": "r", "t_norm": [s[0] for s in spans],
                          "t_end_norm": [s[1] for s in spans], "time_s": [s[2] for s in spans],
                          "activity_class": [s[3] for s in spans]})
    got = activity_time(calls, pd.DataFrame({"run_key": ["r"]}))
    for g in (0.2, 0.33, 0.4):
        mass = [w / (b - a) * integrate.quad(
            lambda s, g=g: stats.norm.pdf(g, loc=s, scale=SMOOTHING_SD), a, b)[0]
            for a, b, w, _ in spans]
        assert math.isclose(_at(got, g)[B], mass[1] / sum(mass), rel_tol=1e-7)


def test_a_table_without_ends_places_calls_at_their_start() -> None:
    """A calls.csv written before ``t_end_norm`` was kept: the point kernel, as before."""
    calls, runs = _two_halves()
    assert activity_time(calls.drop(columns="t_end_norm"), runs).equals(
        activity_time(calls, runs, over_duration=False))
    assert len(GRID) == 101
