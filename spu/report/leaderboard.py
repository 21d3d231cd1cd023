"""``spu leaderboard``: a static page and CSVs ranking configurations (SPEC section 14).

Public and private tasks are apart, as the paper's Tables 1 and 2. The numbers are
``spu stats``' own, with the same seed and resamples: for the public tasks
(``leaderboard.csv``) the task-adjusted mean, its interval and the share above chance of
:func:`spu.stats.means.config_table` and the cost per scored run of
:func:`spu.stats.costs.cost_table`, so they equal ``configs.csv`` and ``costs.csv``; for
the private tasks (``leaderboard_private.csv``) those of
:func:`spu.stats.private.private_table`, equal to ``private.csv``. Each section counts a
configuration's runs on tasks published before its model's training cutoff
(``n_before_cutoff``), and the page marks those configurations.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.project import option_file
from spu.schema import Outcome

if TYPE_CHECKING:  # pandas only where a table is built: ``spu --help`` stays fast
    import pandas as pd

LEADERBOARD_COLUMNS = ("config", "model", "training_cutoff", "n_tasks", "coverage",
                       "adjusted_mean", "ci_low", "ci_high", "above_chance_share", "cost_mean",
                       "sealed_share", "n_before_cutoff", "tier", "n_separated")
"""``leaderboard.csv``'s columns: SPEC section 14's, then ``n_before_cutoff`` and the
tier separation (:func:`tiers`)."""
PRIVATE_COLUMNS = ("config", "model", "training_cutoff", "n_tasks", "n_scored", "raw_mean",
                   "ci_low", "ci_high", "above_chance_share", "p_vs_random", "p_holm",
                   "cost_mean", "sealed_share", "n_before_cutoff")
"""``leaderboard_private.csv``'s columns: the numbers of ``spu stats``' ``private.csv``."""
UNKNOWN = "unknown"
"""The training cutoff of a model whose ``conf/model/<name>.yaml`` sets none."""
MARK = "\u2020"
"""The page's mark of a configuration with runs on tasks published before its model's
training cutoff."""


def training_cutoffs(models: set[str], conf_dir: Path | None = None) -> dict[str, str]:
    """Each model's ``training_cutoff`` from ``conf/model/<name>.yaml`` (``unknown`` if unset).

    ``conf_dir`` None: the file composition uses (:func:`spu.project.option_file`).
    """
    import yaml

    found: dict[str, str] = {}
    for name in models:
        path = (option_file("model", name) if conf_dir is None
                else conf_dir / "model" / f"{name}.yaml")
        data = yaml.safe_load(path.read_text()) if path and path.is_file() else None
        value = data.get("training_cutoff") if isinstance(data, dict) else None
        found[name] = str(value) if value else UNKNOWN
    return found


def _before_cutoff(runs: pd.DataFrame) -> float:
    """How many of ``runs`` are on tasks published before the model's cutoff (NaN: no column)."""
    if "published_before_cutoff" not in runs.columns:
        return float("nan")
    return float((runs["published_before_cutoff"].astype(str).str.lower() == "true").sum())


TIER_RULE = ("tier 1: the configurations above the widest gap of the task-adjusted means, "
             "tier 2 the rest (paper 3.3); n_separated: the Holm-significant paired "
             "Wilcoxon tests (pairs.csv) that separate a configuration from another")
"""How :func:`tiers` forms the tiers the page states."""


