"""The contamination table: what models remember of each task (``harness=recall`` runs).

Each task is probed per model by two runs of :mod:`spu.harness.recall`: a **source
probe** (which study the experiments come from; a recalled source is an exposure hit in
the model's answer) and an **order probe** (the measured order from memory, graded like
a submission). One row per task and model says whether the source was recalled, the
order probe's score and whether it is above the task's chance threshold; a task is
flagged to retire by :data:`RETIRE_RULE`, which ``spu task contamination`` prints.

Counted probes: the latest attempt of each run (its ``run.json``), except runs that did
not get an answer from the model (``infra_error``) and runs not graded (``sealed``,
``seal_broken``). With several counted probes of one kind for a task and model (repeats,
efforts), the source counts as recalled when any names it, and the recall score is
their mean.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from spu.identity import official_score
from spu.schema import Outcome, RunRecord

RECALL_HARNESS = "recall"

ANSWER_TOOL = "model_answer"
"""The ``tool`` of an exposure hit found in the model's own answer
(:func:`spu.analysis.exposure.detect_recall`)."""

RETIRE_RULE = ("a task is flagged to retire when any model recalls its source (the source "
               "probe's answer names its DOI, PMID, PMCID or title) or any model's order "
               "probe scores above the task's chance threshold")
"""The retirement rule, as the command states it."""

NOT_COUNTED = frozenset({Outcome.infra_error, Outcome.sealed, Outcome.seal_broken})
"""Outcomes of probes left out: no answer from the model, or nothing graded."""

COLUMNS = ("task_id", "model", "source_recalled", "recall_score", "recall_above_chance",
           "retire")
"""The table's columns (SPEC section 15)."""


@dataclass(frozen=True)
class ProbeRun:
    """One recorded recall probe."""

    task_id: str
    model: str
    probe: str
    """``source`` or ``order``."""
    outcome: Outcome
    score: float
    """The official score (order probes)."""
    threshold: float | None
    """The task's chance threshold (None: not recorded)."""
    recalled: bool
    """The answer named the source (source probes)."""
    run_key: str


@dataclass(frozen=True)
class ContaminationRow:
    """What one model remembers of one task."""

    task_id: str
    model: str
    source_recalled: bool | None
    """None: no counted source probe."""
    recall_score: float | None
    """Mean official score of the counted order probes; None: none."""
    threshold: float | None
    recall_above_chance: bool | None
    retire: bool
    """The task is flagged by :data:`RETIRE_RULE` (the same on each of its rows)."""


def probe_of(record: RunRecord) -> str | None:
    """The probe of a recall run, from its identity.

    The identity holds the probe among the harness's options when it is not the default
    (:class:`spu.harness.recall.RecallOptions`), or, in records written before options,
    as the argument ``--probe=<probe>``.

    Examples
    --------
    >>> from spu.schema import ConfigIdentity, Identity, TaskIdentity
    >>> def ident(**config):
    ...     return Identity(config=ConfigIdentity(model="m", effort="none", harness="recall",
    ...                                           **config),
    ...                     task=TaskIdentity(id="t", version="1", task_digest="0" * 64))
    >>> probe_of(RunRecord.model_construct(harness="recall", identity=ident()))
    'source'
    >>> probe_of(RunRecord.model_construct(harness="recall",
    ...                                    identity=ident(options={"probe": "order"})))
    'order'
    >>> probe_of(RunRecord.model_construct(harness="recall",
    ...                                    identity=ident(args=["--probe=order"])))
    'order'
    """
    from spu.harness.recall import RecallOptions

    if record.harness != RECALL_HARNESS or record.identity is None:
        return None
    config = record.identity.config
    if "probe" in config.options:
        return str(config.options["probe"])
    for arg in config.args:
        if arg.startswith("--probe="):
            return arg.removeprefix("--probe=")
    return str(RecallOptions.model_fields["probe"].default)


