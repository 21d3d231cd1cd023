"""The paper's figures that a runs table (plus task packages and run folders) determines.

Each figure is a function named after it (``figure_1``, ``figure_3``, ...) that draws the
panels its inputs allow from a :class:`~spu.stats.analysis.StatsResult`. :data:`REGISTRY`
says, panel by panel, which output of ``spu stats`` each one needs and what input that
takes; :func:`paper_figures` returns the figures that can be drawn and lists every
figure or panel that cannot, with what it needs, so that nothing is silently dropped.

Panels that no runs table determines are listed too: schematics (Figures 2, 4, 13a),
the journals of the source papers (3b), and the panels drawn from trajectories
(``spu analyze``: Figures 14-17, 19b-c, 21-23, 24d-e). Figure 11 and Figure 25a are
the report's ``pareto`` and ``pairs`` figures (:mod:`spu.report.figures`).

Figures are built with matplotlib's object API on their own Agg canvas, within
:data:`spu.report.figures.STYLE` (no global state changes), as the other figures.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from spu.report.figures import _styled, _wrap
from spu.report.tables import Table
from spu.stats.analysis import StatsResult
from spu.stats.runs_table import official

BLUE = "#3b6ea8"
LIGHT = "#a9c4e4"
RED = "#c0392b"
GREY = "#b3b3b3"
DARK = "#333333"
OUTCOME_COLORS = {
    "valid": "#3b6ea8", "recovered": "#8fb3dc", "rejected": "#e08e45", "refusal": "#c0392b",
    "policy_stop": "#8e6bb3", "no_file": "#7f7f7f", "timeout": "#d4b83a",
    "memory_limit": "#5a9e6f", "infra_error": "#222222",
}
"""Colour of each outcome (Figure 5a)."""


class MissingInput(LookupError):
    """A figure cannot be drawn: none of its panels has its input."""


def _canvas(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _table(result: StatsResult, name: str) -> pd.DataFrame | None:
    """A table of the result with at least one row, else None."""
    table = result.tables.get(name)
    return table if table is not None and len(table) else None


def _summary(result: StatsResult, statistic: str) -> float:
    s = result.summary
    hit = s.loc[s["statistic"] == statistic, "value"]
    return float(hit.iloc[0]) if len(hit) and pd.notna(hit.iloc[0]) else math.nan


def _errors(mean: Any, low: Any, high: Any) -> np.ndarray:
    mean, low, high = (np.asarray(x, dtype=float) for x in (mean, low, high))
    return np.nan_to_num(np.vstack([mean - low, high - mean]).clip(min=0))


def _panel_label(ax: Axes, letter: str) -> None:
    ax.set_title(letter, loc="left", fontweight="bold")


def _discipline_ticks(ax: Axes, disciplines: list[str]) -> None:
    """Separate the columns of a task grid by discipline, named on the top axis."""
    starts: dict[str, int] = {}
    for i, d in enumerate(disciplines):
        starts.setdefault(d, i)
    ends = [*list(starts.values())[1:], len(disciplines)]
    for start in list(starts.values())[1:]:
        ax.axvline(start - 0.5, color="black", lw=0.8)
    ax.set_xticks([(s + e - 1) / 2 for s, e in zip(starts.values(), ends, strict=True)],
                  [f"{d} ({e - s})" for d, s, e in zip(starts, starts.values(), ends,
                                                       strict=True)], fontsize=7)
    ax.xaxis.set_ticks_position("top")
    ax.tick_params(axis="x", length=0)


def _stagger_top_labels(fig: Figure, ax: Axes, gap_pt: float = 3.0) -> None:
    """Lift a top tick label that would overprint its left neighbour to a higher row.

    Narrow column groups (a discipline of one task beside another) put their centred
    labels closer than the labels are wide. Each label takes the lowest row where it
    clears the label before it, still centred on its group, so every label stays
    horizontal and readable; constrained layout makes room above. (No leader lines: they
    would cross the labels of the lower rows.)
    """
    fig.canvas.draw()  # lay out once to measure the labels where they will be drawn
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    gap = gap_pt * fig.dpi / 72
    rows: list[float] = []  # right edge of the last label placed in each row, in pixels
    pad = float(matplotlib.rcParams["xtick.major.pad"])  # the ticks' own, in points
    ticks = ax.xaxis.get_major_ticks()
    for tick in sorted(ticks, key=lambda t: t.get_loc()):
        box = tick.label2.get_window_extent(renderer)
        level = next((i for i, right in enumerate(rows) if box.x0 > right + gap), len(rows))
        if level == len(rows):
            rows.append(box.x1)
        rows[level] = box.x1
        tick.set_pad(pad + level * 1.2 * box.height * 72 / fig.dpi)


class _PlainLogFormatter(ticker.LogFormatter):
    """Log-axis labels as plain numbers (``3``, ``0.2``), short enough to sit side by side."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:g}"


def _plain_log_axis(axis: Axis) -> None:
    """Label a log axis with plain numbers.

    Decades, and a few minor ticks when the axis spans less than a decade, where the
    default's ``3×10⁰`` labels overprint each other.
    """
    axis.set_major_formatter(_PlainLogFormatter())
    axis.set_minor_formatter(_PlainLogFormatter(minor_thresholds=(1, 0.4)))


def _order(result: StatsResult) -> list[str]:
    return list(result.tables["configs.csv"]["config"])


def _empty_panel(ax: Axes, letter: str, text: str) -> None:
    _panel_label(ax, letter)
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=8, color="#555555",
            transform=ax.transAxes)


# --------------------------------------------------------------------------- figures


@_styled
def figure_1(result: StatsResult) -> Figure:
    """Figure 1: mean over every scored task (public and private) and over the shared tasks."""
    t = _table(result, "all_tasks.csv")
    if t is None:
        raise MissingInput("all_tasks.csv")
    t = t.sort_values("raw_mean", na_position="first")
    n = len(t)
    fig = _canvas(8.0, 0.42 * n + 1.6)
    ax = fig.subplots()
    y = np.arange(n)
    h = 0.38
    shared = int(t["n_shared_tasks"].iloc[0])
    ax.barh(y + h / 2, t["raw_mean"], h, color=BLUE, label="Scored tasks",
            xerr=_errors(t["raw_mean"], t["raw_ci_low"], t["raw_ci_high"]),
            error_kw={"lw": 0.8, "capsize": 2})
    if shared:
        ax.barh(y - h / 2, t["shared_mean"], h, color=LIGHT, hatch="///", edgecolor="white",
                label=f"Shared tasks ({shared})",
                xerr=_errors(t["shared_mean"], t["shared_ci_low"], t["shared_ci_high"]),
                error_kw={"lw": 0.8, "capsize": 2})
    labels = [f"{c}  (n={k}{'' if pd.isna(r) else f', #{int(r)} shared'})"
              for c, k, r in zip(t["config"], t["n_scored"], t["shared_rank"], strict=True)]
    ax.set_yticks(y, labels)
    ax.axvline(0, color="black", lw=0.6)
    ax.set_xlabel("Mean score over scored public and private tasks (random rankings average 0)")
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    return fig


@_styled
def figure_3(result: StatsResult) -> Figure:
    """Figure 3a, c: tasks by discipline and subfield, and experiments per task."""
    t = _table(result, "tasks.csv")
    if t is None:
        raise MissingInput("tasks.csv")
    fig = _canvas(11.0, 5.0)
    ax_a, ax_c = fig.subplots(1, 2, width_ratios=[1, 1.3])
    _panel_label(ax_a, "a")
    disciplines = sorted(t["discipline"].astype(str).unique())
    colors = matplotlib.colormaps["tab10"](np.arange(len(disciplines)))
    inner = [int((t["discipline"] == d).sum()) for d in disciplines]
    inner_wedges, _ = ax_a.pie(inner, radius=0.7, colors=colors,
                               wedgeprops={"width": 0.7, "edgecolor": "white"})
    for wedge, d, k in zip(inner_wedges, disciplines, inner, strict=True):
        theta = np.deg2rad((wedge.theta1 + wedge.theta2) / 2)
        ax_a.text(0.42 * np.cos(theta), 0.42 * np.sin(theta), f"{d}\n({k})", ha="center",
                  va="center", fontsize=7, color="white", fontweight="bold")
    outer, outer_colors, hatches = [], [], []
    for d, color in zip(disciplines, colors, strict=True):
        own = t[t["discipline"] == d]
        for (_, visibility), group in own.groupby(["subfield", "visibility"], sort=True):
            outer.append(len(group))
            outer_colors.append(color)
            hatches.append("///" if visibility == "private" else "")
    wedges, _ = ax_a.pie(outer, radius=1.0, colors=outer_colors,
                         wedgeprops={"width": 0.3, "edgecolor": "white", "alpha": 0.6})
    for wedge, hatch in zip(wedges, hatches, strict=True):
        wedge.set_hatch(hatch)
    ax_a.set_title(f"{len(t)} tasks in {t['subfield'].nunique()} subfields "
                   "(outer ring; hatched: private)", fontsize=8)
    sizes = t.dropna(subset=["n_items"])
    if not len(sizes):
        _empty_panel(ax_c, "c", "the runs table has no n_items column")
        return fig
    _panel_label(ax_c, "c")
    rng = np.random.default_rng(0)
    for i, d in enumerate(disciplines):
        own = sizes[sizes["discipline"] == d]
        x = i + rng.uniform(-0.25, 0.25, len(own))
        private = (own["visibility"] == "private").to_numpy()
        ax_c.scatter(x[~private], own["n_items"][~private], s=12, color=colors[i], alpha=0.8)
        ax_c.scatter(x[private], own["n_items"][private], s=18, facecolors="none",
                     edgecolors=colors[i])
        if len(own):
            ax_c.hlines(own["n_items"].median(), i - 0.35, i + 0.35, color="black", lw=1.5)
    ax_c.set_yscale("log")
    ax_c.set_xticks(range(len(disciplines)), disciplines, rotation=15)
    ax_c.set_ylabel("Experiments per task (log scale)")
    ax_c.set_title("public tasks filled, private open; bars: discipline medians", fontsize=8)
    return fig