def tiers(configs: pd.DataFrame, pairs: pd.DataFrame) -> tuple[dict[str, int], dict[str, int],
                                                                   tuple[int, int]]:
    """The paper's two tiers (3.3) and how the paired tests separate them.

    A configuration is in tier 1 when its task-adjusted mean lies above the widest gap
    between consecutive means (:func:`spu.stats.repeats.largest_gap_group`), else in
    tier 2. Returns each configuration's tier, its number of Holm-significant paired
    tests, and (significant pairs between the tiers, significant pairs in all): the paper
    reads "all 17 pairwise differences that survive Holm correction lie between these two
    groups" as the separation.

    Examples
    --------
    >>> import pandas as pd
    >>> configs = pd.DataFrame({"config": list("ABCD"),
    ...                         "adjusted_mean": [0.48, 0.45, 0.30, 0.25]})
    >>> pairs = pd.DataFrame({"config_a": ["A", "A", "B", "C"], "config_b": ["C", "D", "D", "D"],
    ...                       "significant": [True, True, False, False]})
    >>> tiers(configs, pairs)
    ({'A': 1, 'B': 1, 'C': 2, 'D': 2}, {'A': 2, 'B': 0, 'C': 1, 'D': 1}, (2, 2))
    """
    from spu.stats.repeats import largest_gap_group

    ordered = configs.dropna(subset=["adjusted_mean"]).sort_values("adjusted_mean",
                                                                   ascending=False)
    names = [str(c) for c in ordered["config"]]
    top = largest_gap_group(ordered["adjusted_mean"].to_numpy()) if len(names) > 1 else 1
    tier = {name: 1 if i < top else 2 for i, name in enumerate(names)}
    separated = dict.fromkeys(names, 0)
    between = total = 0
    if len(pairs):
        for r in pairs[pairs["significant"].astype(bool)].itertuples(index=False):
            a, b = str(r.config_a), str(r.config_b)
            total += 1
            between += int(a in tier and b in tier and tier[a] != tier[b])
            for name in (a, b):
                if name in separated:
                    separated[name] += 1
    return tier, separated, (between, total)


def _sealed_share(runs: pd.DataFrame) -> float:
    """The share of ``runs`` sealed before grading: still ``sealed``, or graded from a seal.

    A run graded later from its seal (``spu regrade``, ``spu grade-bundle``) has
    ``graded_from_seal`` true in the runs table.
    """
    if not len(runs):
        return 0.0
    sealed = runs["outcome"] == Outcome.sealed.value
    if "graded_from_seal" in runs.columns:
        sealed = sealed | (runs["graded_from_seal"].astype(str).str.lower() == "true")
    return float(sealed.mean())


def leaderboard_table(runs: pd.DataFrame, seed: int = 0, resamples: int = 10_000,
                      cutoffs: dict[str, str] | None = None) -> pd.DataFrame:
    """The public tasks' table (paper Table 1): one row per configuration of ``configs.csv``.

    In ``configs.csv``'s order, with SPEC 14's columns: ``n_tasks`` counts the public
    tasks a configuration has an official run on, ``coverage`` is its scored runs over
    every public task of the table, ``sealed_share`` the share of its official runs
    (public and private) sealed before grading (:func:`_sealed_share`);
    ``n_before_cutoff`` counts its official public runs on tasks published before the
    model's training cutoff (:mod:`spu.tasks.freshness`; NaN where the table has no
    ``published_before_cutoff`` column).
    """
    import pandas as pd

    from spu.stats.costs import cost_table
    from spu.stats.inputs import StatsInputs, StatsOptions

    inputs = StatsInputs(runs=runs, options=StatsOptions(seed=seed, resamples=resamples))
    configs = inputs.configs
    costs = cost_table(inputs.public, inputs.order, inputs.adjusted, seed, resamples)
    public = inputs.public
    n_public = max(int(public["task_id"].nunique()), 1)
    official = inputs.official_all
    models = {c: str(g["model"].iloc[0]) for c, g in official.groupby("config")}
    cutoffs = cutoffs if cutoffs is not None else training_cutoffs(set(models.values()))
    tier, separated, between = tiers(configs, inputs.pairs)
    rows: list[dict[str, Any]] = []
    for row in configs.itertuples(index=False):
        mine = public[public["config"] == row.config]
        everything = official[official["config"] == row.config]
        cost = costs[costs["config"] == row.config]["cost_mean"]
        model = models.get(row.config, "")
        rows.append({
            "config": row.config, "model": model,
            "training_cutoff": cutoffs.get(model, UNKNOWN),
            "n_tasks": int(mine["task_id"].nunique()),
            "coverage": float(mine["scored"].sum()) / n_public,
            "adjusted_mean": row.adjusted_mean, "ci_low": row.adjusted_ci_low,
            "ci_high": row.adjusted_ci_high, "above_chance_share": row.above_chance_share,
            "cost_mean": float(cost.iloc[0]) if len(cost) else float("nan"),
            "sealed_share": _sealed_share(everything),
            "n_before_cutoff": _before_cutoff(mine),
            "tier": tier.get(row.config, float("nan")),
            "n_separated": separated.get(row.config, 0),
        })
    table = pd.DataFrame(rows, columns=list(LEADERBOARD_COLUMNS))
    table.attrs["tier_separation"] = between
    return table


