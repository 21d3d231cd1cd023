"""What relates to score (paper 4.3, E.7) and which configuration produced a run (4.9).

Pure functions over the runs-features table of ``spu analyze``:

- :func:`feature_associations`: for each feature, the least-squares coefficient of the
  feature in ``score ~ feature + task + configuration`` (fixed effects), with a 95%
  percentile interval and a two-sided P value from resampling tasks, and Holm's
  correction within each family of features (method, behavior);
- :func:`configuration_classifier`: a random forest predicting a run's configuration from
  its behavioral features, its stratified cross-validated accuracy against always
  guessing the most common configuration, and the confusion matrix.

A bootstrap resample of tasks draws tasks with replacement; a task drawn ``k`` times
enters with its runs weighted ``k``. With task fixed effects this weighted fit equals
the fit on the stacked copies (each copy its own task), so every resample is one
weighted least-squares solve, computed for all features at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np
import pandas as pd

from spu.activities import METHOD_FAMILIES
from spu.stats.resampling import percentile_interval, rng_for

METHOD_FEATURES: tuple[str, ...] = (
    *(f"family_{f}" for f in METHOD_FAMILIES), "any_simulation", "many_families", "used_gpu",
    "gpu_confirmed", "typed_table", "fetched_literature", "fetched_database",
)
"""Method features, the paper's 16 (one Holm family, E.7): the nine method families, any
simulation, three or more families, a GPU used and confirmed, a typed-in table of values
(4.2), literature and databases fetched."""

BEHAVIOR_FEATURES: tuple[str, ...] = (
    "used_web", "early_draft", "revised", "stated_expectation", "disclosed_recollection",
    "subagent", "background_jobs", "software_install",
)
"""Behavioral features, the paper's 8 (the other Holm family, E.7), among them disclosing
a recollection (3.7, 4.3)."""

SIMULATION_FAMILIES = ("semiempirical_qm", "dft", "molecular_dynamics", "ml_potentials",
                       "docking")

CLASSIFIER_FEATURES: tuple[str, ...] = (
    "n_calls", "share_task_inputs", "share_web_search_and_fetch", "share_setup_and_probes",
    "share_scientific_computation", "share_other_python_and_code", "share_files_and_notes",
    "share_submission_files", "share_other", "first_web_t", "first_compute_t",
    "first_submission_t", "n_families", "n_searches", "n_fetches", "ranking_writes",
    "revisions", "subagent", "background_jobs", "gpu_probe", "code_chars",
    "first_complete_t",
)
"""Behavioral features the configuration classifier sees (never the score or the labels)."""


def derived_features(features: pd.DataFrame) -> pd.DataFrame:
    """Binary features of :data:`METHOD_FEATURES` and :data:`BEHAVIOR_FEATURES`."""
    f = features
    out = pd.DataFrame(index=f.index)
    for name in METHOD_FEATURES:
        if name in f:
            out[name] = f[name].astype(bool)
    out["any_simulation"] = np.logical_or.reduce(
        [f.get(f"family_{x}", pd.Series(False, index=f.index)).astype(bool)
         for x in SIMULATION_FAMILIES])
    out["used_web"] = (f["n_searches"] + f["n_fetches"]) > 0
    out["early_draft"] = f["first_complete_t"].fillna(2.0) < 0.5
    out["revised"] = f["revisions"] > 0
    out["stated_expectation"] = f["stated_expected_rho"].notna()
    out["subagent"] = f["subagent"].astype(bool)
    out["background_jobs"] = f["background_jobs"].astype(bool)
    out["software_install"] = f["first_install_t"].notna()
    out["many_families"] = f["n_families"] >= 3
    for name in ("typed_table", "fetched_literature", "fetched_database",
                 "disclosed_recollection"):
        out[name] = f.get(name, pd.Series(False, index=f.index)).fillna(False).astype(bool)
    return out[[c for c in (*METHOD_FEATURES, *BEHAVIOR_FEATURES) if c in out]]


class _FixedEffects:
    """Weighted least squares with task and configuration effects, tasks weighted as drawn.

    Frisch-Waugh-Lovell: the coefficient of feature ``x`` is ``x~'Wy / x~'Wx`` with ``x~``
    the residual of ``x`` on the two sets of dummies. Every term is a sum over tasks (or
    task-configuration cells) of sums kept once, so a resample that weights task ``t`` by
    ``u[t]`` costs a few small matrix products, for all features at once; the
    configuration block is solved after eliminating the (diagonal) task block.
    """

    def __init__(self, y: np.ndarray, x: np.ndarray, task: np.ndarray, config: np.ndarray,
                 n_tasks: int, n_configs: int) -> None:
        k = x.shape[1]
        self.sx = np.zeros((n_tasks, k))
        np.add.at(self.sx, task, x)
        self.sy = np.bincount(task, weights=y, minlength=n_tasks)
        self.sxy = np.zeros((n_tasks, k))
        np.add.at(self.sxy, task, x * y[:, None])
        self.sxx = np.zeros((n_tasks, k))
        np.add.at(self.sxx, task, x * x)
        self.tc = np.zeros((n_tasks, n_configs))
        np.add.at(self.tc, (task, config), 1.0)
        self.cx = np.zeros((n_tasks, n_configs, k))
        np.add.at(self.cx, (task, config), x)
        self.cy = np.zeros((n_tasks, n_configs))
        np.add.at(self.cy, (task, config), y)

    def solve(self, u: np.ndarray) -> np.ndarray:
        """Coefficient of each feature with task ``t`` weighted ``u[t]``."""
        tc = u[:, None] * self.tc
        wt = tc.sum(axis=1)
        inv = np.divide(1.0, wt, out=np.zeros_like(wt), where=wt > 0)
        tx = u[:, None] * self.sx
        ty = u * self.sy
        cx = np.tensordot(u, self.cx, axes=(0, 0))                 # C'WX
        cy = u @ self.cy                                           # C'Wy
        schur = np.diag(tc.sum(axis=0)) - tc.T @ (inv[:, None] * tc)
        rhs = cx - tc.T @ (inv[:, None] * tx)
        # The task and configuration dummies share the intercept: fix the first
        # configuration's effect at 0 and solve the rest; lstsq where a configuration
        # drew no run.
        b = np.zeros_like(rhs)
        try:
            b[1:] = np.linalg.solve(schur[1:, 1:], rhs[1:])
        except np.linalg.LinAlgError:
            b = np.linalg.lstsq(schur, rhs, rcond=None)[0]
        a = inv[:, None] * (tx - tc @ b)                           # x's task effects
        num = u @ self.sxy - ty @ a - cy @ b
        den = u @ self.sxx - (a * tx).sum(axis=0) - (b * cx).sum(axis=0)
        scale = u @ self.sxx + 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 1e-9 * scale, num / den, np.nan)

    def solve_many(self, weights: np.ndarray) -> np.ndarray:
        """:meth:`solve` for each row of ``weights`` (resamples x tasks), all at once.

        The same algebra as :meth:`solve` on stacked arrays: one call replaces a Python
        loop of thousands of small solves. The sums run in another order, so a
        coefficient may differ from :meth:`solve`'s in the last bits (relative 1e-12).
        """
        u = np.asarray(weights, dtype=float)
        tc = u[:, :, None] * self.tc                                # (R, T, C)
        wt = tc.sum(axis=2)
        inv = np.divide(1.0, wt, out=np.zeros_like(wt), where=wt > 0)
        tx = u[:, :, None] * self.sx                                # (R, T, K)
        ty = u * self.sy
        cx = np.einsum("rt,tck->rck", u, self.cx)                  # C'WX
        cy = u @ self.cy                                           # C'Wy
        itc = inv[:, :, None] * tc
        schur = -np.matmul(tc.transpose(0, 2, 1), itc)
        diagonal = np.arange(tc.shape[2])
        schur[:, diagonal, diagonal] += tc.sum(axis=1)
        rhs = cx - np.matmul(itc.transpose(0, 2, 1), tx)
        b = np.zeros_like(rhs)
        try:
            b[:, 1:] = np.linalg.solve(schur[:, 1:, 1:], rhs[:, 1:])
        except np.linalg.LinAlgError:  # a resample without some configuration
            for r in range(len(u)):
                try:
                    b[r, 1:] = np.linalg.solve(schur[r, 1:, 1:], rhs[r, 1:])
                except np.linalg.LinAlgError:
                    b[r] = np.linalg.lstsq(schur[r], rhs[r], rcond=None)[0]
        a = inv[:, :, None] * (tx - np.matmul(tc, b))              # x's task effects
        num = u @ self.sxy - np.einsum("rt,rtk->rk", ty, a) - np.einsum("rc,rck->rk", cy, b)
        den = u @ self.sxx - (a * tx).sum(axis=1) - (b * cx).sum(axis=1)
        scale = u @ self.sxx + 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 1e-9 * scale, num / den, np.nan)


BATCH = 500
"""Resamples solved together (memory: a few arrays of resamples x tasks x configurations)."""


def task_resample_counts(rng: np.random.Generator, n_tasks: int, resamples: int
                         ) -> Iterator[np.ndarray]:
    """Times each task is drawn, for each resample, :data:`BATCH` resamples at a time.

    The draws are those of one ``rng.integers(0, n_tasks, n_tasks)`` per resample, in
    order, so the resamples do not depend on the batch size.
    """
    for start in range(0, resamples, BATCH):
        size = min(BATCH, resamples - start)
        counts = np.empty((size, n_tasks))
        for r in range(size):
            counts[r] = np.bincount(rng.integers(0, n_tasks, n_tasks), minlength=n_tasks)
        yield counts


@dataclass(frozen=True)
class AssociationInputs:
    """Scored runs with their score, task, configuration and binary features."""

    score: np.ndarray
    task: np.ndarray
    config: np.ndarray
    x: np.ndarray
    names: tuple[str, ...]
    n_tasks: int
    n_configs: int


def association_inputs(features: pd.DataFrame) -> AssociationInputs:
    """The scored runs of ``features`` (official and repeats alike) as arrays."""
    f = features[features["scored"].astype(bool) & features["score"].notna()]
    derived = derived_features(f)
    task_codes, tasks = pd.factorize(f["task_id"], sort=True)
    config_codes, configs = pd.factorize(f["config"], sort=True)
    return AssociationInputs(
        score=f["score"].to_numpy(float), task=task_codes, config=config_codes,
        x=derived.to_numpy(float), names=tuple(derived.columns),
        n_tasks=len(tasks), n_configs=len(configs))


def feature_associations(features: pd.DataFrame, resamples: int = 10_000, seed: int = 0
                         ) -> pd.DataFrame:
    """Score difference with and without each feature, task and configuration held fixed.

    Parameters
    ----------
    features
        ``runs_features.csv`` of ``spu analyze``.
    resamples
        Bootstrap resamples of tasks.
    seed
        Seed of the resampling.

    Returns
    -------
    pandas.DataFrame
        feature, estimate, ci_low, ci_high, p_value (two-sided: twice the smaller share of
        resampled estimates on either side of zero, at most 1), p_holm (within the family),
        family (method or behavior), n_with (runs with the feature), n_runs. A feature that
        never varies within a task and configuration has no estimate (NaN).

    References
    ----------
    Paper 4.3 and E.7 (least squares with task and configuration fixed effects, 10,000
    resamples of tasks, Holm within the 16 method and 8 behavioral features).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> f = pd.DataFrame({"task_id": np.repeat(list("abcdefgh"), 4),
    ...                   "config": np.tile(list("pqrs"), 8), "scored": True})
    >>> f["n_searches"] = rng.integers(0, 2, 32); f["n_fetches"] = 0
    >>> f["score"] = 0.3 * (f["n_searches"] > 0) + rng.normal(0, 0.01, 32)
    >>> for c in ("first_complete_t", "stated_expected_rho", "first_install_t"):
    ...     f[c] = np.nan
    >>> f["revisions"] = 0; f["n_families"] = 0
    >>> f["subagent"] = f["background_jobs"] = False
    >>> t = feature_associations(f, resamples=200)
    >>> round(float(t.set_index("feature").loc["used_web", "estimate"]), 1)
    0.3
    """
    columns = ["feature", "estimate", "ci_low", "ci_high", "p_value", "p_holm", "family",
               "n_with", "n_runs"]
    if features.empty:
        return pd.DataFrame(columns=columns)
    data = association_inputs(features)
    if data.score.size < 3 or data.n_tasks < 2:
        return pd.DataFrame(columns=columns)
    fit = _FixedEffects(data.score, data.x, data.task, data.config, data.n_tasks,
                        data.n_configs)
    estimate = fit.solve(np.ones(data.n_tasks))
    rng = rng_for(seed, "associations")
    draws = np.concatenate([np.empty((0, len(data.names))), *(
        fit.solve_many(counts) for counts in task_resample_counts(rng, data.n_tasks,
                                                                  resamples))])
    ci = percentile_interval(draws)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(draws)
        n_valid = valid.sum(axis=0)
        below = np.where(valid, draws <= 0, False).sum(axis=0) / np.maximum(n_valid, 1)
        above = np.where(valid, draws >= 0, False).sum(axis=0) / np.maximum(n_valid, 1)
    p = np.minimum(1.0, 2 * np.minimum(below, above))
    p = np.where(np.isfinite(estimate) & (n_valid > 0), p, np.nan)
    table = pd.DataFrame({
        "feature": data.names,
        "family": ["method" if n in METHOD_FEATURES else "behavior" for n in data.names],
        "n_with": data.x.sum(axis=0).astype(int), "n_runs": data.score.size,
        "estimate": estimate, "ci_low": ci[0], "ci_high": ci[1], "p_value": p,
    })
    from spu.stats.paired import holm  # scipy.stats: imported when needed

    table["p_holm"] = np.nan
    for _, part in table.groupby("family"):
        table.loc[part.index, "p_holm"] = holm(part["p_value"].to_numpy())
    return table[columns]


@dataclass(frozen=True)
class ClassifierResult:
    """The configuration classifier's cross-validated performance."""

    accuracy: float
    """Share of runs whose configuration the forest predicted (out of fold)."""
    chance: float
    """Share of the most common configuration (always guessing it)."""
    n_runs: int
    folds: int
    confusion: pd.DataFrame
    """Rows: true configuration; columns: predicted; counts."""


