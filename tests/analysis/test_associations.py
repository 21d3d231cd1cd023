"""Associations with task and configuration fixed effects, and the configuration classifier."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from statsmodels.stats.multitest import multipletests

from spu.analysis.associations import (
    CLASSIFIER_FEATURES,
    _FixedEffects,
    configuration_classifier,
    derived_features,
    feature_associations,
)


def features_table(seed: int = 0, n_tasks: int = 12, configs: str = "pqrs") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_tasks):
        for c in configs:
            rows.append({"task_id": f"t{t}", "config": c, "harness": "claude_code",
                         "scored": True})
    f = pd.DataFrame(rows)
    n = len(f)
    f["n_searches"] = rng.integers(0, 3, n)
    f["n_fetches"] = 0
    f["family_dft"] = rng.random(n) < 0.4
    f["first_complete_t"] = np.where(rng.random(n) < 0.5, rng.random(n), np.nan)
    f["stated_expected_rho"] = np.nan
    f["first_install_t"] = np.nan
    f["revisions"] = rng.integers(0, 2, n)
    f["n_families"] = rng.integers(0, 4, n)
    f["subagent"] = False
    f["background_jobs"] = rng.random(n) < 0.3
    task_effect = {f"t{t}": rng.normal() for t in range(n_tasks)}
    f["score"] = (f["task_id"].map(task_effect) + 0.2 * f["family_dft"]
                  + rng.normal(0, 0.1, n))
    return f


def test_estimates_equal_statsmodels_ols_with_fixed_effects() -> None:
    """The coefficient equals statsmodels' OLS with C(task) + C(config) (tolerance 1e-10)."""
    f = features_table()
    table = feature_associations(f, resamples=50, seed=1).set_index("feature")
    d = derived_features(f).astype(float)
    for feature in ("family_dft", "revised", "background_jobs", "early_draft"):
        data = pd.DataFrame({"y": f["score"], "x": d[feature], "t": f["task_id"],
                             "c": f["config"]})
        ref = smf.ols("y ~ x + C(t) + C(c)", data).fit().params["x"]
        assert table.loc[feature, "estimate"] == pytest.approx(ref, abs=1e-10)
    assert table.loc["family_dft", "ci_low"] < 0.2 < table.loc["family_dft", "ci_high"]


def test_bootstrap_resample_equals_stacked_copies() -> None:
    """A task drawn k times weighted k equals k copies of it, each its own task (statsmodels)."""
    f = features_table(seed=3)
    x = derived_features(f)[["family_dft"]].to_numpy(float)
    task, tasks = pd.factorize(f["task_id"], sort=True)
    config, configs = pd.factorize(f["config"], sort=True)
    fit = _FixedEffects(f["score"].to_numpy(), x, task, config, len(tasks), len(configs))
    u = np.array([2, 0, 1, 3, 0, 1, 1, 0, 2, 1, 1, 0], dtype=float)
    copies = []
    for t, k in enumerate(u.astype(int)):
        for j in range(k):
            part = f[task == t].assign(task_id=f"{tasks[t]}#{j}")
            copies.append(part)
    stacked = pd.concat(copies)
    stacked["x"] = stacked["family_dft"].astype(float)
    ref = smf.ols("score ~ x + C(task_id) + C(config)", stacked).fit().params["x"]
    assert fit.solve(u)[0] == pytest.approx(ref, abs=1e-10)


def test_holm_within_each_family_matches_statsmodels() -> None:
    table = feature_associations(features_table(seed=5), resamples=200, seed=2)
    for _, part in table.groupby("family"):
        known = part["p_value"].notna()
        ref = multipletests(part.loc[known, "p_value"], method="holm")[1]
        np.testing.assert_allclose(part.loc[known, "p_holm"], ref, atol=1e-12)


def test_seeded_resampling_repeats() -> None:
    f = features_table(seed=7)
    a = feature_associations(f, resamples=100, seed=4)
    b = feature_associations(f, resamples=100, seed=4)
    pd.testing.assert_frame_equal(a, b)


def test_classifier_matches_scikit_learn_run_directly() -> None:
    """Same forest, same folds: the accuracy equals scikit-learn's cross_val_score."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    rng = np.random.default_rng(0)
    f = features_table(seed=9, n_tasks=15, configs="pq")
    for column in CLASSIFIER_FEATURES:
        f[column] = rng.random(len(f))
    f.loc[f["config"] == "p", "n_calls"] += 1.0  # a habit that tells p from q
    result = configuration_classifier(f, seed=3, n_estimators=50)
    x = f[list(CLASSIFIER_FEATURES)].astype(float).fillna(-1.0).to_numpy()
    y = f["config"].to_numpy()
    ref = cross_val_score(RandomForestClassifier(n_estimators=50, random_state=3), x, y,
                          cv=StratifiedKFold(5, shuffle=True, random_state=3)).mean()
    assert result is not None
    assert result.accuracy == pytest.approx(ref, abs=1e-12)
    assert result.accuracy > 0.7 and result.chance == 0.5  # above always guessing one
    assert int(result.confusion.to_numpy().sum()) == len(f)


def test_classifier_needs_two_configurations() -> None:
    assert configuration_classifier(features_table(configs="p"), n_estimators=5) is None