@_styled
def figure_5(result: StatsResult) -> Figure:
    """Figure 5: outcome of every official public run, and the strict scores."""
    runs = official(result.runs)
    if not len(runs):
        raise MissingInput("official public runs")
    order = _order(result)
    outcomes = list(OUTCOME_COLORS)
    code = {o: i for i, o in enumerate(outcomes)}
    grid = runs.pivot(index="config", columns="task_id", values="outcome").reindex(index=order)
    scores = runs.pivot(index="config", columns="task_id", values="score_recovered")
    scored = runs.pivot(index="config", columns="task_id", values="scored").astype(bool)
    mean = scores.where(scored).mean(axis=0)
    discipline = runs.groupby("task_id")["discipline"].first()
    columns = sorted(grid.columns, key=lambda c: (discipline[c], -np.nan_to_num(mean[c], nan=-9)))
    values = grid[columns].apply(lambda col: col.map(code)).to_numpy(dtype=float)
    # Wide enough for the task columns and for the configurations' labels under panel b.
    width = min(16.0, max(7.5, 3.0 + 0.09 * len(columns), 1.5 + 0.2 * len(order)))
    grid_h = max(1.4, 0.22 * len(order))
    box_h = 2.6
    fig = _canvas(width, grid_h + box_h + 2.8)
    ax_a, ax_b = fig.subplots(2, 1, height_ratios=[grid_h, box_h])
    _panel_label(ax_a, "a")
    ax_a.imshow(np.ma.masked_invalid(values), aspect="auto", interpolation="none",
                cmap=ListedColormap(list(OUTCOME_COLORS.values())), vmin=-0.5,
                vmax=len(outcomes) - 0.5)
    ax_a.set_yticks(range(len(order)), order, fontsize=7)
    _discipline_ticks(ax_a, [str(discipline[c]) for c in columns])
    ax_a.set_xlabel("Public tasks, by discipline and mean score")
    present = sorted(set(runs["outcome"]), key=outcomes.index)
    ax_a.legend(handles=[Patch(color=OUTCOME_COLORS[o], label=o.replace("_", " "))
                         for o in present], fontsize=7, frameon=False, loc="upper left",
                bbox_to_anchor=(1.01, 1))
    _panel_label(ax_b, "b")
    data = [runs.loc[runs["config"] == c, "score_strict"].to_numpy(dtype=float) for c in order]
    ax_b.boxplot(data, showfliers=False, widths=0.5)
    rng = np.random.default_rng(0)
    for i, d in enumerate(data, start=1):
        ax_b.scatter(i + rng.uniform(-0.2, 0.2, d.size), d, s=4, color=BLUE, alpha=0.5)
    ax_b.set_xticks(range(1, len(order) + 1), order, rotation=90, fontsize=7)
    ax_b.set_ylabel("Score, every run without\na valid file at -1")
    _stagger_top_labels(fig, ax_a)
    return fig


