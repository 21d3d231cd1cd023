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
from spu.report.ranking import MIN_COVERAGE

if TYPE_CHECKING:  # pandas only where a table is built: ``spu --help`` stays fast
    import pandas as pd

LEADERBOARD_COLUMNS = ("config", "model", "training_cutoff", "n_tasks", "coverage",
                       "adjusted_mean", "ci_low", "ci_high", "above_chance_share", "cost_mean",
                       "sealed_share", "n_before_cutoff", "tier", "n_separated", "rank",
                       "ranked", "n_shared_tasks", "shared_mean", "shared_ci_low",
                       "shared_ci_high", "n_scored", "raw_mean", "raw_ci_low", "raw_ci_high")
"""``leaderboard.csv``'s columns: SPEC section 14's, then ``n_before_cutoff``, the tier
separation (:func:`tiers`) and the ranking (:mod:`spu.report.ranking`): ``rank`` on the
shared tasks (empty for a configuration below the coverage threshold, ``ranked`` false),
the shared-task mean and interval, and the mean over its own scored tasks."""
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


SEALED_RULE = ("sealed share: the official runs whose submission was sealed before it was "
               "graded, a signed seal.json in the run folder whose SHA-256 the output root's "
               "ledger.jsonl holds (every run sealed when it ends and graded after, and one "
               "that waited sealed for its key, count alike; spu seal verify checks the "
               "signatures)")
"""What ``sealed_share`` counts (SPEC 14), as the page says it."""


def sealed_run_keys(output_root: Path) -> set[str]:
    """The run keys under ``output_root`` whose ``seal.json`` the ledger holds.

    A key counts when its latest ledger line's ``manifest_sha256`` is the SHA-256 of
    ``runs/<key>/seal.json``: the run was sealed (before it was graded), and its seal is
    the one the ledger chained. The signatures are ``spu seal verify``'s to check.
    """
    import hashlib
    import json

    root = Path(output_root)
    ledger = root / "ledger.jsonl"
    latest: dict[str, str] = {}
    if ledger.is_file():
        for line in ledger.read_bytes().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("run_key"), str):
                latest[entry["run_key"]] = str(entry.get("manifest_sha256"))
    found = set()
    for key, digest in latest.items():
        seal = root / "runs" / key / "seal.json"
        if "/" not in key and ".." not in key and seal.is_file() and \
                hashlib.sha256(seal.read_bytes()).hexdigest() == digest:
            found.add(key)
    return found


def _sealed_share(runs: pd.DataFrame, sealed: set[str] | None) -> float:
    """The share of ``runs`` whose run key is in ``sealed`` (NaN: no output root read).

    >>> import pandas as pd
    >>> _sealed_share(pd.DataFrame({"run_key": ["a", "b"]}), {"a"})
    0.5
    """
    if sealed is None or not len(runs) or "run_key" not in runs.columns:
        return float("nan")
    return float(runs["run_key"].astype(str).isin(sealed).mean())


def leaderboard_table(runs: pd.DataFrame, seed: int = 0, resamples: int = 10_000,
                      cutoffs: dict[str, str] | None = None, sealed: set[str] | None = None,
                      min_coverage: float = MIN_COVERAGE) -> pd.DataFrame:
    """The public tasks' table (paper Table 1, ranked as Figure 1): one row per configuration.

    With SPEC 14's columns: ``n_tasks`` counts the public tasks a configuration has an
    official run on, ``coverage`` is its scored runs over every public task of the table,
    ``adjusted_mean`` and its interval are ``configs.csv``'s, ``sealed_share`` the share
    of its official runs (public and private) whose key is in ``sealed``
    (:func:`sealed_run_keys`; NaN without it); ``n_before_cutoff`` counts its official
    public runs on tasks published before the model's training cutoff
    (:mod:`spu.tasks.freshness`; NaN where the table has no ``published_before_cutoff``
    column). Rows go by ``rank`` (:func:`spu.report.ranking.rank_on_shared_tasks` at
    ``min_coverage``), the unranked configurations below; ``attrs["ranking"]`` holds the
    :class:`~spu.report.ranking.Ranking`.
    """
    import pandas as pd

    from spu.report.ranking import rank_on_shared_tasks
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
            "sealed_share": _sealed_share(everything, sealed),
            "n_before_cutoff": _before_cutoff(mine),
            "tier": tier.get(row.config, float("nan")),
            "n_separated": separated.get(row.config, 0),
        })
    board = pd.DataFrame(rows)
    ranking = rank_on_shared_tasks(public, dict(zip(board["config"], board["coverage"],
                                                    strict=True)) if len(board) else {},
                                   min_coverage, seed, resamples)
    table = ranking.table.merge(board, on="config", how="left")[list(LEADERBOARD_COLUMNS)]
    table.attrs["tier_separation"] = between
    table.attrs["ranking"] = ranking
    return table


def private_leaderboard_table(runs: pd.DataFrame, seed: int = 0, resamples: int = 10_000,
                              cutoffs: dict[str, str] | None = None,
                              sealed: set[str] | None = None) -> pd.DataFrame:
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
            "sealed_share": _sealed_share(mine, sealed), "n_before_cutoff": _before_cutoff(mine),
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


