"""Agreement, consensus (paper E.8) and the monotone prior (4.2), on task packages and run
folders written to disk, read the way ``spu stats --tasks --runs-dir`` reads them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from spu.stats.agreement import agreement_analysis, consensus_orders, rank_agreement
from spu.stats.monotone import abs_spearman, monotone_prior
from spu.stats.runs_table import check_runs_table
from spu.stats.submissions import load_submitted_orders, load_task_set, orders_from_bytes
from tests.stats.conftest import run_row, write_run, write_task

ORDERS = {"A": ["a", "b", "c", "d"], "B": ["a", "b", "d", "c"], "C": ["b", "a", "c", "d"]}
"""Measured a < b < c < d. A is right (1.0); B and C swap one adjacent pair: rho =
1 - 6 * 2 / (4 * 15) = 0.8."""


@pytest.fixture
def setting(tmp_path):
    write_task(tmp_path / "tasks", "t1", {"G": {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}})
    out = tmp_path / "outputs"
    rows = []
    for config, order in ORDERS.items():
        key = f"key-{config}"
        if config == "C":  # a recovered file: rankings keyed by group (departure 1)
            raw = b'{"task_id": "t1", "rankings": {"G": ["b", "a", "c", "d"]}}'
            write_run(out, key, "t1", None, raw=raw)
        else:
            write_run(out, key, "t1", [{"group_id": "G", "order": order}])
        score = 1.0 if config == "A" else 0.8
        rows.append(run_row(config, "t1", score, run_key=key,
                            outcome="recovered" if config == "C" else "valid"))
    runs = check_runs_table(pd.DataFrame(rows))
    tasks = load_task_set([tmp_path / "tasks"])
    return runs, tasks, out


def test_orders_are_read_from_run_folders_recovering_departures(setting) -> None:
    runs, _, out = setting
    submitted = load_submitted_orders(out, runs)
    assert submitted.notes == []
    assert {run_id: o["G"] for run_id, o in submitted.orders.items()} == {
        f"{c}-t1-0": ORDERS[c] for c in ORDERS}


def test_agreement_and_consensus_hand_worked(setting) -> None:
    """Agreement: A-B 0.8, A-C 0.8, B-C 0.6 (B positions of C's order: 1, 0, 3, 2, d^2 = 4,
    rho = 1 - 24/60), mean 0.7333. Consensus by average position: a 1/3, b 2/3, c 7/3,
    d 8/3 -> a b c d, score 1.0; the submissions average 2.6/3, so the gain is 0.1333.
    Leave one out: the consensus of the other two is a b c d every time (ties broken by
    id), so A's difference is 0 and B's and C's are 0.8 - 1 = -0.2."""
    runs, tasks, out = setting
    orders = load_submitted_orders(out, runs).orders
    contract = tasks["t1"].package.contract
    assert rank_agreement(contract, orders["B-t1-0"], orders["C-t1-0"]) == pytest.approx(0.6)
    result = agreement_analysis(runs, orders, tasks, ["A", "B", "C"], resamples=100)
    row = result.tasks.iloc[0]
    assert row.agreement_mean == pytest.approx(2.2 / 3)
    assert row.consensus_score == pytest.approx(1.0)
    assert row.consensus_gain == pytest.approx(1.0 - 2.6 / 3)
    loo = result.leave_one_out.set_index("config")["diff_mean"]
    assert loo.to_dict() == pytest.approx({"A": 0.0, "B": -0.2, "C": -0.2})


def test_agreement_is_the_spearman_of_the_two_orders() -> None:
    """Reference: scipy.stats.spearmanr of the two submitted positions."""
    from spu.schema import ComparisonGroup, Contract

    rng = np.random.default_rng(0)
    items = [f"e{i}" for i in range(9)]
    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=items)])
    a, b = list(rng.permutation(items)), list(rng.permutation(items))
    expected = sps.spearmanr([a.index(i) for i in items], [b.index(i) for i in items])[0]
    assert rank_agreement(contract, {"G": a}, {"G": b}) == pytest.approx(expected, abs=1e-12)
    assert np.isnan(rank_agreement(contract, {"G": a}, {"G": b[:-1]}))


def test_consensus_ties_break_by_experiment_id() -> None:
    from spu.schema import ComparisonGroup, Contract

    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["x", "y"])])
    assert consensus_orders(contract, [{"G": ["y", "x"]}, {"G": ["x", "y"]}]) == {
        "G": ["x", "y"]}


