"""The simulator, and the estimates recovering its known parameters at the stated rate."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spu.stats.additive import AdditiveDesign, bootstrap_adjusted, fit_additive
from spu.stats.repeats import TaskSpread, variance_components
from spu.stats.resampling import bootstrap_mean, percentile_interval, resample_counts, rng_for
from spu.stats.runs_table import check_runs_table, official, score_matrix
from spu.stats.simulate import (
    PAPER_CONFIGS,
    SimulationParameters,
    main,
    simulate_runs,
    simulate_study,
)

REPLICATIONS = 30
RESAMPLES = 300


def test_structure_of_the_paper() -> None:
    runs = simulate_runs(seed=0)
    check_runs_table(runs)  # passes the checks of a real table
    public, private = official(runs, "public"), official(runs, "private")
    assert (len(public), len(private)) == (1300, 208)
    assert public["task_id"].nunique() == 100 and private["task_id"].nunique() == 16
    scored = public[public["scored"]].groupby("config").size()
    assert scored["Opus 5.5"] == 44 and scored["Fable 5.1"] == 30
    assert scored.sum() == 1155
    assert private["scored"].sum() == 159
    repeats = runs[runs["repeat"] >= 1]
    assert len(repeats) == 145 and repeats["scored"].sum() == 137
    assert repeats["task_id"].nunique() == 29 and repeats["subfield"].nunique() == 29
    # refusals fall outside materials science (paper 3.2): Opus 5.5 keeps most of it
    opus = public[(public["config"] == "Opus 5.5") & public["scored"]]
    assert (opus["discipline"] == "materials science").sum() > 20


def test_same_seed_same_table() -> None:
    pd.testing.assert_frame_equal(simulate_runs(seed=4), simulate_runs(seed=4))
    assert not simulate_runs(seed=4)["score_recovered"].equals(
        simulate_runs(seed=5)["score_recovered"])


def test_module_writes_a_table(tmp_path, capsys) -> None:
    assert main([str(tmp_path / "runs.csv"), "--seed", "2"]) == 0
    assert len(pd.read_csv(tmp_path / "runs.csv")) == 1653
    # The runs-table writer of spu runs export: parquet by suffix, anything else refused.
    assert main([str(tmp_path / "out" / "runs.parquet"), "--seed", "2"]) == 0
    # Text columns may come back as pandas' string dtype, empty as NaN: same values.
    def values(df: pd.DataFrame) -> pd.DataFrame:
        return df.astype(object).where(df.notna(), None)

    pd.testing.assert_frame_equal(values(pd.read_parquet(tmp_path / "out" / "runs.parquet")),
                                  values(simulate_runs(seed=2)))
    capsys.readouterr()
    assert main([str(tmp_path / "runs.txt")]) == 2
    assert "runs.txt: the output must end in .csv or .parquet" in capsys.readouterr().err
    assert not (tmp_path / "runs.txt").exists()


@pytest.mark.slow
def test_means_recover_the_true_configuration_means() -> None:
    """Over 30 simulated benchmarks, the 95% bootstrap intervals of the task-adjusted mean
    (tasks resampled, model refitted) and of the raw mean cover the true ``alpha_c``.

    Percentile bootstrap intervals over about 100 tasks run slightly narrow (93% in 200
    replications while this test was written; 95% in these 30); a nominal-95% interval is
    required to cover at least 88% and at most 99% of the 390 intervals. The adjusted
    estimates are unbiased: their average error is within 0.01 (the standard error of that
    average is about 0.003).
    """
    params = SimulationParameters()
    truth = {c.label: c.mean for c in params.configs}
    order = sorted(truth)
    true = np.array([truth[c] for c in order])
    covered, raw_covered, errors = [], [], []
    for r in range(REPLICATIONS):
        matrix = score_matrix(official(simulate_runs(params, seed=100 + r)), order)
        design, y = AdditiveDesign.from_matrix(matrix)
        low, high = percentile_interval(
            bootstrap_adjusted(design, y, rng_for(r, "adjusted"), RESAMPLES))
        covered.append((low <= true) & (true <= high))
        errors.append(fit_additive(matrix).adjusted - true)
        for c in order:
            iv = bootstrap_mean(matrix[c].dropna().to_numpy(), rng_for(r, "raw", c), RESAMPLES)
            raw_covered.append(iv.low <= truth[c] <= iv.high)
    assert 0.88 <= np.mean(covered) <= 0.99
    assert 0.88 <= np.mean(raw_covered) <= 0.99
    assert abs(np.mean(errors)) < 0.01


@pytest.mark.slow
def test_repeats_recover_within_task_sd_and_icc() -> None:
    """Five repeats on 29 tasks: the pooled within-task SD (true 0.150) and the ICC (true
    0.219^2 / (0.219^2 + 0.150^2) = 0.681) are covered by their bootstrap intervals over
    tasks. With 29 tasks these percentile intervals run a little narrow (94% for the SD and
    90% for the ICC in these 80 replications); at least 85% are required, and the average
    estimates are within 0.01 (SD) and 0.03 (ICC, biased low in small samples) of the
    truth. Only the repeated configuration is simulated, which keeps 80 replications quick.
    """
    params = SimulationParameters(
        configs=tuple(c for c in PAPER_CONFIGS if c.label == "Astra Max"))
    sd_cover, icc_cover, sds, iccs = [], [], [], []
    for r in range(80):
        runs = simulate_runs(params, seed=500 + r)
        spread = TaskSpread.from_scores(runs[(runs["repeat"] >= 1) & runs["scored"]])
        point = variance_components(spread)
        boot = variance_components(
            spread, resample_counts(len(spread.tasks), RESAMPLES, rng_for(r, "repeats")))
        low, high = percentile_interval(boot["within_sd"])
        sd_cover.append(low <= params.within_sd <= high)
        low, high = percentile_interval(boot["icc"])
        icc_cover.append(low <= params.icc() <= high)
        sds.append(point["within_sd"][0])
        iccs.append(point["icc"][0])
    assert params.icc() == pytest.approx(0.681, abs=1e-3)
    assert np.mean(sd_cover) >= 0.85 and np.mean(icc_cover) >= 0.85
    assert abs(np.mean(sds) - params.within_sd) < 0.01
    assert abs(np.mean(iccs) - params.icc()) < 0.03


def test_a_simulated_study_grades_to_its_table(tmp_path) -> None:
    """Every run folder of a simulated study, graded by the grader (with recovery) against
    its task package, scores what the table says; recovered runs carry the departure the
    table names, which the strict grader rejects."""
    from spu.grading.rules import grade_submission
    from spu.tasks.package import load_answers, load_task

    params = SimulationParameters(configs=tuple(c for c in PAPER_CONFIGS
                                                if c.label in ("Doubao", "Astra Max")))
    runs = simulate_study(tmp_path, params, seed=3)
    check_runs_table(runs)
    scored = runs[runs["scored"]]
    assert (scored["outcome"] == "recovered").sum() == 33
    for r in scored.sample(40, random_state=0).itertuples(index=False):
        task = load_task(tmp_path / "tasks" / r.task_id)
        answers = load_answers(tmp_path / "tasks" / r.task_id / "hidden" / "answers.json")
        data = (tmp_path / "outputs" / "runs" / r.run_key / "output" / "rankings.json"
                ).read_bytes()
        grade = grade_submission(task.contract, answers, data, recover=True)
        assert grade.score == pytest.approx(r.score_recovered, abs=1e-12)
        assert grade.score_strict == pytest.approx(r.score_strict, abs=1e-12)
        if r.outcome == "recovered":
            assert grade.recovered_departures == [r.departures]
    thresholds = runs.groupby("task_id")["threshold"].nunique()
    assert (thresholds == 1).all() and runs["threshold"].between(0, 1).all()


def test_a_simulated_study_carries_seeded_trajectories(tmp_path) -> None:
    """Every scored run folder holds a trajectory in the format ``spu analyze`` reads,
    submitting the run's orders, the same for the same seed; the table's tool calls are
    the trajectory's, and GPU work is tried only where the sampled device says so."""
    from spu.analysis.runs import read_run
    from spu.tracking.trajectories import iter_steps

    params = SimulationParameters(configs=PAPER_CONFIGS[:2], repeats=0)
    runs = simulate_study(tmp_path / "a", params, seed=5)
    again = simulate_study(tmp_path / "b", params, seed=5)
    pd.testing.assert_frame_equal(runs, again)
    scored = runs[runs["scored"]]
    for r in scored.head(25).itertuples(index=False):
        folder_a = tmp_path / "a" / "outputs" / "runs" / r.run_key
        folder_b = tmp_path / "b" / "outputs" / "runs" / r.run_key
        steps = list(iter_steps(folder_a / "trajectory.jsonl.gz"))
        assert [s.model_dump() for s in steps] == [
            s.model_dump() for s in iter_steps(folder_b / "trajectory.jsonl.gz")]
        assert sum(len(s.tool_calls) for s in steps) == r.tool_calls
        reading = read_run(folder_a)
        features = reading.features
        assert features["config"] == r.config and features["score"] == pytest.approx(
            r.score_recovered)
        assert features["gpu_measured"] == bool(r.used_gpu)
        assert not features["used_gpu"] or r.used_gpu  # executed GPU work only where tried
        assert features["first_complete_step"] is not None
