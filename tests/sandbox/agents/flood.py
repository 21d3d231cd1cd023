#!/usr/bin/env python3
"""Log flood: writes far more to stdout and stderr than the log cap, then a valid submission.

The first and the last line carry markers, so that a test can see the head and the tail kept.
"""

import json
import os
import sys


def main():
    megabytes = int(os.environ.get("FLOOD_MB", "8"))
    line = b"x" * 1023 + b"\n"
    out, err = sys.stdout.buffer, sys.stderr.buffer
    out.write(b"FLOOD-FIRST-LINE\n")
    for _ in range(megabytes * 1024):
        out.write(line)
        err.write(line)
    out.write(b"FLOOD-LAST-LINE\n")
    out.flush()
    err.flush()
    with open(os.path.join(os.environ["SPU_TASK_DIR"], "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    submission = {"task_id": contract["task_id"], "task_version": contract["task_version"],
                  "rankings": [{"group_id": g["group_id"], "order": g["items"]}
                               for g in contract["groups"]]}
    with open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "rankings.json"), "w") as f:
        json.dump(submission, f)


if __name__ == "__main__":
    main()