def private_leaderboard_table(runs: pd.DataFrame, seed: int = 0, resamples: int = 10_000,
                              cutoffs: dict[str, str] | None = None) -> pd.DataFrame:
    """The private tasks' table (paper Table 2): ``spu stats``' ``private.csv`` numbers.

    One row per configuration with official private runs, in ``private.csv``'s order:
    the raw mean over its scored private tasks with its bootstrap interval, the share
    above chance, the one-sided test against random rankings (the normal approximation:
    the leaderboard reads no task packages, as ``spu stats`` without ``--tasks``) and its
    Holm correction; the mean cost of its scored private runs, the share sealed before
    grading and the runs on tasks published before the model's cutoff. Empty without
    private runs.
    """
    import numpy as np
    import pandas as pd

    from spu.stats.inputs import StatsInputs, StatsOptions
    from spu.stats.private import private_table

    inputs = StatsInputs(runs=runs, options=StatsOptions(seed=seed, resamples=resamples))
    private = inputs.private
    if not len(private):
        return pd.DataFrame(columns=list(PRIVATE_COLUMNS))
    order = [c for c in inputs.order if c in set(private["config"])] + sorted(
        set(private["config"]) - set(inputs.order))
    table = private_table(private, order, None, seed, resamples)
    models = {c: str(g["model"].iloc[0]) for c, g in private.groupby("config")}
    cutoffs = cutoffs if cutoffs is not None else training_cutoffs(set(models.values()))
    rows: list[dict[str, Any]] = []
    for row in table.itertuples(index=False):
        mine = private[private["config"] == row.config]
        scored = mine[mine["scored"]]
        cost = pd.to_numeric(scored["cost_usd"], errors="coerce") if "cost_usd" in scored \
            else pd.Series(dtype=float)
        model = models.get(row.config, "")
        rows.append({
            "config": row.config, "model": model, "training_cutoff": cutoffs.get(model, UNKNOWN),
            "n_tasks": int(mine["task_id"].nunique()), "n_scored": int(row.n_scored),
            "raw_mean": row.raw_mean, "ci_low": row.raw_ci_low, "ci_high": row.raw_ci_high,
            "above_chance_share": row.above_chance_share, "p_vs_random": row.p_vs_random,
            "p_holm": row.p_holm,
            "cost_mean": float(cost.mean()) if cost.notna().any() else np.nan,
            "sealed_share": _sealed_share(mine), "n_before_cutoff": _before_cutoff(mine),
        })
    return pd.DataFrame(rows, columns=list(PRIVATE_COLUMNS))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "\u2013" if value != value else f"{value:.3f}"
    return html.escape(str(value))


def _count(value: Any) -> str:
    if isinstance(value, float):
        return "\u2013" if value != value else f"{value:.0f}"
    return html.escape(str(value))


def _section(table: pd.DataFrame) -> str:
    """One ``<table>``: a rank, the table's columns, names marked as :data:`MARK` says."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ("rank", *table.columns))
    rows = []
    for i, row in enumerate(table.to_dict("records"), start=1):
        cells = []
        for column, value in row.items():
            if column == "config":
                before = row.get("n_before_cutoff")
                marked = isinstance(before, (int, float)) and before == before and before > 0
                text = _cell(value) + (f' <span class="mark">{MARK}</span>' if marked else "")
            elif column in ("n_before_cutoff", "n_tasks", "n_scored", "tier", "n_separated"):
                text = _count(value)
            else:
                text = _cell(value)
            cells.append(f"<td>{text}</td>")
        rows.append(f"<tr><td>{i}</td>{''.join(cells)}</tr>")
    return (f'<div class="wrap"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def leaderboard_html(table: pd.DataFrame, title: str = "SPU leaderboard",
                     private: pd.DataFrame | None = None) -> str:
    """A self-contained page (no script, no outside file) holding the tables.

    The public tasks' table, then the private tasks' where there are private runs, as
    the paper's Tables 1 and 2.
    """
    private_part = ""
    if private is not None and len(private):
        private_part = f"""<h2>Private tasks</h2>