def configuration_classifier(features: pd.DataFrame, seed: int = 0, n_estimators: int = 500,
                             folds: int = 5, harness: str | None = "claude_code",
                             columns: Sequence[str] = CLASSIFIER_FEATURES, jobs: int = 2
                             ) -> ClassifierResult | None:
    """Random forest from behavioral features to configuration (paper 4.9, E.7).

    Runs of the configurations under one ``harness`` (default Claude Code, as in the
    paper: the harness alone would tell the others apart; ``None``: all runs) that were
    scored. ``None`` when fewer than two configurations have at least two runs each.
    ``jobs`` processes fit the folds; the predictions do not depend on it.

    References
    ----------
    Paper 4.9 and E.7: 500 trees, stratified five-fold cross-validation, accuracy
    against always guessing the most common configuration.
    """
    if jobs <= 1:
        pending = start_classifier(features, seed, n_estimators, folds, harness, columns)
        return None if pending is None else pending.result()
    with worker_pool(jobs) as pool:
        pending = start_classifier(features, seed, n_estimators, folds, harness, columns, pool)
        return None if pending is None else pending.result()


def worker_pool(jobs: int) -> Executor:
    """Worker processes, forked where the system can (they inherit what is imported)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method))


class PendingClassifier:
    """A configuration classifier whose folds are being fitted (:func:`start_classifier`)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, counts: pd.Series, k: int, seed: int,
                 n_estimators: int, executor: Executor | None) -> None:
        from sklearn.model_selection import StratifiedKFold

        self._y, self._counts, self._k = y, counts, k
        cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
        splits = list(cv.split(x, y))
        self._tests = [test for _, test in splits]
        self._jobs = [(x, y, train, test, n_estimators, seed) for train, test in splits]
        self._folds: list[Future[np.ndarray]] | None = None
        if executor is not None:
            self._folds = [executor.submit(fit_predict_fold, *job) for job in self._jobs]

    def result(self) -> ClassifierResult:
        """Wait for the folds and score the out-of-fold predictions."""
        from sklearn.metrics import confusion_matrix

        y = self._y
        if self._folds is None:
            parts = [fit_predict_fold(*job) for job in self._jobs]
        else:
            # This process, free now, fits the folds no worker has taken, last first
            # (the workers take them first to last); the rest it waits for.
            mine: dict[int, np.ndarray] = {}
            for i in reversed(range(len(self._folds))):
                if not self._folds[i].cancel():
                    break
                mine[i] = fit_predict_fold(*self._jobs[i])
            parts = [mine[i] if i in mine else f.result() for i, f in enumerate(self._folds)]
        # Out-of-fold predictions in run order, as cross_val_predict assembles them.
        predicted = np.empty_like(y)
        for test, part in zip(self._tests, parts, strict=True):
            predicted[test] = part
        labels = sorted(set(y))
        confusion = pd.DataFrame(confusion_matrix(y, predicted, labels=labels), index=labels,
                                 columns=labels)
        return ClassifierResult(
            accuracy=float(np.mean(predicted == y)),
            chance=float(self._counts.reindex(labels).max() / len(y)),
            n_runs=len(y), folds=self._k, confusion=confusion)


