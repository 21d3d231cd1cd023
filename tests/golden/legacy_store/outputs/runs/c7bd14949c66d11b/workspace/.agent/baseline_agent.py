#!/usr/bin/env python3
"""Baseline agent: writes a valid rankings.json without any model (standard library only).

Runs inside the sandbox like any agent: reads the task from ``$SPU_TASK_DIR``,
writes ``rankings.json``, ``report.md`` and ``sources.json`` to ``$SPU_OUTPUT_DIR``.

Strategies:
  random           each group in a uniformly random order (``--seed``)
  presented_order  the order of the rows in targets.csv
  monotone_prior   ascending along the group's numeric setting column with the
                   largest spread: most distinct values, then the largest
                   coefficient of variation, then the first column
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import sys

ID_COLUMNS = ("experiment_id", "group_id")


def _read_targets(task_dir: str) -> list[dict[str, str]]:
    with open(os.path.join(task_dir, "targets.csv"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _numeric(values: list[str]) -> list[float] | None:
    out = []
    for value in values:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        if number != number:  # NaN
            return None
        out.append(number)
    return out


def _spread(numbers: list[float]) -> tuple[int, float]:
    distinct = len(set(numbers))
    mean_abs = statistics.fmean(abs(x) for x in numbers)
    sd = statistics.pstdev(numbers)
    cv = sd / mean_abs if mean_abs > 0 else sd
    return distinct, cv


def monotone_order(
    items: list[str], rows: dict[str, dict[str, str]], columns: list[str]
) -> list[str]:
    """Items ascending along the numeric column of largest spread (stable on ties)."""
    best: tuple[tuple[int, float], str] | None = None
    for column in columns:
        numbers = _numeric([rows[i].get(column, "") for i in items])
        if numbers is None or len(set(numbers)) < 2:
            continue
        key = _spread(numbers)
        if best is None or key > best[0]:
            best = (key, column)
    if best is None:
        return list(items)
    column = best[1]
    return sorted(items, key=lambda i: float(rows[i][column]))


def rank(strategy: str, seed: int, task_dir: str) -> dict:
    """The submission of ``strategy`` for the task in ``task_dir`` (SPEC section 2)."""
    with open(os.path.join(task_dir, "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    targets = _read_targets(task_dir)
    row_of = {row["experiment_id"]: row for row in targets}
    position = {row["experiment_id"]: k for k, row in enumerate(targets)}
    columns = [c for c in (targets[0].keys() if targets else []) if c not in ID_COLUMNS]
    rng = random.Random(seed)
    rankings = []
    for group in contract["groups"]:
        items = list(group["items"])
        if strategy == "random":
            rng.shuffle(items)
        elif strategy == "presented_order":
            items.sort(key=lambda i: position.get(i, len(position)))
        elif strategy == "monotone_prior":
            items.sort(key=lambda i: position.get(i, len(position)))
            items = monotone_order(items, row_of, columns)
        else:
            raise SystemExit(f"unknown strategy {strategy!r}")
        rankings.append({"group_id": group["group_id"], "order": items})
    return {
        "task_id": contract["task_id"],
        "task_version": contract["task_version"],
        "rankings": rankings,
    }


def main() -> int:
    """Rank the task of ``$SPU_TASK_DIR`` and write the submission to ``$SPU_OUTPUT_DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    task_dir = os.environ["SPU_TASK_DIR"]
    out_dir = os.environ["SPU_OUTPUT_DIR"]
    submission = rank(args.strategy, args.seed, task_dir)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "rankings.json"), "w", encoding="utf-8") as f:
        json.dump(submission, f, indent=1)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(
            f"# Baseline submission\n\nStrategy: `{args.strategy}` (seed {args.seed}). "
            "No model, no search: a reference point for the task's chance level.\n"
        )
    with open(os.path.join(out_dir, "sources.json"), "w", encoding="utf-8") as f:
        json.dump({"sources": [], "note": "baseline agent: no source consulted"}, f)
    print(f"baseline {args.strategy}: ranked {len(submission['rankings'])} group(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
