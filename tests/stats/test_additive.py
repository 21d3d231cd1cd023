"""The task-adjusted mean against statsmodels OLS (paper 3.1).

Reference: ``smf.ols("y ~ C(task) + C(config)")``; the task-adjusted mean of ``c`` is the
mean over tasks of the fitted ``mu_t + alpha_c``, i.e. the model's prediction for ``c``
averaged over every task of the fit. Tolerance 1e-10 (both are exact least squares).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from spu.stats.additive import (
    AdditiveDesign,
    adjusted_means,
    bootstrap_adjusted,
    fit_additive,
    linear_map,
)
from spu.stats.resampling import resample_counts, rng_for


def _unbalanced(seed: int, tasks: int = 25, configs: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.normal(0.3, 0.3, (tasks, configs)) + rng.normal(0, 0.2, (tasks, 1))
    y[rng.random((tasks, configs)) < 0.3] = np.nan
    y[:, 0] = np.where(np.isnan(y[:, 0]), 0.1, y[:, 0])  # one configuration everywhere: connected
    return pd.DataFrame(y, index=[f"t{i:02d}" for i in range(tasks)],
                        columns=[f"c{j}" for j in range(configs)])


def _statsmodels_adjusted(long: pd.DataFrame, configs: list[str]) -> np.ndarray:
    fit = smf.ols("y ~ C(task) + C(config)", long).fit()
    grid = pd.DataFrame([(t, c) for t in long["task"].unique() for c in configs],
                        columns=["task", "config"])
    grid["fitted"] = fit.predict(grid)
    return grid.groupby("config")["fitted"].mean().reindex(configs).to_numpy()


def _long(matrix: pd.DataFrame) -> pd.DataFrame:
    long = matrix.stack().rename("y").reset_index()
    long.columns = ["task", "config", "y"]
    return long


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adjusted_means_match_statsmodels_ols(seed) -> None:
    matrix = _unbalanced(seed)
    fit = fit_additive(matrix)
    reference = _statsmodels_adjusted(_long(matrix), list(matrix.columns))
    np.testing.assert_allclose(fit.adjusted, reference, atol=1e-10)
    # alpha sums to zero and mu + alpha reproduces the OLS fitted values
    assert abs(fit.alpha.sum()) < 1e-12
    assert fit.mean_task_effect == pytest.approx(fit.mu.mean())


def test_each_bootstrap_resample_is_the_ols_refit_of_the_resampled_tasks() -> None:
    """Task weights = how often the resample drew each task; a task drawn twice enters
    the OLS as two tasks with their own effects."""
    matrix = _unbalanced(3, tasks=15, configs=4)
    design, y = AdditiveDesign.from_matrix(matrix)
    weights = resample_counts(len(design.tasks), 4, rng_for(0, "test"))
    ours = adjusted_means(design, y, weights)
    long = _long(matrix)
    for b in range(weights.shape[0]):
        copies = []
        for task, count in zip(design.tasks, weights[b], strict=True):
            for k in range(int(count)):
                part = long[long["task"] == task].copy()
                part["task"] = f"{task}#{k}"
                copies.append(part)
        reference = _statsmodels_adjusted(pd.concat(copies), list(matrix.columns))
        np.testing.assert_allclose(ours[b], reference, atol=1e-10)


def test_bootstrap_is_seeded() -> None:
    design, y = AdditiveDesign.from_matrix(_unbalanced(4))
    a = bootstrap_adjusted(design, y, rng_for(9, "adjusted"), 300)
    b = bootstrap_adjusted(design, y, rng_for(9, "adjusted"), 300)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (300, 5)


def test_balanced_design_gives_the_raw_means() -> None:
    matrix = _unbalanced(5).fillna(0.25)
    np.testing.assert_allclose(fit_additive(matrix).adjusted, matrix.mean().to_numpy(),
                               atol=1e-12)


def test_unconnected_design_is_not_identified() -> None:
    """Two configurations that share no task (directly or through others) cannot be
    put on one scale: the adjusted means are NaN rather than arbitrary."""
    matrix = pd.DataFrame({"A": [0.1, 0.2, np.nan, np.nan], "B": [np.nan, np.nan, 0.3, 0.5]})
    assert np.isnan(fit_additive(matrix).adjusted).all()


def test_configuration_without_scored_runs_is_nan() -> None:
    matrix = _unbalanced(6)
    matrix["empty"] = np.nan
    adjusted = fit_additive(matrix).adjusted
    assert np.isnan(adjusted[-1]) and np.isfinite(adjusted[:-1]).all()
    np.testing.assert_allclose(adjusted[:-1], fit_additive(matrix.iloc[:, :-1]).adjusted)


def test_linear_map_reproduces_the_fit() -> None:
    matrix = _unbalanced(7)
    design, y = AdditiveDesign.from_matrix(matrix)
    np.testing.assert_allclose(linear_map(design) @ y, fit_additive(matrix).adjusted,
                               atol=1e-12)


def test_fit_carries_its_design_and_drops_unscored_configurations_exactly() -> None:
    """``fit.design``/``fit.y`` are what ``from_matrix`` builds, and leaving out the
    configurations without scored runs gives the design and fit of the smaller matrix
    (what the rank-stability simulation reuses instead of refitting)."""
    matrix = _unbalanced(3).assign(c5=np.nan)[["c0", "c5", "c1", "c2", "c3", "c4"]]
    fit = fit_additive(matrix)
    design, y = AdditiveDesign.from_matrix(matrix)
    assert (fit.design.tasks, fit.design.configs) == (design.tasks, design.configs)
    np.testing.assert_array_equal(fit.design.task_index, design.task_index)
    np.testing.assert_array_equal(fit.design.config_index, design.config_index)
    np.testing.assert_array_equal(fit.y, y)
    identified = np.isfinite(fit.adjusted)
    assert identified.tolist() == [True, False, True, True, True, True]
    smaller = matrix.loc[:, identified]
    expected, expected_y = AdditiveDesign.from_matrix(smaller)
    got = fit.design.scored_configs(identified)
    assert got.configs == expected.configs and got.tasks == expected.tasks
    np.testing.assert_array_equal(got.task_index, expected.task_index)
    np.testing.assert_array_equal(got.config_index, expected.config_index)
    np.testing.assert_array_equal(fit.y, expected_y)
    np.testing.assert_allclose(fit.adjusted[identified], fit_additive(smaller).adjusted,
                               rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="has observations"):
        fit.design.scored_configs(np.array([False, True, True, True, True, True]))
