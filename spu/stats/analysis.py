"""Every analysis of paper sections 3 and 4 on one runs table, as ``spu stats`` writes it.

:func:`analyze` runs every registered analysis (:mod:`spu.stats.registry`; the built-in
ones are in :mod:`spu.stats.builtin`, outside ones come by the entry-point group
``spu.analyses``) and returns all tables in memory (the report draws from them);
:func:`write_stats` writes them as CSV files with a ``summary.csv`` of the scalar results
and a ``manifest.json`` saying what was computed from what, which analysis wrote each file
for which paper section, and what was skipped and why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from spu.stats.gpu import GPU_RULE_TEXT, apply_gpu_rule
from spu.stats.inputs import MAX_NOTES, StatsInputs, StatsOptions
from spu.stats.named_tests import TEST_COLUMNS
from spu.stats.registry import (
    COLLECTED_FILES,
    REGISTRY,
    Analysis,
    AnalysisResult,
    discover,
    missing_need,
)
from spu.stats.repeats import RankStability
from spu.stats.retired import RETIRED_FILE, retirements_of_roots, split_probes, split_retired
from spu.stats.rules import STATS_RULES
from spu.stats.rules import entry as rule_entry

__all__ = ["MAX_NOTES", "StatsOptions", "StatsResult", "analyze", "files", "write_stats"]

SUMMARY_COLUMNS = ("analysis", "statistic", "value", "ci_low", "ci_high", "n", "note")
"""Columns of ``summary.csv``; ``note`` says why a value is not a finite number."""

UNDEFINED_NOTE = ("not defined on these inputs (too few values, or none that vary)")
"""The ``note`` of a summary row whose value is missing and whose analysis gave no reason."""

INFINITE_NOTE = "infinite: a ratio over a spread of zero"
"""The ``note`` of a summary row whose value is infinite and whose analysis gave no reason."""


def files() -> dict[str, str]:
    """Each output file of the registered analyses and the paper section it reproduces."""
    discover()
    found = {name: entry.section_of(name) for entry in REGISTRY for name in entry.files}
    return {**found, **COLLECTED_FILES,
            RETIRED_FILE: "retired tasks, out of every other table (SPEC section 15)"}


@dataclass(frozen=True)
class StatsResult:
    """All outputs of :func:`analyze`."""

    tables: dict[str, pd.DataFrame]
    """CSV tables by file name."""
    summary: pd.DataFrame
    """Scalar results: analysis, statistic, value, ci_low, ci_high, n."""
    manifest: dict[str, Any]
    """Inputs, options, the producer of each file, and what was skipped and why."""
    runs: pd.DataFrame
    """The checked runs table the results come from (the runs of retired tasks left out;
    ``used_gpu`` under the GPU rule, ``gpu_measured`` the sampled device beside it)."""
    rank_stability: RankStability | None = None
    """Simulated-rerun rank stability, when a run-to-run SD was available."""
    notes: list[str] = field(default_factory=list)
    """Everything skipped, and why."""


@dataclass(frozen=True)
class _Outcome:
    """One analysis run, or skipped: what the loop keeps of it."""

    entry: Analysis
    result: AnalysisResult
    skipped: str | None
    read_notes: tuple[str, ...] = ()
    """Notes of the task packages and run folders first read while it ran."""


def _run_one(entry: Analysis, inputs: StatsInputs) -> _Outcome:
    """Run ``entry`` unless the inputs lack one of its needs."""
    reason = next(filter(None, (missing_need(need, inputs) for need in entry.needs)), None)
    result = AnalysisResult(notes=[reason]) if reason is not None else entry(inputs)
    return _Outcome(entry, result, reason, tuple(inputs.take_notes()))


def _notes(outcomes: list[_Outcome]) -> list[str]:
    """The notes in order; a need's reason is given once, by the first analysis it stops."""
    notes: list[str] = []
    for outcome in outcomes:
        notes += outcome.read_notes
        for note in outcome.result.notes:
            if outcome.skipped is None or note not in notes:
                notes.append(note)
    return notes


def _outputs(outcomes: list[_Outcome]) -> dict[str, dict[str, Any]]:
    """Each file: the analysis that produced it, its paper section, or why it was skipped."""
    outputs: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        entry, result = outcome.entry, outcome.result
        reason = outcome.skipped or "; ".join(result.notes) or "the inputs did not allow it"
        for name in entry.files:
            written = name in result.tables
            outputs[name] = {"analysis": entry.name, "source": entry.source,
                             "section": entry.section_of(name), "written": written,
                             "skipped": None if written else reason,
                             **rule_entry(result.rules.get(name), STATS_RULES.get(name))}
    for name, section in COLLECTED_FILES.items():
        key = "tests" if name == "tests.csv" else "summary"
        outputs[name] = {"analysis": [o.entry.name for o in outcomes
                                      if getattr(o.result, key)],
                         "section": section, "written": True, "skipped": None,
                         **rule_entry(None, STATS_RULES[name])}
    return dict(sorted(outputs.items()))