def fit_predict_fold(x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray,
                     n_estimators: int, seed: int) -> np.ndarray:
    """One fold: a forest fitted on ``train``, its predictions for ``test``."""
    from sklearn.ensemble import RandomForestClassifier

    forest = RandomForestClassifier(n_estimators=n_estimators, random_state=seed, n_jobs=1)
    return forest.fit(x[train], y[train]).predict(x[test])


def start_classifier(features: pd.DataFrame, seed: int = 0, n_estimators: int = 500,
                     folds: int = 5, harness: str | None = "claude_code",
                     columns: Sequence[str] = CLASSIFIER_FEATURES,
                     executor: Executor | None = None) -> PendingClassifier | None:
    """Start :func:`configuration_classifier`: other work can go on while the folds fit.

    The folds are submitted to ``executor`` (None: fitted in this process when the
    result is asked for). They are those of ``StratifiedKFold(shuffle=True,
    random_state=seed)`` and each forest is seeded with ``seed``: the predictions are
    those of sklearn's ``cross_val_predict``, wherever the folds run.
    """
    f = features[features["scored"].astype(bool)]
    if harness is not None and "harness" in f:
        f = f[f["harness"] == harness]
    counts = f["config"].value_counts()
    f = f[f["config"].isin(counts[counts >= 2].index)]
    if f["config"].nunique() < 2:
        return None
    k = int(min(folds, f["config"].value_counts().min()))
    x = f[[c for c in columns if c in f]].astype(float).fillna(-1.0).to_numpy()
    y = f["config"].astype(str).to_numpy()
    return PendingClassifier(x, y, counts, k, seed, n_estimators, executor)