def test_unreadable_run_folders_are_reported_not_fatal(tmp_path) -> None:
    out = tmp_path / "outputs"
    write_run(out, "k1", "t1", None, raw=b"not json")
    runs = check_runs_table(pd.DataFrame([run_row("A", "t1", 0.1, run_key="k1"),
                                          run_row("A", "t2", 0.1, run_key="k2")]))
    submitted = load_submitted_orders(out, runs)
    assert submitted.orders == {}
    assert any("no readable rankings" in n for n in submitted.notes)
    assert any("no run folder" in n for n in submitted.notes)
    assert orders_from_bytes(None) is None


def test_monotone_prior_hand_worked(tmp_path) -> None:
    """Group G (5 items): temperature takes 5 values, pressure only 2 (not examined), the
    solvent is text. Measured 3, 1, 4, 5, 2 along temperatures 10..50: rho = 1 - 6 * 16 /
    120 = 0.2. A ranks along temperature (|rho| 1, monotone); B submits the measured order
    (0.2). Group H has three items and is not examined."""
    temps = {"e1": 10, "e2": 20, "e3": 30, "e4": 40, "e5": 50}
    settings = {e: {"temp": t, "pressure": 1 + (t > 30), "solvent": "THF"}
                for e, t in temps.items()}
    write_task(tmp_path / "tasks", "t1",
               {"G": {"e1": 3.0, "e2": 1.0, "e3": 4.0, "e4": 5.0, "e5": 2.0},
                "H": {"h1": 1.0, "h2": 2.0, "h3": 3.0}},
               settings={**settings, "h1": {"temp": 1}, "h2": {"temp": 2}, "h3": {"temp": 3}})
    tasks = load_task_set([tmp_path / "tasks"])
    runs = check_runs_table(pd.DataFrame([run_row("A", "t1", 0.1), run_row("B", "t1", 0.6)]))
    h = ["h1", "h2", "h3"]
    orders = {"A-t1-0": {"G": ["e1", "e2", "e3", "e4", "e5"], "H": h},
              "B-t1-0": {"G": ["e2", "e5", "e1", "e3", "e4"], "H": h}}
    result = monotone_prior(runs, orders, tasks, ["A", "B"])
    groups = result.groups.set_index("config")
    assert set(result.groups["group_id"]) == {"G"}
    assert (groups["n_settings"] == 1).all()
    assert groups.loc["A", "submitted_abs_rho"] == pytest.approx(1.0)
    assert groups.loc["B", "submitted_abs_rho"] == pytest.approx(0.2)
    assert groups["measured_abs_rho"].tolist() == pytest.approx([0.2, 0.2])
    assert groups["submitted_monotone"].tolist() == [True, False]
    configs = result.configs.set_index("config")
    assert configs.loc["A", "submitted_monotone_share"] == 1.0
    assert configs.loc["A", "measured_monotone_share"] == 0.0


def test_abs_spearman_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 4, 12).astype(float), rng.normal(size=12)
    assert abs_spearman(x, y) == pytest.approx(abs(sps.spearmanr(x, y)[0]), abs=1e-12)
    assert np.isnan(abs_spearman(np.ones(4), y[:4]))


def test_canonical_file_is_read_as_it_is(tmp_path) -> None:
    """A canonical file goes through the grader's normalization unchanged: same groups,
    same orders (ids as text), a group listed twice left out, extra keys ignored."""
    from spu.grading.recovery import normalize_departures

    document = {"task_id": "t", "task_version": "1", "rankings": [
        {"group_id": "G", "order": ["b", "a", "c"], "note": "extra key"},
        {"group_id": "H", "order": [2, 1]},
        {"group_id": "D", "order": ["x"]}, {"group_id": "D", "order": ["y"]}]}
    assert normalize_departures(document)[1] == []
    data = json.dumps(document).encode()
    assert orders_from_bytes(data) == {"G": ["b", "a", "c"], "H": ["2", "1"]}
    # The same orders behind a departure (rankings keyed by group) read the same.
    keyed = {"task_id": "t", "rankings": {"G": ["b", "a", "c"], "H": [2, 1]}}
    assert orders_from_bytes(json.dumps(keyed).encode()) == {"G": ["b", "a", "c"],
                                                            "H": ["2", "1"]}
    for unreadable in (b"not json", b"[1, 2]", b'{"rankings": [["a"]]}', b'{"task_id": "t"}'):
        assert orders_from_bytes(unreadable) is None


