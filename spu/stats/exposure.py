"""Guarding against shortcuts: flagged runs and the presented order (paper 3.7, E.4).

- :func:`exposure_table` (``exposure.csv``, Figure 13d): runs flagged by the exposure
  detector (a tool output held an identifier of the source study) against unflagged runs
  of the same configuration, both measured against the other configurations on the same
  task, with bootstrap intervals, permutation p and Holm over the configurations; the
  pooled difference weights each configuration by its flagged runs
  (:mod:`spu.stats.within_config`).
- :func:`exposure_summary`: above chance among flagged runs and among unflagged runs on
  the same tasks, and the flagged runs with very high scores.
- :func:`exposure_indicators` (``exposure_indicators.csv``, Figure 13c): per
  configuration, the share of scored runs flagged, flagged for the source DOI, and
  sending requests outside the audited tools.
- :func:`presented_order_summary` (``presented_order.csv``, Figure 13b): the score of
  the order in which the experiments are presented, and the runs that submitted it.

A flag never changes a score (3.7, "What a flag changes"); these are descriptions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from spu.grading.submission import read_submission_file
from spu.stats.means import above_chance
from spu.stats.named_tests import named_test
from spu.stats.outcomes import relative_frame
from spu.stats.permutation import DRAWS
from spu.stats.resampling import DEFAULT_RESAMPLES
from spu.stats.submissions import Orders, TaskInfo
from spu.stats.ties import exact
from spu.stats.within_config import within_config_difference

EXPOSURE_COLUMNS: tuple[str, ...] = (
    "config", "n_flagged", "n_unflagged", "diff", "ci_low", "ci_high", "p_perm", "p_holm",
)
"""The columns SPEC section 9 fixes for ``exposure.csv``, in order (more follow)."""

HIGH_SCORE = 0.9
"""Flagged runs above this score are listed with their task sizes (paper 3.7)."""


def exposure_table(
    runs: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
    draws: int = DRAWS,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``exposure.csv``: flagged minus unflagged runs of each configuration, and pooled.

    Parameters
    ----------
    runs
        Official runs of the public tasks (``flagged_exposure``).
    order
        Configurations in table order.
    seed, resamples, draws
        Seed, bootstrap resamples and permutation draws.

    Returns
    -------
    tuple
        The table (:data:`EXPOSURE_COLUMNS`, then ``flagged_mean``, ``unflagged_mean``,
        ``exact``) and a ``tests.csv`` row of the pooled difference.

    References
    ----------
    Paper 3.7 ("flagged runs average +0.053 above unflagged runs of the same configuration
    (95% CI 0.001 to 0.112; permutation P=0.094)"), E.4 ("Opus 5 (+0.203 over 8 flagged
    runs; Holm P=0.27)") and Figure 13d.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A"] * 3 + ["B"] * 3, "scored": True,
    ...     "task_id": ["t1", "t2", "t3"] * 2, "flagged_exposure": [True, False, False] * 2,
    ...     "score_recovered": [0.9, 0.3, 0.4, 0.5, 0.3, 0.4]})
    >>> t, pooled = exposure_table(runs, ["A", "B"], resamples=50, draws=50)
    >>> t["diff"].round(3).tolist(), t["n_flagged"].tolist(), round(pooled["statistic"], 3)
    ([0.4, -0.4], [1, 1], 0.0)
    """
    frame = relative_frame(runs, order)
    frame["marked"] = frame["flagged_exposure"].astype(bool).to_numpy()
    result = within_config_difference(frame, order, "exposure", seed, resamples, draws)
    table = result.table.rename(columns={"n_marked": "n_flagged", "n_unmarked": "n_unflagged",
                                         "marked_mean": "flagged_mean",
                                         "unmarked_mean": "unflagged_mean"})
    table = table[[*EXPOSURE_COLUMNS, "flagged_mean", "unflagged_mean", "exact"]]
    pooled = result.pooled
    test = named_test("exposure_pooled_difference", pooled["diff"], pooled["p_perm"], "3.7",
                      n=pooled["n_marked"], method="exact" if pooled["exact"] else
                      "monte-carlo")
    test.update({"ci_low": pooled["ci_low"], "ci_high": pooled["ci_high"]})
    return table, test


