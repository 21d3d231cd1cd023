"""The fast paths of ``spu analyze`` give what the plain ones give.

Each speed-up is checked against a reference computed the straightforward way: the
pydantic step reader, sklearn's ``cross_val_predict``, one bootstrap solve at a time,
a Python loop over pairs of runs, a DataFrame per run, the label patterns searched
without their word filters.
"""

from __future__ import annotations

import json
import pickle
import random
import re
from collections import Counter
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spu import activities
from spu.analysis import trajectory_analysis
from spu.analysis.associations import (
    CLASSIFIER_FEATURES,
    _FixedEffects,
    association_inputs,
    configuration_classifier,
    start_classifier,
    task_resample_counts,
    worker_pool,
)
from spu.analysis.runs import read_run
from spu.analysis.trajectory_analysis import (
    CLASSES,
    GRID,
    SMOOTHING_SD,
    activity_time,
    family_jaccard,
    jaccard,
    run_folders,
)
from spu.grading.rules import GradingKey
from spu.stats.resampling import rng_for
from spu.tasks.package import discover_tasks, load_answers, load_task
from spu.testing.corpus import make_corpus
from spu.tracking.trajectories import iter_steps
from tests.analysis.test_associations import features_table

TASKS = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Both CLIs, long outputs (the scan window), a few repeats."""
    out = tmp_path_factory.mktemp("corpus")
    make_corpus(out, n_runs=16, task_root=TASKS, calls=25, seed=11, output_blob=150_000,
                repeats=2)
    return out


def _keys() -> dict[str, GradingKey]:
    keys = {}
    for path in discover_tasks(TASKS):
        task = load_task(path)
        try:
            keys[task.id] = GradingKey.build(task.contract, load_answers(task.answers_path()))
        except (OSError, ValueError):
            continue
    return keys


def _features_json(features: dict) -> str:
    return json.dumps(features, sort_keys=True, default=str)  # NaN as NaN: equal as text


def test_read_run_with_step_views_equals_the_pydantic_reader(corpus) -> None:
    """Every call row and feature of every run is the same with either step reader, and
    survives the trip from a worker process (pickle) unchanged."""
    keys = _keys()
    folders = run_folders(corpus)
    assert len(folders) == 16
    for folder in folders:
        fast = read_run(folder, keys)
        plain = read_run(folder, keys, reader=iter_steps)
        assert fast.calls == plain.calls and len(fast.calls) > 10
        assert _features_json(fast.features) == _features_json(plain.features)
        assert (fast.group_sources, fast.fetched, fast.operators, fast.gpu_errors,
                fast.gpu_families, fast.notes) == (
            plain.group_sources, plain.fetched, plain.operators, plain.gpu_errors,
            plain.gpu_families, plain.notes)
        back = pickle.loads(pickle.dumps(fast))
        assert back.calls == fast.calls


def test_analysis_in_worker_processes_equals_one_process(corpus, tmp_path) -> None:
    """Two worker processes (reading, then the classifier's folds) write the same files as
    one process."""
    written = {}
    for jobs in (1, 2):
        opt = trajectory_analysis.AnalyzeOptions(task_roots=(TASKS,), resamples=300,
                                                 trees=30, jobs=jobs)
        result = trajectory_analysis.analyze_runs(corpus, opt)
        out = tmp_path / str(jobs)
        trajectory_analysis.write_analysis(result, out)
        written[jobs] = {p.name: p.read_bytes() for p in out.glob("*.csv")}
    assert written[1] == written[2] and len(written[1]) >= 19


def _classifier_table(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 90
    f = pd.DataFrame({c: rng.normal(size=n) for c in CLASSIFIER_FEATURES})
    f["config"] = np.repeat(["a-max", "b-max", "c-low"], n // 3)
    f["n_calls"] += (f["config"] == "a-max") * 2.0  # something to learn
    f["harness"], f["scored"] = "claude_code", True
    f.loc[::7, "first_complete_t"] = np.nan
    return f


def test_classifier_folds_anywhere_equal_cross_val_predict() -> None:
    """The folds fitted here, in its own processes or in a shared pool predict what
    sklearn's cross_val_predict predicts."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.metrics import confusion_matrix
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    f = _classifier_table()
    x = f[list(CLASSIFIER_FEATURES)].astype(float).fillna(-1.0).to_numpy()
    y = f["config"].to_numpy()
    forest = RandomForestClassifier(n_estimators=40, random_state=3, n_jobs=1)
    cv = StratifiedKFold(n_splits=5, shuffle=True, random_state=3)
    predicted = cross_val_predict(forest, x, y, cv=cv)
    labels = sorted(set(y))
    expected = confusion_matrix(y, predicted, labels=labels)
    results = [configuration_classifier(f, seed=3, n_estimators=40, jobs=jobs)
               for jobs in (1, 2)]
    with worker_pool(2) as pool:
        pending = start_classifier(f, seed=3, n_estimators=40, executor=pool)
        assert pending is not None
        results.append(pending.result())
    for result in results:
        assert result is not None
        assert (result.confusion.to_numpy() == expected).all()
        assert result.accuracy == float(np.mean(predicted == y))


def test_batched_resamples_equal_one_solve_at_a_time() -> None:
    """The same resamples as one rng.integers draw per resample, and coefficients equal to
    the one-at-a-time solve within 1e-12 (the sums run in another order)."""
    for seed in (0, 3):
        f = features_table(seed=seed)
        data = association_inputs(f)
        fit = _FixedEffects(data.score, data.x, data.task, data.config, data.n_tasks,
                            data.n_configs)
        rng = rng_for(seed, "associations")
        counts = [np.bincount(rng.integers(0, data.n_tasks, data.n_tasks),
                              minlength=data.n_tasks).astype(float) for _ in range(1200)]
        batches = list(task_resample_counts(rng_for(seed, "associations"), data.n_tasks,
                                            1200))
        assert [len(b) for b in batches] == [500, 500, 200]
        assert np.array_equal(np.concatenate(batches), np.array(counts))
        one = np.array([fit.solve(u) for u in counts])
        many = fit.solve_many(np.array(counts))
        assert np.array_equal(np.isnan(one), np.isnan(many))
        assert np.allclose(one, many, rtol=1e-12, atol=1e-12, equal_nan=True)


def _jaccard_by_pairs(features: pd.DataFrame) -> pd.DataFrame:
    """Mean Jaccard by configuration pair and scope, pair by pair (the plain loop)."""
    sets = [frozenset(s.split(";")) - {""} for s in features["method_families"].fillna("")]
    configs = features["config"].astype(str).tolist()
    tasks = features["task_id"].astype(str).tolist()
    sums: dict[tuple[str, str, str], float] = {}
    counts: Counter[tuple[str, str, str]] = Counter()
    for i, j in combinations(range(len(sets)), 2):
        a, b = sorted((configs[i], configs[j]))
        scope = "same_task" if tasks[i] == tasks[j] else "different_tasks"
        sums[(a, b, scope)] = sums.get((a, b, scope), 0.0) + jaccard(sets[i], sets[j])
        counts[(a, b, scope)] += 1
    rows = [{"config_a": a, "config_b": b, "scope": s, "n_pairs": counts[(a, b, s)],
             "mean_jaccard": sums[(a, b, s)] / counts[(a, b, s)]} for (a, b, s) in sorted(counts)]
    return pd.DataFrame(rows, columns=["config_a", "config_b", "scope", "n_pairs",
                                       "mean_jaccard"])


@pytest.mark.parametrize("block", [7, 1 << 21])
def test_family_jaccard_equals_the_pairwise_loop(monkeypatch, block) -> None:
    """Exactly equal (the float sums added in the same order), in blocks of any size."""
    monkeypatch.setattr(trajectory_analysis, "PAIRS_PER_BLOCK", block)
    rng = np.random.default_rng(5)
    families = ["dft", "monte_carlo", "docking", "cheminformatics"]
    n = 150
    f = pd.DataFrame({
        "config": rng.choice(["p-max", "q-max", "r-low", "s-high"], n),
        "task_id": rng.choice([f"t{k}" for k in range(9)], n),
        "method_families": [";".join(sorted(set(rng.choice(families, rng.integers(0, 4)))))
                            for _ in range(n)]})
    f.loc[3, "method_families"] = None
    expected = _jaccard_by_pairs(f)
    got = family_jaccard(f)
    assert got.equals(expected) and len(got) > 10
    assert family_jaccard(f.iloc[:1]).equals(_jaccard_by_pairs(f.iloc[:1]))


def _activity_time_by_run(calls: pd.DataFrame) -> pd.DataFrame:
    """Figure 14a with a DataFrame per run (the plain groupby)."""
    class_index = {c: i for i, c in enumerate(CLASSES)}
    total = np.zeros((len(GRID), len(CLASSES)))
    n_runs = 0
    for _, run in calls.groupby("run_key", sort=False):
        t = run["t_norm"].to_numpy(float)
        w = run["time_s"].to_numpy(float)
        if w.sum() <= 0:
            w = np.ones_like(w)
        kernel = np.exp(-0.5 * ((GRID[:, None] - t[None, :]) / SMOOTHING_SD) ** 2)
        by_class = np.zeros((len(GRID), len(CLASSES)))
        cls = run["activity_class"].map(class_index).to_numpy(int)
        for k in range(len(CLASSES)):
            mask = cls == k
            if mask.any():
                by_class[:, k] = kernel[:, mask] @ w[mask]
        sums = by_class.sum(axis=1, keepdims=True)
        total += np.divide(by_class, sums, out=np.zeros_like(by_class), where=sums > 0)
        n_runs += 1
    out = pd.DataFrame(total / max(n_runs, 1), columns=list(CLASSES))
    out.insert(0, "t", GRID)
    return out


def test_activity_time_equals_a_dataframe_per_run() -> None:
    """Exactly equal, with the calls of a run not next to each other in the table."""
    rng = np.random.default_rng(2)
    n = 400
    calls = pd.DataFrame({"run_key": rng.choice([f"r{k}" for k in range(12)], n),
                          "t_norm": rng.random(n), "time_s": rng.exponential(20.0, n),
                          "activity_class": rng.choice(list(CLASSES), n)})
    calls.loc[calls["run_key"] == "r3", "time_s"] = 0.0  # counted one unit per call
    features = pd.DataFrame({"run_key": sorted(set(calls["run_key"]))})
    assert activity_time(calls, features).equals(_activity_time_by_run(calls))


# The label patterns as they were searched before their word filters.
_BACKGROUND_PLAIN = re.compile(r"(?<![&>])&\s*(?:$|\n|;)|\bnohup\b|\bsetsid\b|\bdisown\b|"
                               r"\bscreen\s+-d|\btmux\s+new")
_PIECES = ["&", ">", ">>", "<", " ", "\n", ";", "|", "a", "x&", "&&", "2>&1", "nohup",
           "setsid", "disown", "screen -d", "tmux new", "pip install", "uv add", "install",
           "tee", "cp", "mv", "open('f', 'w')", ".write(", "json.dump(", "to_csv(",
           "savetxt(", "python -m pip", "'pip', 'install'", "install.packages(", "("]


def test_word_filters_keep_every_match() -> None:
    """A pattern searched only when one of its words is present finds what it found
    searched everywhere (random commands made of the patterns' pieces)."""
    rng = random.Random(0)
    for _ in range(20_000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 7)))
        assert activities._starts_background(text) == bool(_BACKGROUND_PLAIN.search(text)), text
        for words, pattern in ((activities._INSTALL_WORDS, activities._INSTALL),
                               (activities._WRITE_WORDS, activities._WRITE_OPS)):
            filtered = activities._may_match(text, words) and bool(pattern.search(text))
            assert filtered == bool(pattern.search(text)), text


def test_corpus_of_an_exact_number_of_calls(tmp_path) -> None:
    """total_calls fixes the corpus's tool calls: the paper's 227,103 over 1,155 runs
    scales down to any total."""
    folders = make_corpus(tmp_path, n_runs=14, task_root=TASKS, seed=2, total_calls=1_000)
    counted = 0
    for folder in folders:
        record = json.loads((folder / "run.json").read_text())
        steps = list(iter_steps(folder / "trajectory.jsonl.gz"))
        assert record["tool_calls"] == sum(len(s.tool_calls) for s in steps)
        counted += record["tool_calls"]
    assert counted == 1_000
    # every run still holds its first complete ranking
    readings = [read_run(folder) for folder in folders]
    assert all(r.features["first_complete_source"] for r in readings)