@_styled
def figure_6(result: StatsResult) -> Figure:
    """Figure 6: formatting-rejected files by departure, and recovered against valid."""
    departures = _table(result, "departures.csv")
    recovered = _table(result, "recovered.csv")
    if departures is None and recovered is None:
        raise MissingInput("departures.csv, recovered.csv")
    n_recovered = 0 if recovered is None else len(recovered)
    fig = _canvas(min(16.0, max(12.0, 9.0 + 0.3 * n_recovered)), 4.2)
    ax_a, ax_b, ax_c = fig.subplots(1, 3, width_ratios=[1, max(1.0, 0.14 * n_recovered), 1])
    _panel_label(ax_a, "a")
    if departures is not None:
        wide = departures.pivot(index="departure", columns="config", values="n_files").fillna(0)
        bottom = np.zeros(len(wide))
        for j, config in enumerate(wide.columns):
            ax_a.barh(range(len(wide)), wide[config], left=bottom, label=config,
                      color=matplotlib.colormaps["tab20"](j % 20))
            bottom += wide[config].to_numpy()
        ax_a.set_yticks(range(len(wide)), [d.replace("_", " ") for d in wide.index],
                        fontsize=7)
        ax_a.set_xlabel("Files")
        ax_a.legend(fontsize=6, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                    ncols=1 + len(wide.columns) // 25)
    else:
        _empty_panel(ax_a, "a", "no formatting-rejected files")
    _panel_label(ax_b, "b")
    public = official(result.runs)
    configs = [] if recovered is None else list(recovered["config"])
    scored = public[public["scored"] & public["config"].isin(configs)]
    for i, config in enumerate(configs):
        own = scored[scored["config"] == config]
        for dx, outcome, color in ((-0.18, "valid", BLUE), (0.18, "recovered", RED)):
            v = own.loc[own["outcome"] == outcome, "score_recovered"].to_numpy(dtype=float)
            if v.size:
                ax_b.boxplot([v], positions=[i + dx], widths=0.3, showfliers=False,
                             patch_artist=True, boxprops={"facecolor": color, "alpha": 0.5})
    ax_b.set_xticks(range(len(configs)), configs, rotation=90, fontsize=7)
    ax_b.set_ylabel("Score")
    ax_b.legend(handles=[Patch(color=BLUE, alpha=0.5, label="valid"),
                         Patch(color=RED, alpha=0.5, label="recovered")], fontsize=7,
                frameon=False)
    _panel_label(ax_c, "c")
    if recovered is not None:
        y = np.arange(len(recovered))[::-1]
        ax_c.errorbar(recovered["diff"], y, xerr=_errors(recovered["diff"], recovered["ci_low"],
                                                         recovered["ci_high"]),
                      fmt="o", color=DARK, ms=4, lw=0.8)
        pooled = _summary(result, "recovered_minus_valid")
        if math.isfinite(pooled):
            ax_c.axvline(pooled, color=RED, ls="--", lw=1, label=f"weighted mean {pooled:+.3f}")
            ax_c.legend(fontsize=7, frameon=False)
        ax_c.axvline(0, color="black", lw=0.6)
        ax_c.set_yticks(y, [f"{c} ({n})" for c, n in zip(recovered["config"],
                                                         recovered["n_marked"], strict=True)],
                        fontsize=7)
        ax_c.set_xlabel("Recovered minus valid\n(each relative to the other configurations)")
    return fig


@_styled
def figure_7(result: StatsResult) -> Figure:
    """Figure 7: refusals by configuration and, for the two most refusing, by discipline."""
    t = _table(result, "refusals.csv")
    if t is None:
        raise MissingInput("refusals.csv")
    overall = t[t["discipline"] == "all"].sort_values("share")
    fig = _canvas(11.0, 0.3 * len(overall) + 2.0)
    ax_a, ax_b = fig.subplots(1, 2)
    _panel_label(ax_a, "a")
    ax_a.barh(overall["config"], 100 * overall["share"], color=RED)
    for i, (share, labelled, n) in enumerate(zip(overall["share"], overall["labelled"],
                                                 overall["refusals"], strict=True)):
        ax_a.text(100 * share + 1, i, f"{n} ({labelled} labelled)", va="center", fontsize=7)
    ax_a.set_xlabel("Public tasks refused (%)")
    ax_a.set_xlim(0, 115)
    top = overall[overall["refusals"] > 0].tail(2)["config"].tolist()
    if not top:
        _empty_panel(ax_b, "b", "no configuration refused a task, so there is no discipline "
                     "breakdown of refusals")
        return fig
    _panel_label(ax_b, "b")
    by = t[(t["discipline"] != "all") & t["config"].isin(top)]
    disciplines = sorted(by["discipline"].unique())
    width = 0.8 / max(len(top), 1)
    for j, config in enumerate(top):
        own = by[by["config"] == config].set_index("discipline").reindex(disciplines)
        ax_b.bar(np.arange(len(disciplines)) + j * width, 100 * own["share"], width,
                 label=config, color=[RED, "#e8a39b"][j % 2])
    ax_b.set_xticks(np.arange(len(disciplines)) + width * (len(top) - 1) / 2, disciplines,
                    rotation=15, fontsize=7)
    ax_b.set_ylabel("Tasks refused (%)")
    ax_b.legend(fontsize=7, frameon=False)
    return fig


@_styled
def figure_8(result: StatsResult) -> Figure:
    """Figure 8: means under the two rules that penalize a missing or rejected file."""
    t = _table(result, "scoring_rules.csv")
    if t is None:
        raise MissingInput("scoring_rules.csv")
    fig = _canvas(11.0, 0.3 * len(t) + 2.0)
    axes = fig.subplots(1, 2, sharex=True)
    for ax, letter, name, title in ((axes[0], "a", "strict", "Rejected files and no file at -1"),
                                    (axes[1], "b", "recovered",
                                     "Rejected files recovered, no file at -1")):
        part = t.sort_values(f"{name}_mean")
        _panel_label(ax, letter)
        y = np.arange(len(part))
        ax.barh(y, part[f"{name}_mean"], color=BLUE if name == "recovered" else LIGHT,
                xerr=_errors(part[f"{name}_mean"], part[f"{name}_ci_low"],
                             part[f"{name}_ci_high"]), error_kw={"lw": 0.8, "capsize": 2})
        ax.set_yticks(y, [f"{c} ({n})" for c, n in zip(part["config"], part["n_runs"],
                                                       strict=True)], fontsize=7)
        ax.axvline(0, color="black", lw=0.6)
        ax.set_xlabel(f"Mean score: {title}")
    return fig


@_styled
def figure_9(result: StatsResult) -> Figure:
    """Figure 9: means, score distributions, above chance and shared tasks (public tasks)."""
    configs = result.tables["configs.csv"]
    if not len(configs):
        raise MissingInput("configs.csv")
    order = list(configs["config"])
    fig = _canvas(12.0, 0.35 * len(order) * 2 + 4.0)
    (ax_a, ax_b), (ax_c, ax_d) = fig.subplots(2, 2)
    y = np.arange(len(order))[::-1]
    _panel_label(ax_a, "a")
    ax_a.errorbar(configs["raw_mean"], y + 0.15, xerr=_errors(
        configs["raw_mean"], configs["raw_ci_low"], configs["raw_ci_high"]), fmt="o",
        mfc="white", color=DARK, ms=5, lw=0.8, label="raw")
    ax_a.errorbar(configs["adjusted_mean"], y - 0.15, xerr=_errors(
        configs["adjusted_mean"], configs["adjusted_ci_low"], configs["adjusted_ci_high"]),
        fmt="o", color=BLUE, ms=5, lw=0.8, label="task-adjusted")
    ax_a.set_yticks(y, [f"{c} (n={n})" for c, n in zip(order, configs["n_scored"],
                                                       strict=True)], fontsize=7)
    ax_a.set_xlabel("Mean score")
    ax_a.legend(fontsize=7, frameon=False)
    _panel_label(ax_b, "b")
    public = official(result.runs)
    data = [public.loc[(public["config"] == c) & public["scored"], "score_recovered"]
            .to_numpy(dtype=float) for c in order]
    ax_b.boxplot([d if d.size else np.array([np.nan]) for d in data], positions=y,
                 orientation="horizontal", widths=0.5, showfliers=False)
    rng = np.random.default_rng(0)
    for yi, d in zip(y, data, strict=True):
        ax_b.scatter(d, yi + rng.uniform(-0.2, 0.2, d.size), s=3, color=BLUE, alpha=0.4)
    ax_b.set_yticks(y, order, fontsize=7)
    ax_b.set_xlabel("Score of each scored run")
    _panel_label(ax_c, "c")
    share = 100 * configs["above_chance_share"]
    ax_c.errorbar(share, y, xerr=100 * _errors(configs["above_chance_share"],
                                               configs["above_chance_ci_low"],
                                               configs["above_chance_ci_high"]),
                  fmt="o", color=BLUE, ms=5, lw=0.8)
    ax_c.axvline(5, color=RED, ls="--", lw=1, label="5% expected from random rankings")
    ax_c.set_yticks(y, order, fontsize=7)
    ax_c.set_xlim(left=0)
    ax_c.set_xlabel("Scored tasks above the chance threshold (%, Wilson 95%)")
    ax_c.legend(fontsize=7, frameon=False, loc="best")
    _panel_label(ax_d, "d")
    pairs = result.tables["pairs.csv"]
    index = {c: i for i, c in enumerate(order)}
    shared = np.full((len(order), len(order)), np.nan)
    for r in pairs.itertuples(index=False):
        shared[index[r.config_a], index[r.config_b]] = r.n_shared
        shared[index[r.config_b], index[r.config_a]] = r.n_shared
    # Cells fill the panel (not square), so the names under it get the panel's width.
    image = ax_d.imshow(shared, cmap="Blues", interpolation="none", aspect="auto")
    for i in range(len(order)):
        for j in range(len(order)):
            if np.isfinite(shared[i, j]):
                ax_d.text(j, i, f"{int(shared[i, j])}", ha="center", va="center", fontsize=5.5,
                          color="white" if shared[i, j] > 0.6 * np.nanmax(shared) else "black")
    ax_d.set_xticks(range(len(order)), order, rotation=90, fontsize=6)
    ax_d.set_yticks(range(len(order)), order, fontsize=6)
    fig.colorbar(image, ax=ax_d, shrink=0.7).set_label("Shared scored tasks")
    return fig


@_styled
def figure_10(result: StatsResult) -> Figure:
    """Figure 10: score of each configuration on each private task, excluded runs in grey."""
    private = official(result.runs, "private")
    if not len(private):
        raise MissingInput("official runs on private tasks")
    order = [c for c in _order(result) if c in set(private["config"])] + sorted(
        set(private["config"]) - set(_order(result)))
    tasks = result.tables.get("private_tasks.csv")
    columns = list(tasks["task_id"]) if tasks is not None and len(tasks) else sorted(
        private["task_id"].unique())
    scores = private.pivot(index="config", columns="task_id", values="score_recovered")
    scored = private.pivot(index="config", columns="task_id", values="scored").astype(bool)
    values = scores.where(scored).reindex(index=order, columns=columns).to_numpy(dtype=float)
    present = scored.reindex(index=order, columns=columns).notna().to_numpy()
    fig = _canvas(2.5 + 0.45 * len(columns), 0.32 * len(order) + 2.0)
    ax = fig.subplots()
    ax.imshow(np.where(present & np.isnan(values), 1.0, np.nan), aspect="auto",
              cmap=ListedColormap([GREY]), interpolation="none")
    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="RdBu", vmin=-1,
                      vmax=1, interpolation="none")
    for i in range(len(order)):
        for j in range(len(columns)):
            if np.isfinite(values[i, j]):
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=5.5,
                        color="white" if abs(values[i, j]) > 0.6 else "black")
    subfield = private.groupby("task_id")["subfield"].first() if "subfield" in private else None
    labels = [f"{t}\n{subfield[t]}" if subfield is not None else t for t in columns]
    ax.set_xticks(range(len(columns)), labels, rotation=90, fontsize=6)
    ax.set_yticks(range(len(order)), order, fontsize=7)
    fig.colorbar(image, ax=ax, shrink=0.8).set_label("Score (grey: excluded run)")
    return fig


def figure_11(result: StatsResult) -> Figure:
    """Figure 11: the cost-score Pareto frontier (the report draws it as ``pareto``)."""
    from spu.report.figures import pareto_figure

    return pareto_figure(result.tables["costs.csv"], result.tables["configs.csv"])


@_styled
def figure_12(result: StatsResult) -> Figure:
    """Figure 12: the repeated runs, against the official run and in agreement."""
    tasks = _table(result, "repeats_tasks.csv")
    if tasks is None:
        raise MissingInput("repeats_tasks.csv")
    agreement = _table(result, "repeats_agreement.csv")
    fig = _canvas(13.0, 4.5)
    ax_a, ax_b, ax_c = fig.subplots(1, 3, width_ratios=[1.6, 1, 1])
    _panel_label(ax_a, "a")
    runs = result.runs
    repeated = runs[(runs["repeat"] >= 1) & runs["scored"]]
    t = tasks.sort_values("repeat_mean").reset_index(drop=True)
    for i, r in t.iterrows():
        own = repeated[(repeated["config"] == r.config) & (repeated["task_id"] == r.task_id)]
        ax_a.scatter(np.full(len(own), i), own["score_recovered"], s=10, color=BLUE, alpha=0.7)
        if np.isfinite(r.official):
            ax_a.scatter(i, r.official, marker="x", color=RED, s=25)
    ax_a.set_xticks(range(len(t)), t["task_id"], rotation=90, fontsize=5)
    ax_a.set_ylabel("Score (dots: repeats, crosses: official run)")
    _panel_label(ax_b, "b")
    ax_b.scatter(t["repeat_mean"], t["official"], s=14, color=BLUE)
    ax_b.plot([-1, 1], [-1, 1], "--", color=GREY, lw=1)
    ax_b.set_xlabel("Mean of the scored repeats")
    ax_b.set_ylabel("Official score")
    if agreement is not None:
        _panel_label(ax_c, "c")
        ax_c.scatter(agreement["between"], agreement["within"], s=14, color=BLUE)
        ax_c.plot([-1, 1], [-1, 1], "--", color=GREY, lw=1)
        ax_c.set_xlabel("Repeat against other configurations' official runs")
        ax_c.set_ylabel("Repeat against repeat")
    else:
        _empty_panel(ax_c, "c", "needs the submitted orders: --runs-dir and --tasks")
    return fig


