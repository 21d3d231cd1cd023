"""The task subset of the paper's repeated runs (section 3.6), for ``experiment=paper_repeats``.

The paper ran Astra Max five more times on 29 public tasks, "drawing one
representative task with a fixed seed from each discipline-subfield group". This
module draws such a subset from the tasks under a task root and prints it in the
form Hydra's sweep syntax takes::

    python -m spu.main experiment=paper_repeats task=$(python -m spu.launch.design)
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spu.tasks.package import TaskLoadError, select_tasks


@dataclass(frozen=True)
class TaskStratum:
    """The tasks of one discipline-subfield group, and the one drawn from it."""

    discipline: str
    subfield: str
    task_ids: tuple[str, ...]
    """Every public task of the group, sorted."""
    drawn: str
    """The task drawn to represent the group."""


def stratified_sample(tasks: Sequence[tuple[str, str, str]], seed: int) -> list[TaskStratum]:
    """Draw one task per (discipline, subfield) group with a seeded generator.

    Args:
        tasks: ``(task_id, discipline, subfield)`` of the candidate tasks.
        seed: the seed; the same tasks and seed give the same draw whatever their order.

    Returns:
        One stratum per group, sorted by discipline then subfield.

    Examples:
        >>> tasks = [("t3", "biology", "enzymes"), ("t1", "biology", "enzymes"),
        ...          ("t2", "chemistry", "catalysis")]
        >>> [s.drawn for s in stratified_sample(tasks, seed=0)]
        ['t3', 't2']
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for task_id, discipline, subfield in tasks:
        groups.setdefault((discipline, subfield.strip().casefold()), []).append(task_id)
    rng = random.Random(seed)
    strata = []
    for (discipline, subfield), ids in sorted(groups.items()):
        ordered = tuple(sorted(ids))
        strata.append(TaskStratum(discipline, subfield, ordered, rng.choice(ordered)))
    return strata


def public_tasks(task_root: Path) -> list[tuple[str, str, str]]:
    """``(folder name, discipline, subfield)`` of every public task under ``task_root``.

    The folder name is what ``task=<id>`` selects.
    """
    return [(task.path.name, task.meta.discipline.value, task.meta.subfield)
            for task in select_tasks(task_root, visibility="public")]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spu.launch.design``: print the drawn task ids, comma-separated."""
    parser = argparse.ArgumentParser(
        prog="python -m spu.launch.design",
        description="Draw one public task per discipline-subfield group (paper 3.6) and "
                    "print them as a Hydra sweep value.")
    parser.add_argument("--task-root", default="tasks", type=Path)
    parser.add_argument("--seed", default=0, type=int)
    parser.add_argument("--explain", action="store_true",
                        help="print each group and its draw on stderr")
    args = parser.parse_args(argv)
    try:
        strata = stratified_sample(public_tasks(args.task_root), args.seed)
    except TaskLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not strata:
        print(f"error: no public task under {args.task_root.resolve()}", file=sys.stderr)
        return 2
    if args.explain:
        for s in strata:
            print(f"{s.discipline} / {s.subfield}: {s.drawn} (of {len(s.task_ids)})",
                  file=sys.stderr)
    print(",".join(s.drawn for s in strata))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
