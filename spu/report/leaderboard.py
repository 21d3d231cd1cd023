"""``spu leaderboard``: a static page and a CSV ranking configurations (SPEC section 14).

The numbers are ``spu stats``' own: the task-adjusted mean, its interval and the share
above chance come from :func:`spu.stats.means.config_table` over the official runs of the
public tasks, the cost per scored run from :func:`spu.stats.costs.cost_table`, with the
same seed and resamples, so the leaderboard equals ``configs.csv`` and ``costs.csv``.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.overrides import CONF_DIR
from spu.schema import Outcome

if TYPE_CHECKING:  # pandas only where a table is built: ``spu --help`` stays fast
    import pandas as pd

LEADERBOARD_COLUMNS = ("config", "model", "training_cutoff", "n_tasks", "coverage",
                       "adjusted_mean", "ci_low", "ci_high", "above_chance_share", "cost_mean",
                       "sealed_share")
"""``leaderboard.csv``'s columns (SPEC section 14)."""
UNKNOWN = "unknown"
"""The training cutoff of a model whose ``conf/model/<name>.yaml`` sets none."""


def training_cutoffs(models: set[str], conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """Each model's ``training_cutoff`` from ``conf/model/<name>.yaml`` (``unknown`` if unset)."""
    import yaml

    found: dict[str, str] = {}
    for name in models:
        path = conf_dir / "model" / f"{name}.yaml"
        data = yaml.safe_load(path.read_text()) if path.is_file() else None
        value = data.get("training_cutoff") if isinstance(data, dict) else None
        found[name] = str(value) if value else UNKNOWN
    return found


def leaderboard_table(runs: pd.DataFrame, seed: int = 0, resamples: int = 10_000,
                      cutoffs: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per configuration in ``configs.csv``'s order, with SPEC 14's columns.

    ``n_tasks`` counts the public tasks a configuration has an official run on,
    ``coverage`` is its scored runs over every public task of the table, ``sealed_share``
    the share of its official runs (public and private) still ``sealed`` (not graded).
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
            "sealed_share": float((everything["outcome"] == Outcome.sealed.value).mean())
            if len(everything) else 0.0,
        })
    return pd.DataFrame(rows, columns=list(LEADERBOARD_COLUMNS))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "–" if value != value else f"{value:.3f}"
    return html.escape(str(value))


def leaderboard_html(table: pd.DataFrame, title: str = "SPU leaderboard") -> str:
    """A self-contained page (no script, no outside file) holding the table."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ("rank", *table.columns))
    body = "".join(
        "<tr>" + f"<td>{i}</td>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>"
        for i, row in enumerate(table.itertuples(index=False), start=1))
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
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Configurations ranked by task-adjusted mean over the official runs of public tasks,
with 95% bootstrap intervals; cost per scored run in USD; sealed share: official runs not
graded yet.</p>
<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>
</body></html>
"""


def write_leaderboard(table: pd.DataFrame, out: Path) -> list[Path]:
    """Write ``out/index.html`` and ``out/leaderboard.csv``; returns both paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "leaderboard.csv"
    table.to_csv(csv, index=False)
    page = out / "index.html"
    page.write_text(leaderboard_html(table), encoding="utf-8")
    return [page, csv]


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
    from spu.stats.retired import retirements_of_roots, split_retired
    from spu.stats.runs_table import RunsTableError, read_runs_table

    try:
        runs = read_runs_table(args.runs)
    except RunsTableError as exc:
        print(f"spu leaderboard: {exc}", file=sys.stderr)
        return 2
    absent = runs.attrs.get("absent_columns", [])
    runs, _ = split_retired(runs, retirements_of_roots(args.tasks))
    runs.attrs["absent_columns"] = absent
    paths = write_leaderboard(leaderboard_table(runs, args.seed, args.resamples), args.out)
    print("\n".join(str(p) for p in paths))
    return 0
