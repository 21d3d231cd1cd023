"""The simulator plants effects; each new statistic must find them at its nominal rate.

Two kinds of simulated benchmark, with the paper's structure: ``NULL`` plants nothing
(every test should reject at about its level), ``PLANTED`` plants, at once, recovered
files scoring 0.15 higher, flagged runs 0.10 higher, refusals falling on easier tasks, a
0.25 discipline effect for the leading configurations in chemistry, a 0.15
configuration-by-task interaction and policy stops clustered on a few tasks. The
statistics of one benchmark are computed by :func:`_statistics` with few resamples.

The fast test draws three benchmarks of each kind and checks that the planted effects
are found; the slow test draws 30 of each and checks the nominal rates with the stated
tolerances (binomial standard error of a 5% rate over 30 draws: 4%; of a 95% coverage:
4%).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from spu.stats.coverage import coverage_table
from spu.stats.disciplines import all_discipline_configs, discipline_gap
from spu.stats.effort import effort_pairs, effort_table, effort_tasks
from spu.stats.exposure import exposure_table
from spu.stats.interaction import interaction_tasks, simulated_nulls
from spu.stats.outcomes import recovered_vs_valid
from spu.stats.repeats import stop_clustering_test
from spu.stats.runs_table import check_runs_table, official
from spu.stats.simulate import PAPER_CONFIGS, SimulationParameters, simulate_runs

LEADING = ("Astra Medium", "Opus 5", "Astra Max", "Sonnet 5.5")
TRAILING = ("Doubao", "Kimi-K3.1-Pro", "DeepSeek", "HY4", "GLM-5.3", "Qwen3.8")
NULL = SimulationParameters()
PLANTED = SimulationParameters(
    recovered_effect=0.15, exposure_effect=0.10, refusal_difficulty=1.5,
    discipline_effects=tuple((c, "chemistry", 0.25) for c in LEADING),
    interaction_sd=0.15, stop_clustering=4.0)
TRUE_EFFORT_GAP = (next(c.mean for c in PAPER_CONFIGS if c.label == "Astra Medium")
                   - next(c.mean for c in PAPER_CONFIGS if c.label == "Astra Max"))
RESAMPLES = 200


def _statistics(params: SimulationParameters, seed: int) -> dict[str, Any]:
    runs = check_runs_table(simulate_runs(params, seed=seed))
    public = official(runs)
    public_all = runs[runs["visibility"] == "public"]
    order = sorted(public["config"].unique())
    out: dict[str, Any] = {}
    recovered = recovered_vs_valid(public, order, seed, RESAMPLES, RESAMPLES).pooled
    out["recovered"] = (recovered["diff"], recovered["ci_low"], recovered["ci_high"],
                        recovered["p_perm"])
    _, exposure = exposure_table(public, order, seed, RESAMPLES, RESAMPLES)
    out["exposure"] = (exposure["statistic"], exposure["ci_low"], exposure["ci_high"],
                       exposure["p_value"])
    coverage = coverage_table(public, order, seed, RESAMPLES, RESAMPLES).set_index("config")
    out["coverage_p"] = coverage.loc["Opus 5.5", "p_perm"]
    eligible = all_discipline_configs(public, order)
    _, gap = discipline_gap(public, [c for c in LEADING if c in eligible],
                            [c for c in TRAILING if c in eligible], seed, RESAMPLES, RESAMPLES)
    out["gap_p"] = gap["p_value"]
    _, tests, _ = simulated_nulls(public_all, order, params.within_sd, seed, RESAMPLES)
    out["advantage_p"] = next(t["p_value"] for t in tests
                              if t["test"].startswith("repeat_advantage"))
    f_tests, _ = interaction_tasks(public_all, order)
    out["f_reject"] = float((f_tests["p_value"] < 0.05).mean())
    repeated = public_all[public_all["repeat"] >= 1]
    out["stops_p"] = stop_clustering_test(repeated, seed, RESAMPLES)["p_value"]
    pair = effort_pairs(public)[0]
    effort = effort_table(effort_tasks(public_all, pair), public_all, pair, seed,
                          RESAMPLES).set_index("way").loc["official"]
    out["effort"] = (effort["diff"], effort["ci_low"], effort["ci_high"])
    return out


def _draw(params: SimulationParameters, n: int, start: int) -> list[dict[str, Any]]:
    return [_statistics(params, start + r) for r in range(n)]


def test_planted_effects_are_found() -> None:
    """Three benchmarks of each kind: every planted effect's estimate is near what was
    planted and its test rejects in at least two of the three; under the null the
    estimates are near zero."""
    planted = _draw(PLANTED, 3, 1000)
    null = _draw(NULL, 3, 2000)
    for name, value in (("recovered", 0.15), ("exposure", 0.10)):
        assert abs(np.mean([s[name][0] for s in planted]) - value) < 0.06
        assert abs(np.mean([s[name][0] for s in null])) < 0.06
    for key in ("coverage_p", "gap_p", "advantage_p", "stops_p"):
        assert sum(s[key] < 0.05 for s in planted) >= 2, key
    assert np.mean([s["f_reject"] for s in planted]) > np.mean([s["f_reject"] for s in null])


@pytest.mark.slow
def test_planted_effects_at_their_nominal_rates() -> None:
    """30 benchmarks of each kind. Under the null every test rejects at most 15% of the
    time (nominal 5%, binomial SE 4%) and the per-task F tests at most 10% on average;
    with the effects planted the 95% intervals of the recovered and exposure effects
    cover the planted values at least 80% of the time, the tests reject at least 80%
    of the time, and the effort interval covers the true gap of the configurations
    (0.022) at least 80% of the time in both kinds."""
    planted = _draw(PLANTED, 30, 3000)
    null = _draw(NULL, 30, 4000)
    for key in ("coverage_p", "gap_p", "advantage_p", "stops_p"):
        assert np.mean([s[key] < 0.05 for s in null]) <= 0.15, key
        assert np.mean([s[key] < 0.05 for s in planted]) >= 0.80, key
    for name, value in (("recovered", 0.15), ("exposure", 0.10)):
        assert np.mean([s[name][3] < 0.05 for s in null]) <= 0.15, name
        assert np.mean([s[name][1] <= value <= s[name][2] for s in planted]) >= 0.80, name
        assert np.mean([s[name][1] <= 0 <= s[name][2] for s in null]) >= 0.80, name
    assert np.mean([s["f_reject"] for s in null]) <= 0.10
    for kind in (planted, null):
        assert np.mean([s["effort"][1] <= TRUE_EFFORT_GAP <= s["effort"][2]
                        for s in kind]) >= 0.80