def _summary_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    # Every value is a number (a flag counts as 1 or 0), so summary.csv reads back as one.
    frame["value"] = pd.to_numeric(frame["value"].map(
        lambda v: float(v) if isinstance(v, (bool, np.bool_)) else v), errors="raise")
    # A value that is no finite number says why (the analysis' note, else the general one).
    value = frame["value"].to_numpy(dtype=float)
    note = frame["note"].astype(object).where(frame["note"].notna(), "").astype(str)
    frame["note"] = np.where(note != "", note, np.where(
        np.isnan(value), UNDEFINED_NOTE, np.where(np.isinf(value), INFINITE_NOTE, "")))
    return frame


def analyze(runs: pd.DataFrame, options: StatsOptions | None = None) -> StatsResult:
    """Run every registered analysis on a checked runs table.

    Parameters
    ----------
    runs
        The runs table (:func:`~spu.stats.runs_table.read_runs_table`).
    options
        Seed, resamples and the optional inputs.

    Returns
    -------
    StatsResult
        The tables of SPEC sections 6 and 9 and every other table whose inputs exist
        (:func:`files` says which paper section each file reproduces).

    References
    ----------
    Paper sections 2.2, 3.1-3.7, 4.2, 4.4-4.6, 4.10, appendices C, E.1-E.10 and F.
    """
    discover()
    options = options or StatsOptions()
    everything = runs
    runs, n_probes = split_probes(runs)
    runs, retired = split_retired(runs, retirements_of_roots(options.task_roots))
    runs.attrs.update(everything.attrs)
    gpu = apply_gpu_rule(apply_refusal_rule(runs, options.refusals_after_file),
                         options.gpu_rule, options.runs_dir, options.gpu_reader)
    inputs = StatsInputs(gpu.runs, options, GPU_RULE_TEXT[gpu.rule])
    outcomes = [_run_one(entry, inputs) for entry in REGISTRY]
    tables = {name: table for o in outcomes for name, table in o.result.tables.items()}
    retired_notes = []
    if n_probes:
        retired_notes.append(f"{n_probes} contamination probe run(s) (harness=recall) are "
                             "left out of every table (spu task contamination reads them)")
    if len(retired):
        tables[RETIRED_FILE] = retired
        retired_notes.append(f"{int(retired['n_runs'].sum())} run(s) of {len(retired)} retired "
                             f"task(s) are left out of every table but {RETIRED_FILE} "
                             f"(SPEC section 15)")
    tables["tests.csv"] = pd.DataFrame([row for o in outcomes for row in o.result.tests],
                                       columns=list(TEST_COLUMNS))
    notes = retired_notes + list(gpu.notes) + _notes(outcomes)
    sections = files()
    manifest = {
        **inputs.manifest(),
        "files": sorted([*tables, "summary.csv", "manifest.json"]),
        "sections": {name: sections.get(name, "") for name in sorted(tables)},
        "notes": notes,
        "gpu_rule": gpu.manifest(),
        "outputs": _outputs(outcomes),
    }
    if RETIRED_FILE in tables:
        manifest["outputs"][RETIRED_FILE] = {"analysis": "retired", "source": "spu",
                                             "section": sections[RETIRED_FILE],
                                             "written": True, "skipped": None,
                                             **rule_entry(None, STATS_RULES[RETIRED_FILE])}
    stability = next((o.result.values["rank_stability"] for o in outcomes
                      if "rank_stability" in o.result.values), None)
    summary = _summary_frame([row for o in outcomes for row in o.result.summary])
    runs = runs.assign(used_gpu=gpu.runs["used_gpu"], gpu_measured=gpu.runs["gpu_measured"])
    return StatsResult(tables, summary, manifest, runs, stability, notes)


def apply_refusal_rule(runs: pd.DataFrame, rule: str) -> pd.DataFrame:
    """The runs table with ``scored`` as the refusals-after-a-file rule makes it.

    ``exclude`` (the paper's rule) leaves the table as recorded; ``score`` sets ``scored``
    for the runs whose ``refusal_after_file`` is true (their ``outcome`` stays
    ``refusal``). A table without the column has no such run.

    >>> runs = pd.DataFrame({"outcome": ["refusal", "refusal"], "scored": [False, False],
    ...                      "refusal_after_file": [True, False]})
    >>> apply_refusal_rule(runs, "score")["scored"].tolist()
    [True, False]
    """
    from spu.grading.outcome import scored_under_rule

    scored_under_rule(False, False, rule)  # an unknown rule fails here, named
    if rule == "exclude" or "refusal_after_file" not in runs:
        return runs
    runs = runs.copy()
    runs["scored"] = [scored_under_rule(bool(s), bool(a), rule)
                      for s, a in zip(runs["scored"], runs["refusal_after_file"], strict=True)]
    return runs


def write_stats(result: StatsResult, out: str | Path) -> list[Path]:
    """Write the tables, ``summary.csv`` and ``manifest.json`` under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in [*result.tables.items(), ("summary.csv", result.summary)]:
        path = out / name
        table.to_csv(path, index=False)
        written.append(path)
    path = out / "manifest.json"
    path.write_text(json.dumps(result.manifest, indent=2) + "\n", encoding="utf-8")
    written.append(path)
    return written
