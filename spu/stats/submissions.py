"""Inputs beyond the runs table: task packages and the orders the runs submitted.

The agreement, consensus and monotone-prior analyses (paper 4.2, E.8), and the exact
null of the private-task test (3.4), need what the runs table does not hold:

- **task packages** (``--tasks DIR``, a task root as for ``task_root=``, repeatable):
  the contract (groups, weights), ``targets.csv`` (the varied settings) and the answer
  key (``hidden/answers.json``, or ``--answers-root``);
- **submitted orders** (``--runs-dir OUTPUT_ROOT``): each run's folder
  ``<output_root>/runs/<run_key>/`` with ``run.json`` and ``output/rankings.json``. A
  table row finds its folder by the ``run_key`` column (``spu runs export`` writes it),
  else by a folder named after its ``run_id``, else by (model, harness, effort, task,
  repeat) read from the folder's ``run.json``.

A file of the canonical schema is read as it is; one with a schema departure is
normalized by the grader's recovery (appendix E.1) without moving any item. A group
listed twice is left out. Unreadable run folders are skipped and reported, not fatal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from spu.grading.consensus import Orders as Orders
from spu.grading.consensus import is_complete as is_complete
from spu.grading.consensus import orders_from_bytes as orders_from_bytes
from spu.grading.submission import read_submission
from spu.schema import AnswerKey
from spu.tasks.package import TaskLoadError, TaskPackage, load_answers, load_task


class StatsInputError(ValueError):
    """An input of the statistics beyond the runs table is unusable; names the file."""


@dataclass(frozen=True)
class TaskInfo:
    """A task package and, where found, its answer key."""

    package: TaskPackage
    answers: AnswerKey | None


@dataclass(frozen=True)
class SubmittedOrders:
    """Submitted orders by ``run_id``, and what could not be read."""

    orders: dict[str, Orders]
    """Orders of each run that left a readable file."""
    notes: list[str] = field(default_factory=list)
    """Run folders or files skipped, and why."""


def load_task_set(
    roots: Sequence[Path], answers_root: Path | None = None, wanted: Iterable[str] | None = None
) -> dict[str, TaskInfo]:
    """Task packages under ``roots`` (folders holding ``<task_id>/task.yaml``), by id.

    Raises
    ------
    StatsInputError
        A root that is not a folder, a wanted task that does not load, or one task id
        found under two roots.
    """
    want = None if wanted is None else set(wanted)
    found: dict[str, TaskInfo] = {}
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise StatsInputError(f"{root}: task root is not a folder")
        for folder in sorted(p for p in root.iterdir() if (p / "task.yaml").is_file()):
            if want is not None and folder.name not in want:
                continue
            try:
                package = load_task(folder)
            except TaskLoadError as exc:
                raise StatsInputError(str(exc)) from None
            if package.id in found:
                raise StatsInputError(
                    f"{folder}: task {package.id!r} is also at {found[package.id].package.path}"
                )
            path = package.answers_path(answers_root)
            try:
                answers = load_answers(path) if path.is_file() else None
            except TaskLoadError as exc:
                raise StatsInputError(str(exc)) from None
            found[package.id] = TaskInfo(package, answers)
    return found


def _run_folders(runs_dir: Path) -> Path:
    nested = runs_dir / "runs"
    return nested if nested.is_dir() else runs_dir


def _folders_by_identity(base: Path, notes: list[str]) -> dict[tuple[str, ...], Path]:
    """Run folders under ``base`` by the identity in their ``run.json``.

    The identity is (model, harness, effort, task, repeat); unreadable records are noted
    and skipped.
    """
    found: dict[tuple[str, ...], Path] = {}
    for record_path in sorted(base.glob("*/run.json")):
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
            identity = tuple(str(record[k]) for k in
                             ("model", "harness", "effort", "task_id", "repeat"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            notes.append(f"{record_path}: skipped ({type(exc).__name__}: {exc})")
            continue
        found[identity] = record_path.parent
    return found


def load_submitted_orders(runs_dir: Path, runs: pd.DataFrame) -> SubmittedOrders:
    """Orders submitted by the runs of ``runs``, read from their run folders.

    Raises
    ------
    StatsInputError
        When ``runs_dir`` is not a folder.
    """
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise StatsInputError(f"{runs_dir}: runs folder does not exist")
    base = _run_folders(runs_dir)
    notes: list[str] = []
    by_identity: dict[tuple[str, ...], Path] | None = None  # read on first need
    identified = {"model", "harness", "effort"} <= set(runs.columns)
    orders: dict[str, Orders] = {}
    for row in runs.itertuples(index=False):
        folder = None
        run_key = getattr(row, "run_key", None)
        if isinstance(run_key, str) and run_key and (base / run_key).is_dir():
            folder = base / run_key
        elif (base / str(row.run_id)).is_dir():
            folder = base / str(row.run_id)
        elif identified:
            if by_identity is None:
                by_identity = _folders_by_identity(base, notes)
            folder = by_identity.get((str(row.model), str(row.harness), str(row.effort),
                                      str(row.task_id), str(row.repeat)))
        if folder is None or not folder.is_dir():
            notes.append(f"run {row.run_id}: no run folder under {base}")
            continue
        read = orders_from_bytes(read_submission(folder / "output"))
        if read is None:
            notes.append(f"{folder / 'output' / 'rankings.json'}: no readable rankings")
            continue
        orders[str(row.run_id)] = read
    return SubmittedOrders(orders, notes)
