"""E.3's log run time, log tool calls and log web fetches: log x as the paper writes it,
log(1 + x) only where the measure has a zero; checked on a balanced table by hand."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

from spu.stats.effort import effort_correlations, log_measure


def _runs() -> pd.DataFrame:
    scores = [[0.1, 0.5, 0.3, 0.7], [0.2, 0.2, 0.6, 0.4]]
    runtime = [[100.0, 900.0, 300.0, 2000.0], [50.0, 80.0, 700.0, 400.0]]
    fetches = [[0.0, 3.0, 1.0, 9.0], [2.0, 0.0, 5.0, 4.0]]
    rows = [{"config": c, "task_id": f"t{t}", "scored": True,
             "score_recovered": scores[i][t], "runtime_s": runtime[i][t],
             "tool_calls": 10 * (t + 1) + i, "web_fetches": fetches[i][t], "used_gpu": False}
            for i, c in enumerate(("A", "B")) for t in range(4)]
    return pd.DataFrame(rows)


def _double_centred(values: list[list[float]]) -> np.ndarray:
    """Residuals of mu_t + alpha_c on a complete table: x - row - column + grand mean."""
    x = np.asarray(values, dtype=float)
    return x - x.mean(axis=1, keepdims=True) - x.mean(axis=0, keepdims=True) + x.mean()


def _adjusted(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["config"].str.startswith("(")].set_index("measure")


def test_log_where_no_zero_log1p_where_one_by_hand() -> None:
    runs = _runs()
    table, _ = effort_correlations(runs, ["A", "B"], resamples=20)
    adjusted = _adjusted(table)
    assert adjusted.loc["runtime_s", "transform"] == "log"
    assert adjusted.loc["web_fetches", "transform"] == "log1p"
    wide = {m: runs.pivot(index="config", columns="task_id", values=m).to_numpy()
            for m in ("score_recovered", "runtime_s", "web_fetches")}
    y = _double_centred(wide["score_recovered"]).ravel()
    for measure, scaled in (("runtime_s", np.log(wide["runtime_s"])),
                            ("web_fetches", np.log1p(wide["web_fetches"]))):
        x = _double_centred(scaled).ravel()
        assert adjusted.loc[measure, "rho"] == pytest.approx(np.corrcoef(x, y)[0, 1],
                                                             abs=1e-12)
    within = table[~table["config"].str.startswith("(")]
    assert set(within["transform"]) == {"ranks"}


def test_the_papers_log_is_the_default_and_log1p_an_option() -> None:
    assert inspect.signature(effort_correlations).parameters["log_rule"].default == "log"
    runs = _runs()
    plus_one = _adjusted(effort_correlations(runs, ["A", "B"], resamples=20,
                                             log_rule="log1p")[0])
    assert plus_one.loc["runtime_s", "transform"] == "log1p"
    paper = _adjusted(effort_correlations(runs, ["A", "B"], resamples=20)[0])
    assert paper.loc["runtime_s", "rho"] != pytest.approx(plus_one.loc["runtime_s", "rho"])
    with pytest.raises(ValueError, match="effort log rule"):
        log_measure(np.array([1.0]), "sqrt")


def test_a_measure_fixed_by_task_and_configuration_has_no_adjusted_correlation() -> None:
    """Issue 40: a scripted agent makes the same calls on every task, so its tool calls are
    fixed by the configuration; with task and configuration effects removed nothing is
    left of them but float noise, and the summary read ``adjusted_corr_tool_calls = inf``
    (here: 2.6e-09, noise over noise). Undefined, said in the note; run time, which
    varies, keeps its correlation."""
    import numpy as np
    import pandas as pd

    from spu.stats.effort import effort_correlations

    rng = np.random.default_rng(1)
    runs = pd.DataFrame([{"config": c, "task_id": f"t{t}", "scored": True,
                          "score_recovered": float(np.round(rng.uniform(-0.5, 0.9), 4)),
                          "runtime_s": float(rng.uniform(10, 100)),
                          "tool_calls": {"A": 3, "B": 8, "C": 21}[c], "web_fetches": 3,
                          "used_gpu": False}
                         for c in "ABC" for t in range(22)])
    table, summary = effort_correlations(runs, ["A", "B", "C"], resamples=50)
    rows = {r["statistic"]: r for r in summary}
    calls = rows["adjusted_corr_tool_calls"]
    assert np.isnan(calls["value"]) and "do not vary once task and configuration" in calls[
        "note"]
    assert np.isfinite(rows["adjusted_corr_runtime_s"]["value"])
    assert rows["adjusted_corr_runtime_s"]["note"] == ""
    assert not np.isinf(table["rho"].to_numpy(dtype=float)).any()
