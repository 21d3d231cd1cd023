"""The task-adjusted mean: least squares fit of ``y_tc = mu_t + alpha_c`` (paper 3.1).

The fit is solved in closed form. Eliminating the task effects (Frisch-Waugh) leaves a
system in the configuration effects alone, ``A alpha = b`` with

    A = sum_t w_t (diag(o_t) - o_t o_t' / n_t),   b = sum_t w_t o_t * (y_t - ybar_t),

where ``o_t`` marks the configurations scored on task ``t``, ``n_t`` counts them, ``ybar_t``
is their mean score and ``w_t`` is the task's weight (1, or the number of times a
bootstrap resample drew it). ``A`` and ``b`` are linear in the weights, so a whole batch
of bootstrap resamples is two matrix products and a batch of C x C solves: refitting the
model for each of 10,000 resamples takes well under a second. ``alpha`` is identified up
to a constant, fixed here by ``sum(alpha) = 0`` (solving ``(A + 1 1') alpha = b``);
``alpha_c + mean_t(mu_t)``, the reported task-adjusted mean, does not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from spu.stats.resampling import DEFAULT_RESAMPLES, resample_counts

CHUNK = 1000
"""Resamples solved together; bounds memory at about CHUNK x runs floats."""


@dataclass(frozen=True)
class AdditiveDesign:
    """Which configuration was scored on which task: the design of the additive model.

    One observation per scored run, in the order of ``task_index`` and ``config_index``.
    """

    tasks: tuple[str, ...]
    """Tasks with at least one scored run."""
    configs: tuple[str, ...]
    """Configurations (columns of the score matrix), scored or not."""
    task_index: np.ndarray
    """Task of each observation."""
    config_index: np.ndarray
    """Configuration of each observation."""

    @classmethod
    def from_matrix(cls, matrix: pd.DataFrame) -> tuple[AdditiveDesign, np.ndarray]:
        """Design and observation vector of a task x configuration score frame (NaN = none)."""
        values = matrix.to_numpy(dtype=float)
        keep = np.isfinite(values).any(axis=1)
        values = values[keep]
        t, c = np.nonzero(np.isfinite(values))
        design = cls(
            tasks=tuple(str(x) for x in matrix.index[keep]),
            configs=tuple(str(x) for x in matrix.columns),
            task_index=t,
            config_index=c,
        )
        return design, values[t, c]

    def scored_configs(self, keep: np.ndarray) -> AdditiveDesign:
        """The same observations with only the configurations where ``keep`` is true.

        Every configuration left out must be without observations (the observation
        vector stays the same).

        Examples
        --------
        >>> m = pd.DataFrame({"A": [0.5, 0.3], "B": [np.nan, np.nan], "C": [0.1, np.nan]})
        >>> d, y = AdditiveDesign.from_matrix(m)
        >>> d.scored_configs(np.array([True, False, True])).config_index.tolist()
        [0, 1, 0]
        """
        keep = np.asarray(keep, dtype=bool)
        if not keep[self.config_index].all():
            raise ValueError("a configuration left out has observations")
        new_index = np.cumsum(keep) - 1
        return AdditiveDesign(
            tasks=self.tasks,
            configs=tuple(c for c, k in zip(self.configs, keep, strict=True) if k),
            task_index=self.task_index,
            config_index=new_index[self.config_index],
        )

    @property
    def observed(self) -> np.ndarray:
        """Task x configuration indicator of scored runs."""
        o = np.zeros((len(self.tasks), len(self.configs)))
        o[self.task_index, self.config_index] = 1.0
        return o


@dataclass(frozen=True)
class AdditiveFit:
    """The fitted additive model and the task-adjusted means."""

    configs: tuple[str, ...]
    """Configuration of each entry of ``alpha`` and ``adjusted``."""
    alpha: np.ndarray
    """Configuration effects, summing to zero over the scored configurations."""
    mu: np.ndarray
    """Task effects, in the order of the design's tasks."""
    mean_task_effect: float
    """Average task effect ``mean_t(mu_t)``."""
    adjusted: np.ndarray
    """Task-adjusted means ``alpha_c + mean_t(mu_t)``; NaN where not identified."""
    design: AdditiveDesign
    """The design fitted (for the bootstrap and the simulated reruns)."""
    y: np.ndarray
    """The observations fitted, in the design's order."""


