"""Fixture submissions of any task: one file for each rule of SPEC section 3."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from spu.tasks.package import load_answers, load_task


def fixture_submissions(task_dir: Path, seed: int = 7) -> dict[str, bytes | None]:
    """Submitted bytes by name (``None``: no file), covering every grading rule.

    Valid files (measured order, reversed, presented order, seeded shuffles),
    group-confined errors, whole-file errors and the five departures of appendix E.1.
    """
    task = load_task(task_dir)
    measured = load_answers(task.answers_path()).groups
    groups = task.contract.groups
    rows = [r.experiment_id for r in task.targets()]
    rng = random.Random(seed)
    best = {g.group_id: sorted(g.items, key=lambda i, gid=g.group_id: (measured[gid][i], i))
            for g in groups}

    def file(orders: dict[str, list[Any]], **top: Any) -> dict[str, Any]:
        return {"task_id": task.id, "task_version": task.version,
                "rankings": [{"group_id": gid, "order": order} for gid, order in orders.items()],
                **top}

    def shuffled() -> dict[str, list[str]]:
        return {gid: rng.sample(order, len(order)) for gid, order in best.items()}

    first = groups[0].group_id
    out: dict[str, Any] = {
        "measured": file(best),
        "reversed": file({gid: order[::-1] for gid, order in best.items()}),
        "presented": file({g.group_id: [i for i in rows if i in set(g.items)] for g in groups}),
        "shuffle-1": file(shuffled()),
        "shuffle-2": file(shuffled()),
        "shuffle-3": file(shuffled()),
        "group-absent": file({gid: o for gid, o in best.items() if gid != first}),
        "misses-one": file({**best, first: best[first][1:]}),
        "repeats-one": file({**best, first: [*best[first][:-1], best[first][0]]}),
        "foreign-item": file({**best, first: [*best[first][:-1], "E00000"]}),
        "listed-twice": {**file(best), "rankings": [
            *file(best)["rankings"], {"group_id": first, "order": best[first]}]},
        "unknown-group": file({**best, "G-unknown": ["E1"]}),
        "wrong-task": {**file(best), "task_id": "spu-none"},
        "wrong-version": {**file(best), "task_version": "99"},
        "number-version": {**file(best), "task_version": float(task.version)}
        if task.version.replace(".", "", 1).isdigit() else file(best),
        # Departures of appendix E.1: graded -1 strictly, recovered without moving an item.
        "keyed-by-group": {"task_id": task.id, "task_version": task.version,
                           "rankings": {gid: order for gid, order in best.items()}},
        "ordering-key": {"task_id": task.id, "task_version": task.version,
                         "rankings": [{"group_id": gid, "ranking": order}
                                      for gid, order in best.items()]},
        "predictions": {"task_id": task.id, "task_version": task.version,
                        "predictions": [{"group": gid, "order": order}
                                        for gid, order in best.items()]},
        "renamed-identity": {"task": task.id, "version": task.version,
                             "rankings": file(best)["rankings"]},
    }
    data: dict[str, bytes | None] = {name: json.dumps(obj).encode() for name, obj in out.items()}
    data["no-file"] = None
    data["not-json"] = b'{"task_id": "' + task.id.encode() + b'", "rankings": ['
    data["not-utf8"] = b'{"task_id": "\xff\xfe"}'
    data["duplicate-key"] = (b'{"task_id": "' + task.id.encode() + b'", "task_id": "'
                             + task.id.encode() + b'", "rankings": []}')
    data["nan"] = b'{"task_id": "' + task.id.encode() + b'", "rankings": NaN}'
    data["over-1-mib"] = json.dumps({**file(best), "pad": "x" * 1_048_576}).encode()
    data["empty-rankings"] = json.dumps(file({})).encode()
    return data
