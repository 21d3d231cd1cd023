"""The report's figures, drawn with matplotlib's Agg backend and saved as PNG and SVG.

Figures are built with matplotlib's object API on their own Agg canvas and styled
within :func:`matplotlib.rc_context`: importing or using this module changes neither
pyplot's backend nor the global ``rcParams`` of the process.

- ``means``: Figure 1 style bars, the raw mean on each configuration's scored tasks
  (solid) and the mean on the tasks all configurations scored (hatched), with 95%
  intervals and the number of scored tasks.
- ``pareto``: cost per scored run against the task-adjusted mean (Figure 11), with the
  frontier.
- ``heatmap``: the score of every official public run, tasks grouped by discipline and
  ordered by their mean, excluded runs in grey (Figures 5, 10).
- ``pairs``: mean paired differences above the diagonal, detectable differences below,
  Holm-significant pairs boxed (Figure 25a).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from spu.stats.analysis import StatsResult
from spu.stats.runs_table import official

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

FORMATS = ("png", "svg")
DPI = 150
SOLID = "#3b6ea8"
HATCHED = "#a9c4e4"
FRONTIER = "#c0392b"
EXCLUDED = "#b3b3b3"

STYLE: dict[RcKeyType, Any] = {"font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False, "svg.hashsalt": "spu-report",
                                "svg.fonttype": "none"}
"""rcParams of the report's figures, applied only while one is drawn or saved."""

_P = ParamSpec("_P")


def _styled(draw: Callable[_P, Figure]) -> Callable[_P, Figure]:
    """Run a figure function within :data:`STYLE`."""
    @functools.wraps(draw)
    def styled(*args: _P.args, **kwargs: _P.kwargs) -> Figure:
        with matplotlib.rc_context(STYLE):
            return draw(*args, **kwargs)
    return styled


