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
                                "svg.fonttype": "path"}
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
    """A figure with one axes on its own Agg canvas (pyplot is not involved).

    Constrained layout keeps tick labels, axis labels, colour bars and legends placed
    ``outside`` from overlapping or leaving the figure, whatever the table's size.
    """
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def _wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``fontsize`` points."""
    import textwrap

    per_line = max(20, int(width_in * 72 / (0.56 * fontsize)))
    return "\n".join(textwrap.wrap(text, per_line))


def _legend_columns(labels: list[str], width_in: float, fontsize: float) -> int:
    """How many legend entries fit side by side in ``width_in`` inches."""
    widest = max((len(label) for label in labels), default=1) * 0.56 * fontsize / 72 + 0.5
    return max(1, min(len(labels), int(width_in // widest)))


@_styled
def means_figure(configs: pd.DataFrame) -> Figure:
    """Figure 1 style: raw means on scored tasks and means on the shared tasks."""
    t = configs.sort_values("raw_mean", ascending=True, na_position="first")
    n = len(t)
    fig, ax = _figure((7.5, 0.42 * n + 1.9))
    y = np.arange(n)
    shared = int(t["n_shared_tasks"].iloc[0]) if n else 0
    h = 0.38 if shared else 0.6

    def errors(mean: pd.Series, low: pd.Series, high: pd.Series) -> np.ndarray:
        return np.vstack([mean - low, high - mean]).clip(min=0)

    ax.barh(y + (h / 2 if shared else 0), t["raw_mean"], h, color=SOLID, label="Scored tasks",
            xerr=errors(t["raw_mean"], t["raw_ci_low"], t["raw_ci_high"]),
            error_kw={"lw": 0.9, "capsize": 2})
    highs = [t["raw_ci_high"].to_numpy(float)]
    lows = [t["raw_ci_low"].to_numpy(float)]
    if shared:  # no task scored by every configuration: no shared bars
        ax.barh(y - h / 2, t["shared_mean"], h, color=HATCHED, hatch="///",
                edgecolor="white", label=f"Tasks every configuration scored ({shared})",
                xerr=errors(t["shared_mean"], t["shared_ci_low"], t["shared_ci_high"]),
                error_kw={"lw": 0.9, "capsize": 2})
        highs.append(t["shared_ci_high"].to_numpy(float))
        lows.append(t["shared_ci_low"].to_numpy(float))
    right = float(np.nanmax(np.r_[np.concatenate(highs), 0.1]))
    for yi, (count, mean) in enumerate(zip(t["n_scored"], t["raw_mean"], strict=True)):
        if np.isfinite(mean):
            ax.text(right + 0.03, yi + (h / 2 if shared else 0), f"n={count}", va="center",
                    fontsize=7.5, color="#444444")
    ax.set_yticks(y, t["config"])
    left = float(np.nanmin(np.r_[np.concatenate(lows), 0.0]))
    ax.set_xlim(min(0.0, left) - 0.02, right + 0.16)
    ax.axvline(0, color="black", lw=0.6)
    ax.set_xlabel("Mean score (random rankings average 0, a perfect ranking scores 1)")
    ax.set_title("Configurations by mean score on the public tasks", loc="left")
    fig.legend(loc="outside lower center", frameon=False, fontsize=8, ncols=2)
    return fig


def _place_labels(fig: Figure, ax: Axes, points: list[tuple[float, float, str]]) -> None:
    """Label each point where the label overlaps no other label and stays in the axes.

    Candidates around the point, nearest first (a leader line beyond the nearest ring);
    the first free one is taken, else the least crowded. Labels do not move the layout.
    """
    from matplotlib.transforms import Bbox

    fig.canvas.draw()  # fix the constrained layout before measuring
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    frame = ax.get_window_extent(renderer)
    marker = 5.0  # half the marker size, in pixels
    placed: list[Bbox] = []
    for x, y, _ in points:  # labels keep off every marker too
        px, py = ax.transData.transform((x, y))
        placed.append(Bbox.from_extents(px - marker, py - marker, px + marker, py + marker))
    directions = [(1, 0.5), (1, -1.4), (-1, 0.5), (-1, -1.4), (0, 1.2), (0, -2.2),
                  (1, 1.6), (-1, 1.6), (1, -2.6), (-1, -2.6), (0.5, 2.4), (-0.5, 2.4),
                  (0.5, -3.2), (-0.5, -3.2)]
    pad = 2.0
    for x, y, text in sorted(points, key=lambda p: (-p[1], p[0])):
        best = None
        for ring in (1.0, 2.2, 3.6, 5.2, 7.0, 9.0, 11.5):
            for dx, dy in directions:
                offset = (6 * ring * dx, 5 * ring * dy)
                ha = "left" if dx > 0 else "right" if dx < 0 else "center"
                note = ax.annotate(
                    text, (x, y), xytext=offset, textcoords="offset points", ha=ha,
                    va="center", fontsize=7.5,
                    arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.5,
                                "shrinkA": 0, "shrinkB": 3} if ring > 1 else None)
                note.set_in_layout(False)
                box = note.get_window_extent(renderer).padded(pad)
                crowd = sum(box.overlaps(b) for b in placed)
                outside = not (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1))
                score = crowd + (10 if outside else 0)
                if best is None or score < best[0]:
                    if best is not None:
                        best[1].remove()
                    best = (score, note, box)
                else:
                    note.remove()
                if score == 0:
                    break
            if best is not None and best[0] == 0:
                break
        assert best is not None
        placed.append(best[2])


@_styled
def pareto_figure(costs: pd.DataFrame, configs: pd.DataFrame) -> Figure:
    """Figure 11: cost per scored run against the task-adjusted mean, with the frontier.

    The cost axis is logarithmic above the cheapest paid configuration and linear below
    it (``symlog``), so configurations that cost nothing (baselines), which Table 3 can
    mark Pareto, are drawn too.
    """
    t = costs.merge(configs[["config", "adjusted_ci_low", "adjusted_ci_high"]], on="config")
    t = t[np.isfinite(t["cost_mean"]) & (t["cost_mean"] >= 0) & np.isfinite(t["adjusted_mean"])]
    fig, ax = _figure((7.5 + 0.05 * max(0, len(t) - 10), 5.4 + 0.1 * max(0, len(t) - 10)))
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
    paid = t["cost_mean"][t["cost_mean"] > 0]
    if len(paid):
        floor = 10 ** np.floor(np.log10(float(paid.min())))
        ax.set_xscale("symlog", linthresh=floor, linscale=0.5)
        # Room on the right for the labels of the costliest configurations.
        ax.set_xlim(left=-floor * 0.1, right=float(t["cost_ci_high"].max()) * 4)
        ax.set_xlabel("Mean API cost per scored run (USD; log scale above the cheapest paid "
                      "run)")
    else:
        # Nothing was paid (baselines, the scripted model): one tick at $0, not an axis of
        # negative dollars around it.
        ax.set_xlim(-1.0, 1.0)
        ax.set_xticks([0.0], ["$0"])
        ax.set_xlabel("Mean API cost per scored run (USD; no configuration had a cost)")
    ax.set_ylabel("Task-adjusted mean score")
    ax.set_title("Cost and score on the public tasks", loc="left")
    low = float(np.nanmin(np.r_[t["adjusted_ci_low"], t["adjusted_mean"]])) if len(t) else 0
    high = float(np.nanmax(np.r_[t["adjusted_ci_high"], t["adjusted_mean"]])) if len(t) else 1
    margin = max(0.05, (high - low) * 0.12)
    ax.set_ylim(low - margin, high + margin)
    fig.legend(loc="outside lower center", frameon=False, fontsize=8, ncols=2)
    _place_labels(fig, ax, [(float(r.cost_mean), float(r.adjusted_mean), str(r.config))
                            for r in t.itertuples(index=False)])
    return fig


DISCIPLINE_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


@_styled
def heatmap_figure(runs: pd.DataFrame, order: list[str]) -> Figure:
    """Per-task scores of the official public runs; grey cells are excluded runs.

    A band above the cells shows each task's discipline, named in the legend (text
    under narrow column groups would overprint).
    """
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
    # Up to 40 tasks the cells are made wide enough to carry their scores (label_cells).
    width = float(min(16.0, max(7.0, 2.8 + (0.32 if n_cols <= 40 else 0.07) * n_cols)))
    fig = Figure(figsize=(width, 0.32 * n_rows + 2.6), layout="constrained")
    FigureCanvasAgg(fig)
    band, ax = fig.subplots(2, 1, sharex=True,
                            gridspec_kw={"height_ratios": [0.35, max(1.0, 0.32 * n_rows)]})
    names = sorted(set(discipline[c] for c in columns))
    colour = {d: DISCIPLINE_COLOURS[i % len(DISCIPLINE_COLOURS)] for i, d in enumerate(names)}
    codes = np.array([[names.index(discipline[c]) for c in columns]], dtype=float)
    band.imshow(codes, aspect="auto", interpolation="none", vmin=-0.5, vmax=len(names) - 0.5,
                cmap=ListedColormap([colour[d] for d in names]))
    band.set_yticks([])
    band.tick_params(axis="x", bottom=False, labelbottom=False)
    band.spines[:].set_visible(False)
    band.set_title("Score of each official run", loc="left")
    excluded = np.where(present & np.isnan(values), 1.0, np.nan)
    ax.imshow(excluded, aspect="auto", cmap=ListedColormap([EXCLUDED]), interpolation="none")
    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="RdBu", vmin=-1,
                      vmax=1, interpolation="none")
    ax.set_yticks(np.arange(n_rows), order)
    # Each column is named by its task; the paper's 116 tasks fit at 4.5 points.
    ax.set_xticks(np.arange(n_cols), [str(c) for c in columns], rotation=90,
                  fontsize=7 if n_cols <= 40 else 4.5)
    ax.tick_params(axis="x", length=0)
    for i in range(1, n_cols):
        if discipline[columns[i]] != discipline[columns[i - 1]]:
            for a in (band, ax):
                a.axvline(i - 0.5, color="black", lw=0.8)
    ax.set_xlabel("Public task (grouped by discipline, by mean score within one)")
    bar = fig.colorbar(image, ax=[band, ax], fraction=0.03, pad=0.01, aspect=30)
    bar.set_label("Score")
    ax.spines[:].set_visible(False)
    counts = {d: sum(1 for c in columns if discipline[c] == d) for d in names}
    handles = [Patch(color=colour[d], label=f"{d} ({counts[d]})") for d in names]
    handles.append(Patch(color=EXCLUDED, label="Excluded run"))
    labels = [str(h.get_label()) for h in handles]
    fig.legend(handles=handles, loc="outside lower center", frameon=False, fontsize=7.5,
               ncols=_legend_columns(labels, width - 0.5, 7.5))
    if not label_cells(fig, ax, values):
        fig.spu_note = ("Scores are not printed in the cells: at this number of cells they "  # type: ignore[attr-defined]
                        "would not fit; the colour scale gives them.")
    return fig


CELL_LABEL_PT = (4.5, 6.5)
"""Smallest and largest font size (points) of a score printed in a heat-map cell."""


def label_cells(fig: Figure, ax: Axes, values: np.ndarray) -> bool:
    """Print each finite value in its cell, in a size that fits the cell; False when none fits.

    The figure is laid out first (constrained layout places the axes), the labels are sized
    to the smallest cell with a margin, measured as drawn, and shrunk once more if the
    widest still overflows; below :data:`CELL_LABEL_PT`'s least size no label is printed.
    The labels take no part in the layout (they lie inside the axes).
    """
    finite = np.isfinite(values)
    if not finite.any():
        return True
    fig.canvas.draw()
    box = ax.get_window_extent()
    n_rows, n_cols = values.shape
    cell_w = box.width / n_cols * 72 / fig.dpi  # points
    cell_h = box.height / n_rows * 72 / fig.dpi
    texts = [f"{v:.2f}" for v in values[finite]]
    widest = max(len(t) for t in texts)
    size = min(CELL_LABEL_PT[1], 0.7 * cell_h, 0.85 * cell_w / (0.62 * widest))
    if size < CELL_LABEL_PT[0]:
        return False
    drawn = []
    for (i, j), value in np.ndenumerate(values):
        if np.isfinite(value):
            text = ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=size,
                           color="white" if abs(value) > 0.6 else "black")
            text.set_in_layout(False)
            drawn.append(text)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    over = max(t.get_window_extent(renderer).width for t in drawn) * 72 / fig.dpi
    if over > 0.9 * cell_w:
        size *= 0.9 * cell_w / over
        if size < CELL_LABEL_PT[0]:
            for t in drawn:
                t.remove()
            return False
        for t in drawn:
            t.set_fontsize(size)
    return True


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
    width = max(6.5, 0.55 * n + 3.8)
    fig, ax = _figure((width, 0.5 * n + 3.6))
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
                text = f"{value:.2f}"
                ax.text(j, i, "0.00" if text == "-0.00" else text, ha="center", va="center",
                        fontsize=6.5, color="white" if dark else "black",
                        fontweight="bold" if (i, j) in significant else "normal")
    for i, j in significant:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=1.4, color="black"))
    ax.set_xticks(np.arange(n), order, rotation=90)
    ax.set_yticks(np.arange(n), order)
    ax.set_title(_wrap("Paired differences (row minus column) above the diagonal, detectable "
                       "differences below", width - 1.5, 9), loc="left", fontsize=9)
    fig.colorbar(upper, ax=ax, fraction=0.05, pad=0.02, shrink=0.9).set_label(
        "Mean difference (above)")
    fig.colorbar(lower, ax=ax, location="bottom", fraction=0.05, pad=0.02, shrink=0.6,
                 aspect=30).set_label("Detectable difference, 80% power, Holm (below)")
    ax.spines[:].set_visible(False)
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


def inline_svg(svg: str, name: str) -> str:
    """The SVG document ``svg`` (a saved figure's) as an ``<svg>`` element for the HTML page.

    Element ids are prefixed with ``<name>--`` so that several figures share one page.
    """
    import re

    text = svg[svg.index("<svg"):]
    prefix = f"{name}--"
    text = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}\1"', text)
    text = re.sub(r'href="#([^"]+)"', rf'href="#{prefix}\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}\1)", text)
    return text.replace("<svg ", f'<svg data-figure="{name}" class="spu-figure" ', 1)


def save_figure(fig: Figure, folder: Path, name: str) -> list[Path]:
    """Save as PNG and SVG (deterministic metadata, in :data:`STYLE`).

    The SVG draws text as glyph outlines (``svg.fonttype: path``), so it shows exactly the
    layout matplotlib computed whatever fonts the reader has; the report's page inlines
    the same file (:func:`inline_svg`), so each figure is drawn twice, not three times.
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context(STYLE):
        for fmt in FORMATS:
            path = folder / f"{name}.{fmt}"
            metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
            fig.savefig(path, dpi=DPI, metadata=metadata)
            paths.append(path)
    return paths
