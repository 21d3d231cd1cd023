"""Chance thresholds: exact distributions against scipy's permutation test and the paper."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

from spu.grading.chance import chance_threshold, random_task_scores
from spu.schema import AnswerKey, ComparisonGroup, Contract
from spu.tasks.package import load_answers, load_task
from spu.tasks.threshold import (
    convolve,
    count_rho,
    enumerate_rho,
    exact_task_distribution,
    group_distribution,
    task_threshold,
)
from tests.conftest import EXAMPLE_TWO_GROUPS, TASKS, run_module


def one_group(values, name="G1"):
    items = [f"E{100 + k}" for k in range(len(values))]
    contract = Contract(task_id="t", task_version="1", groups=[ComparisonGroup(
        group_id=name, endpoint="y", weight=1.0, items=items)])
    answers = AnswerKey(task_id="t", task_version="1",
                        groups={name: dict(zip(items, map(float, values), strict=True))})
    return contract, answers


def scipy_null(values):
    """Spearman's rho over every ordering, by scipy's exact permutation test."""
    positions = np.arange(len(values), dtype=float)
    centred = positions - positions.mean()

    def rho(x, axis=-1):
        # Spearman's rho of each resample against the positions (vectorized for speed);
        # checked against scipy.stats.spearmanr on the observed data below.
        r = stats.rankdata(x, axis=axis)
        r = r - r.mean(axis=axis, keepdims=True)
        return (r * centred).sum(axis=axis) / np.sqrt((r**2).sum(axis=axis) * (centred**2).sum())

    data = np.asarray(values, dtype=float)
    assert rho(data) == pytest.approx(stats.spearmanr(data, positions).statistic, abs=1e-12)
    result = stats.permutation_test((data,), rho, permutation_type="pairings",
                                    n_resamples=np.inf, alternative="greater", vectorized=True)
    return np.sort(result.null_distribution)


CASES = [
    [1, 2],
    [3, 1, 2],
    [1, 2, 3, 4],
    [5.0, 1.0, 4.0, 2.0, 3.0],
    [1, 1, 2, 3, 5, 8],
    [2, 7, 1, 8, 2, 8, 1],
    [0.3, 0.1, 0.4, 0.1, 0.5, 0.9, 0.2, 0.6],
    [1, 2, 3, 4, 5, 6, 7, 8],
]


@pytest.mark.parametrize("values", CASES, ids=lambda v: f"n{len(v)}")
def test_enumeration_matches_scipy_permutation_test(values) -> None:
    ours = enumerate_rho(values)
    null = scipy_null(values)
    # Same distribution: every rho with the same probability (tolerance 1e-12).
    expanded = np.repeat(ours.values, np.round(ours.probabilities * null.size).astype(int))
    np.testing.assert_allclose(expanded, null, atol=1e-12)
    # The exact 95th percentile is the inverse CDF of that distribution.
    cdf_index = math.ceil(0.95 * null.size - 1e-9) - 1
    assert ours.quantile(0.95) == pytest.approx(null[cdf_index], abs=1e-12)


@pytest.mark.parametrize("values", CASES[3:], ids=lambda v: f"n{len(v)}")
def test_dynamic_programming_matches_enumeration(values) -> None:
    a, b = enumerate_rho(values), count_rho(values)
    np.testing.assert_allclose(a.values, b.values, atol=1e-12)
    np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-15)


def test_dynamic_programming_matches_brute_force_at_nine() -> None:
    values = [4, 1, 4, 9, 2, 6, 5, 3, 5]  # ties included
    ranks = stats.rankdata(values)
    perms = np.array(list(itertools.permutations(range(9))))
    # Row i orders the items perms[i]; rho is Pearson's r of positions and average ranks.
    by_position = ranks[perms] - ranks.mean()
    positions = np.arange(9) - 4.0
    rho = by_position @ positions / np.sqrt((by_position**2).sum(axis=1) * (positions**2).sum())
    brute, counts = np.unique(np.round(rho, 12), return_counts=True)
    dist = count_rho(values)
    np.testing.assert_allclose(dist.values, brute, atol=1e-12)
    np.testing.assert_allclose(dist.probabilities, counts / perms.shape[0], atol=1e-15)


def test_four_items_hand_worked() -> None:
    # Of the 24 orderings of 4 distinct items, rho = 1 for one and 0.8 for three (one
    # adjacent swap: 1 - 6*2/(4*15)); P(rho <= 0.6) = 20/24 < 0.95 <= P(rho <= 0.8) = 23/24.
    d = enumerate_rho([1, 2, 3, 4])
    assert d.tail_probability(1.0) == pytest.approx(1 / 24)
    assert d.tail_probability(0.8) == pytest.approx(4 / 24)
    assert d.quantile(0.95) == pytest.approx(0.8)


def test_paper_figure_two_thirteen_distinct_items() -> None:
    """Paper Figure 2: 13 distinct items have a chance threshold of about 0.47."""
    contract, answers = one_group(range(13))
    report = task_threshold(contract, answers, presented=contract.groups[0].items)
    assert report.exact_method == "dynamic-programming"
    assert report.exact_threshold == pytest.approx(0.478, abs=0.0005)
    assert report.threshold == pytest.approx(0.47, abs=0.02)  # 4,000 draws, seed 0


@pytest.mark.parametrize("n", [4, 5, 6])
def test_paper_small_tasks_lie_between_071_and_080(n) -> None:
    """Paper 2.5: the 17 tasks with fewer than seven experiments have 0.71 to 0.80."""
    contract, answers = one_group(range(n))
    report = task_threshold(contract, answers, presented=contract.groups[0].items)
    assert report.exact_method == "enumeration"
    assert 0.71 <= report.exact_threshold <= 0.80 + 1e-12
    assert 0.71 <= report.threshold <= 0.80 + 1e-12


def test_sampled_threshold_is_the_grading_modules() -> None:
    task = load_task(EXAMPLE_TWO_GROUPS)
    answers = load_answers(task.answers_path())
    report = task_threshold(task.contract, answers, [r.experiment_id for r in task.targets()])
    assert report.threshold == chance_threshold(task.contract, answers)
    assert report.threshold_method == "sampled"


def test_convolution_agrees_with_many_random_submissions() -> None:
    task = load_task(EXAMPLE_TWO_GROUPS)  # groups of 6 and 4 (one tie), weights 0.6 and 0.4
    answers = load_answers(task.answers_path())
    dist, methods, _ = exact_task_distribution(task.contract, answers)
    assert dist is not None and dist.method == "convolution"
    assert methods == {"G1": "enumeration", "G2": "enumeration"}
    draws = random_task_scores(task.contract, answers, draws=200_000, seed=7)
    # Kolmogorov distance between the exact CDF and 200,000 draws: with n = 200,000 the
    # 99.9% quantile of the distance is about 1.95 / sqrt(n) = 0.0044.
    grid = dist.values
    exact_cdf = np.cumsum(dist.probabilities)
    empirical = np.searchsorted(np.sort(draws), grid + 1e-9, side="right") / draws.size
    assert np.max(np.abs(exact_cdf - empirical)) < 0.0044
    assert dist.probabilities.sum() == pytest.approx(1.0, abs=1e-12)


def test_convolution_of_two_coin_groups_hand_worked() -> None:
    two = enumerate_rho([1.0, 2.0])
    d = convolve([(0.7, two), (0.3, two)])
    assert d.values.tolist() == pytest.approx([-1.0, -0.4, 0.4, 1.0])
    assert d.probabilities.tolist() == pytest.approx([0.25] * 4)
    assert d.quantile(0.95) == pytest.approx(1.0)


def test_large_groups_are_sampled_only() -> None:
    contract, answers = one_group(range(30))
    assert group_distribution(range(30)) is None
    report = task_threshold(contract, answers, presented=contract.groups[0].items)
    assert report.exact_threshold is None and report.exact_method is None
    assert "G1 (30 experiments)" in report.exact_note
    assert report.group_methods == {"G1": "sampled"}


def test_attainable_maximum_with_ties_hand_worked() -> None:
    # Values 1, 1, 2: centred ranks -0.5, -0.5, 1 against positions -1, 0, 1 give
    # covariance 1.5, variances 1.5 and 2, so rho = 1.5 / sqrt(3) = sqrt(3)/2.
    contract, answers = one_group([1, 1, 2])
    report = task_threshold(contract, answers, presented=contract.groups[0].items)
    assert report.attainable_max == pytest.approx(math.sqrt(3) / 2, abs=1e-12)


def test_presented_order_follows_targets_rows() -> None:
    contract, answers = one_group([10, 20, 30, 40])
    items = contract.groups[0].items
    up = task_threshold(contract, answers, presented=items)
    down = task_threshold(contract, answers, presented=items[::-1])
    assert up.presented_order_score == pytest.approx(1.0)
    assert down.presented_order_score == pytest.approx(-1.0)
    assert up.presented_order_beats_chance and not down.presented_order_beats_chance


def test_cli_threshold_reports_the_presented_order_either_way(tmp_path) -> None:
    """Above or below chance, ``spu task threshold`` states the presented-order score."""
    from tests.tasks.conftest import write_task

    rows_up = write_task(tmp_path / "up", groups={"G1": {"weight": 1.0, "values": {
        "E417": 1.0, "E902": 2.0, "E233": 3.0, "E781": 4.0, "E560": 5.0}}},
        rows=[{"experiment_id": e, "group_id": "G1", "x": "a"}
              for e in ["E417", "E902", "E233", "E781", "E560"]])
    for task, side in ((rows_up, "above"), (EXAMPLE_TWO_GROUPS, "not above")):
        out = run_module(["spu", "task", "threshold", str(task)])
        assert out.returncode == 0, out.stderr
        assert f"({side} the chance threshold" in out.stdout
        data = json.loads(run_module(["spu", "task", "threshold", str(task), "--json"]).stdout)
        assert data["presented_order_beats_chance"] is (side == "above")
        assert isinstance(data["presented_order_score"], float)


def test_cli_threshold_json_has_the_spec_keys() -> None:
    out = run_module(["spu", "task", "threshold", str(EXAMPLE_TWO_GROUPS), "--json"])
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"task_id", "threshold", "draws", "seed", "attainable_max",
            "presented_order_score"} <= set(data)
    assert data["draws"] == 4000 and data["seed"] == 0
    assert data["threshold_method"] == "sampled"
    assert data["exact_method"] == "convolution"
    exact = run_module(["spu", "task", "threshold", str(EXAMPLE_TWO_GROUPS), "--json",
                        "--exact", "--draws", "500", "--seed", "3"])
    data_exact = json.loads(exact.stdout)
    assert data_exact["threshold_method"] == "exact"
    assert data_exact["threshold"] == data_exact["exact_threshold"] == data["exact_threshold"]
    assert data_exact["draws"] == 500 and data_exact["seed"] == 3


def test_cli_threshold_on_a_missing_task_exits_2(tmp_path) -> None:
    out = run_module(["spu", "task", "threshold", str(tmp_path / "nope")])
    assert out.returncode == 2
    assert "does not exist" in out.stderr


def test_shipped_thirteen_item_task_has_the_papers_threshold() -> None:
    """The cement task has one group of 13 distinct values, like the paper's Figure 2."""
    out = run_module(["spu", "task", "threshold", str(TASKS / "spu-bhpt"), "--json"])
    data = json.loads(out.stdout)
    assert data["exact_threshold"] == pytest.approx(0.478, abs=0.0005)