<p>Raw mean over each configuration's scored private tasks (unpublished measurements), with
95% bootstrap intervals; p: one-sided test against random rankings, Holm-corrected (paper
Table 2).</p>
{_section(private)}"""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: .3rem .6rem; border-bottom: 1px solid #ddd; text-align: right;
          white-space: nowrap; }}
th:nth-child(2), td:nth-child(2), th:nth-child(3), td:nth-child(3) {{ text-align: left; }}
.wrap {{ overflow-x: auto; }}
.mark {{ color: #a33; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<h2>Public tasks</h2>
<p>Configurations ranked by task-adjusted mean over the official runs of public tasks,
with 95% bootstrap intervals (paper Table 1); cost per scored run in USD; sealed share:
official runs sealed before they were graded.</p>
{_section(table)}
{_tier_line(table)}
{private_part}
<p>{MARK} n_before_cutoff: runs on tasks whose source was published before the model's
training cutoff (the task may be in its training data); a dash where the runs table does
not say.</p>
</body></html>
"""


def _tier_line(table: pd.DataFrame) -> str:
    """The sentence under the public table: the rule of the tiers and what the tests say."""
    between, total = table.attrs.get("tier_separation", (0, 0))
    if "tier" not in table.columns or not len(table):
        return ""
    verdict = (f"{between} of the {total} Holm-significant paired differences lie between "
               "the tiers" if total else "no paired difference survives Holm correction")
    return f"<p>Tiers: {html.escape(TIER_RULE)}; {verdict}.</p>"


def write_leaderboard(table: pd.DataFrame, out: Path,
                      private: pd.DataFrame | None = None) -> list[Path]:
    """Write the page, ``leaderboard.csv`` and ``leaderboard_private.csv``; returns the paths.

    ``out/index.html``, ``out/leaderboard.csv`` (public tasks) and, where there are
    private runs, ``out/leaderboard_private.csv``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "leaderboard.csv"
    table.to_csv(csv, index=False)
    paths = [out / "index.html", csv]
    stale = out / "leaderboard_private.csv"
    if private is not None and len(private):
        private.to_csv(stale, index=False)
        paths.append(stale)
    elif stale.exists():
        stale.unlink()  # an earlier table's private section is not this table's
    paths[0].write_text(leaderboard_html(table, private=private), encoding="utf-8")
    return paths


def register(sub: Any) -> None:
    """Add ``leaderboard`` to the ``spu`` parser."""
    p = sub.add_parser("leaderboard", help="a static leaderboard page and CSV of a runs table",
                       description="Rank configurations by task-adjusted mean (the numbers of "
                       "spu stats' configs.csv and costs.csv) into OUT/index.html and "
                       "OUT/leaderboard.csv.")
    p.add_argument("runs", type=Path, metavar="RUNS", help="runs table (.csv or .parquet)")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    p.add_argument("--resamples", type=int, default=10_000,
                   help="bootstrap resamples (default 10000, as spu stats)")
    p.add_argument("--tasks", type=Path, action="append", default=[], metavar="TASK_ROOT",
                   help="task root (repeatable): its retired tasks are left out, as spu stats "
                        "leaves them out (SPEC 15)")
    p.set_defaults(handler=leaderboard_command)


def leaderboard_command(args: argparse.Namespace) -> int:
    """Write the leaderboard; 2 when the runs table cannot be read."""
    from spu.stats.retired import retirements_of_roots, split_probes, split_retired
    from spu.stats.runs_table import RunsTableError, read_runs_table

    try:
        runs = read_runs_table(args.runs)
    except RunsTableError as exc:
        print(f"spu leaderboard: {exc}", file=sys.stderr)
        return 2
    absent = runs.attrs.get("absent_columns", [])
    runs, _ = split_probes(runs)
    runs, _ = split_retired(runs, retirements_of_roots(args.tasks))
    runs.attrs["absent_columns"] = absent
    paths = write_leaderboard(leaderboard_table(runs, args.seed, args.resamples), args.out,
                              private_leaderboard_table(runs, args.seed, args.resamples))
    print("\n".join(str(p) for p in paths))
    return 0