def _task_matrices(observed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = observed.sum(axis=1)
    pairs = observed[:, :, None] * observed[:, None, :]
    eye = np.eye(observed.shape[1])
    m = observed[:, :, None] * eye[None] - pairs / n[:, None, None]
    tc = observed.shape[0], observed.shape[1] ** 2
    return n, m.reshape(tc), pairs.reshape(tc)


def _connected(pairs: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Whether the scored configurations of each resample form one connected design."""
    c = present.shape[1]
    reach = (pairs.reshape(-1, c, c) > 0) | np.eye(c, dtype=bool)
    steps = int(np.ceil(np.log2(max(c, 2))))
    r = reach.astype(float)
    for _ in range(steps):
        r = (r @ r > 0).astype(float)
    first = np.argmax(present, axis=1)
    from_first = r[np.arange(r.shape[0]), first]  # configurations reachable from the first
    return ((from_first > 0) | ~present).all(axis=1)


def _adjusted_batch(
    design: AdditiveDesign, y: np.ndarray, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adjusted means, alpha and mean task effect for rows of ``y`` and/or ``weights``."""
    observed = design.observed
    n_tasks, n_configs = observed.shape
    n, m_flat, pairs_flat = _task_matrices(observed)
    y = np.atleast_2d(np.asarray(y, dtype=float))
    w = np.ones((1, n_tasks)) if weights is None else np.atleast_2d(weights).astype(float)
    batch = max(y.shape[0], w.shape[0])
    ti, ci = design.task_index, design.config_index

    task_onehot = np.zeros((ti.size, n_tasks))
    task_onehot[np.arange(ti.size), ti] = 1.0
    ybar = (y @ task_onehot) / n
    resid = y - ybar[:, ti]
    if y.shape[0] == 1:
        per_task = np.zeros((n_tasks, n_configs))
        per_task[ti, ci] = resid[0]
        b = w @ per_task
    else:
        onehot = np.zeros((ti.size, n_configs))
        onehot[np.arange(ti.size), ci] = 1.0
        b = (resid * w[:, ti]) @ onehot
    b = np.broadcast_to(b, (batch, n_configs)).copy()

    a = (w @ m_flat).reshape(-1, n_configs, n_configs)
    a = np.broadcast_to(a, (batch, n_configs, n_configs)).copy()
    present = np.broadcast_to((w @ observed) > 0, (batch, n_configs))
    pairs = np.broadcast_to(w @ pairs_flat, (batch, n_configs * n_configs))
    # sum(alpha) = 0 over the present configurations; an absent one gets alpha = 0.
    a += present[:, :, None] * present[:, None, :]
    absent_b, absent_c = np.nonzero(~present)
    a[absent_b, absent_c, absent_c] = 1.0
    b[~present] = 0.0
    # An unconnected design leaves A singular: its effects are not identified.
    connected = _connected(pairs, present)
    a[~connected] = np.eye(n_configs)
    b[~connected] = 0.0
    alpha = np.linalg.solve(a, b[:, :, None])[:, :, 0]

    mu = np.broadcast_to(ybar, (batch, n_tasks)) - (alpha @ observed.T) / n
    wb = np.broadcast_to(w, (batch, n_tasks))
    mean_mu = (wb * mu).sum(axis=1) / wb.sum(axis=1)
    adjusted = alpha + mean_mu[:, None]
    adjusted[~present] = np.nan
    adjusted[~connected] = np.nan
    return adjusted, alpha, mean_mu


def fit_additive(matrix: pd.DataFrame) -> AdditiveFit:
    """Fit ``y_tc = mu_t + alpha_c`` by least squares to a task x configuration frame.

    Parameters
    ----------
    matrix
        Scores of scored runs, tasks as rows, configurations as columns, NaN where a
        configuration has no scored run on the task.

    Returns
    -------
    AdditiveFit
        ``adjusted`` is NaN for a configuration without scored runs, and for all of them
        when the design is not connected (the effects are then not identified).

    References
    ----------
    Paper section 3.1, "Statistics"; Searle (1987), *Linear Models for Unbalanced Data*,
    ch. 4 (the two-way crossed classification without interaction).

    Examples
    --------
    Hand-worked: ``B`` scores 0.2 below ``A`` on the one task they share, so with two
    tasks of means 0.5 and 0.3 for ``A``, ``B`` is adjusted to 0.4 - 0.2 = 0.2:

    >>> m = pd.DataFrame({"A": [0.5, 0.3], "B": [0.3, np.nan]}, index=["t1", "t2"])
    >>> [round(float(x), 6) for x in fit_additive(m).adjusted]
    [0.4, 0.2]
    """
    design, y = AdditiveDesign.from_matrix(matrix)
    configs = tuple(str(c) for c in matrix.columns)
    if y.size == 0:
        nan = np.full(len(configs), np.nan)
        return AdditiveFit(configs, nan, np.zeros(0), np.nan, nan, design, y)
    adjusted, alpha, mean_mu = _adjusted_batch(design, y, None)
    observed = design.observed
    n = observed.sum(axis=1)
    ybar = np.bincount(design.task_index, weights=y, minlength=len(design.tasks)) / n
    mu = ybar - observed @ alpha[0] / n
    return AdditiveFit(configs, alpha[0], mu, float(mean_mu[0]), adjusted[0], design, y)


def adjusted_means(
    design: AdditiveDesign, y: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """Task-adjusted means for a batch: rows of scores ``y`` and/or rows of task ``weights``.

    ``y`` is ``(N,)`` or ``(B, N)`` (one score per observation of the design), ``weights``
    ``None``, ``(T,)`` or ``(B, T)``; the result is ``(B, C)``. Solved in chunks of
    :data:`CHUNK` rows.
    """
    y = np.atleast_2d(np.asarray(y, dtype=float))
    w = None if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))
    batch = max(y.shape[0], 1 if w is None else w.shape[0])
    out = np.full((batch, len(design.configs)), np.nan)
    if design.task_index.size == 0:  # nothing scored: nothing to fit
        return out
    for start in range(0, batch, CHUNK):
        stop = min(start + CHUNK, batch)
        yy = y if y.shape[0] == 1 else y[start:stop]
        ww = None if w is None else (w if w.shape[0] == 1 else w[start:stop])
        out[start:stop] = _adjusted_batch(design, yy, ww)[0]
    return out


def bootstrap_adjusted(
    design: AdditiveDesign, y: np.ndarray, rng: np.random.Generator,
    resamples: int = DEFAULT_RESAMPLES,
) -> np.ndarray:
    """Task-adjusted means of ``resamples`` bootstrap resamples of tasks, model refitted each.

    Returns ``(resamples, C)``; a resample that leaves a configuration without a scored
    task, or the design unconnected, gives NaN there.

    References
    ----------
    Paper section 3.1: 95% percentile intervals from 10,000 bootstrap resamples of tasks.
    """
    weights = resample_counts(len(design.tasks), resamples, rng)
    return adjusted_means(design, y, weights)


def linear_map(design: AdditiveDesign) -> np.ndarray:
    """The matrix ``L`` (C x N) with ``adjusted = L @ y`` for unit task weights.

    The fit is linear in the scores, so noise added to every score moves the adjusted
    means by ``L @ noise``: the simulated reruns of paper 4.5 need one product each.
    """
    n_obs = design.task_index.size
    return adjusted_means(design, np.eye(n_obs)).T


def additive_residuals(
    design: AdditiveDesign, y: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """Residuals of ``y_tc = mu_t + alpha_c`` for a batch of scores and/or task weights.

    ``y`` and ``weights`` as in :func:`adjusted_means`; the result is ``(B, N)``, one
    residual per observation. With the task effects eliminated,
    ``mu_t = ybar_t - mean over the task's configurations of alpha_c``, so the residual
    is ``y_tc - ybar_t - alpha_c + mean_t(alpha)``. A resample whose design is not
    connected gets the within-task deviations (its ``alpha`` is 0).

    References
    ----------
    Frisch and Waugh (1933), Econometrica 1, 387-401; paper E.3 ("With task and
    configuration effects removed, the correlation between score and log run time").

    Examples
    --------
    A perfectly additive table has zero residuals:

    >>> m = pd.DataFrame({"A": [0.5, 0.3, 0.1], "B": [0.4, 0.2, 0.0]})
    >>> d, y = AdditiveDesign.from_matrix(m)
    >>> bool(np.allclose(additive_residuals(d, y), 0))
    True
    """
    y = np.atleast_2d(np.asarray(y, dtype=float))
    w = None if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))
    batch = max(y.shape[0], 1 if w is None else w.shape[0])
    ti, ci = design.task_index, design.config_index
    out = np.full((batch, ti.size), np.nan)
    if ti.size == 0:
        return out
    observed = design.observed
    n = observed.sum(axis=1)
    onehot = np.zeros((ti.size, len(design.tasks)))
    onehot[np.arange(ti.size), ti] = 1.0
    for start in range(0, batch, CHUNK):
        stop = min(start + CHUNK, batch)
        yy = y if y.shape[0] == 1 else y[start:stop]
        ww = None if w is None else (w if w.shape[0] == 1 else w[start:stop])
        _, alpha, _ = _adjusted_batch(design, yy, ww)
        ybar = (yy @ onehot) / n
        correction = (alpha @ observed.T) / n
        rows = stop - start
        out[start:stop] = (np.broadcast_to(yy, (rows, ti.size)) - ybar[:, ti]
                           - alpha[:, ci] + correction[:, ti])
    return out


