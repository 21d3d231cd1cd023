#!/usr/bin/env python3
"""A minimal agent for ``harness=command``: rank every group in the order of targets.csv.

The framework copies this file into the sandbox and runs it with the task's public files
at ``$SPU_TASK_DIR``; it writes ``rankings.json`` (the submission format of
docs/running.md, "Bring your own agent") and a short ``report.md`` to ``$SPU_OUTPUT_DIR``.
Replace ``rank`` by your own method.
"""

import csv
import json
import os


def rank(group_items: list[str], rows: list[dict[str, str]]) -> list[str]:
    """Order the experiments of one group from the lowest to the highest expected value."""
    position = {row["experiment_id"]: k for k, row in enumerate(rows)}
    return sorted(group_items, key=position.__getitem__)


def main() -> None:
    task, out = os.environ["SPU_TASK_DIR"], os.environ["SPU_OUTPUT_DIR"]
    with open(os.path.join(task, "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    with open(os.path.join(task, "targets.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    submission = {
        "task_id": contract["task_id"],
        "task_version": contract["task_version"],
        "rankings": [{"group_id": g["group_id"], "order": rank(g["items"], rows)}
                     for g in contract["groups"]],
    }
    with open(os.path.join(out, "rankings.json"), "w", encoding="utf-8") as f:
        json.dump(submission, f, indent=1)
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8") as f:
        f.write("Every group ranked in the order of targets.csv (an example agent).\n")


if __name__ == "__main__":
    main()
