"""Figures 14 to 24 of the paper from the tables of ``spu analyze``.

Each figure is drawn from one or two of the analysis tables (never from the run
folders), with the report's style (:mod:`spu.report.figures`). A figure whose table is
empty is not drawn; :func:`trajectory_figures` lists it with what it needs. Figures 18,
19a-b, 20 and 16c-d come from the runs table and the task packages, in ``spu stats``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from spu.analysis.trajectory_analysis import GPU_LEVELS, revised_runs
from spu.report.figures import _figure, _styled, save_figure
from spu.report.page import CAPTIONS as PAGE_CAPTIONS

Tables = dict[str, pd.DataFrame]

CLASS_COLORS = ("#8c8c8c", "#3b6ea8", "#c9a227", "#2e8b57", "#a9c4e4", "#b07aa1", "#d9534f",
                "#dddddd")

CAPTIONS = {
    "fig14a_activity_time": "Share of time in each activity class along a run; each run is "
    "normalized to its own length and counts equally, shares smoothed by a Gaussian kernel "
    "of s.d. 2% of the run (Figure 14a).",
    "fig14b_milestones": "Median (marker) and interquartile range (line) of the point in the "
    "run at which each milestone is reached, over all runs; grey dots are configuration "
    "medians (Figure 14b).",
    "fig15a_families": "Share of runs that ran each method family, over all runs and by "
    "configuration (Figure 15a).",
    "fig15b_families_discipline": "Share of runs that ran each method family, by discipline "
    "(Figure 15b).",
    "fig15c_sources": "Source class of the URLs fetched, by configuration (Figure 15c).",
    "fig15d_operators": "Mean share of a run's search queries using each operator, over runs "
    "that searched (Figure 15d).",
    "fig16a_first_appearance": "Where the submitted order of each group (at least three "
    "items, not the input order) first appears in the trajectory (Figure 16a).",
    "fig16b_first_complete": "Point in the run at which the first complete ranking was "
    "written, with medians (bars) (Figure 16b).",
    "fig17a_associations": "Score difference between runs with and without each feature, with "
    "task and configuration fixed effects and 95% intervals from resampling tasks; filled "
    "markers have P < 0.05 before Holm correction (Figure 17a).",
    "fig17b_self_assessment": "Expected Spearman correlation stated in the report against the "
    "score of the run; the dashed line marks equality (Figure 17b).",
    "fig17c_revisions": "Score of the submission minus that of the first complete ranking, for "
    "runs whose submission differs from it; diamonds are means and lines 95% intervals from "
    "resampling tasks, the last row over all runs (Figure 17c).",
    "fig18e_task_settings": "On a task named by --task (the first), the Spearman correlation "
    "between each submitted order and each numeric setting of the experiments, with the "
    "measured order at the top (Figure 18e).",
    "fig19b_task_repeat_orders": "Order submitted for each group of a task named by --task "
    "in its repeats, items shaded by their place in the most common order of the group, "
    "and the score of each repeat (Figure 19b).",
    "fig19c_repeat_methods": "How many of the repeats of each task used each method family, "
    "and the score of the repeats that used it minus the others, mean over the tasks where "
    "it varied with a 95% interval, for families that vary on at least four tasks "
    "(Figure 19c).",
    "fig21b_draft_vs_submission": "Score of the first complete ranking and of the submission "
    "for runs that revised it; labels count the flipped pairs that moved into the measured "
    "order (Figure 21b).",
    "fig22a_gpu_levels": "Share of runs at each level of GPU use, by configuration "
    "(Figure 22a).",
    "fig24d_effort_drafts": "Score of the higher effort's first complete ranking minus its "
    "own submission and minus the lower effort's submission, on the tasks where that draft "
    "is visible, with 95% intervals over tasks (Figure 24d).",
    "fig22b_gpu_workloads": "Main workload of the runs that used the GPU, by discipline "
    "(Figure 22b).",
    "fig22e_gpu_within": "Runs that used the GPU minus the other runs of the same "
    "configuration, each after subtracting the mean of the other configurations on the same "
    "task, with 95% intervals; the last row pools the configurations (Figure 22e).",
    "fig22c_gpu_errors": "Share of the runs that started a GPU workload hitting each kind of "
    "GPU error (Figure 22c).",
    "fig22d_gpu_runtime": "Median run time of runs that used the GPU and of the others, by "
    "configuration (Figure 22d).",
    "fig23a_profiles": "Working habits of each configuration (medians, or shares of runs); "
    "colors are z scores across configurations (Figure 23a).",
    "fig23b_confusion": "Confusion matrix of the random forest that predicts a run's "
    "configuration from its behavior, cross-validated (Figure 23b).",
    "fig24c_efforts": "Ratio of the higher to the lower effort of the same model on the same "
    "task for run time, output tokens, code written and web searches (Figure 24c; GPU shares "
    "and draft scores in efforts.csv).",
    "fig24e_flips": "Share of the item pairs flipped after the first draft that moved into the "
    "measured order, against the share expected from random flips at the same distance in "
    "that draft, and the difference, by configuration and over all runs, with 95% "
    "intervals from resampling tasks (Figures 24e, 21b).",
}

PAGE_CAPTIONS.update(CAPTIONS)  # the report page captions every figure it is given

NOT_FROM_TRAJECTORIES = {
    "fig16c_16d_monotone_prior": "the monotone prior comes from the submitted orders and the "
    "task settings: spu stats --tasks --runs-dir",
    "fig18_fig19ab_fig20": "task separation, repeats and disciplines come from the runs "
    "table: spu stats / spu report",
}


def _configs(t: pd.DataFrame) -> list[str]:
    return sorted(c for c in t["config"].astype(str).unique() if c != "all")


@_styled
def activity_time_figure(t: pd.DataFrame) -> Figure:
    """Figure 14a: stacked shares of the eight activity classes along normalized time."""
    classes = [c for c in t.columns if c != "t"]
    fig, ax = _figure((7.5, 4.0))
    ax.stackplot(t["t"] * 100, *[t[c] for c in classes], labels=classes,
                 colors=CLASS_COLORS[:len(classes)], linewidth=0)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 1)
    ax.set_xlabel("Point in the run (% of its duration)")
    ax.set_ylabel("Share of time")
    ax.set_title("How agents spend a run", loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=7.5)
    return fig


@_styled
def milestones_figure(t: pd.DataFrame) -> Figure:
    """Figure 14b: median and IQR of each milestone."""
    names = list(dict.fromkeys(t["milestone"]))
    fig, ax = _figure((7.0, 0.45 * len(names) + 1.2))
    overall = t[t["config"] == "all"].set_index("milestone")
    for i, name in enumerate(names):
        if name in overall.index and np.isfinite(overall.loc[name, "median"]):
            r = overall.loc[name]
            ax.plot([r.q25 * 100, r.q75 * 100], [i, i], color="#3b6ea8", lw=2)
            ax.plot(r["median"] * 100, i, "o", color="#3b6ea8")
        per = t[(t["config"] != "all") & (t["milestone"] == name)]
        ax.plot(per["median"] * 100, np.full(len(per), i + 0.2), ".", color="#999999", ms=4)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("Point in the run (% of its duration)")
    ax.set_title("Milestones", loc="left")
    return fig


@_styled
def share_heatmap(t: pd.DataFrame, rows: str, columns: str, values: str, title: str,
                  cmap: str = "Blues", vmax: float | None = 1.0) -> Figure:
    """A heatmap of shares with the value written in each cell."""
    m = t.pivot_table(index=rows, columns=columns, values=values, aggfunc="first", sort=False)
    fig, ax = _figure((0.75 * m.shape[1] + 2.5, 0.35 * m.shape[0] + 1.6))
    data = m.to_numpy(float)
    image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=0, vmax=vmax,
                      aspect="auto", interpolation="none")
    top = vmax if vmax is not None else float(np.nanmax(data)) if np.isfinite(data).any() else 1
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            if np.isfinite(data[i, j]):
                ax.text(j, i, f"{data[i, j]:.2f}", ha="center", va="center", fontsize=6.5,
                        color="white" if data[i, j] > 0.6 * top else "black")
    ax.set_xticks(range(m.shape[1]), [str(c).replace("_", " ") for c in m.columns],
                  rotation=40, ha="right")
    ax.set_yticks(range(m.shape[0]), [str(r) for r in m.index])
    ax.set_title(title, loc="left")
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
    ax.spines[:].set_visible(False)
    return fig


@_styled
def stacked_shares(t: pd.DataFrame, category: str, title: str, order: list[str] | None = None
                   ) -> Figure:
    """Horizontal stacked bars of shares per configuration."""
    m = t.pivot_table(index="config", columns=category, values="share", aggfunc="sum",
                      observed=True).fillna(0.0)
    if order:
        m = m[[c for c in order if c in m.columns]]
    fig, ax = _figure((7.5, 0.35 * len(m) + 1.6))
    left = np.zeros(len(m))
    for k, column in enumerate(m.columns):
        ax.barh(range(len(m)), m[column], left=left, color=CLASS_COLORS[k % len(CLASS_COLORS)],
                label=str(column).replace("_", " "))
        left += m[column].to_numpy()
    ax.set_yticks(range(len(m)), m.index)
    ax.set_xlim(0, 1)
    ax.set_xlabel("Share")
    ax.set_title(title, loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=7.5)
    return fig


@_styled
def first_complete_figure(f: pd.DataFrame) -> Figure:
    """Figure 16b: first complete ranking's point in the run, by configuration."""
    f = f[f["first_complete_t"].notna()]
    configs = sorted(f["config"].astype(str).unique())
    fig, ax = _figure((7.0, 0.35 * len(configs) + 1.4))
    for i, c in enumerate(configs):
        v = f.loc[f["config"] == c, "first_complete_t"].to_numpy(float) * 100
        jitter = np.linspace(-0.15, 0.15, v.size) if v.size > 1 else np.zeros(1)
        ax.plot(v, i + jitter, ".", color="#3b6ea8", alpha=0.6)
        ax.plot([np.median(v)] * 2, [i - 0.3, i + 0.3], color="black", lw=2)
    ax.set_yticks(range(len(configs)), configs)
    ax.set_xlim(0, 100)
    ax.set_xlabel("First complete ranking (% of the run)")
    ax.set_title("When the first complete ranking is written", loc="left")
    return fig