def test_cli_threshold_on_a_broken_answer_key_exits_2(make_task) -> None:
    task = make_task(answers={"task_id": "spu-test", "task_version": "1.0",
                              "groups": {"G1": {"E417": 1.0}, "G2": {"E345": 2.0}}})
    out = run_module(["spu", "task", "threshold", str(task)])
    assert out.returncode == 2
    assert "answers.json" in out.stderr and "missing" in out.stderr


@pytest.mark.parametrize("values", [[1, 2, 2, 3, 5, 5], [4, 1, 3, 2, 7, 6, 5]])
def test_exact_support_is_the_graders_scores_to_the_last_bit(values) -> None:
    """Every value of the exact distribution is a score the grader gives some ordering."""
    from spu.grading.rules import GradingKey

    contract, answers = one_group(values)
    items = contract.groups[0].items
    key = GradingKey.build(contract, answers)
    graded = {key.score_orders({"G1": list(p)}) for p in itertools.permutations(items)}
    assert set(enumerate_rho(values).values.tolist()) == graded


@pytest.mark.parametrize("values", [[2.0, 2.0, 2.0], [1.0]])
def test_a_group_without_a_defined_rho_has_threshold_zero_not_nan(values) -> None:
    """The grader scores such a group 0 whatever the order; so do both thresholds."""
    contract, answers = one_group(values)
    report = task_threshold(contract, answers, presented=contract.groups[0].items)
    assert report.exact_threshold == 0.0 and report.sampled_threshold == 0.0
    json.dumps(report.public_json(), allow_nan=False)  # valid JSON: no NaN
