"""The paper's populations by default, the other readings as options, ties compared exactly.

Issue 43: an independent statistician found four populations that departed from the
paper's sentences and a tie that float sums broke. Each test names the sentence it follows
and works the expected number by hand (or with scipy on the exact values).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.stats.analysis import StatsOptions, analyze
from spu.stats.effort import EffortPair, effort_table, effort_tasks
from spu.stats.means import above_chance
from spu.stats.pair_order import run_pair_order
from spu.stats.paired import wilcoxon_p
from spu.stats.rules import BASES, STATS_RULES
from spu.stats.runs_table import check_runs_table
from spu.stats.tasks import kruskal_wallis_disciplines, task_table
from spu.stats.ties import TIE_DECIMALS, exact, exact_mean
from tests.stats.conftest import run_row


def _kw_runs() -> pd.DataFrame:
    """Four public tasks of three configurations; two task means equal 32/65.

    chemistry: t1 = (2/65 + 1 + 29/65) / 3 = 32/65, t2 = 0;
    biology:   t3 = (-34/65 + 1 + 1) / 3 = 32/65, t4 = 1.
    """
    scores = {"t1": ("chemistry", [2 / 65, 1.0, 29 / 65]),
              "t2": ("chemistry", [0.0, 0.0, 0.0]),
              "t3": ("biology", [-34 / 65, 1.0, 1.0]),
              "t4": ("biology", [1.0, 1.0, 1.0])}
    return pd.DataFrame([run_row(c, t, s, discipline=d)
                         for t, (d, values) in scores.items()
                         for c, s in zip("ABC", values, strict=True)])


def test_equal_task_means_tie_in_the_kruskal_wallis_test() -> None:
    """3.3: "a Kruskal-Wallis test over these task means". The two means of 32/65 differ in
    the last bit of their float sums (np.mean gives 0.4923076923076923 and ...234), which
    would rank them 2 and 3 (H = 2.4). Tied, they share rank 2.5: rank sums 3.5 and 6.5,
    H = 12 / (4 * 5) * (3.5^2 / 2 + 6.5^2 / 2) - 3 * 5 = 1.35, tie correction
    1 - (2^3 - 2) / (4^3 - 4) = 0.9, so H = 1.5 on 1 df, P = chi2.sf(1.5, 1)."""
    assert np.mean([2 / 65, 1.0, 29 / 65]) != np.mean([-34 / 65, 1.0, 1.0])
    tasks = task_table(_kw_runs()).set_index("task_id")
    assert tasks.loc["t1", "task_mean"] == tasks.loc["t3", "task_mean"]
    assert tasks.loc["t1", "task_mean"] == pytest.approx(32 / 65, abs=10.0 ** -TIE_DECIMALS)
    result = kruskal_wallis_disciplines(tasks.reset_index())
    assert result["statistic"] == pytest.approx(1.5, rel=1e-12)
    assert result["p_value"] == pytest.approx(sps.chi2.sf(1.5, 1), rel=1e-12)
    # scipy on the exact means (Fractions made floats once, equal) gives the same
    exact_means = [float(Fraction(32, 65)), 0.0], [float(Fraction(32, 65)), 1.0]
    assert result["statistic"] == pytest.approx(sps.kruskal(*exact_means).statistic)


def test_the_tie_precision_keeps_distinct_means_apart() -> None:
    """Rounding at 1e-9 merges float noise (about 1e-16) and nothing a score can differ by:
    two Spearman scores of a 500-item group differ by at least 6 / (500 * (500^2 - 1))."""
    assert exact(0.1 + 0.2) == exact(0.3) and 0.1 + 0.2 != 0.3
    step = 6 / (500 * (500**2 - 1))
    assert step > 10.0 ** -TIE_DECIMALS * 4
    assert exact(0.5) != exact(0.5 + step)
    assert exact_mean([0.1, 0.2, 0.3]) == exact_mean([0.3, 0.1, 0.2])
    assert math.isnan(exact(float("nan")))


def test_a_zero_paired_difference_is_zero_and_a_score_at_the_threshold_is_not_above() -> None:
    """3.1's Wilcoxon test drops zero differences, and a tie of |d| takes the average rank;
    0.3 - (0.1 + 0.2) is -5.6e-17 in floats, zero exactly. Above chance is a score *above*
    the threshold (2.5): 0.1 + 0.2 against a threshold of 0.3 is not."""
    d = np.array([0.3 - (0.1 + 0.2), 0.2, -0.1, 0.2, 0.5])
    assert wilcoxon_p(d) == pytest.approx(
        tuple(sps.wilcoxon(np.array([0.0, 0.2, -0.1, 0.2, 0.5]))))
    assert above_chance(np.array([0.1 + 0.2, 0.5]), np.array([0.3, 0.3])) == (1, 2)


def _effort_runs() -> pd.DataFrame:
    """Medium (M) and Max (X) on four tasks; X has repeats on t1-t3 (the tasks of 3.6) and
    its official run on t3 is unscored."""
    rows = []
    medium = {"t1": 0.5, "t2": 0.2, "t3": 0.6, "t4": 0.4}
    official = {"t1": 0.3, "t2": 0.4, "t3": None, "t4": 0.1}
    repeats = {"t1": [0.1, 0.3], "t2": [0.4, 0.6, 0.2], "t3": [0.0, 0.2]}
    m = {"model": "astra", "harness": "codex", "effort": "medium"}
    x = {**m, "effort": "max"}
    for t in medium:
        rows.append(run_row("M", t, medium[t], **m))
        rows.append(run_row("X", t, official[t], **x))
        for k, s in enumerate(repeats.get(t, []), start=1):
            rows.append(run_row("X", t, s, repeat=k, **x))
    return pd.DataFrame(rows)


def test_effort_repeats_mean_uses_the_29_tasks_of_section_3_6() -> None:
    """4.10: "Four ways of scoring Max, including the mean of its five repeated runs on the
    29 tasks of Section 3.6"; 4.5: "The official scores of Astra Medium average 0.004 above
    the mean of the Astra Max repeats on the same tasks".

    By hand: repeat means 0.2, 0.4, 0.1 on t1-t3; Medium minus them: 0.3, -0.2, 0.5, mean
    0.2 over the three tasks (the paper's population, t3 kept although Max's official run
    there is unscored). ``--effort-repeat-tasks official-scored`` keeps t1, t2: 0.05.
    ``official`` stays on the tasks both official runs scored: t1, t2, t4 (0.2, -0.2, 0.3).
    ``all_runs_mean`` averages Max's scored runs: t1 (0.3, 0.1, 0.3) = 0.7/3, t2 0.4,
    t3 0.1: Medium minus them 0.5 - 0.7/3, -0.2, 0.5."""
    runs = check_runs_table(_effort_runs())
    pair = EffortPair("M", "X", "m")
    tasks = effort_tasks(runs, pair)
    assert tasks["task_id"].tolist() == ["t1", "t2", "t3", "t4"]
    paper = effort_table(tasks, runs, pair, resamples=50).set_index("way")
    assert (paper.loc["repeats_mean", "n_tasks"], paper.loc["repeats_mean", "diff"]) == (
        3, pytest.approx(0.2))
    assert paper.loc["official", "n_tasks"] == 3
    assert paper.loc["official", "diff"] == pytest.approx(0.1)
    assert paper.loc["all_runs_mean", "diff"] == pytest.approx(
        (0.5 - 0.7 / 3 - 0.2 + 0.5) / 3)
    option = effort_table(tasks, runs, pair, resamples=50,
                          repeat_tasks="official-scored").set_index("way")
    assert (option.loc["repeats_mean", "n_tasks"], option.loc["repeats_mean", "diff"]) == (
        2, pytest.approx(0.05))


def test_effort_manifest_names_the_population_and_the_option() -> None:
    """The manifest gives effort.csv's rule: the paper's by default, the option named."""
    runs = check_runs_table(_effort_runs())
    default = analyze(runs, StatsOptions(resamples=50, simulations=50, null_draws=50))
    entry = default.manifest["outputs"]["effort.csv"]
    assert entry["basis"] == "paper" and "29 tasks of Section 3.6" in entry["sentence"]
    row = default.summary.set_index("statistic").loc["official M minus repeats mean X"]
    assert (row["value"], row["n"]) == (pytest.approx(0.2), 3)
    option = analyze(runs, StatsOptions(resamples=50, simulations=50, null_draws=50,
                                        effort_repeat_tasks="official-scored"))
    entry = option.manifest["outputs"]["effort.csv"]
    assert entry["basis"] == "option" and "official-scored" in entry["rule"]


def _pair_order_task():
    from spu.schema import AnswerKey, ComparisonGroup, Contract
    from spu.stats.submissions import TaskInfo
    from spu.tasks.package import TaskPackage

    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="G", endpoint="y", weight=0.8, items=["a", "b", "c"]),
        ComparisonGroup(group_id="H", endpoint="y", weight=0.2, items=["d", "e"])])
    answers = AnswerKey(task_id="t", task_version="1", groups={
        "G": {"a": 1.0, "b": 2.0, "c": 3.0}, "H": {"d": 1.0, "e": 2.0}})
    return TaskInfo(TaskPackage(path=None, meta=None, contract=contract), answers)


def test_top1_counts_each_group_once_and_the_pair_share_weights_them() -> None:
    """Appendix F: the pair share "weighting groups as in the task score"; "The top-ranked
    experiment of a group is the measured top 25% ... of the time", each group once.

    Submitted G: b a c (2 of 3 pairs in order, top c hit), H: e d (0 of 1, top d missed).
    Pair share 0.8 * 2/3 + 0.2 * 0 = 0.5333; top-1 (1 + 0) / 2 = 0.5, at random
    (1/3 + 1/2) / 2 = 0.4167. ``--top1-weights weights``: 0.8, and 0.8/3 + 0.1 = 0.3667."""
    info = _pair_order_task()
    orders = {"G": ["b", "a", "c"], "H": ["e", "d"]}
    paper = run_pair_order(orders, info)
    assert paper["pair_share"] == pytest.approx(0.8 * 2 / 3)
    assert (paper["top1"], paper["top1_random"]) == (pytest.approx(0.5),
                                                     pytest.approx(5 / 12))
    weighted = run_pair_order(orders, info, "weights")
    assert weighted["pair_share"] == pytest.approx(paper["pair_share"])
    assert (weighted["top1"], weighted["top1_random"]) == (pytest.approx(0.8),
                                                           pytest.approx(0.8 / 3 + 0.1))


def test_every_file_of_spu_stats_names_its_rule(paper_runs) -> None:
    """Every output file's manifest entry gives its rule, population, basis and the paper's
    sentence; the decomposition's block is a reading, said as one."""
    result = analyze(paper_runs, StatsOptions(resamples=50, simulations=50, null_draws=50))
    outputs = result.manifest["outputs"]
    written = [name for name, out in outputs.items() if out["written"]
               and not str(out.get("source", "spu.stats")).startswith("spu_example_plugin")]
    assert len(written) > 20
    for name in written:
        out = outputs[name]
        assert out["rule"] and out["population"] and out["sentence"], name
        assert out["basis"] in BASES, name
    assert set(STATS_RULES) >= set(written), sorted(set(written) - set(STATS_RULES))
    assert outputs["variance.csv"]["basis"] == "reading"
    assert "nine configurations scored on the same 86" in outputs["variance.csv"]["sentence"]
    assert outputs["tasks.csv"]["basis"] == "paper"
    chosen = analyze(paper_runs, StatsOptions(
        resamples=50, simulations=50, null_draws=50,
        decomposition_configs=tuple(paper_runs["config"].unique()[:3])))
    assert chosen.manifest["outputs"]["variance.csv"]["basis"] == "option"