def _interval(row: dict[str, Any], mean: str, low: str, high: str) -> str:
    if not isinstance(row.get(mean), float) or row[mean] != row[mean]:
        return "\u2013"
    return f"{row[mean]:.3f} [{row[low]:.3f}, {row[high]:.3f}]"


def _share(value: Any) -> str:
    return "\u2013" if not isinstance(value, float) or value != value else f"{value:.0%}"


def _name(row: dict[str, Any]) -> str:
    before = row.get("n_before_cutoff")
    marked = isinstance(before, (int, float)) and before == before and before > 0
    return _cell(row["config"]) + (f' <span class="mark">{MARK}</span>' if marked else "")


_Column = tuple[str, Any]

RANKED: tuple[_Column, ...] = (
    ("rank", lambda r: _count(r["rank"])), ("configuration", _name),
    ("model", lambda r: _cell(r["model"])),
    ("training cutoff", lambda r: _cell(r["training_cutoff"])),
    ("mean on the shared tasks [95% CI]",
     lambda r: _interval(r, "shared_mean", "shared_ci_low", "shared_ci_high")),
    ("task-adjusted mean [95% CI]", lambda r: _interval(r, "adjusted_mean", "ci_low",
                                                         "ci_high")),
    ("coverage", lambda r: _share(r["coverage"])),
    ("above chance", lambda r: _share(r["above_chance_share"])),
    ("cost per scored run (USD)", lambda r: _cell(r["cost_mean"])),
    ("sealed", lambda r: _share(r["sealed_share"])),
    ("runs before cutoff", lambda r: _count(r["n_before_cutoff"])),
    ("tier", lambda r: _count(r["tier"])), ("separated", lambda r: _count(r["n_separated"])),
)
"""The ranked table's columns on the page (``leaderboard.csv`` holds them all)."""

UNRANKED: tuple[_Column, ...] = (
    ("configuration", _name), ("model", lambda r: _cell(r["model"])),
    ("coverage", lambda r: _share(r["coverage"])),
    ("scored tasks", lambda r: _count(r["n_scored"])),
    ("mean over its own scored tasks [95% CI]",
     lambda r: _interval(r, "raw_mean", "raw_ci_low", "raw_ci_high")),
    ("task-adjusted mean [95% CI]", lambda r: _interval(r, "adjusted_mean", "ci_low",
                                                         "ci_high")),
    ("cost per scored run (USD)", lambda r: _cell(r["cost_mean"])),
    ("sealed", lambda r: _share(r["sealed_share"])),
)
"""The columns of the configurations listed below the threshold."""

PRIVATE: tuple[_Column, ...] = (
    ("configuration", _name), ("model", lambda r: _cell(r["model"])),
    ("training cutoff", lambda r: _cell(r["training_cutoff"])),
    ("scored tasks", lambda r: _count(r["n_scored"])),
    ("mean [95% CI]", lambda r: _interval(r, "raw_mean", "ci_low", "ci_high")),
    ("above chance", lambda r: _share(r["above_chance_share"])),
    ("p vs random", lambda r: _cell(r["p_vs_random"])),
    ("p (Holm)", lambda r: _cell(r["p_holm"])),
    ("cost per scored run (USD)", lambda r: _cell(r["cost_mean"])),
    ("sealed", lambda r: _share(r["sealed_share"])),
    ("runs before cutoff", lambda r: _count(r["n_before_cutoff"])),
)
"""The private tasks' columns on the page."""


def _section(table: pd.DataFrame, columns: tuple[_Column, ...], name: str) -> str:
    """One ``<table>`` of ``columns`` in a box that scrolls sideways inside the page."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c, _ in columns)
    rows = ["<tr>" + "".join(f"<td>{cell(row)}</td>" for _, cell in columns) + "</tr>"
            for row in table.to_dict("records")]
    return (f'<div class="wrap" id="{name}"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 100%; }
table { border-collapse: collapse; font-size: .9rem; }
th, td { padding: .3rem .6rem; border-bottom: 1px solid #ddd; text-align: right; }
td { white-space: nowrap; }
th { white-space: normal; vertical-align: bottom; min-width: 4em; }
td:nth-child(-n+2), th:nth-child(-n+2) { text-align: left; }
.wrap { max-width: 100%; overflow-x: auto; border: 1px solid #eee; }
.mark { color: #a33; }
p.rule { max-width: 60rem; }
"""
"""The page's style: each table scrolls inside its own box, never the page."""