@_styled
def associations_figure(t: pd.DataFrame) -> Figure:
    """Figure 17a: forest plot of the fixed-effects associations."""
    t = t[t["estimate"].notna()].reset_index(drop=True)
    fig, ax = _figure((7.0, 0.3 * len(t) + 1.4))
    y = np.arange(len(t))
    for i, r in t.iterrows():
        filled = bool(np.isfinite(r.p_value) and r.p_value < 0.05)
        ax.plot([r.ci_low, r.ci_high], [i, i], color="#777777", lw=1)
        ax.plot(r.estimate, i, "o", mfc="#3b6ea8" if filled else "white", mec="#3b6ea8")
    ax.axvline(0, color="black", lw=0.6, ls="--")
    ax.set_yticks(y, [f"{f.replace('family_', '').replace('_', ' ')} ({fam})"
                      for f, fam in zip(t["feature"], t["family"], strict=True)])
    ax.invert_yaxis()
    ax.set_xlabel("Score difference with the feature (task and configuration fixed)")
    ax.set_title("What relates to score", loc="left")
    return fig


@_styled
def scatter_equality(t: pd.DataFrame, x: str, y: str, xlabel: str, ylabel: str, title: str,
                     labels: pd.Series | None = None) -> Figure:
    """A scatter plot with the equality line."""
    fig, ax = _figure((5.0, 4.6))
    ax.plot([-1, 1], [-1, 1], "--", color="#999999", lw=0.8)
    ax.plot(t[x], t[y], "o", color="#3b6ea8", alpha=0.7)
    if labels is not None:
        for xi, yi, lab in zip(t[x], t[y], labels, strict=True):
            ax.annotate(str(lab), (xi, yi), xytext=(3, 3), textcoords="offset points",
                        fontsize=6.5)
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left")
    return fig


