#!/usr/bin/env python3
"""Leaves a daemon behind: double-forks a long sleep, records its pid, and exits at once.

The sleep's process name (its argv[0]) is ``$DAEMON_TAG`` where set, so that a check can
find it among the host's processes after the run, whatever pid namespace it ran in.
"""

import os
import time


def main():
    pid_file = os.path.join(os.environ["SPU_OUTPUT_DIR"], "daemon.pid")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pid_file + ".part", "w") as f:
                f.write(str(os.getpid()))
            os.rename(pid_file + ".part", pid_file)
            os.closerange(0, 3)
            os.execvp("sleep", [os.environ.get("DAEMON_TAG", "sleep"), "600"])
        os._exit(0)
    os.wait()
    while not os.path.exists(pid_file):
        time.sleep(0.01)


if __name__ == "__main__":
    main()