def _figure(figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """A figure with one axes on its own Agg canvas (pyplot is not involved)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


@_styled
def means_figure(configs: pd.DataFrame) -> Figure:
    """Figure 1 style: raw means on scored tasks and means on the shared tasks."""
    t = configs.sort_values("raw_mean", ascending=True, na_position="first")
    n = len(t)
    fig, ax = _figure((7.5, 0.42 * n + 1.4))
    y = np.arange(n)
    h = 0.38

    def errors(mean: pd.Series, low: pd.Series, high: pd.Series) -> np.ndarray:
        return np.vstack([mean - low, high - mean]).clip(min=0)

    ax.barh(y + h / 2, t["raw_mean"], h, color=SOLID, label="Scored tasks",
            xerr=errors(t["raw_mean"], t["raw_ci_low"], t["raw_ci_high"]),
            error_kw={"lw": 0.9, "capsize": 2})
    shared = int(t["n_shared_tasks"].iloc[0]) if n else 0
    ax.barh(y - h / 2, t["shared_mean"], h, color=HATCHED, hatch="///", edgecolor="white",
            label=f"Shared tasks ({shared})",
            xerr=errors(t["shared_mean"], t["shared_ci_low"], t["shared_ci_high"]),
            error_kw={"lw": 0.9, "capsize": 2})
    right = np.nanmax(np.r_[t["raw_ci_high"].to_numpy(float), t["shared_ci_high"].to_numpy(float),
                            0.1])
    for yi, (count, mean) in enumerate(zip(t["n_scored"], t["raw_mean"], strict=True)):
        if np.isfinite(mean):
            ax.text(right + 0.02, yi + h / 2, f"n={count}", va="center", fontsize=7.5,
                    color="#444444")
    ax.set_yticks(y, t["config"])
    ax.set_xlim(min(0.0, float(np.nanmin(np.r_[t["raw_ci_low"], t["shared_ci_low"], 0.0])))
                - 0.02, right + 0.12)
    ax.axvline(0, color="black", lw=0.6)
    ax.set_xlabel("Mean score (random rankings average 0, a perfect ranking scores 1)")
    ax.set_title("Configurations by mean score on the public tasks", loc="left")
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


@_styled
def pareto_figure(costs: pd.DataFrame, configs: pd.DataFrame) -> Figure:
    """Figure 11: cost per scored run against the task-adjusted mean, with the frontier."""
    t = costs.merge(configs[["config", "adjusted_ci_low", "adjusted_ci_high"]], on="config")
    t = t[np.isfinite(t["cost_mean"]) & (t["cost_mean"] > 0) & np.isfinite(t["adjusted_mean"])]
    fig, ax = _figure((7.5, 5.0))
    for on, marker_face in ((False, "white"), (True, FRONTIER)):
        part = t[t["pareto"] == on]
        ax.errorbar(part["cost_mean"], part["adjusted_mean"],
                    xerr=np.vstack([part["cost_mean"] - part["cost_ci_low"],
                                    part["cost_ci_high"] - part["cost_mean"]]).clip(min=0),
                    yerr=np.vstack([part["adjusted_mean"] - part["adjusted_ci_low"],
                                    part["adjusted_ci_high"] - part["adjusted_mean"]]).clip(min=0),
                    fmt="o", ms=6, mfc=marker_face, mec=FRONTIER if on else "#333333",
                    ecolor="#999999", elinewidth=0.8, capsize=0, zorder=3,
                    label="Pareto frontier" if on else "Other configurations")
    frontier = t[t["pareto"]].sort_values("cost_mean")
    ax.plot(frontier["cost_mean"], frontier["adjusted_mean"], "--", color=FRONTIER, lw=1,
            zorder=2)
    for r in t.itertuples(index=False):
        ax.annotate(r.config, (r.cost_mean, r.adjusted_mean), xytext=(5, 4),
                    textcoords="offset points", fontsize=7.5)
    ax.set_xscale("log")
    ax.set_xlabel("Mean API cost per scored run (USD, log scale)")
    ax.set_ylabel("Task-adjusted mean score")
    ax.set_title("Cost and score on the public tasks", loc="left")
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


@_styled
def heatmap_figure(runs: pd.DataFrame, order: list[str]) -> Figure:
    """Per-task scores of the official public runs; grey cells are excluded runs."""
    public = official(runs)
    scores = public.pivot(index="config", columns="task_id", values="score_recovered")
    scored = public.pivot(index="config", columns="task_id", values="scored")
    scores = scores.where(scored.astype(bool))
    discipline = public.groupby("task_id")["discipline"].first()
    mean = scores.mean(axis=0)
    columns = sorted(scores.columns, key=lambda c: (discipline[c], -np.nan_to_num(mean[c], nan=-9)))
    scores = scores.reindex(index=order, columns=columns)
    present = scored.reindex(index=order, columns=columns).notna().to_numpy()
    values = scores.to_numpy(dtype=float)
    n_rows, n_cols = values.shape
    fig, ax = _figure((min(16.0, 2.5 + 0.11 * n_cols), 0.32 * n_rows + 1.8))
    excluded = np.where(present & np.isnan(values), 1.0, np.nan)
    ax.imshow(excluded, aspect="auto", cmap=ListedColormap([EXCLUDED]), interpolation="none")
    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="RdBu", vmin=-1,
                      vmax=1, interpolation="none")
    ax.set_yticks(np.arange(n_rows), order)
    ax.set_xticks([])
    starts: dict[str, int] = {}
    for i, c in enumerate(columns):
        starts.setdefault(discipline[c], i)
    for name, start in starts.items():
        count = sum(1 for c in columns if discipline[c] == name)
        if start:
            ax.axvline(start - 0.5, color="black", lw=0.8)
        ax.text(start + count / 2 - 0.5, n_rows - 0.3, f"{name} ({count})", ha="center",
                va="top", fontsize=8)
    ax.set_xlabel("Public tasks, by discipline and by mean score", labelpad=16)
    ax.set_title("Score of each official run", loc="left")
    bar = fig.colorbar(image, ax=ax, fraction=0.025, pad=0.01)
    bar.set_label("Score")
    ax.legend(handles=[Patch(color=EXCLUDED, label="Excluded run")], loc="upper left",
              bbox_to_anchor=(1.06, -0.02), frameon=False, fontsize=7.5)
    ax.spines[:].set_visible(False)
    fig.tight_layout()
    return fig


@_styled
def pairs_figure(pairs: pd.DataFrame, order: list[str]) -> Figure:
    """Figure 25a: paired differences (row minus column) above, detectable ones below."""
    n = len(order)
    index = {c: i for i, c in enumerate(order)}
    diff = np.full((n, n), np.nan)
    mde = np.full((n, n), np.nan)
    significant = []
    for r in pairs.itertuples(index=False):
        i, j = index[r.config_a], index[r.config_b]
        diff[i, j] = r.mean_diff
        mde[j, i] = r.mde
        if r.significant:
            significant.append((i, j))
    fig, ax = _figure((0.55 * n + 3.0, 0.5 * n + 2.0))
    span = max(0.05, float(np.nanmax(np.abs(diff)))) if np.isfinite(diff).any() else 1.0
    upper = ax.imshow(np.ma.masked_invalid(diff), cmap="RdBu", vmin=-span, vmax=span,
                      interpolation="none")
    top = float(np.nanmax(mde)) if np.isfinite(mde).any() else 1.0
    lower = ax.imshow(np.ma.masked_invalid(mde), cmap="Greys", vmin=0, vmax=top * 1.6,
                      interpolation="none")
    for i in range(n):
        for j in range(n):
            value = diff[i, j] if i < j else mde[i, j]
            if np.isfinite(value):
                dark = abs(value) > 0.6 * (span if i < j else top * 1.6)
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6.5,
                        color="white" if dark else "black",
                        fontweight="bold" if (i, j) in significant else "normal")
    for i, j in significant:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=1.4, color="black"))
    ax.set_xticks(np.arange(n), order, rotation=60, ha="right")
    ax.set_yticks(np.arange(n), order)
    ax.set_title("Paired differences (row minus column, above) and detectable differences "
                 "(below)", loc="left", fontsize=9)
    fig.colorbar(upper, ax=ax, fraction=0.04, pad=0.02).set_label(
        "Mean paired difference (above the diagonal)")
    fig.colorbar(lower, ax=ax, location="bottom", fraction=0.035, pad=0.2, shrink=0.6).set_label(
        "Difference detectable with 80% power at the Holm level (below the diagonal)")
    ax.spines[:].set_visible(False)
    fig.tight_layout()
    return fig


def report_figures(result: StatsResult) -> dict[str, Callable[[], Figure]]:
    """Figure builders by name, for the analyses that ran."""
    t = result.tables
    order = list(t["configs.csv"]["config"])
    if not order:  # no official public runs: nothing to draw
        return {}
    figures: dict[str, Callable[[], Figure]] = {
        "means": lambda: means_figure(t["configs.csv"]),
        "pareto": lambda: pareto_figure(t["costs.csv"], t["configs.csv"]),
        "heatmap": lambda: heatmap_figure(result.runs, order),
    }
    if len(t["pairs.csv"]):
        figures["pairs"] = lambda: pairs_figure(t["pairs.csv"], order)
    return figures


def save_figure(fig: Figure, folder: Path, name: str) -> list[Path]:
    """Save as PNG and SVG (deterministic metadata, in :data:`STYLE`)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context(STYLE):
        for fmt in FORMATS:
            path = folder / f"{name}.{fmt}"
            metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
            fig.savefig(path, dpi=DPI, metadata=metadata)
            paths.append(path)
    return paths