@_styled
def figure_13(result: StatsResult) -> Figure:
    """Figure 13b-d: presented order, network indicators, flagged against unflagged runs."""
    tasks = result.tables.get("tasks.csv")
    indicators = _table(result, "exposure_indicators.csv")
    exposure = _table(result, "exposure.csv")
    has_b = tasks is not None and tasks["presented_order_score"].notna().any()
    if not has_b and indicators is None and exposure is None:
        raise MissingInput("tasks.csv with presented_order_score, exposure tables")
    fig = _canvas(13.0, 4.8)
    ax_b, ax_c, ax_d = fig.subplots(1, 3)
    if has_b:
        assert tasks is not None
        _panel_label(ax_b, "b")
        public = tasks[(tasks["visibility"] == "public") & tasks["presented_order_score"].notna()]
        ax_b.scatter(public["threshold"], public["presented_order_score"], s=12, color=BLUE)
        ax_b.plot([0, 1], [0, 1], "--", color=GREY, lw=1, label="chance threshold")
        adjusted = result.tables["configs.csv"]["adjusted_mean"].dropna()
        if len(adjusted):
            ax_b.axhspan(adjusted.min(), adjusted.max(), color=LIGHT, alpha=0.4,
                         label="configurations' task-adjusted means")
        ax_b.set_xlabel("Chance threshold")
        ax_b.set_ylabel("Score of the presented order")
        ax_b.legend(fontsize=7, frameon=False, loc="best")
    else:
        _empty_panel(ax_b, "b", "needs the task packages: --tasks")
    if indicators is not None:
        _panel_label(ax_c, "c")
        y = np.arange(len(indicators))[::-1]
        for dy, column, label, color in ((-0.25, "flagged_share", "flagged", RED),
                                         (0.0, "doi_share", "source DOI", "#e8a39b"),
                                         (0.25, "outside_share", "requests outside tools",
                                          BLUE)):
            ax_c.barh(y + dy, 100 * indicators[column].fillna(0), 0.25, color=color,
                      label=label)
        ax_c.set_yticks(y, indicators["config"], fontsize=7)
        ax_c.set_xlabel("Scored runs (%)")
        ax_c.legend(fontsize=7, frameon=False)
    if exposure is not None:
        _panel_label(ax_d, "d")
        y = np.arange(len(exposure))[::-1]
        ax_d.errorbar(exposure["diff"], y, xerr=_errors(exposure["diff"], exposure["ci_low"],
                                                        exposure["ci_high"]),
                      fmt="o", color=DARK, ms=4, lw=0.8)
        s = result.summary
        pooled = s[s["statistic"] == "pooled_difference"]
        if len(pooled) and pd.notna(pooled["ci_low"].iloc[0]):
            ax_d.axvspan(pooled["ci_low"].iloc[0], pooled["ci_high"].iloc[0], color=LIGHT,
                         alpha=0.5, label=f"pooled {pooled['value'].iloc[0]:+.3f}")
            ax_d.legend(fontsize=7, frameon=False)
        ax_d.axvline(0, color="black", lw=0.6)
        ax_d.set_yticks(y, [f"{c} ({n})" for c, n in zip(exposure["config"],
                                                         exposure["n_flagged"], strict=True)],
                        fontsize=7)
        ax_d.set_xlabel("Flagged minus unflagged\n(each relative to the other configurations)")
    else:
        _empty_panel(ax_d, "d", "no configuration with flagged and unflagged runs")
    return fig


@_styled
def figure_16(result: StatsResult) -> Figure:
    """Figure 16c-d: the monotone prior (submitted and measured orders against settings)."""
    groups = _table(result, "monotone_groups.csv")
    configs = _table(result, "monotone.csv")
    if groups is None or configs is None:
        raise MissingInput("monotone.csv")
    fig = _canvas(11.0, 4.5)
    ax_c, ax_d = fig.subplots(1, 2)
    _panel_label(ax_c, "c")
    per_task = groups.groupby("task_id")[["measured_abs_rho", "submitted_abs_rho"]].mean()
    ax_c.scatter(per_task["measured_abs_rho"], per_task["submitted_abs_rho"], s=14, color=BLUE)
    ax_c.plot([0, 1], [0, 1], "--", color=GREY, lw=1)
    ax_c.set_xlabel("|Spearman| of a setting with the measured order")
    ax_c.set_ylabel("|Spearman| with the submitted orders")
    _panel_label(ax_d, "d")
    y = np.arange(len(configs))
    ax_d.barh(y, 100 * configs["submitted_monotone_share"], color=BLUE)
    ax_d.scatter(100 * configs["measured_monotone_share"], y, marker="|", s=120, color=RED,
                 label="measured order")
    ax_d.set_yticks(y, configs["config"], fontsize=7)
    ax_d.set_xlabel("Groups monotone in a setting (%)")
    ax_d.legend(fontsize=7, frameon=False)
    return fig


@_styled
def figure_18(result: StatsResult) -> Figure:
    """Figure 18a-d: spread between configurations, against repeats, and pair correlations."""
    tasks = _table(result, "tasks.csv")
    if tasks is None:
        raise MissingInput("tasks.csv")
    fig = _canvas(13.0, 8.0)
    (ax_a, ax_b), (ax_c, ax_d) = fig.subplots(2, 2)
    _panel_label(ax_a, "a")
    public = tasks[(tasks["visibility"] == "public") & tasks["task_sd"].notna()].sort_values(
        "task_sd").reset_index(drop=True)
    x = np.arange(len(public))
    ax_a.vlines(x, public["task_min"], public["task_max"], color=LIGHT, lw=2)
    ax_a.scatter(x, public["task_mean"], s=6, color=DARK)
    ax_a.set_xlabel("Public tasks, by SD between configurations")
    ax_a.set_ylabel("Lowest, mean and highest score")
    interaction = _table(result, "interaction_tasks.csv")
    if interaction is not None:
        _panel_label(ax_b, "b")
        ax_b.scatter(interaction["repeat_sd"], np.sqrt(interaction["ms_configs"]), s=14,
                     color=BLUE)
        top = float(max(interaction["repeat_sd"].max(), np.sqrt(interaction["ms_configs"]).max()))
        ax_b.plot([0, top], [0, top], "--", color=GREY, lw=1)
        ax_b.set_xlabel("SD between repeats")
        ax_b.set_ylabel("Residual SD between configurations")
    else:
        _empty_panel(ax_b, "b", "needs repeated runs (repeat >= 1)")
    _draw_advantage(ax_c, result)
    pairs = _table(result, "pair_correlations.csv")
    if pairs is not None:
        _panel_label(ax_d, "d")
        jitter = np.random.default_rng(0).uniform(-0.2, 0.2, len(pairs))
        ax_d.scatter(jitter, pairs["r"], s=12, color=BLUE)
        best = int(np.argmax(pairs["r"].to_numpy()))
        top = pairs.iloc[best]
        ax_d.annotate(f"{top.config_a} / {top.config_b}", (jitter[best], top.r), xytext=(6, 0),
                      textcoords="offset points", fontsize=7, va="center")
        ax_d.set_xlim(-0.5, 0.9)
        ax_d.axhline(pairs["null_mean"].mean(), color=RED, ls="--", lw=1,
                     label="expected without interaction")
        ax_d.set_xticks([])
        ax_d.set_ylabel("Correlation of per-task scores")
        ax_d.legend(fontsize=7, frameon=False)
    else:
        _empty_panel(ax_d, "d", "needs a run-to-run SD (repeats or --run-sd)")
    return fig


def _draw_advantage(ax: Axes, result: StatsResult) -> None:
    """Figure 18c: the repeated configuration's official against repeated advantage."""
    runs = result.runs
    public = runs[(runs["visibility"] == "public") & runs["scored"]]
    repeated = public[public["repeat"] >= 1]
    if not len(repeated):
        _empty_panel(ax, "c", "needs repeated runs (repeat >= 1)")
        return
    config = repeated["config"].value_counts().index[0]
    official_runs = public[public["repeat"] == 0]
    others = official_runs[official_runs["config"] != config].groupby("task_id")[
        "score_recovered"].mean()
    own = official_runs[official_runs["config"] == config].set_index("task_id")["score_recovered"]
    rep = repeated[repeated["config"] == config].groupby("task_id")["score_recovered"].mean()
    tasks = rep.index.intersection(own.index).intersection(others.index)
    x = (own[tasks] - others[tasks]).to_numpy()
    y = (rep[tasks] - others[tasks]).to_numpy()
    _panel_label(ax, "c")
    ax.scatter(x, y, s=14, color=BLUE)
    if x.size >= 2 and np.ptp(x) > 0:
        slope, intercept = np.polyfit(x, y, 1)
        grid = np.linspace(x.min(), x.max(), 2)
        ax.plot(grid, intercept + slope * grid, color=DARK, lw=1)
    lim = float(np.nanmax(np.abs(np.r_[x, y, 0.1])))
    ax.plot([-lim, lim], [-lim, lim], "--", color=GREY, lw=1)
    ax.set_xlabel(f"{config}: official minus others")
    ax.set_ylabel("Repeats' mean minus others")