def leaderboard_html(table: pd.DataFrame, title: str = "SPU leaderboard",
                     private: pd.DataFrame | None = None) -> str:
    """A self-contained page (no script, no outside file) holding the tables.

    The public tasks' ranking and, under it, the configurations below the coverage
    threshold, each with the rule that placed them; then the private tasks' table where
    there are private runs, as the paper's Tables 1 and 2.
    """
    ranking = table.attrs.get("ranking")
    ranked = table[table["ranked"].astype(bool)] if "ranked" in table else table
    unranked = table[~table["ranked"].astype(bool)] if "ranked" in table else table.iloc[0:0]
    below = ""
    if len(unranked):
        below = (f"<h3>Not ranked: coverage below {ranking.threshold:.0%}</h3>"
                 if ranking is not None else "<h3>Not ranked</h3>")
        below += _section(unranked, UNRANKED, "unranked")
    private_part = ""
    if private is not None and len(private):
        private_part = f"""<h2>Private tasks</h2>
<p>Raw mean over each configuration's scored private tasks (unpublished measurements), with
95% bootstrap intervals; p: one-sided test against random rankings, Holm-corrected (paper
Table 2).</p>
{_section(private, PRIVATE, "private")}"""
    rule = html.escape(ranking.rule) if ranking is not None else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{STYLE}</style></head><body>
<h1>{html.escape(title)}</h1>
<h2>Public tasks</h2>
<p class="rule">{rule} Beside it: the task-adjusted mean over every public task (paper
Table 1), the share of scored tasks above the chance threshold, the cost per scored run in
USD; {html.escape(SEALED_RULE)}, a dash where the output root was not read.</p>
{_section(ranked, RANKED, "ranked")}
{below}
{_tier_line(table)}
{private_part}
<p>{MARK} runs before cutoff: runs on tasks whose source was published before the model's
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
    p = sub.add_parser("leaderboard", help="a static leaderboard page and CSV of a runs table "
                       "or an output root",
                       description="Rank the configurations as the paper's Figure 1 does its "
                       "hatched bars (the mean over the public tasks every ranked "
                       "configuration scored), those below --min-coverage listed unranked "
                       "beside their own mean, with spu stats' task-adjusted means and costs, "
                       "into OUT/index.html and OUT/leaderboard.csv.")
    p.add_argument("runs", type=Path, metavar="RUNS",
                   help="a runs table (.csv or .parquet), or an output root (its runs are "
                        "exported and its seals read)")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    p.add_argument("--resamples", type=int, default=10_000,
                   help="bootstrap resamples (default 10000, as spu stats)")
    p.add_argument("--min-coverage", type=float, default=MIN_COVERAGE, metavar="SHARE",
                   help="least share of the public tasks a configuration must be scored on "
                        "to be ranked (default 0.25); the others are listed below, unranked")
    p.add_argument("--runs-dir", type=Path, default=None, metavar="OUTPUT_ROOT",
                   help="output root whose seals and ledger give sealed_share (default: RUNS "
                        "when it is an output root; else sealed_share is left empty)")
    p.add_argument("--tasks", type=Path, action="append", default=[], metavar="TASK_ROOT",
                   help="task root (repeatable): its retired tasks are left out, as spu stats "
                        "leaves them out (SPEC 15)")
    p.set_defaults(handler=leaderboard_command)


def _read_runs(args: argparse.Namespace, scratch: Path) -> tuple[pd.DataFrame, Path | None]:
    """The runs table of ``args.runs`` (a table, or an output root's), and the seals' root."""
    from spu.report.inputs import export_runs
    from spu.stats.runs_table import read_runs_table

    root = args.runs_dir
    table = args.runs
    if Path(args.runs).is_dir():
        table = scratch / "runs.csv"
        export_runs(args.runs, table)
        root = root or args.runs
    return read_runs_table(table), root


def leaderboard_command(args: argparse.Namespace) -> int:
    """Write the leaderboard; 2 for an unusable input, 1 for no official run."""
    import tempfile

    from spu.report.inputs import OutputRootError
    from spu.stats.retired import retirements_of_roots, split_probes, split_retired
    from spu.stats.runs_table import EMPTY_HINT, RunsTableError, nothing_to_analyse

    if not 0 <= args.min_coverage <= 1:
        print("spu leaderboard: --min-coverage must be between 0 and 1", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory(prefix="spu-leaderboard-") as scratch:
            runs, root = _read_runs(args, Path(scratch))
    except (RunsTableError, OutputRootError) as exc:
        print(f"spu leaderboard: {exc}", file=sys.stderr)
        return 2
    absent = runs.attrs.get("absent_columns", [])
    n_rows = len(runs)
    runs, _ = split_probes(runs)
    runs, _ = split_retired(runs, retirements_of_roots(args.tasks))
    runs.attrs["absent_columns"] = absent
    empty = nothing_to_analyse(runs, n_rows - len(runs))
    if empty is not None:
        print(f"spu leaderboard: {args.runs}: {empty}; nothing written; {EMPTY_HINT}",
              file=sys.stderr)
        return 1
    sealed = sealed_run_keys(root) if root is not None else None
    paths = write_leaderboard(
        leaderboard_table(runs, args.seed, args.resamples, sealed=sealed,
                          min_coverage=args.min_coverage), args.out,
        private_leaderboard_table(runs, args.seed, args.resamples, sealed=sealed))
    print("\n".join(str(p) for p in paths))
    return 0
