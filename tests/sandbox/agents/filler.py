#!/usr/bin/env python3
"""Disk filler: writes a valid submission, then fills /workspace until the disk refuses more.

It keeps writing 1 MiB blocks past ``ENOSPC`` for a while (retrying, as a stubborn agent
would), and records how far it got in ``$SPU_OUTPUT_DIR/filler.json`` when it can.
"""

import json
import os
import time


def main():
    with open(os.path.join(os.environ["SPU_TASK_DIR"], "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    submission = {"task_id": contract["task_id"], "task_version": contract["task_version"],
                  "rankings": [{"group_id": g["group_id"], "order": g["items"]}
                               for g in contract["groups"]]}
    with open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "rankings.json"), "w") as f:
        json.dump(submission, f)
    block = os.urandom(1 << 20)
    written = refused = 0
    limit_mb = int(os.environ.get("FILLER_MAX_MB", "4096"))
    with open(os.path.join(os.environ["SPU_WORKSPACE"], "fill.bin"), "wb") as f:
        while written < limit_mb and refused < 50:
            try:
                f.write(block)
                f.flush()
                written += 1
            except OSError:
                refused += 1
                time.sleep(0.1)
    try:
        with open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "filler.json"), "w") as f:
            json.dump({"written_mb": written, "refused": refused}, f)
    except OSError:
        pass
    time.sleep(30)  # stays around: the sandbox stops it


if __name__ == "__main__":
    main()