def test_run_json_index_is_built_only_for_rows_without_a_folder(tmp_path, monkeypatch) -> None:
    """Rows found by run key never read the other run folders' ``run.json``; the first row
    whose folder is missing builds the (model, harness, effort, task, repeat) index once."""
    import spu.stats.submissions as submissions

    out = tmp_path / "outputs"
    identity = {"model": "m", "harness": "h", "effort": "e"}
    write_run(out, "k1", "t1", [{"group_id": "G", "order": ["a", "b"]}])
    for key, task in (("other-a", "t2"), ("other-b", "t3")):
        folder = write_run(out, key, task, [{"group_id": "G", "order": ["b", "a"]}])
        (folder / "run.json").write_text(json.dumps(
            {**identity, "run_key": key, "task_id": task, "repeat": 0}))
    (out / "runs" / "junk").mkdir()
    (out / "runs" / "junk" / "run.json").write_text("not json")
    builds: list[Path] = []
    build = submissions._folders_by_identity

    def counted(base: Path, notes: list[str]) -> dict[tuple[str, ...], Path]:
        builds.append(base)
        return build(base, notes)

    monkeypatch.setattr(submissions, "_folders_by_identity", counted)
    keyed = run_row("A", "t1", 0.1, run_key="k1", **identity)
    runs = check_runs_table(pd.DataFrame([keyed]))
    found = load_submitted_orders(out, runs)
    assert found.orders == {"A-t1-0": {"G": ["a", "b"]}} and found.notes == []
    assert builds == []

    lost = [run_row("A", task, 0.2, run_key=f"gone-{task}", **identity) for task in ("t2", "t3")]
    runs = check_runs_table(pd.DataFrame([keyed, *lost]))
    found = load_submitted_orders(out, runs)
    assert found.orders == {"A-t1-0": {"G": ["a", "b"]}, "A-t2-0": {"G": ["b", "a"]},
                            "A-t3-0": {"G": ["b", "a"]}}
    assert builds == [out / "runs"]
    assert [n for n in found.notes if "junk" in n] == [
        f"{out / 'runs' / 'junk' / 'run.json'}: skipped "
        f"(JSONDecodeError: Expecting value: line 1 column 1 (char 0))"]


def test_consensus_scores_are_what_the_submitted_file_would_get(tmp_path) -> None:
    """The consensus and leave-one-out scores (one grading key per task) equal the grade
    of a file listing the same orders, as ``spu grade`` gives it."""
    from spu.grading.rules import grade_submission

    groups = {"G": {"a": 1.0, "b": 3.0, "c": 2.0, "d": 4.0}, "H": {"x": 2.0, "y": 1.0}}
    write_task(tmp_path / "tasks", "t1", groups, weights={"G": 0.7, "H": 0.3})
    tasks = load_task_set([tmp_path / "tasks"])
    contract, answers = tasks["t1"].package.contract, tasks["t1"].answers
    submitted = {"A": {"G": ["d", "a", "b", "c"], "H": ["x", "y"]},
                 "B": {"G": ["a", "c", "b", "d"], "H": ["y", "x"]},
                 "C": {"G": ["c", "a", "d", "b"]}}
    runs = check_runs_table(pd.DataFrame(
        [run_row(c, "t1", 0.1 * i) for i, c in enumerate(submitted)]))
    orders = {f"{c}-t1-0": o for c, o in submitted.items()}
    result = agreement_analysis(runs, orders, tasks, list(submitted), resamples=50)

    def graded(o: dict[str, list[str]]) -> float:
        document = {"task_id": "t1", "task_version": "1.0",
                    "rankings": [{"group_id": g, "order": v} for g, v in o.items()]}
        return grade_submission(contract, answers, json.dumps(document).encode()).score

    everyone = consensus_orders(contract, list(submitted.values()))
    assert result.tasks.iloc[0].consensus_score == graded(everyone)
    loo = result.leave_one_out.set_index("config")
    for c in submitted:
        others = consensus_orders(contract, [o for k, o in submitted.items() if k != c])
        assert loo.loc[c, "consensus_mean"] == graded(others)
