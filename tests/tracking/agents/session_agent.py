#!/usr/bin/env python3
"""Test agent that keeps a session log with per-request usage, like the real agent CLIs.

It lists the task, reads a page the harness left in the workspace (standing in for a
web fetch), writes rankings.json in the presented order, and records each step with
the usage given on the command line in ``$SPU_WORKSPACE/session.jsonl``; the last line
reports the session's cost, as Claude Code's ``total_cost_usd`` does.
"""

from __future__ import annotations

import argparse
import csv
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--usage", required=True, help="JSON list: usage of each of 3 requests")
    parser.add_argument("--cli-cost", type=float, required=True)
    args = parser.parse_args()
    usages = json.loads(args.usage)
    task, out, home = (os.environ[k] for k in ("SPU_TASK_DIR", "SPU_OUTPUT_DIR", "SPU_WORKSPACE"))
    steps = []

    listing = "\n".join(sorted(os.listdir(task)))
    steps.append({"tool": "Bash", "arguments": {"command": f"ls {task}"}, "output": listing})

    with open(os.path.join(home, "page.html"), encoding="utf-8") as f:
        page = f.read()
    steps.append({"tool": "WebFetch", "arguments": {"url": "https://example.org/search"},
                  "output": page})

    with open(os.path.join(task, "targets.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(task, "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    rankings = [{"group_id": g["group_id"],
                 "order": [r["experiment_id"] for r in rows if r["group_id"] == g["group_id"]]}
                for g in contract["groups"]]
    with open(os.path.join(out, "rankings.json"), "w", encoding="utf-8") as f:
        json.dump({"task_id": contract["task_id"], "task_version": contract["task_version"],
                   "rankings": rankings}, f)
    os.makedirs(os.path.join(out, "scripts"), exist_ok=True)
    with open(os.path.join(out, "scripts", "rank.py"), "w", encoding="utf-8") as f:
        f.write("# presented order\n")
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8") as f:
        f.write("Presented order.\n")
    steps.append({"tool": "Write", "arguments": {"file_path": "rankings.json"}, "output": "ok"})

    with open(os.path.join(home, "session.jsonl"), "w", encoding="utf-8") as f:
        for i, (step, usage) in enumerate(zip(steps, usages, strict=True)):
            f.write(json.dumps({"type": "step", "id": f"msg_{i}", **step, "usage": usage}) + "\n")
        f.write(json.dumps({"type": "result", "total_cost_usd": args.cli_cost,
                            "version": "session-agent 1.0"}) + "\n")


if __name__ == "__main__":
    main()