@_styled
def by_config_points(t: pd.DataFrame, value: str, xlabel: str, title: str) -> Figure:
    """Each run's value by configuration, with the mean as a diamond."""
    configs = sorted(t["config"].astype(str).unique())
    fig, ax = _figure((7.0, 0.35 * len(configs) + 1.4))
    for i, c in enumerate(configs):
        v = t.loc[t["config"] == c, value].dropna().to_numpy(float)
        ax.plot(v, np.full(v.size, i), "o", color="#3b6ea8", alpha=0.5, ms=4)
        if v.size:
            ax.plot(v.mean(), i, "D", color="black", ms=6)
    ax.axvline(0, color="black", lw=0.6, ls="--")
    ax.set_yticks(range(len(configs)), configs)
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left")
    return fig


@_styled
def gpu_runtime_figure(t: pd.DataFrame) -> Figure:
    """Figure 22d: median run time with and without GPU use, by configuration."""
    t = t[t["config"] != "all"]
    fig, ax = _figure((7.0, 0.35 * len(t) + 1.4))
    y = np.arange(len(t))
    ax.barh(y + 0.2, t["median_runtime_gpu_s"] / 3600, 0.4, color="#2e8b57", label="used GPU")
    ax.barh(y - 0.2, t["median_runtime_other_s"] / 3600, 0.4, color="#a9c4e4", label="other")
    ax.set_yticks(y, t["config"])
    ax.set_xlabel("Median run time (hours)")
    ax.set_title("Run time and GPU use", loc="left")
    ax.legend(frameon=False, fontsize=8)
    return fig


@_styled
def gpu_within_figure(t: pd.DataFrame) -> Figure:
    """Figure 22e: used-GPU minus other runs within each configuration, with intervals."""
    t = t[t["marker"] == "used_gpu"].reset_index(drop=True)
    fig, ax = _figure((7.0, 0.35 * len(t) + 1.4))
    y = np.arange(len(t))[::-1]
    low = (t["diff"] - t["ci_low"]).clip(lower=0).to_numpy(float)
    high = (t["ci_high"] - t["diff"]).clip(lower=0).to_numpy(float)
    ax.errorbar(t["diff"], y, xerr=[low, high], fmt="o", color="#2e8b57", ms=4, capsize=2)
    ax.axvline(0, color="black", lw=0.6, ls="--")
    ax.set_yticks(y, t["config"])
    ax.set_xlabel("Used GPU minus other runs (relative score)")
    ax.set_title("GPU use within configurations", loc="left")
    return fig


@_styled
def profiles_figure(t: pd.DataFrame) -> Figure:
    """Figure 23a: working habits as z scores across configurations, values written."""
    m = t.set_index("config")
    z = (m - m.mean()) / m.std(ddof=0).replace(0, np.nan)
    fig, ax = _figure((0.8 * m.shape[1] + 2.5, 0.35 * m.shape[0] + 1.8))
    ax.imshow(np.ma.masked_invalid(z.to_numpy(float)), cmap="RdBu_r", vmin=-2.5, vmax=2.5,
              aspect="auto", interpolation="none")
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            value = m.iat[i, j]
            if pd.notna(value):
                ax.text(j, i, f"{value:.3g}", ha="center", va="center", fontsize=6)
    ax.set_xticks(range(m.shape[1]), [c.replace("_", " ") for c in m.columns], rotation=40,
                  ha="right")
    ax.set_yticks(range(m.shape[0]), m.index)
    ax.set_title("Configuration profiles", loc="left")
    ax.spines[:].set_visible(False)
    return fig


@_styled
def confusion_figure(t: pd.DataFrame, accuracy: float | None, chance: float | None) -> Figure:
    """Figure 23b: confusion matrix of the configuration classifier."""
    m = t.set_index("true_config")
    rows = m.to_numpy(float)
    share = rows / np.maximum(rows.sum(axis=1, keepdims=True), 1)
    fig, ax = _figure((0.55 * m.shape[1] + 3.0, 0.5 * m.shape[0] + 2.0))
    ax.imshow(share, cmap="Blues", vmin=0, vmax=1, interpolation="none")
    for i in range(rows.shape[0]):
        for j in range(rows.shape[1]):
            if rows[i, j]:
                ax.text(j, i, f"{int(rows[i, j])}", ha="center", va="center", fontsize=7,
                        color="white" if share[i, j] > 0.6 else "black")
    ax.set_xticks(range(m.shape[1]), m.columns, rotation=60, ha="right")
    ax.set_yticks(range(m.shape[0]), m.index)
    ax.set_xlabel("Predicted configuration")
    ax.set_ylabel("True configuration")
    title = "Which configuration produced a run"
    if accuracy is not None and chance is not None:
        title += f": accuracy {accuracy:.0%} (chance {chance:.0%})"
    ax.set_title(title, loc="left", fontsize=9)
    return fig