@_styled
def figure_19(result: StatsResult) -> Figure:
    """Figure 19a, d: identical orders by group size, and what a policy stop costs."""
    orders = _table(result, "repeats_orders.csv")
    stops = _table(result, "repeats_stops.csv")
    if orders is None and stops is None:
        raise MissingInput("repeats_orders.csv, repeats_stops.csv")
    fig = _canvas(11.0, 4.2)
    ax_a, ax_d = fig.subplots(1, 2)
    if orders is not None:
        _panel_label(ax_a, "a")
        size = orders["n_items"].clip(upper=10)
        share = orders.groupby(size)["identical_in_all_repeats"].agg(["mean", "size"])
        ax_a.bar(share.index.astype(int), 100 * share["mean"], color=BLUE)
        for k, (m, n) in share.iterrows():
            ax_a.text(k, 100 * m + 1, f"n={int(n)}", ha="center", fontsize=7)
        ax_a.set_xticks(share.index.astype(int),
                        [str(int(k)) if k < 10 else "10+" for k in share.index])
        ax_a.set_xlabel("Items in the group")
        ax_a.set_ylabel("Groups with the same order in every repeat (%)")
    else:
        _empty_panel(ax_a, "a", "needs the submitted orders: --runs-dir and --tasks")
    if stops is not None:
        _panel_label(ax_d, "d")
        y = np.arange(len(stops))
        ax_d.scatter(stops["diff"], y, color=DARK, s=14)
        s = result.summary
        row = s[s["statistic"] == "stop_effect"]
        if len(row) and pd.notna(row["ci_low"].iloc[0]):
            ax_d.axvspan(row["ci_low"].iloc[0], row["ci_high"].iloc[0], color=LIGHT, alpha=0.5,
                         label=f"mean {row['value'].iloc[0]:+.3f} (95% CI)")
            ax_d.legend(fontsize=7, frameon=False)
        ax_d.axvline(0, color="black", lw=0.6)
        ax_d.set_yticks(y, stops["task_id"], fontsize=7)
        ax_d.set_xlabel("Stopped repeats minus the others")
    else:
        _empty_panel(ax_d, "d", "no task with stopped and other scored repeats")
    return fig