def residual_gram(
    design: AdditiveDesign, ys: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """Weighted cross products of the additive-fit residuals of several variables.

    For variables ``ys`` (``(K, N)``, one value per observation of the design) and rows of
    task weights, ``G[b, k, l] = sum_t w_bt sum_c r_k,tc r_l,tc`` where ``r_k`` are the
    residuals of variable ``k`` after the fit ``mu_t + alpha_c`` under those weights
    (:func:`additive_residuals`). The residuals sum to zero within every task, so ``G``
    holds their weighted covariances and ``G_kl / sqrt(G_kk G_ll)`` their correlation.

    No residual is formed: with ``u`` the within-task deviations, ``b_k = w @ P_k`` the
    right-hand side of the normal equations and ``alpha_k`` their solution,
    ``G_kl = w @ (u_k . u_l)_t - b_k . alpha_l``, so a batch costs a few ``C x C`` solves
    with ``K`` right-hand sides, whatever the number of runs.

    Returns ``(B, K, K)``.

    References
    ----------
    Frisch and Waugh (1933); Searle (1987), ch. 4; paper E.3 and E.7 (score associations
    with task and configuration fixed effects, intervals from resampling tasks).

    Examples
    --------
    >>> m = pd.DataFrame({"A": [0.5, 0.3, 0.1], "B": [0.4, 0.0, 0.2]})
    >>> d, y = AdditiveDesign.from_matrix(m)
    >>> r = additive_residuals(d, y)[0]
    >>> bool(np.isclose(residual_gram(d, y[None])[0, 0, 0], (r ** 2).sum()))
    True
    """
    ys = np.atleast_2d(np.asarray(ys, dtype=float))
    k = ys.shape[0]
    observed = design.observed
    n_tasks, n_configs = observed.shape
    w = np.ones((1, n_tasks)) if weights is None else np.atleast_2d(weights).astype(float)
    ti, ci = design.task_index, design.config_index
    n, m_flat, pairs_flat = _task_matrices(observed)
    onehot = np.zeros((ti.size, n_tasks))
    onehot[np.arange(ti.size), ti] = 1.0
    u = ys - ((ys @ onehot) / n)[:, ti]  # within-task deviations, (K, N)
    by_task = np.zeros((n_tasks, n_configs, k))
    by_task[ti, ci, :] = u.T
    p = by_task.reshape(n_tasks, n_configs * k)
    # Per-task cross products of the deviations, (T, K * K).
    cross = onehot.T @ (u.T[:, :, None] * u.T[:, None, :]).reshape(ti.size, k * k)
    out = np.empty((w.shape[0], k, k))
    for start in range(0, w.shape[0], CHUNK):
        ww = w[start:start + CHUNK]
        batch = ww.shape[0]
        b = (ww @ p).reshape(batch, n_configs, k)
        a = (ww @ m_flat).reshape(batch, n_configs, n_configs)
        present = (ww @ observed) > 0
        a += present[:, :, None] * present[:, None, :]
        absent_b, absent_c = np.nonzero(~present)
        a[absent_b, absent_c, absent_c] = 1.0
        b[~present] = 0.0
        connected = _connected(ww @ pairs_flat, present)
        a[~connected] = np.eye(n_configs)
        b[~connected] = 0.0
        alpha = np.linalg.solve(a, b)
        out[start:start + batch] = ((ww @ cross).reshape(batch, k, k)
                                    - b.transpose(0, 2, 1) @ alpha)
    return out