def exposure_summary(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """Flagged runs against the chance threshold, beside unflagged runs on the same tasks.

    ``summary.csv`` rows: the flagged scored runs and their share above chance, the
    unflagged scored runs on the tasks that have a flagged scored run and theirs, and
    the flagged runs scoring above :data:`HIGH_SCORE` with the largest task among them.

    References
    ----------
    Paper 3.7 ("Among the flagged runs, 41% exceed the chance threshold ..., compared
    with 42% among unflagged runs on the same tasks ... all eight flagged runs scoring
    above 0.9 occur on small tasks of at most 14 experiments") and E.4.

    Examples
    --------
    >>> runs = pd.DataFrame({"task_id": ["t", "t", "u"], "scored": True,
    ...     "flagged_exposure": [True, False, False], "score_recovered": [0.95, 0.2, 0.9],
    ...     "threshold": 0.5, "n_items": [8, 8, 30]})
    >>> {r["statistic"]: r["value"] for r in exposure_summary(runs)}["unflagged_above_chance"]
    0
    """
    scored = runs[runs["scored"]]
    flagged = scored[scored["flagged_exposure"].astype(bool)]
    same_tasks = scored[~scored["flagged_exposure"].astype(bool)
                        & scored["task_id"].isin(set(flagged["task_id"]))]
    rows: list[dict[str, Any]] = []
    for name, part in (("flagged", flagged), ("unflagged", same_tasks)):
        above, known = above_chance(part["score_recovered"].to_numpy(dtype=float),
                                    part["threshold"].to_numpy(dtype=float))
        rows += [
            {"analysis": "exposure", "statistic": f"{name}_above_chance", "value": above,
             "n": known},
            {"analysis": "exposure", "statistic": f"{name}_above_chance_share",
             "value": above / known if known else np.nan, "n": known},
        ]
    rows.append({"analysis": "exposure", "statistic": "flagged_tasks",
                 "value": int(flagged["task_id"].nunique()), "n": len(flagged)})
    high = flagged[flagged["score_recovered"] > HIGH_SCORE]
    rows.append({"analysis": "exposure", "statistic": "flagged_above_0.9",
                 "value": len(high), "n": len(flagged)})
    if len(high) and "n_items" in high:
        rows.append({"analysis": "exposure", "statistic": "flagged_above_0.9_max_items",
                     "value": float(high["n_items"].max()), "n": len(high)})
    return rows


AUDITED_TOOLS = frozenset({"search", "fetch", "mcp__spu__search", "mcp__spu__fetch"})
"""Names of the audited tools as hits record them (bare, or as the agent CLIs call them)."""

DOI_RULE = ("source DOI: share of the scored runs whose task has a source DOI (answer key) "
            "in which the DOI appears in the output of an audited tool (search or fetch, "
            "from the run record's exposure hits)")
"""The paper's definition of ``doi_share`` (3.7, Figure 13c)."""

DOI_SIDES_RULE = ("request side: the DOI in the arguments of an audited call (tools/audit.jsonl);"
                  " report side: the DOI in output/report.md (of the runs whose task has one "
                  "and whose folder is under --runs-dir)")
"""How ``n_doi_requested`` and ``n_doi_reported`` are counted (3.7, Figure 13c)."""


def doi_tasks(tasks: Mapping[str, TaskInfo]) -> set[str] | None:
    """Tasks whose answer key names a source DOI; ``None`` when no answer key names a source.

    Examples
    --------
    >>> doi_tasks({}) is None
    True
    """
    keys = [info.answers for info in tasks.values() if info.answers is not None]
    if not any(key.source is not None for key in keys):
        return None
    return {key.task_id for key in keys if key.source is not None and key.source.doi}


def audited_doi_hits(runs_dir: Path, runs: pd.DataFrame) -> dict[str, bool]:
    """Whether each run's record holds a DOI hit in an audited tool's output, by ``run_id``.

    Reads ``<runs_dir>/runs/<run_key>/run.json`` (or the folder named by ``run_id``); a hit
    counts when its ``kind`` is ``doi`` and it came from an audited call (``audit_call``
    set) or a tool of :data:`AUDITED_TOOLS`. Runs without a readable record, or whose
    record has no ``exposure_hits``, are left out.
    """
    base = runs_dir / "runs" if (runs_dir / "runs").is_dir() else runs_dir
    found: dict[str, bool] = {}
    for row in runs.itertuples(index=False):
        names = [getattr(row, "run_key", None), row.run_id]
        folder = next((base / str(n) for n in names
                       if isinstance(n, str) and n and (base / n / "run.json").is_file()), None)
        if folder is None:
            continue
        try:
            record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        hits = record.get("exposure_hits") if isinstance(record, dict) else None
        if not isinstance(hits, list):
            continue
        found[str(row.run_id)] = any(
            isinstance(h, dict) and h.get("kind") == "doi"
            and (h.get("audit_call") is not None or h.get("tool") in AUDITED_TOOLS)
            for h in hits)
    return found


def task_dois(tasks: Mapping[str, TaskInfo]) -> dict[str, str]:
    """The source DOI of each task whose answer key names one, by task id."""
    return {key.task_id: key.source.doi for info in tasks.values()
            if (key := info.answers) is not None and key.source is not None and key.source.doi}


def doi_sides(runs_dir: Path, runs: pd.DataFrame, dois: Mapping[str, str]
              ) -> dict[str, tuple[bool, bool]]:
    """Whether each run requested its task's source DOI, and whether its report records it.

    Request side: the DOI (case-insensitive) in the arguments of an audited call
    (``<run>/tools/audit.jsonl``: a query, a fetched URL); report side: in
    ``<run>/output/report.md``. Only runs whose task has a DOI and whose folder is
    found under ``runs_dir``, by ``run_id``.

    References
    ----------
    Paper 3.7 ("no run requested a source DOI itself") and Figure 13c.
    """
    base = runs_dir / "runs" if (runs_dir / "runs").is_dir() else runs_dir
    found: dict[str, tuple[bool, bool]] = {}
    for row in runs.itertuples(index=False):
        doi = dois.get(str(row.task_id))
        names = [getattr(row, "run_key", None), row.run_id]
        folder = next((base / str(n) for n in names
                       if isinstance(n, str) and n and (base / n / "run.json").is_file()), None)
        if doi is None or folder is None:
            continue
        needle = doi.lower()
        requested = False
        log = folder / "tools" / "audit.jsonl"
        if log.is_file():
            with log.open(encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(entry, dict) and needle in json.dumps(
                            entry.get("args"), ensure_ascii=False).lower():
                        requested = True
                        break
        # The agent's file: never through a link, never blocking, at most 1 MiB read.
        report = read_submission_file(folder / "output" / "report.md") or b""
        reported = needle in report.decode("utf-8", "replace").lower()
        found[str(row.run_id)] = (requested, reported)
    return found


def exposure_indicators(runs: pd.DataFrame, order: list[str],
                        with_doi: set[str] | None = None,
                        audited: Mapping[str, bool] | None = None,
                        sides: Mapping[str, tuple[bool, bool]] | None = None) -> pd.DataFrame:
    """``exposure_indicators.csv``: indicators of network use per configuration (Figure 13c).

    Shares of each configuration's scored official public runs: flagged by the detector,
    and sending at least one request outside the audited tools (of the runs where the
    sandbox counted them). The source-DOI share follows the paper (:data:`DOI_RULE`):
    of the scored runs whose task has a source DOI (``with_doi``), those where the DOI
    appeared in an audited tool's output (``audited``, from the run records). Without
    ``with_doi`` every scored run counts; for a run not in ``audited`` the table's
    ``exposure_kinds`` (any tool) decides. ``sides`` (:func:`doi_sides`) adds the
    request-side and report-side counts: of the runs whose task has a DOI and whose
    folder was read (``n_doi_sides_known``), those that requested the DOI through an
    audited tool (``n_doi_requested``) and those whose report records it
    (``n_doi_reported``).

    References
    ----------
    Paper 3.7 ("the source DOI appears in the output of an audited tool in 46 of the
    1,066 runs whose task has one") and Figure 13c ("for the source DOI, of the scored
    runs whose task has one").

    Examples
    --------
    >>> runs = pd.DataFrame({"config": "A", "scored": True, "run_id": ["r1", "r2", "r3"],
    ...     "task_id": ["t1", "t2", "t3"], "flagged_exposure": [True, False, True],
    ...     "exposure_kinds": ["doi,title", None, "doi"], "requests_outside_tools": [0, 3, 0]})
    >>> exposure_indicators(runs, ["A"])[["flagged_share", "doi_share", "outside_share"]
    ...     ].iloc[0].round(3).tolist()
    [0.667, 0.667, 0.333]

    Of the two runs on tasks with a DOI (t1, t2), r1's DOI came from a shell command:

    >>> exposure_indicators(runs, ["A"], {"t1", "t2"}, {"r1": False})[
    ...     ["n_doi_runs", "doi_share"]].iloc[0].tolist()
    [2.0, 0.0]
    """
    scored = runs[runs["scored"]]
    audited = audited or {}
    rows = []
    for config in order:
        own = scored[scored["config"] == config]
        n = len(own)
        kinds = (own["exposure_kinds"] if "exposure_kinds" in own
                 else pd.Series([None] * n, index=own.index, dtype=object))
        doi_any = kinds.fillna("").astype(str).str.split(",").apply(lambda k: "doi" in k)
        ids = own["run_id"].astype(str) if "run_id" in own else pd.Series(
            [""] * n, index=own.index)
        doi = pd.Series([bool(audited.get(r, d)) for r, d in zip(ids, doi_any, strict=True)],
                        index=own.index, dtype=bool)
        has_doi = (own["task_id"].isin(with_doi) if with_doi is not None
                   else pd.Series(True, index=own.index))
        outside = (pd.to_numeric(own["requests_outside_tools"], errors="coerce")
                   if "requests_outside_tools" in own else pd.Series(np.nan, index=own.index))
        known = outside.notna()
        n_doi = int(has_doi.sum())
        rows.append({"config": config, "n_scored": n,
                     "flagged_share": float(own["flagged_exposure"].astype(bool).mean())
                     if n else np.nan,
                     "doi_share": float(doi[has_doi].mean()) if n_doi else np.nan,
                     "outside_share": float((outside[known] > 0).mean()) if known.any()
                     else np.nan,
                     "n_outside_known": int(known.sum()), "n_doi_runs": n_doi,
                     "n_doi_audited_known": int(ids[has_doi].isin(set(audited)).sum())})
        seen = [sides[r] for r in ids[has_doi] if sides is not None and r in sides]
        rows[-1].update(n_doi_sides_known=len(seen),
                        n_doi_requested=sum(req for req, _ in seen),
                        n_doi_reported=sum(rep for _, rep in seen))
    return pd.DataFrame(rows, columns=["config", "n_scored", "flagged_share", "doi_share",
                                       "outside_share", "n_outside_known", "n_doi_runs",
                                       "n_doi_audited_known", "n_doi_sides_known",
                                       "n_doi_requested", "n_doi_reported"])


def presented_orders(info: TaskInfo) -> Orders:
    """Each group's experiments in the order the task presents them (``targets.csv``).

    The one definition, :func:`spu.tasks.threshold.presented_orders`.
    """
    from spu.tasks.threshold import presented_orders as orders_of

    return orders_of(info.package.contract,
                     [r["experiment_id"] for r in info.package.targets_rows()])


def presented_order_summary(
    tasks_table: pd.DataFrame, runs: pd.DataFrame, orders: Mapping[str, Orders] | None,
    tasks: Mapping[str, TaskInfo], order: list[str],
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The presented order as a submission, and the runs that submitted it (E.4).

    Parameters
    ----------
    tasks_table
        ``tasks.csv`` with ``presented_order_score`` (from the task packages).
    runs
        Official scored runs of the public tasks.
    orders
        Submitted orders by ``run_id`` (``None`` without run folders).
    tasks
        Task packages by id.
    order
        Configurations in table order.

    Returns
    -------
    tuple
        ``presented_order.csv`` (per configuration: ``n_scored, n_input_order,
        raw_mean, raw_mean_without_input_order``; empty without orders) and
        ``summary.csv`` rows: the mean presented-order score over the public tasks, the
        tasks where it beats the chance threshold, and the runs that submitted it.

    References
    ----------
    Paper 3.7 ("Submitting the experiments in the order in which they are presented
    scores a mean of 0.030 over the 100 public tasks"), E.4 ("Presented order": "it
    beats the chance threshold on 6 of the 100 public tasks ... Twenty-two scored runs on
    15 tasks submitted that order ... Removing all 22 raises GPT-6.1 Sol's raw mean from
    0.308 to 0.348") and Figure 13b.
    """
    summary: list[dict[str, Any]] = []
    public = tasks_table[(tasks_table["visibility"] == "public")
                         & tasks_table["presented_order_score"].notna()]
    if len(public):
        above = pd.Series(exact(public["presented_order_score"]) > exact(public["threshold"]),
                          index=public.index)
        summary += [
            {"analysis": "presented_order", "statistic": "presented_order_mean",
             "value": float(public["presented_order_score"].mean()), "n": len(public)},
            {"analysis": "presented_order", "statistic": "presented_order_above_chance",
             "value": int(above.sum()), "n": len(public)},
            {"analysis": "presented_order", "statistic": "expected_above_chance",
             "value": 0.05 * len(public), "n": len(public)},
        ]
    columns = ["config", "n_scored", "n_input_order", "raw_mean", "raw_mean_without_input_order"]
    if orders is None:
        return pd.DataFrame(columns=columns), summary
    presented = {t: presented_orders(info) for t, info in tasks.items()}
    scored = runs[runs["scored"]]
    same = np.array([r.task_id in presented and r.run_id in orders
                     and all(orders[r.run_id].get(g) == o for g, o in presented[r.task_id].items())
                     for r in scored.itertuples(index=False)], dtype=bool)
    rows = []
    for config in order:
        own = (scored["config"] == config).to_numpy()
        values = scored["score_recovered"].to_numpy(dtype=float)
        rows.append({"config": config, "n_scored": int(own.sum()),
                     "n_input_order": int((own & same).sum()),
                     "raw_mean": float(values[own].mean()) if own.any() else np.nan,
                     "raw_mean_without_input_order": float(values[own & ~same].mean())
                     if (own & ~same).any() else np.nan})
    summary += [
        {"analysis": "presented_order", "statistic": "runs_submitting_input_order",
         "value": int(same.sum()), "n": len(scored)},
        {"analysis": "presented_order", "statistic": "tasks_with_input_order_runs",
         "value": int(scored.loc[same, "task_id"].nunique()), "n": len(scored)},
    ]
    return pd.DataFrame(rows, columns=columns), summary