@_styled
def figure_20(result: StatsResult) -> Figure:
    """Figure 20: scores by discipline, the gap between the groups, order stability."""
    tasks = _table(result, "tasks.csv")
    summary = _table(result, "discipline_summary.csv")
    if tasks is None or summary is None:
        raise MissingInput("tasks.csv, discipline_summary.csv")
    fig = _canvas(13.0, 8.5)
    (ax_a, ax_b), (ax_c, ax_d) = fig.subplots(2, 2)
    _panel_label(ax_a, "a")
    disciplines = list(summary["discipline"])
    public = tasks[tasks["visibility"] == "public"]
    rng = np.random.default_rng(0)
    for i, d in enumerate(disciplines):
        own = public.loc[public["discipline"] == d, "task_mean"].dropna()
        ax_a.scatter(i + rng.uniform(-0.2, 0.2, len(own)), own, s=8, color=LIGHT)
    ax_a.errorbar(range(len(disciplines)), summary["raw_mean"], yerr=_errors(
        summary["raw_mean"], summary["ci_low"], summary["ci_high"]), fmt="o", color=BLUE,
        ms=6, lw=1, label="raw mean")
    ax_a.scatter(range(len(disciplines)), summary["mean_threshold"], marker="_", s=300,
                 color=RED, label="mean chance threshold")
    ax_a.set_xticks(range(len(disciplines)), disciplines, rotation=10, fontsize=8)
    ax_a.set_ylabel("Task mean over configurations")
    ax_a.legend(fontsize=7, frameon=False)
    _panel_label(ax_b, "b")
    by = result.tables["disciplines.csv"]
    order = _order(result)
    grid = by.pivot(index="config", columns="discipline", values="raw_mean").reindex(
        index=order, columns=disciplines)
    counts = by.pivot(index="config", columns="discipline", values="n_tasks").reindex(
        index=order, columns=disciplines)
    image = ax_b.imshow(grid.to_numpy(dtype=float), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    for i in range(len(order)):
        for j in range(len(disciplines)):
            v = grid.iloc[i, j]
            if pd.notna(v):
                ax_b.text(j, i, f"{v:.2f} ({int(counts.iloc[i, j])})", ha="center",
                          va="center", fontsize=6)
    ax_b.set_xticks(range(len(disciplines)), disciplines, rotation=10, fontsize=7)
    ax_b.set_yticks(range(len(order)), order, fontsize=7)
    fig.colorbar(image, ax=ax_b, shrink=0.8).set_label("Raw mean (scored tasks)")
    gap = _table(result, "discipline_gap.csv")
    if gap is not None:
        _panel_label(ax_c, "c")
        ax_c.errorbar(range(len(gap)), gap["diff"], yerr=_errors(gap["diff"], gap["ci_low"],
                                                                 gap["ci_high"]),
                      fmt="o", color=BLUE, ms=6, lw=1)
        ax_c.axhline(0, color="black", lw=0.6)
        ax_c.set_xticks(range(len(gap)), gap["discipline"], rotation=10, fontsize=8)
        ax_c.set_ylabel("Leading minus trailing group, same task")
        observed = _summary(result, "gap_range")
        null = _summary(result, "gap_range_null_median")
        ax_c.set_title(f"widest minus narrowest {observed:.3f} (permuted labels: median "
                       f"{null:.3f})", fontsize=8)
    else:
        _empty_panel(ax_c, "c", "no leading and trailing group scored in every discipline")
    pairs = _table(result, "discipline_pairs.csv")
    if pairs is not None:
        _panel_label(ax_d, "d")
        ax_d.scatter(range(len(pairs)), pairs["rho"], color=BLUE, s=16)
        ax_d.axhline(pairs["rho"].mean(), color=BLUE, lw=1, label="mean")
        null = _summary(result, "order_stability_null_median")
        if math.isfinite(null):
            ax_d.axhline(null, color=GREY, ls="--", lw=1, label="random splits (median)")
        ax_d.set_xticks(range(len(pairs)), [f"{a[:4]}-{b[:4]}" for a, b in
                                            zip(pairs["discipline_a"], pairs["discipline_b"],
                                                strict=True)], fontsize=7)
        ax_d.set_ylabel("Rank correlation of discipline means")
        ax_d.legend(fontsize=7, frameon=False)
    else:
        _empty_panel(ax_d, "d", "fewer than three configurations scored in every discipline")
    return fig


@_styled
def figure_24(result: StatsResult) -> Figure:
    """Figure 24a-c: the same model at two reasoning efforts."""
    tasks = _table(result, "effort_tasks.csv")
    effort = _table(result, "effort.csv")
    ratios = _table(result, "effort_ratios.csv")
    if tasks is None or effort is None:
        raise MissingInput("effort_tasks.csv, effort.csv")
    low, high = tasks["low_config"].iloc[0], tasks["high_config"].iloc[0]
    tasks = tasks[tasks["low_config"] == low]
    fig = _canvas(13.0, 4.5)
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    _panel_label(ax_a, "a")
    d = tasks["diff"].to_numpy(dtype=float)
    d = np.sort(d[np.isfinite(d)])  # tasks both efforts' official runs scored
    ax_a.bar(np.arange(d.size), d, color=np.where(d > 0, BLUE, RED), width=1.0)
    ax_a.axhline(0, color="black", lw=0.6)
    ax_a.set_xlabel("Tasks, sorted")
    ax_a.set_ylabel(f"{low} minus {high}")
    _panel_label(ax_b, "b")
    own = effort[effort["low"] == low].reset_index(drop=True)
    y = np.arange(len(own))[::-1]
    ax_b.errorbar(own["diff"], y, xerr=_errors(own["diff"], own["ci_low"], own["ci_high"]),
                  fmt="o", color=DARK, ms=5, lw=0.8)
    ax_b.axvline(0, color="black", lw=0.6)
    ax_b.set_yticks(y, [f"{w.replace('_', ' ')} ({n})" for w, n in
                        zip(own["way"], own["n_tasks"], strict=True)], fontsize=7)
    ax_b.set_xlabel(f"{low} minus {high}")
    if ratios is not None:
        _panel_label(ax_c, "c")
        part = ratios[(ratios["low"] == low) & ratios["median_ratio"].notna()].reset_index(
            drop=True)
        y = np.arange(len(part))[::-1]
        ax_c.errorbar(part["median_ratio"], y, xerr=_errors(part["median_ratio"],
                                                            part["ci_low"], part["ci_high"]),
                      fmt="o", color=BLUE, ms=5, lw=0.8)
        gpu = ratios[(ratios["low"] == low) & (ratios["quantity"] == "used_gpu")]
        labels = list(part["label"])
        ax_c.set_yticks(y, labels, fontsize=7)
        if len(part):
            ax_c.set_xscale("log")
            _plain_log_axis(ax_c.xaxis)
        ax_c.axvline(1, color="black", lw=0.6)
        # A third of the figure's width, less the tick labels: wrap to fit.
        title = _wrap(f"{high} over {low}, same task (median, log scale)", 3.0, 9)
        if len(gpu):
            title += "\n" + _wrap(f"GPU used in {100 * gpu['high_mean'].iloc[0]:.0f}% against "
                                  f"{100 * gpu['low_mean'].iloc[0]:.0f}% of scored runs", 3.0, 9)
        ax_c.set_xlabel(title)
    return fig


@_styled
def figure_25(result: StatsResult) -> Figure:
    """Figure 25b-e: observed against detectable differences, and two close-ups."""
    pairs = result.tables["pairs.csv"]
    if not len(pairs):
        raise MissingInput("pairs.csv")
    order = _order(result)
    fig = _canvas(13.0, 8.0)
    (ax_b, ax_c), (ax_d, ax_e) = fig.subplots(2, 2)
    _panel_label(ax_b, "b")
    sig = pairs["significant"].astype(bool)
    ax_b.scatter(pairs.loc[~sig, "mde"], pairs.loc[~sig, "mean_diff"].abs(), s=12, color=GREY,
                 label="not significant")
    ax_b.scatter(pairs.loc[sig, "mde"], pairs.loc[sig, "mean_diff"].abs(), s=14, color=RED,
                 label="significant (Holm)")
    top = float(np.nanmax(np.r_[pairs["mde"], pairs["mean_diff"].abs(), 0.1]))
    ax_b.plot([0, top], [0, top], "--", color=GREY, lw=1)
    ax_b.set_xlabel("Detectable difference (80% power, Holm level)")
    ax_b.set_ylabel("|Observed mean difference|")
    ax_b.legend(fontsize=7, frameon=False)
    if not sig.any():
        _empty_panel(ax_c, "c", "no pair of configurations differs detectably after Holm "
                     "correction, so none lies above or below another")
    else:
        _separations_panel(ax_c, pairs[sig], order)
    _effort_and_coverage_panels(result, ax_d, ax_e)
    return fig


def _separations_panel(ax_c: Axes, significant: pd.DataFrame, order: list[str]) -> None:
    """Figure 25c: how many configurations lie detectably below and above each."""
    _panel_label(ax_c, "c")
    below = {c: 0 for c in order}
    above = {c: 0 for c in order}
    for r in significant.itertuples(index=False):
        better, worse = (r.config_a, r.config_b) if r.mean_diff > 0 else (r.config_b, r.config_a)
        below[better] += 1
        above[worse] += 1
    y = np.arange(len(order))[::-1]
    ax_c.barh(y, [below[c] for c in order], color=BLUE, label="detectably below it")
    ax_c.barh(y, [-above[c] for c in order], color=RED, label="detectably above it")
    ax_c.set_yticks(y, order, fontsize=7)
    ax_c.axvline(0, color="black", lw=0.6)
    ax_c.set_xlabel("Configurations")
    ax_c.legend(fontsize=7, frameon=False)


def _effort_and_coverage_panels(result: StatsResult, ax_d: Axes, ax_e: Axes) -> None:
    """Figure 25d-e: two efforts of one model per task; the two least covered."""
    tasks = _table(result, "effort_tasks.csv")
    effort = _table(result, "effort.csv")
    if tasks is not None and effort is not None:
        _panel_label(ax_d, "d")
        low, high = tasks["low_config"].iloc[0], tasks["high_config"].iloc[0]
        d = tasks.loc[tasks["low_config"] == low, "diff"].to_numpy(dtype=float)
        ax_d.hist(d[np.isfinite(d)], bins=20, color=BLUE)
        row = effort[(effort["low"] == low) & (effort["way"] == "official")]
        ax_d.axvline(0, color="black", lw=0.6)
        ax_d.set_xlabel(f"{low} minus {high}, per task")
        if len(row):
            ax_d.set_title(f"mean {row['diff'].iloc[0]:+.3f}, Wilcoxon P = "
                           f"{row['p_wilcoxon'].iloc[0]:.3g}", fontsize=8)
    else:
        _empty_panel(ax_d, "d", "no model at two reasoning efforts")
    configs = result.tables["configs.csv"].sort_values("n_scored")
    lowest = list(configs["config"].iloc[:2])
    public = official(result.runs)
    scored = public[public["scored"] & public["config"].isin(lowest)]
    wide = scored.pivot(index="task_id", columns="config", values="score_recovered").dropna()
    if len(lowest) == 2 and len(wide):
        _panel_label(ax_e, "e")
        ax_e.scatter(wide[lowest[0]], wide[lowest[1]], s=14, color=BLUE)
        ax_e.plot([-1, 1], [-1, 1], "--", color=GREY, lw=1)
        ax_e.set_xlabel(lowest[0])
        ax_e.set_ylabel(lowest[1])
        ax_e.set_title(f"the two least covered configurations on their {len(wide)} shared "
                       "tasks", fontsize=8)
    else:
        _empty_panel(ax_e, "e", "the two least covered configurations share no task")


@_styled
def figure_26(result: StatsResult) -> Figure:
    """Figure 26: run-to-run variation, variance shares, detectable differences, ranks."""
    panels = {k: _table(result, k) for k in ("repeats_tasks.csv", "reliability.csv",
                                             "variance.csv", "detectable.csv",
                                             "rank_stability.csv")}
    if all(v is None for v in panels.values()):
        raise MissingInput("repeats, variance, detectable or rank-stability tables")
    fig = _canvas(13.0, 8.0)
    (ax_a, ax_b, ax_c), (ax_d, ax_e, ax_f) = fig.subplots(2, 3)
    repeats = panels["repeats_tasks.csv"]
    if repeats is not None:
        _panel_label(ax_a, "a")
        sd = repeats["repeat_sd"].dropna().sort_values().to_numpy()
        ax_a.bar(np.arange(sd.size), sd, color=BLUE, width=0.8)
        pooled = _summary(result, "run_sd")
        if math.isfinite(pooled):
            ax_a.axhline(pooled, color=RED, ls="--", lw=1, label=f"pooled {pooled:.3f}")
            ax_a.legend(fontsize=7, frameon=False)
        ax_a.set_xlabel("Tasks with repeats, sorted")
        ax_a.set_ylabel("SD of the repeats")
    else:
        _empty_panel(ax_a, "a", "needs repeated runs (repeat >= 1)")
    reliability = panels["reliability.csv"]
    if reliability is not None:
        _panel_label(ax_b, "b")
        for config, own in reliability.groupby("config"):
            ax_b.plot(own["k"], own["reliability"], marker="o", ms=3, label=config, color=BLUE)
            ax_b.fill_between(own["k"], own["ci_low"], own["ci_high"], color=LIGHT, alpha=0.4)
        ax_b.set_xlabel("Runs averaged per task (k)")
        ax_b.set_ylabel("Reliability of the task mean")
        ax_b.legend(fontsize=7, frameon=False)
    else:
        _empty_panel(ax_b, "b", "needs repeated runs (repeat >= 1)")
    variance = panels["variance.csv"]
    if variance is not None:
        _panel_label(ax_c, "c")
        x = np.arange(len(variance))
        ax_c.bar(x, 100 * variance["share"], color=BLUE,
                 yerr=100 * _errors(variance["share"], variance["ci_low"], variance["ci_high"]),
                 error_kw={"lw": 0.8, "capsize": 2})
        ax_c.set_xticks(x, [c.replace("_", " ") for c in variance["component"]], fontsize=7)
        ax_c.set_ylabel("Share of single-run variance (%)")
    else:
        _empty_panel(ax_c, "c", "needs widely covered configurations on shared tasks")
    detectable = panels["detectable.csv"]
    if detectable is not None:
        _panel_label(ax_d, "d")
        curve = detectable[detectable["curve"] == "shared_tasks"]
        ax_d.plot(curve["n_tasks"], curve["mde"], color=BLUE, label="median pair")
        ax_d.fill_between(curve["n_tasks"], curve["mde_low"], curve["mde_high"], color=LIGHT,
                          alpha=0.4, label="range over pairs")
        pairs = result.tables["pairs.csv"]
        ax_d.scatter(pairs["n_shared"], pairs["mde_uncorrected"], s=6, color=DARK,
                     label="pairs")
        ax_d.set_xscale("log")
        ax_d.set_xlabel("Shared tasks")
        ax_d.set_ylabel("Detectable difference (80% power, 0.05)")
        ax_d.legend(fontsize=7, frameon=False)
        _panel_label(ax_e, "e")
        for name, color, label in (("new_tasks", BLUE, "runs on new tasks"),
                                   ("repeats", RED, "repeats of 100 tasks")):
            part = detectable[detectable["curve"] == name]
            ax_e.plot(part["total_runs"], part["mde"], marker="o", ms=3, color=color,
                      label=label)
        ax_e.set_xlabel("Runs per configuration")
        ax_e.set_ylabel("Detectable difference")
        ax_e.legend(fontsize=7, frameon=False)
    else:
        _empty_panel(ax_d, "d", "needs two configurations with shared tasks")
        _empty_panel(ax_e, "e", "needs two configurations with shared tasks")
    ranks = panels["rank_stability.csv"]
    if ranks is not None:
        _panel_label(ax_f, "f")
        y = np.arange(len(ranks))[::-1]
        ax_f.hlines(y, ranks["rank_ci_low"], ranks["rank_ci_high"], color=LIGHT, lw=4)
        ax_f.scatter(ranks["observed_rank"], y, marker="|", s=120, color=DARK)
        ax_f.set_yticks(y, ranks["config"], fontsize=7)
        ax_f.set_xlabel("Rank in simulated reruns (95% interval; tick: observed)")
    else:
        _empty_panel(ax_f, "f", "needs a run-to-run SD (repeats or --run-sd)")
    return fig


@_styled
def figure_27(result: StatsResult) -> Figure:
    """Figure 27: agreement between configurations and the consensus of the others."""
    tasks = _table(result, "agreement_tasks.csv")
    loo = _table(result, "consensus_loo.csv")
    if tasks is None or loo is None:
        raise MissingInput("agreement_tasks.csv, consensus_loo.csv")
    fig = _canvas(13.0, 4.5)
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    _panel_label(ax_a, "a")
    ax_a.scatter(tasks["score_mean"], tasks["agreement_mean"], s=12, color=BLUE)
    ax_a.plot([-1, 1], [-1, 1], "--", color=GREY, lw=1)
    ax_a.set_xlabel("Mean score of the submissions")
    ax_a.set_ylabel("Agreement between configurations")
    _panel_label(ax_b, "b")
    y = np.arange(len(loo))[::-1]
    ax_b.errorbar(loo["diff_mean"], y, xerr=_errors(loo["diff_mean"], loo["diff_ci_low"],
                                                    loo["diff_ci_high"]),
                  fmt="o", color=DARK, ms=4, lw=0.8)
    ax_b.axvline(0, color="black", lw=0.6)
    ax_b.set_yticks(y, loo["config"], fontsize=7)
    ax_b.set_xlabel("Own score minus the others' consensus")
    _panel_label(ax_c, "c")
    ax_c.barh(y, loo["agreement_score_spearman"], color=BLUE)
    ax_c.set_yticks(y, loo["config"], fontsize=7)
    ax_c.axvline(0, color="black", lw=0.6)
    ax_c.set_xlabel("Spearman: agreement with consensus vs score")
    return fig


@_styled
def figure_28(result: StatsResult) -> Figure:
    """Figure 28: example runs, one per discipline at the median, pairs in the measured order."""
    per_run = _table(result, "pair_order_runs.csv")
    configs = _table(result, "pair_order.csv")
    examples = _table(result, "pair_order_examples.csv")
    medians = _table(result, "pair_order_median_examples.csv")
    if per_run is None or configs is None:
        raise MissingInput("pair_order_runs.csv, pair_order.csv")
    fig = _canvas(13.0, 11.5)
    top = fig.subfigures(3, 1, height_ratios=[1, 1, 1.2])
    assert isinstance(top, np.ndarray)
    _median_examples_panel(top[1], medians)
    top = top[[0, 2]]
    axes_a = top[0].subplots(1, len(examples["target"].unique()) if examples is not None else 1)
    axes_a = np.atleast_1d(axes_a)
    if examples is not None:
        for ax, (_, own) in zip(axes_a, examples.groupby("target", sort=True), strict=False):
            ax.scatter(own["submitted_rank"], own["measured_rank"], s=10, color=BLUE)
            ax.set_title(f"score {own['score'].iloc[0]:.2f} ({len(own)} items)", fontsize=7)
            ax.set_xlabel("Submitted rank", fontsize=7)
        axes_a[0].set_ylabel("Measured rank")
        _panel_label(axes_a[0], "a")
    else:
        _empty_panel(axes_a[0], "a", "no one-group task of 10 to 20 experiments without ties")
    ax_c, ax_d = top[1].subplots(1, 2)
    _panel_label(ax_c, "c")
    ax_c.scatter(per_run["score"], 100 * per_run["pair_share"], s=4, color=BLUE, alpha=0.5)
    ax_c.axhline(50, color=GREY, ls="--", lw=1, label="random rankings")
    ax_c.set_xlabel("Score")
    ax_c.set_ylabel("Pairs in the measured order (%)")
    ax_c.legend(fontsize=7, frameon=False)
    _panel_label(ax_d, "d")
    y = np.arange(len(configs))[::-1]
    ax_d.errorbar(100 * configs["pair_share"], y + 0.15, xerr=100 * _errors(
        configs["pair_share"], configs["pair_share_ci_low"], configs["pair_share_ci_high"]),
        fmt="o", color=BLUE, ms=4, lw=0.8, label="pairs in measured order")
    ax_d.errorbar(100 * configs["top1"], y - 0.15, xerr=100 * _errors(
        configs["top1"], configs["top1_ci_low"], configs["top1_ci_high"]),
        fmt="s", color=RED, ms=4, lw=0.8, label="top-ranked is measured top")
    ax_d.axvline(50, color=GREY, ls="--", lw=1)
    ax_d.set_yticks(y, configs["config"], fontsize=7)
    ax_d.set_xlabel("%")
    ax_d.legend(fontsize=7, frameon=False)
    return fig


def _median_examples_panel(sub: Any, medians: pd.DataFrame | None) -> None:
    """Figure 28b: measured against submitted rank, one run per discipline at the median."""
    if medians is None:
        _empty_panel(sub.subplots(1, 1), "b", "no run on a one-group task of 10 to 20 "
                     "experiments without ties")
        return
    disciplines = list(dict.fromkeys(medians["discipline"].astype(str)))
    axes = np.atleast_1d(sub.subplots(1, len(disciplines)))
    for ax, discipline in zip(axes, disciplines, strict=True):
        own = medians[medians["discipline"].astype(str) == discipline]
        ax.scatter(own["submitted_rank"], own["measured_rank"], s=10, color=BLUE)
        ax.set_title(f"{discipline}: score {own['score'].iloc[0]:.2f} ({len(own)} items)",
                     fontsize=7)
        ax.set_xlabel("Submitted rank", fontsize=7)
    axes[0].set_ylabel("Measured rank")
    _panel_label(axes[0], "b")
    sub.suptitle(f"One run per discipline at the median score "
                 f"({float(medians['median'].iloc[0]):.2f})", fontsize=8)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class PaperFigure:
    """One figure of the paper: how it is drawn here and what each panel needs."""

    number: int
    """Figure number in the paper."""
    caption: str
    """What the drawn figure shows."""
    draw: Callable[[StatsResult], Figure] | None
    """The figure function, or None when the report draws it elsewhere or not at all."""
    panels: tuple[tuple[str, str, str], ...]
    """(panels, output of ``spu stats`` it needs, the input that takes)."""
    drawn_as: str = ""
    """Name of the report figure when another module draws it."""

    @property
    def name(self) -> str:
        """The figure's file stem (``figure_9``)."""
        return f"figure_{self.number}"


RUNS = "the runs table"
TASKS = "task packages (--tasks)"
ORDERS = "submitted orders (--runs-dir and --tasks)"
REPEATS = "repeated runs (repeat >= 1)"
TRAJECTORIES = "trajectories (spu analyze)"
NONE = "not determined by runs (schematic or external source)"

REGISTRY: tuple[PaperFigure, ...] = (
    PaperFigure(1, "Configurations by mean score over every scored public and private task "
                "(solid) and over the tasks all configurations completed (hatched); lines "
                "are 95% bootstrap intervals over tasks (Figure 1).", figure_1,
                (("all", "all_tasks.csv", RUNS),)),
    PaperFigure(2, "", None, (("all", "", NONE),)),
    PaperFigure(3, "a, tasks by discipline (inner ring) and subfield (outer ring, hatched: "
                "private); c, experiments per task on a log scale, open circles private, "
                "bars at discipline medians (Figure 3).", figure_3,
                (("a, c", "tasks.csv", RUNS), ("b", "", "the journals of the source papers"))),
    PaperFigure(4, "", None, (("all", "", NONE),)),
    PaperFigure(5, "a, outcome of every official public run, tasks by discipline and mean "
                "score; b, scores with every run without a valid file at -1 (Figure 5).",
                figure_5, (("a, b", "runs", RUNS),)),
    PaperFigure(6, "a, formatting-rejected files by departure type of E.1; b, recovered and "
                "valid scores of the configurations with recovered files; c, recovered minus "
                "valid relative to the other configurations, with the weighted mean "
                "(Figure 6).", figure_6,
                (("a", "departures.csv", "the departures column (spu runs export)"),
                 ("b, c", "recovered.csv", RUNS))),
    PaperFigure(7, "a, share of public tasks refused (labelled by the provider); b, by "
                "discipline for the two configurations that refused most (Figure 7).",
                figure_7, (("a, b", "refusals.csv", RUNS),)),
    PaperFigure(8, "Mean score under the rules that penalize a missing or rejected file, "
                "public and private tasks, refusals excluded; runs in parentheses, 95% "
                "bootstrap intervals (Figure 8).", figure_8,
                (("a, b", "scoring_rules.csv", RUNS),)),
    PaperFigure(9, "a, raw (open) and task-adjusted (filled) means; b, scores of all scored "
                "runs; c, share above the chance threshold (Wilson 95%); d, tasks scored for "
                "both configurations of each pair (Figure 9).", figure_9,
                (("a-d", "configs.csv", RUNS),)),
    PaperFigure(10, "Score of each configuration on each private task, by series; grey cells "
                "are excluded runs (Figure 10).", figure_10,
                (("all", "private_tasks.csv", "official runs on private tasks"),)),
    PaperFigure(11, "", None, (("all", "costs.csv", RUNS),), drawn_as="pareto"),
    PaperFigure(12, "a, scores of the repeated runs (dots) and the official run (crosses) "
                "per task; b, official score against the repeats' mean; c, agreement "
                "between repeats against agreement with other configurations (Figure 12).",
                figure_12, (("a, b", "repeats_tasks.csv", REPEATS),
                            ("c", "repeats_agreement.csv", ORDERS))),
    PaperFigure(13, "b, score of the presented order against the chance threshold, with the "
                "range of task-adjusted means; c, flagged, source-DOI and outside-request "
                "shares of scored runs; d, flagged minus unflagged runs of each "
                "configuration relative to the others, pooled band (Figure 13).", figure_13,
                (("a", "", NONE), ("b", "tasks.csv presented_order_score", TASKS),
                 ("c, d", "exposure.csv", RUNS))),
    PaperFigure(14, "", None, (("all", "", TRAJECTORIES),)),
    PaperFigure(15, "", None, (("all", "", TRAJECTORIES),)),
    PaperFigure(16, "c, absolute Spearman correlation of a numeric setting with the submitted "
                "orders against the measured order; d, share of groups monotone in a "
                "setting, ticks for the measured order (Figure 16c-d).", figure_16,
                (("a, b", "", TRAJECTORIES), ("c, d", "monotone.csv", ORDERS))),
    PaperFigure(17, "", None, (("all", "", TRAJECTORIES),)),
    PaperFigure(18, "a, lowest, mean and highest score per public task by spread; b, "
                "residual spread between configurations against spread between repeats; c, "
                "the repeated configuration's official and repeated advantage over the "
                "others; d, per-task score correlations of the widely covered pairs, dashed: "
                "expected without interaction (Figure 18a-d).", figure_18,
                (("a", "tasks.csv", RUNS), ("b, c", "interaction_tasks.csv", REPEATS),
                 ("d", "pair_correlations.csv", "a run-to-run SD (repeats or --run-sd)"),
                 ("e", "", "targets of one task against the submitted orders (not drawn)"))),
    PaperFigure(19, "a, groups with the same order in every repeat by group size; d, stopped "
                "repeats minus the others on the same task, with the mean and its 95% "
                "interval (Figure 19a, d).", figure_19,
                (("a", "repeats_orders.csv", ORDERS), ("b", "", "one task's orders "
                                                             "(not drawn)"),
                 ("c", "", TRAJECTORIES), ("d", "repeats_stops.csv", REPEATS))),
    PaperFigure(20, "a, task means by discipline with the discipline mean and mean chance "
                "threshold; b, raw mean of each configuration in each discipline (scored "
                "tasks); c, leading minus trailing group by discipline; d, rank correlation "
                "of discipline means for each pair of disciplines against random splits "
                "(Figure 20).", figure_20,
                (("a, b", "discipline_summary.csv", RUNS),
                 ("c", "discipline_gap.csv", RUNS), ("d", "discipline_pairs.csv", RUNS))),
    PaperFigure(21, "", None, (("all", "", TRAJECTORIES),)),
    PaperFigure(22, "", None, (("all", "", TRAJECTORIES),)),
    PaperFigure(23, "", None, (("all", "", TRAJECTORIES),)),
    PaperFigure(24, "a, lower minus higher effort per task; b, the difference under four "
                "ways of scoring the higher effort and a trimmed check; c, higher over lower "
                "effort on the same task (median, 95% interval) (Figure 24a-c).", figure_24,
                (("a-c", "effort.csv", "one model at two reasoning efforts"),
                 ("d, e", "", TRAJECTORIES))),
    PaperFigure(25, "b, observed against detectable differences; c, configurations "
                "detectably below and above each; d, per-task difference between two efforts "
                "of one model with the uncorrected Wilcoxon P; e, the two least covered "
                "configurations on their shared tasks (Figure 25b-e; 25a is the pairs "
                "figure).", figure_25,
                (("a", "pairs.csv", "drawn as the pairs figure"), ("b-e", "pairs.csv", RUNS))),
    PaperFigure(26, "a, SD of the repeats per task; b, reliability of a mean of k runs; c, "
                "shares of single-run variance; d, detectable difference against shared "
                "tasks; e, for a budget of runs on new tasks or on repeats; f, ranks in "
                "simulated reruns (Figure 26).", figure_26,
                (("a, b", "repeats.csv", REPEATS), ("c", "variance.csv", RUNS),
                 ("d, e", "detectable.csv", RUNS),
                 ("f", "rank_stability.csv", "a run-to-run SD (repeats or --run-sd)"))),
    PaperFigure(27, "a, agreement between configurations against their mean score per task; "
                "b, each configuration against the consensus of the others; c, Spearman "
                "correlation of agreement with that consensus and score (Figure 27).",
                figure_27, (("a-c", "consensus_loo.csv", ORDERS),)),
    PaperFigure(28, "a, measured against submitted rank for runs near 0, 0.2, 0.4, 0.6 and "
                "0.8; b, the same for one run per discipline at the median score; c, pairs "
                "in the measured order against score; d, per configuration, pairs in order "
                "and top-1 rate with 95% intervals (Figure 28).",
                figure_28, (("a", "pair_order_examples.csv", ORDERS),
                            ("b", "pair_order_median_examples.csv", ORDERS),
                            ("c, d", "pair_order.csv", ORDERS))),
)
"""Every figure of the paper, with what each panel needs."""

PAPER_CAPTIONS = {f.name: f.caption for f in REGISTRY if f.draw is not None}
"""Captions of the figures drawn here, by file stem."""

PAPER_FIGURE_FILES: dict[str, tuple[str, ...]] = {
    f.name: tuple(dict.fromkeys(table.split()[0] for _, table, _ in f.panels
                                if table.split() and table.split()[0].endswith(".csv")))
    for f in REGISTRY if f.draw is not None}
PAPER_FIGURE_FILES.update({
    "figure_5": ("outcomes.csv",), "figure_13": ("tasks.csv", "exposure_indicators.csv",
                                                  "exposure.csv"),
    "figure_16": ("monotone_groups.csv", "monotone.csv"),
    "figure_24": ("effort_tasks.csv", "effort.csv", "effort_ratios.csv"),
    "figure_25": ("pairs.csv", "effort.csv")})
"""The ``spu stats`` files each figure drawn here uses (their rules are shown beside it)."""


def _has(result: StatsResult, needs: str) -> bool:
    name = needs.split()[0] if needs else ""
    if name == "runs":
        return len(official(result.runs)) > 0
    if name == "tasks.csv" and "presented_order_score" in needs:
        t = result.tables.get("tasks.csv")
        return t is not None and t["presented_order_score"].notna().any()
    return bool(name) and _table(result, name) is not None


def paper_figures(result: StatsResult) -> tuple[dict[str, Callable[[], Figure]],
                                                list[tuple[str, str, str]]]:
    """The figures the inputs allow, and every figure or panel not drawn with what it needs.

    The figures are drawn here, so that one whose inputs turn out empty (it raises
    :class:`MissingInput`) is listed rather than failing the report.

    Returns
    -------
    tuple
        ``{name: builder}`` of the drawn figures (each returns its figure) and rows
        ``(figure, panels, needs)`` for what is not drawn.
    """
    drawable: dict[str, Callable[[], Figure]] = {}
    missing: list[tuple[str, str, str]] = []
    for spec in REGISTRY:
        label = f"Figure {spec.number}"
        if spec.drawn_as:
            continue
        lacking = [(panels, need) for panels, table, need in spec.panels
                   if not _has(result, table)]
        missing += [(label, panels, need) for panels, need in lacking]
        if spec.draw is not None and len(lacking) < len(spec.panels):
            try:
                figure = spec.draw(result)
            except MissingInput as exc:
                missing.append((label, "all", f"{exc.args[0]} (no rows)"))
                continue
            drawable[spec.name] = functools.partial(lambda f: f, figure)
    return drawable, missing


def paper_figure_index(drawn: Mapping[str, object], missing: list[tuple[str, str, str]]
                       ) -> Table:
    """The report's table of paper figures: what is drawn, and what each missing one needs.

    Examples
    --------
    >>> t = paper_figure_index({"figure_1": None}, [("Figure 12", "c", "submitted orders")])
    >>> t.rows[0], t.rows[11]
    (('Figure 1', 'figure_1', ''), ('Figure 12', '', 'panels c: submitted orders'))
    """
    other = {f.number: f.drawn_as for f in REGISTRY if f.drawn_as}
    needs: dict[str, list[str]] = {}
    for figure, panels, need in missing:
        needs.setdefault(figure, []).append(f"panels {panels}: {need}" if panels != "all"
                                            else need)
    rows = []
    for number in sorted({f.number for f in REGISTRY} | {int(k.split()[1]) for k in needs}):
        label = f"Figure {number}"
        name = f"figure_{number}" if f"figure_{number}" in drawn else other.get(number, "")
        if name and name not in drawn:
            name = ""
        rows.append((label, name, "; ".join(needs.get(label, []))))
    extra = [r for r in rows if r[0] not in {f"Figure {f.number}" for f in REGISTRY}]
    rows = [r for r in rows if r not in extra] + extra
    return Table("paper_figures", "Paper figures",
                 "Each figure of the paper: the report figure that reproduces it (file stem "
                 "under figures/), and for every figure or panel not drawn, what it needs.",
                 ("Figure", "Drawn as", "Not drawn (needs)"), tuple(rows))