@_styled
def flips_figure(t: pd.DataFrame) -> Figure:
    """Figure 24e: flipped pairs that moved into the measured order vs random flips."""
    g = t.dropna(subset=["flipped_into_measured"]).groupby("config").agg(
        observed=("flipped_into_measured", "mean"), expected=("flipped_expected_share", "mean"),
        n=("run_key", "size")).reset_index()
    fig, ax = _figure((6.5, 0.4 * len(g) + 1.4))
    y = np.arange(len(g))
    ax.plot(g["expected"], y, "s", mfc="white", mec="#777777", label="random flips, same "
            "distance")
    ax.plot(g["observed"], y, "o", color="#3b6ea8", label="flips made")
    for yi, n in zip(y, g["n"], strict=True):
        ax.text(1.02, float(yi), f"n={n}", va="center", fontsize=7,
                transform=ax.get_yaxis_transform())
    ax.set_yticks(y, g["config"])
    ax.set_xlim(0, 1)
    ax.set_xlabel("Share of flipped pairs that moved into the measured order")
    ax.set_title("Revisions against random flips", loc="left")
    ax.legend(frameon=False, fontsize=7.5, loc="lower right")
    return fig


@_styled
def efforts_figure(t: pd.DataFrame) -> Figure:
    """Figure 24c: the more-effort run over the less-effort run on the same task."""
    t = t[t["quantity"].str.startswith("ratio of") & t["value"].notna()]
    labels = [f"{m}: {q.removeprefix('ratio of ')}" for m, q in
              zip(t["model"], t["quantity"], strict=True)]
    fig, ax = _figure((6.5, 0.35 * len(t) + 1.4))
    y = np.arange(len(t))
    ax.plot(t["value"], y, "o", color="#3b6ea8")
    for yi, n in zip(y, t["n_tasks"], strict=True):
        ax.text(1.02, float(yi), f"{n} tasks", va="center", fontsize=7,
                transform=ax.get_yaxis_transform())
    ax.axvline(1, color="black", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_yticks(y, labels)
    ax.set_xlabel("Median ratio, higher to lower effort on the same task (log scale)")
    ax.set_title("The same model at two efforts", loc="left")
    return fig


@_styled
def effort_drafts_figure(t: pd.DataFrame) -> Figure:
    """Figure 24d: the higher effort's first draft minus each submission, with intervals."""
    t = t[t["quantity"].str.startswith("draft minus submission") & t["value"].notna()]
    labels = [f"{m}: {q.removeprefix('draft minus ')}" for m, q in
              zip(t["model"], t["quantity"], strict=True)]
    fig, ax = _figure((6.5, 0.35 * len(t) + 1.4))
    y = np.arange(len(t))
    low = (t["value"] - t["ci_low"]).clip(lower=0).to_numpy(float)
    high = (t["ci_high"] - t["value"]).clip(lower=0).to_numpy(float)
    ax.errorbar(t["value"], y, xerr=[low, high], fmt="o", color="#3b6ea8", ms=4, capsize=2)
    ax.axvline(0, color="black", lw=0.6, ls="--")
    ax.set_yticks(y, labels)
    ax.set_xlabel("Higher effort's first draft minus the submission (score)")
    ax.set_title("First drafts at two efforts", loc="left")
    return fig


REVISION_CHANGE = "submission minus first draft"
"""The quantity of ``revision_intervals.csv`` Figure 17c draws."""

FLIP_QUANTITIES = ("share of flips into the measured order", "share expected from random flips",
                   "into the measured order minus expected")
"""The quantities of ``revision_intervals.csv`` Figure 24e draws: observed, expected, gap."""


def _interval_rows(intervals: pd.DataFrame, quantity: str, configs: list[str]) -> pd.DataFrame:
    """The rows of ``quantity`` in ``configs`` order, ``all`` last, by configuration."""
    rows = intervals[intervals["quantity"] == quantity].set_index("config")
    return rows.reindex([c for c in [*configs, "all"] if c in rows.index])


@_styled
def revisions_figure(changed: pd.DataFrame, intervals: pd.DataFrame) -> Figure:
    """Figure 17c: submission minus first draft per run, means and 95% intervals.

    ``changed`` holds the runs whose submission differs from their draft
    (``revisions.csv``); ``intervals`` is ``revision_intervals.csv``: its diamond and line
    per configuration, and over all runs in the last row, are the mean and the 95%
    interval from resampling tasks.
    """
    rows = _interval_rows(intervals, REVISION_CHANGE, sorted(changed["config"].astype(str)
                                                             .unique()))
    labels = list(rows.index)
    fig, ax = _figure((7.0, 0.35 * len(labels) + 1.4))
    for i, c in enumerate(labels):
        v = (changed["change"] if c == "all" else
             changed.loc[changed["config"] == c, "change"]).dropna().to_numpy(float)
        if c != "all":
            ax.plot(v, np.full(v.size, i), "o", color="#3b6ea8", alpha=0.4, ms=4)
        r = rows.loc[c]
        ax.plot([r["ci_low"], r["ci_high"]], [i, i], color="black", lw=1.2)
        ax.plot(r["mean"], i, "D", color="black", ms=6)
        ax.text(1.01, float(i), f"n={int(r['n_runs'])}", va="center", fontsize=7,
                transform=ax.get_yaxis_transform())
    ax.axvline(0, color="black", lw=0.6, ls="--")
    ax.set_yticks(range(len(labels)), ["all runs" if c == "all" else c for c in labels])
    ax.set_xlabel("Submission minus first complete ranking (score)")
    ax.set_title("Revisions", loc="left")
    return fig


@_styled
def flip_intervals_figure(intervals: pd.DataFrame) -> Figure:
    """Figure 24e with its intervals: flips into the measured order, expected, difference.

    From ``revision_intervals.csv``: per configuration and over all runs, the share of
    flipped pairs that moved into the measured order and the share expected from random
    flips at the same distance (left), and their difference (right), each with its 95%
    interval from resampling tasks.
    """
    observed, expected, gap = (intervals[intervals["quantity"] == q].set_index("config")
                               for q in FLIP_QUANTITIES)
    labels = [c for c in sorted(set(observed.index) - {"all"}) if c in expected.index]
    labels += ["all"] if "all" in observed.index and "all" in expected.index else []
    fig = Figure(figsize=(9.0, 0.4 * len(labels) + 1.6), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    y = np.arange(len(labels))
    for ax, table, offset, style in ((left, expected, -0.12, dict(marker="s", mfc="white",
                                                                  mec="#777777", color="#777777")),
                                     (left, observed, 0.12, dict(marker="o", color="#3b6ea8")),
                                     (right, gap, 0.0, dict(marker="D", color="black"))):
        rows = table.reindex(labels)
        for yi, (_, r) in zip(y, rows.iterrows(), strict=True):
            if pd.isna(r.get("mean")):
                continue
            ax.plot([r["ci_low"], r["ci_high"]], [yi + offset] * 2, color=style["color"],
                    lw=1.0)
            ax.plot(r["mean"], yi + offset, ls="none", ms=5, **style)
    left.plot([], [], "s", mfc="white", mec="#777777", label="random flips, same distance")
    left.plot([], [], "o", color="#3b6ea8", label="flips made")
    left.legend(frameon=False, fontsize=7.5, loc="lower left")
    left.set_yticks(y, ["all runs" if c == "all" else c for c in labels])
    left.set_xlim(0, 1)
    left.set_xlabel("Share of flipped pairs that moved into the measured order")
    left.set_title("Revisions against random flips", loc="left")
    right.axvline(0, color="black", lw=0.6, ls="--")
    right.set_xlabel("Made minus expected")
    return fig


@_styled
def repeat_methods_figure(t: pd.DataFrame) -> Figure:
    """Figure 19c: method families that vary between the repeats of a task.

    From ``repeat_methods.csv`` (``--all-repeats``): left, for the families shown (varying
    on at least four tasks), how many of the scored repeats of each task used the family
    (of how many); right, the mean over those tasks of the score of the repeats that used
    it minus the others, with its 95% interval.
    """
    overall = t[(t["task_id"] == "all") & t["shown"].astype(bool)].sort_values("family")
    families = list(overall["family"])
    per = t[(t["task_id"] != "all") & t["family"].isin(families)]
    tasks = sorted(per["task_id"].astype(str).unique())
    used = per.pivot_table(index="family", columns="task_id", values="n_used",
                           aggfunc="sum").reindex(index=families, columns=tasks)
    fig = Figure(figsize=(max(7.0, 0.22 * len(tasks) + 5.0), 0.45 * len(families) + 1.8),
                 layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True,
                               gridspec_kw={"width_ratios": [max(len(tasks), 4) / 4, 2]})
    image = left.imshow(used.to_numpy(float), aspect="auto", cmap="Blues", vmin=0)
    fig.colorbar(image, ax=left, fraction=0.03, pad=0.02, label="repeats that used it")
    left.set_xticks(range(len(tasks)), tasks, rotation=90, fontsize=6)
    left.set_yticks(range(len(families)), [f.replace("_", " ") for f in families])
    left.set_title("Method families that vary between repeats", loc="left")
    y = np.arange(len(families))
    right.hlines(y, overall["ci_low"], overall["ci_high"], color="black", lw=1.0)
    right.plot(overall["diff"], y, "D", color="black", ms=5)
    for yi, n in zip(y, overall["n_tasks"], strict=True):
        right.text(1.01, float(yi), f"{int(n)} tasks", va="center", fontsize=7,
                   transform=right.get_yaxis_transform())
    right.axvline(0, color="black", lw=0.6, ls="--")
    right.set_xlabel("Score with the family minus without")
    return fig


@_styled
def task_settings_figure(t: pd.DataFrame) -> Figure:
    """Figure 18e: each submitted order's Spearman with each setting, measured order on top.

    From ``task_settings.csv``, the first task in it: rows are the measured order, then
    the scored runs (configuration, repeat, score), columns the settings; a task with
    several groups shows each run's mean over its groups.
    """
    task = str(t["task_id"].iloc[0])
    own = t[t["task_id"].astype(str) == task]
    m = own.pivot_table(index="run_key", columns="setting", values="rho", aggfunc="mean")
    heads = own.drop_duplicates("run_key").set_index("run_key")
    keys = ["measured"] if "measured" in m.index else []
    keys += [k for k in heads.sort_values(["config", "repeat"]).index if k != "measured"]
    m = m.reindex(keys)
    labels = ["measured order" if k == "measured" else
              f"{heads.loc[k, 'config']} r{int(heads.loc[k, 'repeat'])} "
              f"({float(heads.loc[k, 'score']):.2f})" for k in keys]
    fig, ax = _figure((0.9 * m.shape[1] + 4.0, 0.28 * len(keys) + 1.6))
    image = ax.imshow(m.to_numpy(float), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="Spearman with the setting")
    ax.set_xticks(range(m.shape[1]), list(m.columns), rotation=30, ha="right")
    ax.set_yticks(range(len(keys)), labels, fontsize=7)
    if keys and keys[0] == "measured":
        ax.axhline(0.5, color="black", lw=1.0)
    ax.set_title(f"Orders against the settings on {task}", loc="left")
    return fig


@_styled
def task_repeat_orders_figure(t: pd.DataFrame) -> Figure:
    """Figure 19b: each repeat's order of each group, items shaded by the modal order.

    From ``task_repeat_orders.csv``, its first task: one panel per group, a row per run
    (labelled with its score), a cell per place, shaded by the item's place in the most
    common order of the group (light: low, dark: high).
    """
    task = str(t["task_id"].iloc[0])
    own = t[t["task_id"].astype(str) == task]
    groups = list(dict.fromkeys(own["group_id"].astype(str)))
    runs = list(dict.fromkeys(own.sort_values(["repeat", "run_key"])["run_key"]))
    widest = int(own["position"].max())
    fig = Figure(figsize=(min(0.25 * widest * len(groups) + 2.5, 16.0),
                          0.3 * len(runs) + 1.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(groups), sharey=True))
    image = None
    for ax, group in zip(axes, groups, strict=True):
        part = own[own["group_id"].astype(str) == group]
        n = int(part["position"].max())
        m = part.pivot_table(index="run_key", columns="position", values="modal_position",
                             aggfunc="first").reindex(index=runs)
        image = ax.imshow(m.to_numpy(float) / n, aspect="auto", cmap="viridis", vmin=0,
                          vmax=1)
        ax.set_xticks([0, n - 1], ["1", str(n)])
        ax.set_xlabel("place", fontsize=7)
        ax.set_title(group, fontsize=8)
    scores = own.drop_duplicates("run_key").set_index("run_key")["score"]
    axes[0].set_yticks(range(len(runs)), [f"{scores[k]:.2f}" for k in runs], fontsize=7)
    axes[0].set_ylabel("score of the repeat")
    if image is not None:
        fig.colorbar(image, ax=list(axes), fraction=0.03, pad=0.02,
                     label="place in the most common order (share)")
    fig.suptitle(f"Orders of {own['config'].iloc[0]}'s repeats on {task}", fontsize=9)
    return fig


def _summary_value(t: Tables, name: str) -> float | None:
    s = t.get("summary.csv")
    if s is None or s.empty:
        return None
    hit = s.loc[s["statistic"] == name, "value"]
    return float(hit.iloc[0]) if len(hit) else None


FIGURE_FILES: dict[str, tuple[str, ...]] = {
    "fig14a_activity_time": ("activity_time.csv",), "fig14b_milestones": ("milestones.csv",),
    "fig15a_families": ("families.csv",), "fig15b_families_discipline": ("families.csv",),
    "fig15c_sources": ("sources.csv",), "fig15d_operators": ("search_operators.csv",),
    "fig16a_first_appearance": ("first_appearance.csv",),
    "fig16b_first_complete": ("runs_features.csv",),
    "fig17a_associations": ("associations.csv",), "fig17b_self_assessment":
    ("self_assessment.csv",), "fig17c_revisions": ("revisions.csv", "revision_intervals.csv"),
    "fig21b_draft_vs_submission": ("revisions.csv",),
    "fig24e_flips": ("revision_intervals.csv",), "fig22a_gpu_levels": ("gpu.csv",),
    "fig22b_gpu_workloads": ("gpu_workloads.csv",),
    "fig22e_gpu_within": ("gpu_within_config.csv",), "fig22c_gpu_errors": ("gpu_errors.csv",),
    "fig22d_gpu_runtime": ("gpu.csv",), "fig23a_profiles": ("profiles.csv",),
    "fig23b_confusion": ("classifier_confusion.csv",), "fig24c_efforts": ("efforts.csv",),
    "fig24d_effort_drafts": ("efforts.csv",), "fig18e_task_settings": ("task_settings.csv",),
    "fig19b_task_repeat_orders": ("task_repeat_orders.csv",),
    "fig19c_repeat_methods": ("repeat_methods.csv",),
}
"""The ``spu analyze`` files each figure draws from (their rules are shown beside it)."""

_Need = Callable[[str, bool, str, Callable[[], Figure]], None]
"""Adds one figure: its name, whether its data is there, what it needs otherwise, its builder."""


def trajectory_figures(t: Tables, revised_population: str = "differs"
                       ) -> tuple[dict[str, Callable[[], Figure]], dict[str, str]]:
    """Figure builders by name for the tables that have data, and the rest with what they need.

    ``t`` holds the tables of :func:`spu.analysis.trajectory_analysis.analyze_runs` (or read
    back from its folder); ``revised_population`` is its ``--revised-population``, so
    Figures 17c and 21b draw the runs that ``revision_intervals.csv`` averages.
    """
    draw: dict[str, Callable[[], Figure]] = {}
    missing: dict[str, str] = dict(NOT_FROM_TRAJECTORIES)

    def need(name: str, ok: bool, why: str, build: Callable[[], Figure]) -> None:
        if ok:
            draw[name] = build
        else:
            missing[name] = why

    for part in (_process_figures, functools.partial(_revision_figures,
                                                    population=revised_population),
                 _gpu_figures, _configuration_figures, _task_figures):
        part(t, need)
    return draw, missing


def _has(t: Tables, name: str) -> bool:
    return name in t and not t[name].empty


def _process_figures(t: Tables, need: _Need) -> None:
    """Figures 14-16: time, methods, sources and where orders first appear."""
    feats = t.get("runs_features.csv", pd.DataFrame())
    scored = feats[feats["scored"].astype(bool)] if "scored" in feats else feats
    need("fig14a_activity_time", _has(t, "activity_time.csv"), "needs runs with tool calls",
         lambda: activity_time_figure(t["activity_time.csv"]))
    need("fig14b_milestones",
         _has(t, "milestones.csv") and t["milestones.csv"]["n_reached"].sum() > 0,
         "needs scored runs that reached a milestone",
         lambda: milestones_figure(t["milestones.csv"]))
    fam = t.get("families.csv", pd.DataFrame())
    need("fig15a_families", not fam.empty and (fam["n_used"] > 0).any(),
         "needs runs that ran a method family",
         lambda: share_heatmap(fam[fam["by"].isin(["all", "config"])], "value", "family",
                               "share", "Method families used"))
    need("fig15b_families_discipline", not fam.empty and (fam["n_used"] > 0).any() and
         (fam["by"] == "discipline").any(), "needs runs that ran a method family, with "
         "their discipline",
         lambda: share_heatmap(fam[fam["by"] == "discipline"], "value", "family", "share",
                               "Method families by discipline"))
    need("fig15c_sources", _has(t, "sources.csv"), "needs fetched URLs (audit log "
         "tools/audit.jsonl or fetch calls)",
         lambda: stacked_shares(t["sources.csv"], "source_class", "Sources fetched"))
    need("fig15d_operators", _has(t, "search_operators.csv"), "needs runs that searched",
         lambda: share_heatmap(t["search_operators.csv"], "config", "operator", "mean_share",
                               "Search operators", vmax=None))
    fa = t.get("first_appearance.csv", pd.DataFrame())
    need("fig16a_first_appearance", not fa.empty and fa["n_groups"].sum() > 0,
         "needs submitted groups of three or more items not in the input order",
         lambda: stacked_shares(fa, "source", "Where the submitted orders first appear",
                                ["model_text", "tool_call", "tool_output", "file_only"]))
    need("fig16b_first_complete", "first_complete_t" in scored and
         scored["first_complete_t"].notna().any(), "needs a complete ranking in a trajectory",
         lambda: first_complete_figure(scored))


def _flips_into_measured(changed: pd.DataFrame) -> pd.Series:
    """Figure 21b's numbers: the flipped pairs that moved into the measured order.

    The count ``spu analyze`` writes (``flips_into_measured``); a table written before it
    existed gives the flipped pairs times their share, rounded.
    """
    if "flips_into_measured" in changed:
        return changed["flips_into_measured"].fillna(0).astype(int)
    return (changed["pairs_flipped"] * changed["flipped_into_measured"].fillna(0)).round() \
        .astype(int)


def _revision_figures(t: Tables, need: _Need, population: str = "differs") -> None:
    """Figures 17, 21b and 24e: associations, self-assessment, revisions and flips."""
    assoc = t.get("associations.csv", pd.DataFrame())
    need("fig17a_associations", not assoc.empty and assoc["estimate"].notna().any(),
         "needs scored runs on at least two tasks whose features vary",
         lambda: associations_figure(assoc))
    sa = t.get("self_assessment.csv", pd.DataFrame())
    need("fig17b_self_assessment", not sa.empty, "needs reports (output/report.md) that state "
         "an expected Spearman correlation",
         lambda: scatter_equality(sa, "stated_expected_rho", "score",
                                  "Expected Spearman stated in the report", "Score",
                                  "Self-assessment"))
    rev = t.get("revisions.csv", pd.DataFrame())
    changed = revised_runs(rev, population)
    ri = t.get("revision_intervals.csv", pd.DataFrame())
    has_change = not ri.empty and bool(
        ri.loc[ri["quantity"] == REVISION_CHANGE, "mean"].notna().any())
    why = ("needs a submission that differs from its first draft, and answer keys (--tasks)"
           if rev.empty or "submission_differs" in rev else
           "revisions.csv has no submission_differs column (written by an older spu analyze; "
           "run it again)")
    need("fig17c_revisions", not changed.empty, why,
         (lambda: revisions_figure(changed, ri)) if has_change else
         lambda: by_config_points(changed, "change", "Submission minus first draft (score)",
                                  "Revisions"))
    need("fig21b_draft_vs_submission", not changed.empty, why,
         lambda: scatter_equality(changed, "first_draft_score", "score",
                                  "Score of the first complete ranking",
                                  "Score of the submission", "Draft and submission",
                                  labels=_flips_into_measured(changed)))
    has_flips = not ri.empty and all(
        ri.loc[ri["quantity"] == q, "mean"].notna().any() for q in FLIP_QUANTITIES)
    need("fig24e_flips", not rev.empty and rev["flipped_into_measured"].notna().any(),
         "needs revised first drafts and answer keys (--tasks)",
         (lambda: flip_intervals_figure(ri)) if has_flips else lambda: flips_figure(rev))


def _gpu_figures(t: Tables, need: _Need) -> None:
    """Figure 22: GPU use, workloads, errors and runtime."""
    gpu = t.get("gpu.csv", pd.DataFrame())
    need("fig22a_gpu_levels", not gpu.empty, "needs scored runs",
         lambda: stacked_shares(_levels(gpu), "level", "GPU use", list(GPU_LEVELS)))
    gw = t.get("gpu_workloads.csv", pd.DataFrame())
    need("fig22b_gpu_workloads", not gw.empty, "needs runs that used the GPU",
         lambda: stacked_shares(gw[gw["discipline"] != "all"].rename(
             columns={"discipline": "config"}), "workload", "Main GPU workload by discipline"))
    gin = t.get("gpu_within_config.csv", pd.DataFrame())
    need("fig22e_gpu_within", not gin.empty and (gin["marker"] == "used_gpu").any(),
         "needs configurations with runs that used the GPU and runs that did not",
         lambda: gpu_within_figure(gin))
    ge = t.get("gpu_errors.csv", pd.DataFrame())
    need("fig22c_gpu_errors", not ge.empty, "needs runs that started a GPU workload and hit "
         "an error", lambda: share_heatmap(ge, "config", "error", "share", "GPU errors"))
    need("fig22d_gpu_runtime", not gpu.empty and gpu["median_runtime_gpu_s"].notna().any(),
         "needs runs that used the GPU", lambda: gpu_runtime_figure(gpu))


def _configuration_figures(t: Tables, need: _Need) -> None:
    """Figures 23 and 24c-d: profiles, the classifier, efforts."""
    prof = t.get("profiles.csv", pd.DataFrame())
    need("fig23a_profiles", len(prof) >= 2, "needs two configurations",
         lambda: profiles_figure(prof))
    conf = t.get("classifier_confusion.csv", pd.DataFrame())
    need("fig23b_confusion", not conf.empty, "needs two Claude Code configurations with two "
         "scored runs each",
         lambda: confusion_figure(conf, _summary_value(t, "classifier_accuracy"),
                                  _summary_value(t, "classifier_chance")))
    eff = t.get("efforts.csv", pd.DataFrame())
    need("fig24c_efforts", not eff.empty and eff["value"].notna().any(),
         "needs one model run at two efforts on the same tasks",
         lambda: efforts_figure(eff))
    need("fig24d_effort_drafts", not eff.empty and "ci_low" in eff
         and eff["quantity"].str.startswith("draft minus").any()
         and eff.loc[eff["quantity"].str.startswith("draft minus"), "value"].notna().any(),
         "needs the higher effort's first drafts and answer keys (--tasks)",
         lambda: effort_drafts_figure(eff))


def _task_figures(t: Tables, need: _Need) -> None:
    """Figures 18e, 19b and 19c: one task's settings and repeats, varying methods."""
    ts = t.get("task_settings.csv", pd.DataFrame())
    need("fig18e_task_settings", not ts.empty and bool(ts["rho"].notna().any()),
         "needs a task named by --task with numeric settings in targets.csv and --tasks",
         lambda: task_settings_figure(ts[ts["rho"].notna()]))
    tro = t.get("task_repeat_orders.csv", pd.DataFrame())
    need("fig19b_task_repeat_orders", not tro.empty,
         "needs a task named by --task with two scored runs of one configuration "
         "(--all-repeats) and --tasks", lambda: task_repeat_orders_figure(tro))
    rm = t.get("repeat_methods.csv", pd.DataFrame())
    need("fig19c_repeat_methods", not rm.empty and "shown" in rm
         and bool((rm["shown"].astype(bool) & (rm["task_id"] == "all")).any()),
         "needs method families that vary between the scored repeats of at least four tasks "
         "(spu analyze --all-repeats)", lambda: repeat_methods_figure(rm))


def _levels(gpu: pd.DataFrame) -> pd.DataFrame:
    # the levels of Figure 22a only (gpu.csv has other shares: probes, used, measured)
    levels = {f"share_{level.replace(' ', '_')}" for level in GPU_LEVELS}
    columns = [c for c in gpu.columns if c in levels]
    long = gpu.melt(id_vars="config", value_vars=columns, var_name="level", value_name="share")
    long["level"] = long["level"].str.removeprefix("share_").str.replace("_", " ")
    return long


def write_figures(t: Tables, folder: Path) -> tuple[list[Path], dict[str, str]]:
    """Draw every figure the tables allow into ``folder``; the files and the figures missing."""
    draw, missing = trajectory_figures(t)
    written: list[Path] = []
    for name, build in draw.items():
        written += save_figure(build(), folder, name)
    return written, missing


def read_analysis_tables(folder: Path) -> Tables:
    """The CSV tables of an ``spu analyze`` output folder, by file name."""
    tables = {}
    for path in sorted(Path(folder).glob("*.csv")):
        try:
            tables[path.name] = pd.read_csv(path)
        except pd.errors.EmptyDataError:
            tables[path.name] = pd.DataFrame()
    return tables


def analysis_figures(analysis: Path) -> tuple[dict[str, Callable[[], Figure]], list[str]]:
    """The figures an ``spu analyze`` output folder allows, and a note for each it does not.

    Returns a drawing function per figure, by name, and for each figure not drawn a note
    saying what it needs.
    """
    tables = read_analysis_tables(analysis)
    if "runs_features.csv" not in tables:
        return {}, [f"{analysis}: no runs_features.csv (not an spu analyze folder); "
                    "trajectory figures 14-24 not drawn"]
    population = str(analysis_outputs_manifest(analysis).get("revised_population", "differs"))
    draw, missing = trajectory_figures(tables, population)
    return dict(draw), [f"figure {name} not drawn: {why}" for name, why in missing.items()]


def analysis_outputs_manifest(analysis: Path) -> dict:
    """The ``manifest.json`` of an ``spu analyze`` folder ({} when absent or unreadable)."""
    import json

    try:
        found = json.loads((Path(analysis) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
