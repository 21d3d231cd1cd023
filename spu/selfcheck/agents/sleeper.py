#!/usr/bin/env python3
"""Sleeper: writes a valid submission at once, then ignores SIGTERM and sleeps past any limit.

The submission ranks every group in its presented (contract) order.
"""

import json
import os
import signal
import time


def main():
    with open(os.path.join(os.environ["SPU_TASK_DIR"], "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    submission = {
        "task_id": contract["task_id"],
        "task_version": contract["task_version"],
        "rankings": [{"group_id": g["group_id"], "order": g["items"]}
                     for g in contract["groups"]],
    }
    with open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "rankings.json"), "w") as f:
        json.dump(submission, f)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the kill after the grace period ends it
    time.sleep(3600)


if __name__ == "__main__":
    main()