def probe_run(record: RunRecord) -> ProbeRun | None:
    """The probe a run record holds; None for any other run."""
    probe = probe_of(record)
    if probe is None:
        return None
    return ProbeRun(task_id=record.task_id, model=record.model, probe=probe,
                    outcome=record.outcome,
                    score=official_score(record.scored, record.score_strict,
                                         record.score_recovered),
                    threshold=record.threshold,
                    recalled=any(h.tool == ANSWER_TOOL for h in record.exposure_hits),
                    run_key=record.run_key)


def read_probe_runs(runs_dir: Path) -> tuple[list[ProbeRun], list[str]]:
    """The recall probes recorded under ``runs_dir`` (an output root or its ``runs/``).

    Returns:
        The probes, and notes naming the records that could not be read.
    """
    base = runs_dir / "runs" if (runs_dir / "runs").is_dir() else runs_dir
    probes: list[ProbeRun] = []
    notes: list[str] = []
    for path in sorted(base.glob("*/run.json")):
        try:
            record = RunRecord.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            notes.append(f"{path}: skipped ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        found = probe_run(record)
        if found is not None:
            probes.append(found)
    return probes, notes


def contamination_table(probes: Iterable[ProbeRun],
                        task_ids: Sequence[str] | None = None) -> list[ContaminationRow]:
    """One row per task and model, with the tasks to retire flagged (:data:`RETIRE_RULE`).

    Args:
        probes: recorded probes; uncounted outcomes (:data:`NOT_COUNTED`) are left out.
        task_ids: the tasks to report (None: every task probed); probes of other tasks
            are left out.

    Examples
    --------
    >>> def p(task, probe, score=0.0, recalled=False):
    ...     return ProbeRun(task, "m", probe, Outcome.valid, score, 0.4, recalled, "k")
    >>> rows = contamination_table([p("a", "source", recalled=True), p("a", "order", 0.2),
    ...                             p("b", "source"), p("b", "order", 0.9), p("c", "order")])
    >>> [(r.task_id, r.source_recalled, r.recall_above_chance, r.retire) for r in rows]
    [('a', True, False, True), ('b', False, True, True), ('c', None, False, False)]
    """
    wanted = set(task_ids) if task_ids is not None else None
    grouped: dict[tuple[str, str], list[ProbeRun]] = {}
    for probe in probes:
        if probe.outcome in NOT_COUNTED or (wanted is not None and probe.task_id not in wanted):
            continue
        grouped.setdefault((probe.task_id, probe.model), []).append(probe)
    partial = []
    for (task_id, model), runs in sorted(grouped.items()):
        sources = [r for r in runs if r.probe == "source"]
        orders = [r for r in runs if r.probe == "order"]
        score = statistics.fmean(r.score for r in orders) if orders else None
        threshold = orders[0].threshold if orders else None
        partial.append((task_id, model, any(r.recalled for r in sources) if sources else None,
                        score, threshold,
                        None if score is None or threshold is None else score > threshold))
    retired = {row[0] for row in partial if row[2] or row[5]}
    return [ContaminationRow(task_id=t, model=m, source_recalled=s, recall_score=sc,
                             threshold=th, recall_above_chance=above, retire=t in retired)
            for t, m, s, sc, th, above in partial]


def _cell(value: bool | float | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:.4f}"


def write_table(rows: Sequence[ContaminationRow], out: Path) -> Path:
    """Write the table as CSV with :data:`COLUMNS` (empty cells: no such probe)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for r in rows:
            writer.writerow([r.task_id, r.model, _cell(r.source_recalled),
                             _cell(r.recall_score), _cell(r.recall_above_chance),
                             _cell(r.retire)])
    return out


def format_table(rows: Sequence[ContaminationRow]) -> str:
    """A plain text table of the rows, with the chance thresholds."""
    lines = [f"{'task':<34}{'model':<16}{'source recalled':>16}{'recall score':>14}"
             f"{'threshold':>11}{'above chance':>14}{'retire':>8}"]
    for r in rows:
        lines.append(f"{r.task_id:<34}{r.model:<16}{_cell(r.source_recalled) or '-':>16}"
                     f"{_cell(r.recall_score) or '-':>14}{_cell(r.threshold) or '-':>11}"
                     f"{_cell(r.recall_above_chance) or '-':>14}{_cell(r.retire):>8}")
    return "\n".join(lines)
