#!/usr/bin/env python3
"""Fork bomb: every process forks as fast as it can until the sandbox refuses; then it waits.

Records in ``$SPU_OUTPUT_DIR/forkbomb.json`` how many forks the first process made and how
many were refused, and exits after a few seconds (its children are left to the sandbox).
"""

import json
import os
import time


def main():
    made = refused = 0
    deadline = time.monotonic() + 5
    root = os.getpid()
    while time.monotonic() < deadline:
        try:
            if os.fork() == 0:
                continue  # the child forks too
            made += 1
        except OSError:
            refused += 1
            time.sleep(0.01)
    if os.getpid() == root:
        with open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "forkbomb.json"), "w") as f:
            json.dump({"made": made, "refused": refused}, f)
        os._exit(0)
    time.sleep(600)


if __name__ == "__main__":
    main()
