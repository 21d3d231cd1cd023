"""``spu analyze``: every run folder under a folder read once, then the tables of paper 4.

:func:`analyze_runs` reads each run (:func:`spu.analysis.runs.read_run`, one pass, one
step at a time) and builds the tables of SPEC section 8 and the figures' inputs;
:func:`write_analysis` writes them as CSV with a ``manifest.json`` saying what was
computed from what and what was skipped, and why.

Files: ``calls.csv``, ``runs_features.csv``, ``associations.csv`` (SPEC 8), and
``activity_time.csv`` (Figure 14a), ``milestones.csv`` (14b), ``families.csv`` (15a-b),
``jaccard.csv`` (15), ``sources.csv`` (15c), ``search_operators.csv`` (15d),
``first_appearance.csv`` (16a), ``revisions.csv`` (17c, 21b, 24d-e), ``self_assessment.csv``
(17b), ``gpu.csv`` and ``gpu_errors.csv`` (22a, c, d), ``gpu_workloads.csv`` (22b),
``gpu_within_config.csv`` (22e), ``audited_tools.csv`` (3.7, 4.1), ``classifier.csv`` and
``classifier_confusion.csv`` (23b), ``profiles.csv`` (23a), ``efforts.csv`` (24c-d),
``summary.csv``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import spu
from spu.activities import METHOD_FAMILIES
from spu.analysis.associations import feature_associations, start_classifier, worker_pool
from spu.analysis.rankings import SOURCES
from spu.analysis.runs import CLASSES, RunReading, read_run
from spu.analysis.sources import OPERATORS, SOURCE_CLASSES
from spu.grading.rules import AnswerKeyError, GradingKey
from spu.schema import Activity
from spu.stats.registry import Registry, discover
from spu.stats.resampling import rng_for
from spu.stats.rules import Rule
from spu.stats.rules import entry as rule_entry
from spu.stats.rules import resolve as resolve_rule
from spu.stats.ties import exact

CALL_COLUMNS = ("run_key", "step", "call_index", "tool", "activity", "activity_class",
                "time_s", "t_norm", "families", "t_end_norm")
FEATURE_COLUMNS = ("run_key", "config", "task_id", "score", "n_calls", "runtime_s",
                   "web_share", "compute_share", "first_web_t", "method_families",
                   "first_complete_step", "first_complete_t", "first_draft_score", "revisions",
                   "pairs_flipped", "used_gpu", "gpu_seconds", "stated_expected_rho")
"""The columns SPEC section 8 fixes, first; more follow."""

GRID = np.linspace(0.0, 1.0, 101)
"""Points of normalized run time at which Figure 14a's shares are given."""

SMOOTHING_SD = 0.02
"""Gaussian kernel of Figure 14a (s.d. 2% of the run)."""

MILESTONES = {"first_input_t": "first read of the task inputs",
              "first_web_t": "first web access", "first_install_t": "first installation",
              "first_compute_t": "first scientific computation",
              "first_complete_t": "first complete ranking",
              "first_submission_t": "first submission file"}


@dataclass(frozen=True)
class AnalyzeOptions:
    """What ``spu analyze`` reads besides the run folders, and how it resamples."""

    task_roots: tuple[Path, ...] = ()
    """Task roots holding the answer keys (first-draft score, flipped pairs)."""
    answers_root: Path | None = None
    """Answer keys kept apart from the task packages."""
    seed: int = 0
    """Seed of every random draw."""
    resamples: int = 10_000
    """Bootstrap resamples of tasks for the associations."""
    trees: int = 500
    """Trees of the configuration classifier."""
    official_only: bool = True
    """Analyse official runs (repeat 0) only, as the paper's section 4 does."""
    flip_share: str = "pairs"
    """Figure 24e's shares (``--flip-share``): of the flipped pairs pooled over runs
    (``pairs``, the default) or each run's share averaged (``runs``); :data:`FLIP_SHARES`."""
    revised_population: str = "differs"
    """The revised runs of 4.3 and Figure 24e (``--revised-population``): ``differs``, the
    paper's, every run whose submission differs from its first draft, or ``ranked``, only
    those whose submission is a complete ranking other than the input order;
    :data:`REVISED_POPULATIONS`."""
    gpu_tasks: str = "both-sides"
    """Tasks of 4.8's comparison of GPU runs with the others (``--gpu-tasks``):
    ``both-sides``, the paper's, the tasks with scored runs on both sides, or ``all``;
    :data:`GPU_TASKS`."""
    public_only: bool = True
    """Analyse the runs on public tasks only, as the paper's section 4 does ("We analyze
    the 1,155 scored official runs on the public tasks"); a run whose ``run.json`` names
    no visibility is kept (``--include-private`` reads the private ones too)."""
    jobs: int = 2
    """Worker processes reading the run folders, then fitting the classifier's folds (1:
    all in this process). The results do not depend on it."""
    detail_tasks: tuple[str, ...] = ()
    """Tasks examined in detail (``--task ID``): ``task_runs.csv`` (Figure 21a),
    ``task_settings.csv`` (18e) and ``task_repeat_orders.csv`` (19b)."""


BUILT_IN_FILES: dict[str, tuple[str, str]] = {
    "calls.csv": ("calls", "SPEC 8, Figure 14"),
    "runs_features.csv": ("runs_features", "SPEC 8, section 4"),
    "associations.csv": ("associations", "SPEC 8, Figure 21"),
    "classifier.csv": ("classifier", "Figure 23b"),
    "classifier_confusion.csv": ("classifier", "Figure 23b"),
    "summary.csv": ("summary", "scalar results quoted in section 4"),
}
"""The files :func:`build_tables` writes itself (the classifier runs beside the others)."""

SCORED_RUNS = "scored official runs (repeat 0) on the public tasks"
"""Section 4's population: "We analyze the 1,155 scored official runs on the public tasks"."""

SECTION_4 = ("4: \"We analyze the 1,155 scored official runs on the public tasks ... and, where "
             "noted, the 137 scored repeated runs of Astra Max\"")


def _rule(text: str, sentence: str, basis: str = "paper",
          population: str = SCORED_RUNS) -> Rule:
    """A rule of ``spu analyze`` over section 4's population unless told otherwise."""
    return Rule(text, population, basis, sentence)


TRAJECTORY_ANALYSES = Registry(needs={}, columns=False)
"""The tables of ``spu analyze`` computed from the run readings, one registered function
each (:mod:`spu.analysis.builtin`; outside ones by the entry-point group ``spu.analyses``
with ``registry=TRAJECTORY_ANALYSES``)."""


@dataclass(frozen=True)
class TrajectoryInputs:
    """What every analysis of ``spu analyze`` reads: the run readings and their tables."""

    readings: list[RunReading]
    """Every run read (official runs only unless ``--all-repeats``)."""
    calls: pd.DataFrame
    """``calls.csv``: one row per labelled tool call."""
    scored: pd.DataFrame
    """Rows of ``runs_features.csv`` of the scored runs."""
    options: AnalyzeOptions
    """Seed, resamples and the inputs besides the run folders."""


@dataclass
class AnalysisResult:
    """All outputs of :func:`analyze_runs`."""

    tables: dict[str, pd.DataFrame]
    manifest: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def run_folders(runs_dir: Path) -> list[Path]:
    """Run folders under ``runs_dir`` (an output root or its ``runs/``), sorted."""
    base = runs_dir / "runs" if (runs_dir / "runs").is_dir() else runs_dir
    return sorted(p.parent for p in base.glob("*/run.json"))


def grading_keys(options: AnalyzeOptions, notes: list[str]) -> dict[str, GradingKey]:
    """Grading keys of the tasks under the task roots, by task id (answer keys found)."""
    from spu.stats.submissions import load_task_set

    keys: dict[str, GradingKey] = {}
    for task_id, info in load_task_set(options.task_roots, options.answers_root).items():
        if info.answers is None:
            continue
        try:
            keys[task_id] = GradingKey.build(info.package.contract, info.answers)
        except AnswerKeyError as exc:
            notes.append(f"task {task_id}: answer key unusable ({exc})")
    return keys


def analyze_runs(runs_dir: Path, options: AnalyzeOptions | None = None) -> AnalysisResult:
    """Read every run folder under ``runs_dir`` and build the tables.

    Raises
    ------
    FileNotFoundError
        ``runs_dir`` is not a folder.
    """
    opt = options or AnalyzeOptions()
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"{runs_dir}: runs folder does not exist")
    notes: list[str] = []
    keys = grading_keys(opt, notes) if opt.task_roots else {}
    readings: list[RunReading] = []
    skipped = private = 0
    started = time.perf_counter()
    folders = run_folders(runs_dir)
    for reading in _read_all(folders, keys, opt.jobs):
        if isinstance(reading, str):
            notes.append(reading)
            skipped += 1
            continue
        if opt.official_only and reading.features["repeat"] != 0:
            continue
        if opt.public_only and reading.features.get("visibility") == "private":
            private += 1
            continue
        readings.append(reading)
        notes += reading.notes
    read_s = time.perf_counter() - started
    result = build_tables(readings, opt)
    result.manifest["seconds"] = {"read": round(read_s, 2), **result.manifest["seconds"]}
    if private:
        notes.append(f"{private} run(s) on private tasks left out (section 4 analyses the "
                     "public tasks; --include-private reads them)")
    result.notes = notes + result.notes
    result.manifest.update(runs_dir=str(runs_dir), skipped_folders=skipped,
                           public_only=opt.public_only, private_runs_left_out=private,
                           task_roots=[str(p) for p in opt.task_roots],
                           grading_keys=len(keys))
    return result


def _read_or_note(folder: Path, keys: dict[str, GradingKey]) -> RunReading | str:
    try:
        return read_run(folder, keys)
    except ValueError as exc:
        return str(exc)


def _read_all(folders: list[Path], keys: dict[str, GradingKey], jobs: int
              ) -> Iterable[RunReading | str]:
    """Readings of ``folders`` in order, in ``jobs`` processes (each streams its runs).

    While the workers read, this process imports what the tables and the classifier
    need, so the processes forked later for the classifier's folds inherit it.
    """
    if jobs <= 1 or len(folders) < 8:
        return (_read_or_note(f, keys) for f in folders)
    with worker_pool(jobs) as pool:
        readings = pool.map(partial(_read_or_note, keys=keys), folders,
                            chunksize=max(1, min(32, len(folders) // (4 * jobs))))
        _import_for_tables()
        return list(readings)


def _import_for_tables() -> None:
    import sklearn.ensemble  # noqa: F401
    import sklearn.metrics  # noqa: F401
    import sklearn.model_selection  # noqa: F401

    import spu.stats.paired  # noqa: F401


def build_tables(readings: list[RunReading], opt: AnalyzeOptions,
                 executor: Executor | None = None) -> AnalysisResult:
    """The tables of one set of run readings (pure: no I/O).

    The classifier's folds run in ``executor`` (None: in ``opt.jobs`` processes of its
    own) while this process computes the other tables; the results do not depend on it.
    """
    own = worker_pool(opt.jobs) if executor is None and opt.jobs > 1 else None
    with own or contextlib.nullcontext():
        return _build_tables(readings, opt, executor or own)


def _build_tables(readings: list[RunReading], opt: AnalyzeOptions,
                  executor: Executor | None) -> AnalysisResult:
    from spu.analysis import builtin  # noqa: F401  (registers the built-in tables)

    discover()
    notes: list[str] = []
    calls = pd.DataFrame(
        [(c.run_key, c.step, c.call_index, c.tool, c.activity, c.activity_class, c.time_s,
          c.t_norm, c.families, c.t_end_norm) for r in readings for c in r.calls],
        columns=list(CALL_COLUMNS))
    features = pd.DataFrame([r.features for r in readings])
    if features.empty:
        features = pd.DataFrame(columns=list(FEATURE_COLUMNS))
    else:
        rest = [c for c in features.columns if c not in FEATURE_COLUMNS]
        features = features[[*FEATURE_COLUMNS, *rest]]
    tables: dict[str, pd.DataFrame] = {"calls.csv": calls, "runs_features.csv": features}
    scored = features[features["scored"].astype(bool)] if "scored" in features else features

    clock = time.perf_counter()
    pending = start_classifier(scored, seed=opt.seed, n_estimators=opt.trees,
                               executor=executor)
    seconds: dict[str, float] = {}
    tables["associations.csv"] = feature_associations(scored, opt.resamples, opt.seed)
    seconds["associations"] = round(time.perf_counter() - clock, 2)
    clock = time.perf_counter()
    if tables["associations.csv"].empty:
        notes.append("associations: fewer than three scored runs on two tasks")
    inputs = TrajectoryInputs(readings, calls, scored, opt)
    rules: dict[str, Any] = {}
    for entry in TRAJECTORY_ANALYSES:
        found = entry(inputs)
        tables.update(found.tables)
        rules.update(found.rules)
        notes += found.notes
    summary: list[dict[str, Any]] = []
    seconds["tables"] = round(time.perf_counter() - clock, 2)
    clock = time.perf_counter()
    classifier = None if pending is None else pending.result()
    seconds["classifier"] = round(time.perf_counter() - clock, 2)  # what was left to wait
    if classifier is None:
        notes.append("classifier: fewer than two Claude Code configurations with two scored "
                     "runs each")
        tables["classifier.csv"] = pd.DataFrame(columns=["config", "n_runs", "recall"])
        tables["classifier_confusion.csv"] = pd.DataFrame()
    else:
        conf = classifier.confusion
        tables["classifier.csv"] = pd.DataFrame({
            "config": conf.index, "n_runs": conf.sum(axis=1).to_numpy(),
            "recall": np.diag(conf.to_numpy()) / np.maximum(conf.sum(axis=1).to_numpy(), 1)})
        tables["classifier_confusion.csv"] = conf.rename_axis("true_config").reset_index()
        summary += [
            {"statistic": "classifier_accuracy", "value": classifier.accuracy,
             "n": classifier.n_runs},
            {"statistic": "classifier_chance", "value": classifier.chance,
             "n": classifier.n_runs},
            {"statistic": "classifier_folds", "value": classifier.folds, "n": classifier.n_runs},
        ]
    summary += _summary(calls, scored, tables, opt.seed, opt.resamples,
                        opt.revised_population)
    tables["summary.csv"] = pd.DataFrame(summary, columns=["statistic", "value", "n"])
    manifest = {"spu_version": spu.__version__, "seed": opt.seed, "resamples": opt.resamples,
                "trees": opt.trees, "official_only": opt.official_only,
                "flip_share": opt.flip_share, "revised_population": opt.revised_population,
                "gpu_tasks": opt.gpu_tasks,
                "runs": len(readings), "scored_runs": int(len(scored)), "calls": len(calls),
                "seconds": seconds, "outputs": _outputs(tables, rules, opt)}
    return AnalysisResult(tables, manifest, notes)


def _outputs(tables: dict[str, pd.DataFrame], rules: Mapping[str, Any] | None = None,
             opt: AnalyzeOptions | None = None) -> dict[str, dict[str, Any]]:
    """Each file written: its analysis, the paper figure it serves and its rule.

    The rule's fields (``rule``, ``population``, ``basis``, ``sentence``) come from the
    analysis or from :data:`ANALYZE_RULES`; reading repeats (``--all-repeats``) or private
    tasks (``--include-private``) changes every population, named with basis ``option``.
    """
    outputs: dict[str, dict[str, Any]] = {
        name: {"analysis": analysis, "section": section}
        for name, (analysis, section) in BUILT_IN_FILES.items() if name in tables}
    for entry in TRAJECTORY_ANALYSES:
        for name in entry.files:
            if name in tables:
                outputs[name] = {"analysis": entry.name, "source": entry.source,
                                 "section": entry.section_of(name)}
    widened = population_options(opt or AnalyzeOptions())
    for name, out in outputs.items():
        rule = resolve_rule((rules or {}).get(name), ANALYZE_RULES.get(name))
        if rule is not None and widened and rule.population == SCORED_RUNS:
            rule = rule.replace(population=f"{SCORED_RUNS}, {widened}", basis="option")
        out.update(rule_entry(rule, None))
    return dict(sorted(outputs.items()))


def population_options(opt: AnalyzeOptions) -> str:
    """The runs read beyond section 4's population, in words ("" for none).

    >>> population_options(AnalyzeOptions(official_only=False))
    'and the repeated runs (--all-repeats)'
    """
    extra = ([] if opt.official_only else ["the repeated runs (--all-repeats)"]) + (
        [] if opt.public_only else ["the runs on private tasks (--include-private)"])
    return f"and {' and '.join(extra)}" if extra else ""


ACTIVITY_TIME_RULE = (
    "each call's time (its step to the next step, divided evenly among the step's calls, "
    "E.7) spread uniformly over the call's span [t_norm, t_end_norm] of the run normalized "
    "to its length, smoothed by a Gaussian kernel of s.d. 2% of the run, normalized per run "
    "to shares at each point and averaged over runs, each run counting equally (Figure 14a)")
"""The paper's rule behind ``activity_time.csv`` (the manifest's ``rule``)."""


def _kernel_over_spans(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The Gaussian kernel at each :data:`GRID` point, averaged over each call's span.

    A call spanning ``[a, b]`` contributes at ``g`` the mean of ``exp(-(g - s)^2 / 2 sd^2)``
    over ``s`` in ``[a, b]``: ``sd * sqrt(2 pi) / (b - a) * (Phi((g - a) / sd) -
    Phi((g - b) / sd))``; a span of no length is its point (the kernel at ``a``).
    """
    from scipy.special import ndtr

    sd = SMOOTHING_SD
    point = np.exp(-0.5 * ((GRID[:, None] - start[None, :]) / sd) ** 2)
    width = end - start
    wide = width > 1e-9
    if not wide.any():
        return point
    a, b = start[wide], end[wide]
    mass = ndtr((GRID[:, None] - a[None, :]) / sd) - ndtr((GRID[:, None] - b[None, :]) / sd)
    point[:, wide] = mass * (sd * math.sqrt(2 * math.pi)) / width[wide][None, :]
    return point


def activity_time(calls: pd.DataFrame, features: pd.DataFrame, *,
                  over_duration: bool = True) -> pd.DataFrame:
    """Share of time in each activity class along normalized run time (Figure 14a).

    Each run counts equally: each call's time is spread uniformly over the call's span in
    the run (``t_norm`` to ``t_end_norm``, paper E.7: the time from its step to the next
    step), smoothed on :data:`GRID` by a Gaussian kernel of s.d. :data:`SMOOTHING_SD`,
    normalized per run to shares that sum to 1 at each point, then averaged over runs.

    Args:
        calls: ``calls.csv``'s rows; without ``t_end_norm`` (a table written before it
            was kept) each call sits at its start.
        features: The runs to count (their ``run_key``); empty: every run in ``calls``.
        over_duration: Spread each call over its span (the paper's rule); ``False``
            places all of a call's time at its start.

    Returns:
        One row per grid point: ``t`` and the share of each of the eight classes.
    """
    columns = ["t", *CLASSES]
    keep = calls[calls["run_key"].isin(set(features["run_key"]))] if len(features) else calls
    if keep.empty:
        return pd.DataFrame(columns=columns)
    class_index = {c: i for i, c in enumerate(CLASSES)}
    total = np.zeros((len(GRID), len(CLASSES)))
    n_runs = 0
    # The runs in order of first appearance (as groupby(sort=False)), each run's calls in
    # table order, sliced from arrays taken once (a DataFrame per run costs more than the
    # arithmetic).
    codes, _ = pd.factorize(keep["run_key"])
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    all_t = keep["t_norm"].to_numpy(float)[order]
    all_end = (np.maximum(keep["t_end_norm"].fillna(keep["t_norm"]).to_numpy(float)[order],
                          all_t)
               if over_duration and "t_end_norm" in keep else all_t)
    all_w = keep["time_s"].to_numpy(float)[order]
    all_cls = keep["activity_class"].map(class_index).to_numpy(int)[order]
    for t, end, w, cls in zip(np.split(all_t, bounds), np.split(all_end, bounds),
                              np.split(all_w, bounds), np.split(all_cls, bounds), strict=True):
        if w.sum() <= 0:
            w = np.ones_like(w)
        kernel = _kernel_over_spans(t, end)
        by_class = np.zeros((len(GRID), len(CLASSES)))
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


def milestones(features: pd.DataFrame) -> pd.DataFrame:
    """Median and interquartile range of each milestone's point in the run (Figure 14b)."""
    rows = []
    for config, part in [("all", features), *features.groupby("config", sort=True)]:
        for column, name in MILESTONES.items():
            if column not in part:
                continue
            values = part[column].dropna().to_numpy(float)
            rows.append({"config": config, "milestone": name, "n_runs": len(part),
                         "n_reached": values.size,
                         "median": np.median(values) if values.size else math.nan,
                         "q25": np.quantile(values, 0.25) if values.size else math.nan,
                         "q75": np.quantile(values, 0.75) if values.size else math.nan})
    return pd.DataFrame(rows, columns=["config", "milestone", "n_runs", "n_reached", "median",
                                       "q25", "q75"])


def family_shares(features: pd.DataFrame) -> pd.DataFrame:
    """Share of runs that ran each method family, by configuration and by discipline."""
    rows = []
    groups: list[tuple[str, str, pd.DataFrame]] = [("all", "all", features)]
    if len(features):
        groups += [("config", str(k), v) for k, v in features.groupby("config", sort=True)]
        groups += [("discipline", str(k), v)
                   for k, v in features.groupby(features["discipline"].fillna("unknown"),
                                                sort=True)]
    for by, value, part in groups:
        for family in METHOD_FAMILIES:
            column = f"family_{family}"
            used = part[column].astype(bool) if column in part else pd.Series(dtype=bool)
            rows.append({"by": by, "value": value, "family": family, "n_runs": len(part),
                         "n_used": int(used.sum()),
                         "share": float(used.mean()) if len(part) else math.nan})
    return pd.DataFrame(rows, columns=["by", "value", "family", "n_runs", "n_used", "share"])


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two family sets; two empty sets are identical (1).

    Examples
    --------
    >>> jaccard(frozenset({"dft", "monte_carlo"}), frozenset({"dft"})), jaccard(frozenset(),
    ...                                                                          frozenset())
    (0.5, 1.0)
    """
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def family_jaccard(features: pd.DataFrame) -> pd.DataFrame:
    """Mean Jaccard similarity of method families between configurations on the same task.

    For each pair of configurations (a configuration with itself: its runs on the same
    task, repeats included when analysed), the mean over pairs of runs on the same task;
    ``different_tasks`` rows compare runs on different tasks (paper 4.1: 0.65 vs 0.29).
    """
    columns = ["config_a", "config_b", "scope", "n_pairs", "mean_jaccard"]
    if features.empty:
        return pd.DataFrame(columns=columns)
    sets = [frozenset(s.split(";")) - {""} for s in features["method_families"].fillna("")]
    index: dict[frozenset[str], int] = {}
    set_codes = np.array([index.setdefault(x, len(index)) for x in sets], dtype=np.intp)
    distinct = list(index)
    # Similarity of each pair of distinct family sets, by :func:`jaccard` itself.
    similarity = np.array([[jaccard(a, b) for b in distinct] for a in distinct]).reshape(
        len(distinct), len(distinct))
    config_codes, configs = pd.factorize(features["config"].astype(str), sort=True)
    task_codes, _ = pd.factorize(features["task_id"].astype(str))
    n_configs = len(configs)
    sums: dict[int, float] = {}
    counts: Counter[int] = Counter()
    for i, j in _pair_blocks(len(sets)):
        # Pair key: sorted configuration pair, then 0 (different tasks) or 1 (same task).
        low = np.minimum(config_codes[i], config_codes[j])
        high = np.maximum(config_codes[i], config_codes[j])
        keys = (low * n_configs + high) * 2 + (task_codes[i] == task_codes[j])
        values = similarity[set_codes[i], set_codes[j]]
        order = np.argsort(keys, kind="stable")  # pairs of a key keep their order
        keys, values = keys[order], values[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        for start, end in zip(starts, [*starts[1:], len(keys)], strict=True):
            key = int(keys[start])
            part = values[start:end]
            if key in sums:
                part = np.r_[sums[key], part]
            # cumsum adds left to right: the same float sum as adding pair by pair
            sums[key] = float(np.cumsum(part)[-1])
            counts[key] += end - start
    rows = []
    for key in counts:
        pair, same = divmod(key, 2)
        a, b = configs[pair // n_configs], configs[pair % n_configs]
        rows.append({"config_a": a, "config_b": b,
                     "scope": "same_task" if same else "different_tasks",
                     "n_pairs": counts[key], "mean_jaccard": sums[key] / counts[key]})
    rows.sort(key=lambda r: (r["config_a"], r["config_b"], r["scope"]))
    return pd.DataFrame(rows, columns=columns)


PAIRS_PER_BLOCK = 1 << 21
"""Pairs of runs handled at once by :func:`family_jaccard` (bounds its memory)."""


def _pair_blocks(n: int) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """All pairs ``i < j`` of ``range(n)`` in the order of ``combinations``, in blocks."""
    i0 = 0
    while i0 < n - 1:
        i1, pairs = i0, 0
        while i1 < n - 1 and (pairs == 0 or pairs + (n - 1 - i1) <= PAIRS_PER_BLOCK):
            pairs += n - 1 - i1
            i1 += 1
        rows = np.arange(i0, i1)
        i = np.repeat(rows, n - 1 - rows)
        # j runs from i + 1 to n - 1 within each row
        first = np.repeat(np.cumsum(n - 1 - rows) - (n - 1 - rows), n - 1 - rows)
        j = np.arange(len(i)) - first + i + 1
        yield i, j
        i0 = i1


def fetched_sources(readings: Iterable[RunReading]) -> pd.DataFrame:
    """Fetched URLs by source class and configuration (Figure 15c)."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for r in readings:
        for _, cls in r.fetched:
            counts[(str(r.features["config"]), cls, str(r.features.get("web_source")))] += 1
    rows = [{"config": c, "source_class": s, "log": log, "n_urls": n}
            for (c, s, log), n in sorted(counts.items())]
    table = pd.DataFrame(rows, columns=["config", "source_class", "log", "n_urls"])
    if len(table):
        table["share"] = table["n_urls"] / table.groupby("config")["n_urls"].transform("sum")
    else:
        table["share"] = pd.Series(dtype=float)
    table["source_class"] = pd.Categorical(table["source_class"], SOURCE_CLASSES)
    return table.sort_values(["config", "source_class"]).reset_index(drop=True)


def operator_shares(readings: Iterable[RunReading]) -> pd.DataFrame:
    """Mean share of a run's queries using each operator, over runs that searched (15d)."""
    per_config: dict[str, list[dict[str, float]]] = {}
    for r in readings:
        if r.operators:
            per_config.setdefault(str(r.features["config"]), []).append(r.operators)
    rows = []
    for config, runs in sorted(per_config.items()):
        for name in OPERATORS:
            rows.append({"config": config, "operator": name, "n_runs": len(runs),
                         "mean_share": float(np.mean([o[name] for o in runs]))})
    return pd.DataFrame(rows, columns=["config", "operator", "n_runs", "mean_share"])


def first_appearance(readings: Iterable[RunReading]) -> pd.DataFrame:
    """Where each traced submitted group order first appears, by configuration (16a)."""
    counts: Counter[tuple[str, str]] = Counter()
    for r in readings:
        for source in r.group_sources.values():
            counts[(str(r.features["config"]), source)] += 1
    rows = [{"config": c, "source": s, "n_groups": counts[(c, s)]}
            for c in sorted({c for c, _ in counts}) for s in SOURCES]
    table = pd.DataFrame(rows, columns=["config", "source", "n_groups"])
    if len(table):
        table["share"] = table["n_groups"] / table.groupby("config")["n_groups"].transform("sum")
    else:
        table["share"] = pd.Series(dtype=float)
    return table


def revisions(features: pd.DataFrame) -> pd.DataFrame:
    """Runs with a first draft: its score, the submission's, whether they differ, the flips.

    One row per such run (Figures 17c, 21b, 24d-e): ``change`` is the submission's score
    minus the draft's; ``submission_differs`` whether the submitted orders differ from
    the draft's (:func:`spu.analysis.rankings.differs_from_draft`), the population of
    4.3's revisions (:func:`revised_runs`). A draft only in the file
    (``first_complete_source`` ``file_only``) is the submission itself.
    """
    columns = ["run_key", "config", "task_id", "first_complete_source", "first_complete_t",
               "first_draft_score", "score", "change", "submission_differs",
               "submission_ranked", "revisions", "pairs_flipped", "flipped_into_measured",
               "flipped_expected_share", "flips_scored", "flips_into_measured"]
    if features.empty or "first_complete_source" not in features:
        return pd.DataFrame(columns=columns)
    f = features[features["first_complete_source"].notna()].copy()
    for column in ("flips_scored", "flips_into_measured", "submission_ranked"):
        if column not in f:
            f[column] = math.nan
    f["change"] = f["score"] - f["first_draft_score"]
    if "submission_differs" not in f:
        f["submission_differs"] = False
    f["submission_differs"] = f["submission_differs"].eq(True)
    return f[columns].reset_index(drop=True)


REVISED_POPULATIONS = {
    "differs": ("the runs whose submitted orders differ from their first draft "
                "(submission_differs), a return to the input order included, with a score "
                "for both"),
    "ranked": ("the runs whose submitted orders differ from their first draft and form a "
               "complete ranking other than the input order (submission_ranked; "
               "--revised-population ranked: the paper counts every different submission)"),
}
"""Who counts as revised in 4.3 (17c, the sign test) and Figure 24e alike
(``--revised-population``): ``differs``, the paper's (4.3: "Of the 772 runs whose trajectory
contains a complete ranking before the submission, 317 submitted a different one"), or
``ranked``, which leaves out the submissions that went back to the input order or left an
item out."""

REVISION_SENTENCE = ("4.3: \"Of the 772 runs whose trajectory contains a complete ranking "
                     "before the submission, 317 submitted a different one\"")
"""The paper's sentence behind 4.3's population of revised runs."""

REVISION_RULE = ("4.3, Figure 17c: " + REVISED_POPULATIONS["differs"] + "; change = "
                 "submission minus draft, mean with a 95% percentile interval from resampling "
                 "tasks; sign test: two-sided binomial test of gains against losses, ties (no "
                 "change in score at the tie precision) left out")
"""The manifest's rule for ``revisions.csv`` and 17c's rows of ``revision_intervals.csv``."""

FLIP_SHARES = {
    "pairs": ("24e, over the same revised runs: the item pairs whose order differs between "
              "the first draft and the submission (on the groups submitted complete) and "
              "whose measured values differ, pooled over the runs: the share of them that "
              "moved into the measured order and the share expected from random flips at "
              "the same distance in their draft, each pair counting once (the caption's "
              "'item pairs flipped after the draft' read as the net flips from draft to "
              "submission)"),
    "runs": ("24e: each run's share of its flipped pairs that moved into the measured order "
             "and its expected share, averaged over the runs with such a pair "
             "(--flip-share runs)"),
}
"""Figure 24e's shares (``--flip-share``): ``pairs``, the default, reads "Share of the item
pairs flipped after the draft" as a share of the pairs; ``runs`` averages each run's
share. Either way with 95% percentile intervals from resampling tasks."""


def revision_rule(flip_share: str = "pairs", population: str = "differs") -> str:
    """The manifest's rule for ``revision_intervals.csv``: 17c's and 24e's.

    >>> "pooled" in revision_rule() and "averaged" in revision_rule("runs")
    True
    """
    head = REVISION_RULE if population == "differs" else REVISION_RULE.replace(
        REVISED_POPULATIONS["differs"], REVISED_POPULATIONS[population])
    return f"{head}; {FLIP_SHARES[flip_share]}"


def revision_rules(opt: AnalyzeOptions) -> dict[str, Rule]:
    """The rules of ``revisions.csv`` and ``revision_intervals.csv`` under ``opt``.

    >>> revision_rules(AnalyzeOptions(revised_population="ranked"))[
    ...     "revision_intervals.csv"].basis
    'option'
    """
    population = opt.revised_population
    optioned = population != "differs" or opt.flip_share != "pairs"
    revised = ANALYZE_RULES["revisions.csv"]
    return {"revisions.csv": revised.replace(
                text=REVISION_RULE.replace(REVISED_POPULATIONS["differs"],
                                           REVISED_POPULATIONS[population]),
                basis="option" if population != "differs" else "paper"),
            "revision_intervals.csv": ANALYZE_RULES["revision_intervals.csv"].replace(
                text=revision_rule(opt.flip_share, population),
                basis="option" if optioned else "paper")}


def revised_runs(rev: pd.DataFrame, population: str = "differs") -> pd.DataFrame:
    """The rows of ``revisions.csv`` whose submission differs from the draft, both scored.

    4.3's population ("317 submitted a different one"): a run that changed its ranking
    and went back to the draft is not in it, one that went back to the input order is,
    and one whose different submission scores the same as the draft is (a tie of the sign
    test). ``population="ranked"`` keeps only the submissions that are a complete ranking
    other than the input order (:data:`REVISED_POPULATIONS`). Figure 24e's flips are
    counted over the same runs. Empty for a table written before ``submission_differs``
    existed.

    Examples
    --------
    >>> rev = pd.DataFrame({"submission_differs": [True, False, True, True],
    ...                     "submission_ranked": [True, True, True, False],
    ...                     "change": [0.0, 0.2, np.nan, -0.1]})
    >>> revised_runs(rev).index.tolist(), revised_runs(rev, "ranked").index.tolist()
    ([0, 3], [0])
    """
    if population not in REVISED_POPULATIONS:
        raise ValueError(f"revised population: {population!r} is not one of "
                         f"{', '.join(REVISED_POPULATIONS)}")
    if rev.empty or "submission_differs" not in rev:
        return rev.iloc[0:0]
    keep = rev["submission_differs"].eq(True) & rev["change"].notna()
    if population == "ranked":
        keep &= rev["submission_ranked"].eq(True) if "submission_ranked" in rev else False
    return rev[keep]


def task_bootstrap_ratio(numerators: np.ndarray, denominators: np.ndarray, tasks: np.ndarray,
                         rng: np.random.Generator, resamples: int
                         ) -> tuple[float, float, float]:
    """``sum(numerators) / sum(denominators)`` and its 95% interval from resampling tasks.

    A task drawn ``k`` times enters with its runs' sums weighted ``k``; with unit
    denominators this is :func:`task_bootstrap_mean`.

    Examples
    --------
    Two flipped pairs of three into the measured order on one task, one of one on the
    other: pooled 3 of 4; the resamples give 2/3, 3/4 or 1.

    >>> r = task_bootstrap_ratio(np.array([2.0, 1.0]), np.array([3.0, 1.0]),
    ...                          np.array(["a", "b"]), np.random.default_rng(0), 2000)
    >>> r[0], round(r[1], 4), r[2]
    (0.75, 0.6667, 1.0)
    """
    from spu.stats.resampling import percentile_interval, resample_counts

    if numerators.size == 0 or not denominators.sum() > 0:
        return math.nan, math.nan, math.nan
    codes, index = np.unique(tasks, return_inverse=True)
    top = np.bincount(index, weights=numerators, minlength=codes.size)
    bottom = np.bincount(index, weights=denominators, minlength=codes.size)
    counts = resample_counts(codes.size, resamples, rng).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = (counts @ top) / (counts @ bottom)
    low, high = percentile_interval(draws)
    return float(numerators.sum() / denominators.sum()), float(low), float(high)


def task_bootstrap_mean(values: np.ndarray, tasks: np.ndarray, rng: np.random.Generator,
                        resamples: int) -> tuple[float, float, float]:
    """Mean of ``values`` and its 95% percentile interval from resampling the tasks.

    A task drawn ``k`` times enters with its runs weighted ``k`` (paper 4.3: "95%
    intervals from resampling tasks").

    Examples
    --------
    >>> v = np.array([1.0, 3.0, 5.0]); t = np.array(["a", "a", "b"])
    >>> mean, low, high = task_bootstrap_mean(v, t, np.random.default_rng(0), 500)
    >>> mean, bool(2.0 <= low <= high <= 5.0)
    (3.0, True)
    """
    from spu.stats.resampling import percentile_interval, resample_counts

    if values.size == 0:
        return math.nan, math.nan, math.nan
    codes, index = np.unique(tasks, return_inverse=True)
    sums = np.bincount(index, weights=values, minlength=codes.size)
    sizes = np.bincount(index, minlength=codes.size).astype(float)
    counts = resample_counts(codes.size, resamples, rng).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = (counts @ sums) / (counts @ sizes)
    low, high = percentile_interval(draws)
    return float(values.mean()), float(low), float(high)


def revision_intervals(revised: pd.DataFrame, seed: int = 0, resamples: int = 2_000,
                       flip_share: str = "pairs", population: str = "differs"
                       ) -> pd.DataFrame:
    """Figure 17c's and 24e's means with 95% intervals from resampling tasks.

    Per configuration and over all runs (``config`` ``all``), over the runs whose
    submission differs from the first draft (:func:`revised_runs` of ``population``): the
    mean change (submission minus draft, 17c); of the item pairs flipped between the draft
    and the submission whose measured values differ, the share that moved into the
    measured order, the share
    expected from random flips at the same distance and their difference (24e), pooled
    over the pairs (``flip_share`` ``pairs``: ``n_runs`` the runs holding them) or
    averaged over the runs' own shares (``runs``; :data:`FLIP_SHARES`).

    Args:
        revised: ``revisions.csv`` (:func:`revisions`).
        seed: Seed of the resampling.
        resamples: Bootstrap resamples of tasks.
        flip_share: ``pairs`` (the default) or ``runs``.
        population: ``differs`` (the default) or ``ranked`` (:data:`REVISED_POPULATIONS`).
    """
    columns = ["config", "quantity", "n_runs", "n_tasks", "mean", "ci_low", "ci_high"]
    if revised.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    quantities = {"change": "submission minus first draft",
                  "flipped_into_measured": "share of flips into the measured order",
                  "flipped_expected_share": "share expected from random flips",
                  "flip_excess": "into the measured order minus expected"}
    revised = revised_runs(revised, population)  # 17c and 24e: one population
    if revised.empty:
        return pd.DataFrame(columns=columns)
    r = revised.assign(flip_excess=revised["flipped_into_measured"]
                       - revised["flipped_expected_share"])
    pooled = flip_share == "pairs"
    if pooled:
        n = r["flips_scored"].astype(float) if "flips_scored" in r else pd.Series(
            math.nan, index=r.index)
        into = (r["flips_into_measured"].astype(float) if "flips_into_measured" in r
                else pd.Series(math.nan, index=r.index))
        expected = r["flipped_expected_share"].fillna(0.0) * n
        tops = {"flipped_into_measured": into, "flipped_expected_share": expected,
                "flip_excess": into - expected}
    for config, part in [("all", r), *r.groupby("config", sort=True)]:
        for column, name in quantities.items():
            rng = rng_for(seed, "revision intervals", str(config), column)
            if column == "change" or not pooled:
                keep = part[part[column].notna()]
                mean, low, high = task_bootstrap_mean(
                    keep[column].to_numpy(float), keep["task_id"].astype(str).to_numpy(),
                    rng, resamples)
            else:
                keep = part[n.loc[part.index] > 0]
                mean, low, high = task_bootstrap_ratio(
                    tops[column].loc[keep.index].to_numpy(float),
                    n.loc[keep.index].to_numpy(float),
                    keep["task_id"].astype(str).to_numpy(), rng, resamples)
            rows.append({"config": config, "quantity": name, "n_runs": len(keep),
                         "n_tasks": int(keep["task_id"].nunique()), "mean": mean,
                         "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows, columns=columns)


def self_assessment(features: pd.DataFrame) -> pd.DataFrame:
    """Expected Spearman stated in the report against the achieved score (Figure 17b)."""
    columns = ["run_key", "config", "task_id", "stated_expected_rho", "score", "overestimate"]
    if features.empty:
        return pd.DataFrame(columns=columns)
    f = features[features["stated_expected_rho"].notna() & features["score"].notna()].copy()
    f["overestimate"] = f["stated_expected_rho"] - f["score"]
    return f[columns].reset_index(drop=True)


GPU_LEVELS = ("no GPU probe", "probed only", "workload failed", "workload ran", "device named")
"""Levels of GPU use of Figure 22a, lowest first."""


def gpu_tables(readings: Iterable[RunReading], features: pd.DataFrame
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """GPU use by configuration (22a, d) and GPU errors by kind (22c)."""
    rows = []
    for config, part in [("all", features), *features.groupby("config", sort=True)]:
        if part.empty:
            continue
        used = part["used_gpu"].astype(bool)
        row: dict[str, Any] = {"config": config, "n_runs": len(part)}
        for level in GPU_LEVELS:
            row[f"share_{level.replace(' ', '_')}"] = float((part["gpu_level"] == level).mean())
        row["share_used_gpu"] = float(used.mean())
        row["median_runtime_gpu_s"] = float(part.loc[used, "runtime_s"].median()) \
            if used.any() else math.nan
        row["median_runtime_other_s"] = float(part.loc[~used, "runtime_s"].median()) \
            if (~used).any() else math.nan
        row["share_gpu_probe"] = float(part["gpu_probe"].astype(bool).mean()) \
            if "gpu_probe" in part else math.nan
        row["share_gpu_probe_early"] = float(part["gpu_probe_early"].astype(bool).mean()) \
            if "gpu_probe_early" in part else math.nan
        if "gpu_call_s" in part and used.any():
            row["median_gpu_call_s"] = float(part.loc[used, "gpu_call_s"].median())
            row["median_gpu_call_share"] = float(part.loc[used, "gpu_call_share"].median())
        else:
            row["median_gpu_call_s"] = row["median_gpu_call_share"] = math.nan
        row["share_gpu_measured"] = float(part["gpu_measured"].astype(bool).mean()) \
            if "gpu_measured" in part else math.nan
        seconds = pd.to_numeric(part["gpu_seconds"], errors="coerce")
        row["measured_runs"] = int(seconds.notna().sum())
        row["gpu_seconds_total"] = float(seconds.sum()) if seconds.notna().any() else math.nan
        rows.append(row)
    gpu = pd.DataFrame(rows)
    keep = set(features["run_key"]) if len(features) else set()
    errors: Counter[tuple[str, str]] = Counter()
    started: Counter[str] = Counter()
    for r in readings:
        if r.features["run_key"] not in keep or not r.features.get("gpu_workload"):
            continue
        config = str(r.features["config"])
        started[config] += 1
        for kind in r.gpu_errors:
            errors[(config, kind)] += 1
    err_rows = [{"config": c, "error": k, "n_runs": n, "n_started": started[c],
                 "share": n / started[c]} for (c, k), n in sorted(errors.items())]
    return gpu, pd.DataFrame(err_rows, columns=["config", "error", "n_runs", "n_started",
                                                "share"])


GPU_RULE = ("used the GPU: a GPU workload in executed code ran without failing (E.12); "
            "device named: its output names the device; early probe: a GPU probe within "
            "the first ten tool calls (4.8); gpu_seconds: the sampled device, beside it")
"""The manifest's rule for the GPU tables."""


def gpu_workloads(features: pd.DataFrame) -> pd.DataFrame:
    """Main workload of the runs that used the GPU, by discipline (Figure 22b).

    A run's main workload is the method family of most of its GPU calls (ties: the first
    by name; ``other`` when none is a family).

    Examples
    --------
    >>> f = pd.DataFrame({"discipline": ["chemistry", "chemistry", "biology", "biology"],
    ...                   "used_gpu": [True, True, True, False],
    ...                   "gpu_workload_main": ["dft", "molecular_dynamics", "other", None]})
    >>> gpu_workloads(f)[["discipline", "workload", "n_runs", "share"]].values.tolist()
    [['all', 'dft', 1, 0.3333333333333333], ['all', 'molecular_dynamics', 1, 0.3333333333333333], ['all', 'other', 1, 0.3333333333333333], ['biology', 'other', 1, 1.0], ['chemistry', 'dft', 1, 0.5], ['chemistry', 'molecular_dynamics', 1, 0.5]]
    """  # noqa: E501
    columns = ["discipline", "workload", "n_runs", "n_used", "share"]
    if features.empty or "gpu_workload_main" not in features:
        return pd.DataFrame(columns=columns)
    used = features[features["used_gpu"].astype(bool) & features["gpu_workload_main"].notna()]
    rows = []
    for discipline, part in [("all", used), *used.groupby("discipline", sort=True)]:
        counts = part["gpu_workload_main"].value_counts()
        for workload in sorted(counts.index):
            rows.append({"discipline": discipline, "workload": workload,
                         "n_runs": int(counts[workload]), "n_used": len(part),
                         "share": float(counts[workload] / len(part))})
    return pd.DataFrame(rows, columns=columns)


GPU_TASKS = {
    "both-sides": ("4.8: over the tasks that have scored runs on both sides (at least one "
                   "that used the GPU and one that did not, official runs of any "
                   "configuration)"),
    "all": ("over every task (--gpu-tasks all; the paper compares over the tasks that have "
            "runs on both sides)"),
}
"""The tasks of 4.8's comparison (``--gpu-tasks``): ``both-sides``, the paper's ("Over the 63
tasks that have runs on both sides"), or ``all``."""


def gpu_rules(opt: AnalyzeOptions, files: Iterable[str]) -> dict[str, Rule]:
    """The rules of the GPU tables under ``opt`` (``--gpu-tasks`` sets 22e's tasks).

    >>> gpu_rules(AnalyzeOptions(gpu_tasks="all"), ["gpu_within_config.csv"])[
    ...     "gpu_within_config.csv"].basis
    'option'
    """
    rules = {name: ANALYZE_RULES[name] for name in files}
    if "gpu_within_config.csv" in rules:
        within = rules["gpu_within_config.csv"]
        rules["gpu_within_config.csv"] = within.replace(
            text=within.text.replace(GPU_TASKS["both-sides"], GPU_TASKS[opt.gpu_tasks]),
            basis="paper" if opt.gpu_tasks == "both-sides" else "option")
    return rules


def gpu_sides_tasks(runs: pd.DataFrame) -> set[str]:
    """Tasks with a scored run that used the GPU and one that did not (4.8).

    Examples
    --------
    >>> runs = pd.DataFrame({"task_id": ["a", "a", "b", "b"],
    ...                      "used_gpu": [True, False, True, True]})
    >>> sorted(gpu_sides_tasks(runs))
    ['a']
    """
    used = runs["used_gpu"].astype(bool)
    sides = used.groupby(runs["task_id"].astype(str)).agg(["any", "all"])
    return set(sides.index[sides["any"] & ~sides["all"]])


def gpu_within_config(features: pd.DataFrame, seed: int, resamples: int,
                      tasks: str = "both-sides") -> pd.DataFrame:
    """Runs that used the GPU against the others of their configuration (Figure 22e).

    Each scored run's score minus the mean of the other configurations on the same task
    (:func:`spu.stats.outcomes.relative_frame`), then the mean of the runs that used the
    GPU minus that of the others, per configuration and pooled, with percentile
    intervals and a permutation P within configurations
    (:func:`spu.stats.within_config.within_config_difference`); for ``used_gpu`` and for
    the runs whose output named the device (``gpu_confirmed``; 4.8: +0.035 and +0.051).
    Official runs only, one per configuration and task (the first by ``run_key`` where a
    corpus holds two), over the tasks with runs on both sides of ``used_gpu``
    (:func:`gpu_sides_tasks`; ``tasks="all"``: every task, :data:`GPU_TASKS`); ``n_tasks``
    counts them.

    References
    ----------
    Paper 4.8 ("Over the 63 tasks that have runs on both sides, the 255 runs that ran a
    workload score 0.035 above the others of the same configuration").
    """
    from spu.stats.outcomes import relative_frame
    from spu.stats.permutation import DRAWS
    from spu.stats.within_config import COLUMNS, within_config_difference

    if tasks not in GPU_TASKS:
        raise ValueError(f"GPU tasks: {tasks!r} is not one of {', '.join(GPU_TASKS)}")
    columns = ["marker", "n_tasks", *COLUMNS]
    if features.empty:
        return pd.DataFrame(columns=columns)
    runs = features.rename(columns={"score": "score_recovered"})
    runs = runs[runs["score_recovered"].notna()].assign(scored=True)
    if "repeat" in runs:  # official runs: one per configuration and task (--all-repeats)
        runs = runs[runs["repeat"].fillna(0).astype(int) == 0]
    # one run per configuration and task (a corpus may hold two official ones): the first
    # by run key
    runs = (runs.sort_values("run_key", kind="stable") if "run_key" in runs else runs
            ).drop_duplicates(["config", "task_id"])
    order = sorted(runs["config"].astype(str).unique())
    if len(order) < 2 or "used_gpu" not in runs:
        return pd.DataFrame(columns=columns)
    frame = relative_frame(runs, order)  # relative to every configuration on the task
    if tasks == "both-sides":
        frame = frame[frame["task_id"].astype(str).isin(gpu_sides_tasks(frame))]
    n_tasks = int(frame["task_id"].nunique())
    used = frame["used_gpu"].astype(bool)
    parts = []
    for marker in ("used_gpu", "gpu_confirmed"):
        if marker not in frame:
            continue
        marked = frame.assign(marked=used & frame[marker].astype(bool))
        result = within_config_difference(marked, order, f"gpu:{marker}", seed, resamples,
                                          DRAWS)
        pooled = {"config": "pooled", **{k: v for k, v in result.pooled.items()
                                         if k in COLUMNS}}
        parts.append(pd.concat([result.table, pd.DataFrame([pooled])], ignore_index=True)
                     .assign(marker=marker, n_tasks=n_tasks))
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns]


AUDITED_RULE = ("audited service: calls, errors (status error) and refusals (status refused, "
                "a policy block) of tools/audit.jsonl, over the runs that have one (3.7); "
                "never used: no call in the log, else no search or fetch call in the "
                "trajectory (4.1); first web access: the first web search or fetch, as a "
                "share of run time")
"""The manifest's rule for ``audited_tools.csv``."""


def audited_tools(features: pd.DataFrame) -> pd.DataFrame:
    """The audited service across runs (3.7) and who never used it, and first web access (4.1).

    Per configuration and over all runs: runs with an audit log, the calls logged, the
    errors and refusals among them (the paper: "no policy block among 8,780 error
    messages of its 38,152 audited calls"); the share of runs that never used the audited
    tools; the median, first and third quartile of the first web access (share of run
    time) over the runs with one.

    Examples
    --------
    >>> f = pd.DataFrame({"config": ["A", "A", "B"], "audited_calls": [4, 0, float("nan")],
    ...                   "audited_errors": [1, 0, float("nan")],
    ...                   "audited_refused": [0, 0, float("nan")],
    ...                   "used_audited_tools": [True, False, True],
    ...                   "first_web_t": [0.2, float("nan"), 0.6]})
    >>> t = audited_tools(f).set_index("config")
    >>> t.loc["all", ["n_with_log", "audited_calls", "audited_errors", "audited_refused"]
    ...       ].tolist()
    [2, 4, 1, 0]
    >>> float(t.loc["A", "share_never_audited"]), float(t.loc["all", "median_first_web_t"])
    (0.5, 0.4)
    """
    columns = ["config", "n_runs", "n_with_log", "audited_calls", "audited_errors",
               "audited_refused", "error_share", "share_never_audited", "n_first_web",
               "median_first_web_t", "q1_first_web_t", "q3_first_web_t"]
    if features.empty or "audited_calls" not in features:
        return pd.DataFrame(columns=columns)
    rows = []
    for config, part in [("all", features), *features.groupby("config", sort=True)]:
        calls = pd.to_numeric(part["audited_calls"], errors="coerce")
        logged = calls.notna()
        n_calls = int(calls[logged].sum())
        errors = int(pd.to_numeric(part["audited_errors"], errors="coerce")[logged].sum())
        web = pd.to_numeric(part["first_web_t"], errors="coerce").dropna()
        rows.append({
            "config": config, "n_runs": len(part), "n_with_log": int(logged.sum()),
            "audited_calls": n_calls, "audited_errors": errors,
            "audited_refused": int(pd.to_numeric(part["audited_refused"],
                                                 errors="coerce")[logged].sum()),
            "error_share": errors / n_calls if n_calls else math.nan,
            "share_never_audited": float((~part["used_audited_tools"].astype(bool)).mean()),
            "n_first_web": len(web),
            "median_first_web_t": float(web.median()) if len(web) else math.nan,
            "q1_first_web_t": float(web.quantile(0.25)) if len(web) else math.nan,
            "q3_first_web_t": float(web.quantile(0.75)) if len(web) else math.nan})
    return pd.DataFrame(rows, columns=columns)


def task_runs(features: pd.DataFrame, tasks: Sequence[str]) -> pd.DataFrame:
    """Every scored run on the tasks examined in detail, by discipline (Figure 21a).

    One row per run of ``tasks`` (``--task ID``): discipline, task, configuration, repeat,
    score, the first draft's score and whether the submission differs from it (21b).

    Examples
    --------
    >>> f = pd.DataFrame({"run_key": ["a", "b", "c"], "task_id": ["t1", "t2", "t1"],
    ...                   "config": ["X", "X", "Y"], "discipline": "chemistry",
    ...                   "repeat": 0, "score": [0.2, 0.5, 0.4]})
    >>> task_runs(f, ["t1"])[["run_key", "config", "score"]].values.tolist()
    [['a', 'X', 0.2], ['c', 'Y', 0.4]]
    """
    columns = ["discipline", "task_id", "config", "repeat", "run_key", "score",
               "first_draft_score", "submission_differs"]
    if features.empty or not tasks:
        return pd.DataFrame(columns=columns)
    f = features[features["task_id"].astype(str).isin(set(tasks))].copy()
    for column in columns:
        if column not in f:
            f[column] = math.nan
    return (f[columns].sort_values(["discipline", "task_id", "config", "repeat"], kind="stable")
            .reset_index(drop=True))


MIN_VARYING_TASKS = 4
"""Figure 19c shows a family used by some but not all repeats on at least this many tasks."""

REPEAT_METHODS_RULE = ("families used by some but not all scored runs of one configuration on "
                       "a task; shown: on at least four tasks (Figure 19c); the gap: mean score "
                       "of the runs that used it minus the others, averaged over those tasks, "
                       "percentile interval over tasks")
"""The manifest's rule for ``repeat_methods.csv``."""


def repeat_methods(features: pd.DataFrame, seed: int = 0, resamples: int = 2_000
                   ) -> pd.DataFrame:
    """Method families that vary between the repeats of a task (Figure 19c, 3.6).

    For each configuration and task with at least two scored runs (``--all-repeats``),
    and each method family used by some but not all of them: the runs that used it,
    and their mean score minus that of the runs that did not (rows with the task's id).
    Per family (``task_id`` ``all``): the tasks where it varied (``n_tasks``), their runs
    and the runs that used it there, the mean of the per-task differences with a 95%
    percentile interval from resampling those tasks, and ``shown``: varied on at least
    :data:`MIN_VARYING_TASKS` tasks, the paper's rule for the figure.

    Examples
    --------
    >>> f = pd.DataFrame({"config": "A", "task_id": ["t1", "t1", "t2", "t2"],
    ...                   "score": [0.5, 0.1, 0.3, 0.4],
    ...                   "family_dft": [True, False, True, True]})
    >>> repeat_methods(f)[["family", "task_id", "n_tasks", "n_used", "diff"]].values.tolist()
    [['dft', 'all', 1, 1, 0.4], ['dft', 't1', 1, 1, 0.4]]
    """
    from spu.stats.resampling import percentile_interval, resample_counts

    columns = ["family", "task_id", "config", "n_tasks", "n_runs", "n_used", "diff", "ci_low",
               "ci_high", "shown"]
    families = [c for c in features.columns if c.startswith("family_")]
    f = features[features["score"].notna()] if "score" in features else features.iloc[:0]
    rows: list[dict[str, Any]] = []
    for (config, task), part in f.groupby(["config", "task_id"], sort=True):
        if len(part) < 2:
            continue
        for column in families:
            used = part[column].astype(bool).to_numpy()
            if 0 < used.sum() < len(part):
                score = part["score"].to_numpy(float)
                rows.append({"family": column.removeprefix("family_"), "task_id": task,
                             "config": config, "n_tasks": 1, "n_runs": len(part),
                             "n_used": int(used.sum()),
                             "diff": float(score[used].mean() - score[~used].mean()),
                             "ci_low": math.nan, "ci_high": math.nan, "shown": False})
    per_task = pd.DataFrame(rows, columns=columns)
    summary = []
    for family, part in per_task.groupby("family", sort=True):
        diffs = part["diff"].to_numpy(float)
        counts = resample_counts(len(diffs), resamples, rng_for(seed, "repeat methods", family))
        low, high = percentile_interval(counts @ diffs / len(diffs))
        summary.append({"family": family, "task_id": "all", "config": "all",
                        "n_tasks": len(part), "n_runs": int(part["n_runs"].sum()),
                        "n_used": int(part["n_used"].sum()),
                        "diff": float(diffs.mean()), "ci_low": float(low),
                        "ci_high": float(high), "shown": len(part) >= MIN_VARYING_TASKS})
    out = pd.concat([pd.DataFrame(summary, columns=columns), per_task], ignore_index=True)
    return out.sort_values(["family", "task_id"], kind="stable").reset_index(drop=True)


PROFILE_COLUMNS = {"runtime_s": "median", "n_calls": "median", "n_searches": "median",
                   "n_fetches": "median", "n_families": "median", "ranking_writes": "median",
                   "first_complete_t": "median", "web_share": "median",
                   "compute_share": "median", "subagent": "mean", "background_jobs": "mean",
                   "used_gpu": "mean"}
"""Working habits of Figure 23a and how each is summarised over a configuration's runs."""


def profiles(features: pd.DataFrame) -> pd.DataFrame:
    """Working habits of each configuration: medians, or shares of runs (Figure 23a)."""
    if features.empty:
        return pd.DataFrame(columns=["config", *PROFILE_COLUMNS])
    f = features.copy()
    for column in ("subagent", "background_jobs", "used_gpu"):
        f[column] = f[column].astype(float)
    agg = {c: how for c, how in PROFILE_COLUMNS.items() if c in f}
    return f.groupby("config", sort=True).agg(agg).reset_index()


EFFORT_ORDER = ("none", "low", "medium", "high", "xhigh", "max")
"""Reasoning efforts from least to most (``conf/effort``)."""

EFFORT_RATIOS = {"runtime_s": "run time", "output_tokens": "output tokens",
                 "code_chars": "code written", "n_searches": "web searches"}


def effort_pairs(features: pd.DataFrame, seed: int = 0, resamples: int = 2_000
                 ) -> pd.DataFrame:
    """The same model at two efforts on the same tasks (paper 4.10, Figure 24c-d).

    For each model run at two or more efforts, the most against the least: the median
    over shared tasks of the ratio (more / less effort) of run time, output tokens, code
    written and web searches; the share of runs that used a GPU at each; and, on the tasks
    where the higher effort's first draft was scored, the mean score of that draft, of its
    submission and of the lower effort's submission, and (Figure 24d) the draft minus each
    submission with a 95% percentile interval from ``resamples`` resamples of the tasks
    (``ci_low``, ``ci_high``; empty on the other rows).
    """
    from spu.stats.resampling import percentile_interval, resample_counts

    columns = ["model", "effort_high", "effort_low", "quantity", "n_tasks", "value",
               "ci_low", "ci_high"]
    rows: list[dict[str, Any]] = []
    if features.empty or "model" not in features:
        return pd.DataFrame(columns=columns)
    for model, part in features.groupby("model", sort=True):
        efforts = sorted(set(part["effort"].astype(str)),
                         key=lambda e: EFFORT_ORDER.index(e) if e in EFFORT_ORDER else -1)
        if len(efforts) < 2:
            continue
        low, high = efforts[0], efforts[-1]
        a = part[part["effort"] == high].groupby("task_id").first()
        b = part[part["effort"] == low].groupby("task_id").first()
        shared = a.index.intersection(b.index)
        base = {"model": model, "effort_high": high, "effort_low": low}
        for column, name in EFFORT_RATIOS.items():
            x = a.loc[shared, column].astype(float)
            y = b.loc[shared, column].astype(float)
            ok = (x > 0) & (y > 0)
            rows.append({**base, "quantity": f"ratio of {name}", "n_tasks": int(ok.sum()),
                         "value": float(np.median(x[ok] / y[ok])) if ok.any() else math.nan})
        for effort, t in ((high, a), (low, b)):
            rows.append({**base, "quantity": f"share used GPU ({effort})",
                         "n_tasks": len(shared),
                         "value": float(t.loc[shared, "used_gpu"].astype(bool).mean())
                         if len(shared) else math.nan})
        drafted = [t for t in shared if pd.notna(a.loc[t, "first_draft_score"])]
        for name, values in (("first draft score (high)", a.loc[drafted, "first_draft_score"]),
                             ("submission score (high)", a.loc[drafted, "score"]),
                             ("submission score (low)", b.loc[drafted, "score"])):
            rows.append({**base, "quantity": name, "n_tasks": len(drafted),
                         "value": float(values.mean()) if len(drafted) else math.nan})
        draft = a.loc[drafted, "first_draft_score"].to_numpy(float)
        for side, sub in (("high", a), ("low", b)):
            diff = draft - sub.loc[drafted, "score"].to_numpy(float)
            row = {**base, "quantity": f"draft minus submission ({side})",
                   "n_tasks": len(drafted), "value": math.nan, "ci_low": math.nan,
                   "ci_high": math.nan}
            if len(drafted):
                counts = resample_counts(len(diff), resamples,
                                         rng_for(seed, "efforts", str(model), side))
                low_end, high_end = percentile_interval(counts @ diff / len(diff))
                row.update(value=float(diff.mean()), ci_low=float(low_end),
                           ci_high=float(high_end))
            rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _summary(calls: pd.DataFrame, features: pd.DataFrame,
             tables: dict[str, pd.DataFrame], seed: int = 0,
             resamples: int = 10_000, population: str = "differs") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if len(calls):
        time_by = calls.groupby("activity")["time_s"].sum()
        total = float(time_by.sum())
        for activity in Activity:
            if activity.value in time_by.index and total > 0:
                rows.append({"statistic": f"time_share_{activity.value}",
                             "value": float(time_by[activity.value]) / total, "n": len(calls)})
    if len(features):
        rows.append({"statistic": "runs_without_web",
                     "value": float(((features["n_searches"] + features["n_fetches"]) == 0)
                                    .mean()), "n": len(features)})
        drafts = features["first_complete_source"].notna()
        rows.append({"statistic": "runs_with_first_draft", "value": int(drafts.sum()),
                     "n": len(features)})
    rows += revision_tests(tables["revisions.csv"], seed, resamples, population)
    rows += self_assessment_tests(tables["self_assessment.csv"], seed, resamples)
    return rows


def revision_tests(rev: pd.DataFrame, seed: int = 0, resamples: int = 10_000,
                   population: str = "differs") -> list[dict[str, Any]]:
    """4.3 *Revision*: runs whose submission differs from their first draft.

    Of the runs with a draft in the trajectory (not only in the file) and of those whose
    submission differs from it (:func:`revised_runs`): the mean change (submission minus
    draft score) with its 95% percentile interval from resampling tasks, the same numbers
    as ``revision_intervals.csv``'s row ``all`` (:func:`revision_intervals`, one stream),
    and a two-sided sign test of the gains against the losses (``scipy.stats.binomtest``
    at one half), ties (a different submission that scores the same) left out.

    References
    ----------
    Paper 4.3 ("Of the 772 runs whose trajectory contains a complete ranking before the
    submission, 317 submitted a different one ... mean change +0.001, 95% CI -0.034 to
    0.036; sign test P=0.95") and Figure 17c ("Lines are 95% intervals from resampling
    tasks"); Dixon, W. J. and Mood, A. M. (1946), J. Am. Statist. Assoc. 41, 557-566 (the
    sign test, ties dropped).

    Examples
    --------
    Two gains and one loss of three revised runs: the two-sided binomial P is 1.

    >>> rev = pd.DataFrame({"task_id": ["a", "b", "c", "d"],
    ...                     "first_complete_source": "tool_output",
    ...                     "submission_differs": [True, True, True, False],
    ...                     "change": [0.2, -0.1, 0.3, 0.0]})
    >>> {r["statistic"]: r["value"] for r in revision_tests(rev, resamples=50)}[
    ...     "revision_sign_test_p"]
    1.0
    """
    from scipy import stats as sps

    differs = revised_runs(rev, population)
    if not len(differs):
        return []
    in_trajectory = int((rev["first_complete_source"] != "file_only").sum()) \
        if "first_complete_source" in rev else len(rev)
    change = differs["change"].to_numpy(dtype=float)
    mean, low, high = task_bootstrap_mean(change, differs["task_id"].astype(str).to_numpy(),
                                          rng_for(seed, "revision intervals", "all", "change"),
                                          resamples)
    signs = exact(change)  # a different submission scoring the draft's score is a tie
    up, down = int((signs > 0).sum()), int((signs < 0).sum())
    p = float(sps.binomtest(up, up + down).pvalue) if up + down else math.nan
    n = len(differs)
    return [{"statistic": "revision_runs_with_draft", "value": in_trajectory,
             "n": in_trajectory},
            {"statistic": "revision_runs_differing", "value": n, "n": in_trajectory},
            {"statistic": "revision_mean_change", "value": mean, "n": n},
            {"statistic": "revision_mean_change_ci_low", "value": low, "n": n},
            {"statistic": "revision_mean_change_ci_high", "value": high, "n": n},
            {"statistic": "revision_gains", "value": up, "n": n},
            {"statistic": "revision_losses", "value": down, "n": n},
            {"statistic": "revision_ties", "value": n - up - down, "n": n},
            {"statistic": "revision_sign_test_p", "value": p, "n": up + down}]


SELF_ASSESSMENT_RULE = ("4.3, Figure 17b: the scored runs whose report states an expected "
                        "Spearman correlation for the submission; overestimate = stated minus "
                        "the run's score, mean with a 95% percentile interval from resampling "
                        "tasks; two-sided Wilcoxon signed-rank test of the overestimates "
                        "(scipy's defaults, zeros left out); Spearman correlation of stated "
                        "with achieved")
"""The manifest's rule for ``self_assessment.csv``."""


def self_assessment_tests(sa: pd.DataFrame, seed: int = 0, resamples: int = 10_000
                          ) -> list[dict[str, Any]]:
    """4.3 *Self-assessment*: stated expected Spearman against the achieved score.

    Over the scored runs whose report states one (``self_assessment.csv``): the medians
    of both, the mean overestimation (stated minus score) with its 95% percentile
    interval from resampling tasks, how many overpredict, the two-sided Wilcoxon
    signed-rank P of the overestimates (:func:`spu.stats.paired.wilcoxon_p`, scipy's
    defaults: zeros dropped, exact for small samples without ties) and the Spearman
    correlation of stated with achieved (``scipy.stats.spearmanr``).

    References
    ----------
    Paper 4.3 ("Sixty-three reports across 40 tasks ... self-estimated median is 0.61
    against an achieved median of 0.49, an average overestimation of 0.20 (95% CI 0.11 to
    0.29; Wilcoxon P=3.1e-4), and most of the 63 overpredict ... Spearman r=0.13").

    Examples
    --------
    >>> sa = pd.DataFrame({"task_id": ["a", "b", "c"], "stated_expected_rho": [0.6, 0.8, 0.7],
    ...                    "score": [0.4, 0.5, 0.75]})
    >>> sa["overestimate"] = sa["stated_expected_rho"] - sa["score"]
    >>> got = {r["statistic"]: r["value"] for r in self_assessment_tests(sa, resamples=50)}
    >>> round(got["self_assessment_mean_overestimate"], 4), got["self_assessment_wilcoxon_p"]
    (0.15, 0.5)
    """
    from scipy import stats as sps

    from spu.stats.paired import wilcoxon_p

    if not len(sa):
        return []
    over = sa["overestimate"].to_numpy(dtype=float)
    mean, low, high = task_bootstrap_mean(over, sa["task_id"].astype(str).to_numpy(),
                                          rng_for(seed, "self-assessment"), resamples)
    n = len(sa)
    rows = [{"statistic": "self_assessment_reports", "value": n, "n": n},
            {"statistic": "self_assessment_tasks", "value": int(sa["task_id"].nunique()),
             "n": n},
            {"statistic": "self_assessment_mean_overestimate", "value": mean, "n": n},
            {"statistic": "self_assessment_overestimate_ci_low", "value": low, "n": n},
            {"statistic": "self_assessment_overestimate_ci_high", "value": high, "n": n},
            {"statistic": "self_assessment_stated_median",
             "value": float(sa["stated_expected_rho"].median()), "n": n},
            {"statistic": "self_assessment_achieved_median", "value": float(sa["score"].median()),
             "n": n},
            {"statistic": "self_assessment_overpredicting", "value": int((over > 0).sum()),
             "n": n}]
    _, p = wilcoxon_p(over)
    if np.isfinite(p):
        rows.append({"statistic": "self_assessment_wilcoxon_p", "value": p,
                     "n": int((exact(over) != 0).sum())})
    if n >= 3 and sa["stated_expected_rho"].nunique() > 1 and sa["score"].nunique() > 1:
        rows.append({"statistic": "self_assessment_spearman",
                     "value": float(sps.spearmanr(exact(sa["stated_expected_rho"]),
                                                  exact(sa["score"])).statistic), "n": n})
    return rows


def write_analysis(result: AnalysisResult, out: Path) -> list[Path]:
    """Write every table as CSV and ``manifest.json``; returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in result.tables.items():
        path = out / name
        table.to_csv(path, index=False)
        written.append(path)
    manifest = dict(result.manifest, notes=result.notes[:200],
                    notes_left_out=max(0, len(result.notes) - 200))
    path = out / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1, default=str), encoding="utf-8")
    written.append(path)
    return written


def sample_calls(calls: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``n`` calls drawn without replacement, seeded, for a person to check (paper E.7).

    Examples
    --------
    >>> c = pd.DataFrame({"run_key": list("abcdef"), "step": range(6)})
    >>> list(sample_calls(c, 3, seed=1)["run_key"]) == list(sample_calls(c, 3, 1)["run_key"])
    True
    """
    rng = rng_for(seed, "audit sample")
    take = rng.choice(len(calls), size=min(n, len(calls)), replace=False)
    return calls.iloc[np.sort(take)].reset_index(drop=True)


ANALYZE_RULES: Mapping[str, Rule] = {
    "calls.csv": _rule("every tool call: its activity (the fifteen labels of E.7 in their "
                       "fixed priority), its class (Figure 14a's eight) and its time",
                       "E.7: \"Rules label each tool call with an activity and with the "
                       "method families of the code it ran\"", population="every run read"),
    "runs_features.csv": _rule(
        "input order: the rows of the task's targets.csv (E.4, E.7); first draft: the "
        "earliest submission-format ranking with every group and item that differs from "
        "it; used_gpu: a GPU workload in executed code that ran without failing (E.12), "
        "gpu_measured and gpu_seconds from the sampled device beside it; "
        "gpu_probe_early: a GPU probe within the first ten tool calls (4.8)",
        "4.1: \"the earliest ordering in the trajectory that has the submission format, "
        "covers every group and item and differs from the input order\"",
        population="every run read"),
    "associations.csv": _rule(
        "score ~ feature + task + configuration by least squares, percentile intervals "
        "and P from resampling tasks, Holm within the 16 method and within the 8 "
        "behavioral features (4.3, E.7)",
        "4.3: \"Each estimate compares runs on the same task after adjusting for "
        "configuration\""),
    "classifier.csv": _rule("random forest over the behaviour features, cross-validated "
                            "recall per configuration", "Figure 23b",
                            population=f"{SCORED_RUNS} of the Claude Code configurations"),
    "classifier_confusion.csv": _rule("the classifier's confusion matrix", "Figure 23b",
                                      population=f"{SCORED_RUNS} of the Claude Code "
                                                "configurations"),
    "summary.csv": _rule("scalar results quoted in section 4; each row names its statistic",
                         SECTION_4),
    "activity_time.csv": _rule(ACTIVITY_TIME_RULE, "Figure 14a: \"each run is normalized "
                               "to its own length and counts equally, the shares are "
                               "smoothed with a Gaussian kernel of s.d. 2% of the run\""),
    "milestones.csv": _rule("median and quartiles of the point in the run (share of its "
                            "time) at which each milestone is first reached",
                            "Figure 14b"),
    "families.csv": _rule("share of runs that used each method family (E.7), over all "
                          "runs, by configuration and by discipline", "Figure 15a-b"),
    "jaccard.csv": _rule("Jaccard similarity of the method families of pairs of runs on "
                         "one task", "4.1: \"two repeated Astra Max runs on the same task "
                         "share a mean Jaccard similarity of 0.65 across method families\""),
    "sources.csv": _rule("source class of each URL fetched through the audited fetch tool",
                         "Figure 15c"),
    "search_operators.csv": _rule("share of a run's search queries using each operator, "
                                  "averaged over the runs that searched", "Figure 15d"),
    "first_appearance.csv": _rule(
        "where each submitted group order (groups of at least three items whose order "
        "differs from the input order) first appears in the trajectory",
        "4.2: \"For each submitted group of at least three items whose order differs "
        "from the input order, we located where the complete order first appears\""),
    "revisions.csv": _rule(REVISION_RULE, REVISION_SENTENCE),
    "revision_intervals.csv": _rule(revision_rule(), REVISION_SENTENCE + "; Figure 24e: "
                                    "\"Share of the item pairs flipped after the draft "
                                    "that moved into the measured order\""),
    "self_assessment.csv": _rule(SELF_ASSESSMENT_RULE, "4.3: \"Sixty-three reports across "
                                 "40 tasks ... explicitly state an expected Spearman "
                                 "correlation for the final submission\""),
    "gpu.csv": _rule(GPU_RULE, "E.12, 4.8"),
    "gpu_errors.csv": _rule(GPU_RULE, "4.8: \"36% of the 258 runs that started a workload "
                            "hit a GPU error\""),
    "gpu_workloads.csv": _rule(GPU_RULE, "Figure 22b"),
    "gpu_within_config.csv": _rule(
        f"{GPU_RULE}; {GPU_TASKS['both-sides']}; each run's score minus the other "
        "configurations' mean on its task, GPU runs minus the others within each "
        "configuration, pooled, percentile intervals, permutation P",
        "4.8: \"Over the 63 tasks that have runs on both sides, the 255 runs that ran a "
        "workload score 0.035 above the others of the same configuration\""),
    "audited_tools.csv": _rule(AUDITED_RULE, "3.7, 4.1"),
    "repeat_methods.csv": _rule(REPEAT_METHODS_RULE, "Figure 19c",
                                population="scored runs of one configuration on a task "
                                          "(the repeats with --all-repeats)"),
    "task_runs.csv": _rule("every scored run on the tasks named by --task", "Figure 21a"),
    "task_settings.csv": _rule("each order's Spearman correlation with each numeric "
                               "setting, the measured order first", "Figure 18e"),
    "task_repeat_orders.csv": _rule("the repeats' orders with each item's place in the "
                                    "most common order", "Figure 19b"),
    "profiles.csv": _rule("each configuration's mean of each behaviour feature",
                          "Figure 23a"),
    "efforts.csv": _rule("behaviour of one model at two reasoning efforts on the same "
                         "tasks, ratios and draft scores", "Figure 24c-d"),
}
"""The default rule of each file ``spu analyze`` writes (the analyses refine the text)."""

BUILT_IN_RULES = ANALYZE_RULES
"""The same rules under their first name."""
