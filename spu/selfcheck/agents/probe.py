#!/usr/bin/env python3
"""Conformance probe: reports what it sees of the layout, environment and system as JSON.

Writes ``$SPU_OUTPUT_DIR/probe.json``; changes nothing but its own files.
"""

import json
import os
import socket
import sys


def attempt(action):
    try:
        action()
        return "ok"
    except OSError as exc:
        return type(exc).__name__


def write(path, text="x"):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def interfaces():
    with open("/proc/net/dev", encoding="utf-8") as f:
        return sorted(line.split(":")[0].strip() for line in f.readlines()[2:])


def main():
    task = os.environ["SPU_TASK_DIR"]
    out = os.environ["SPU_OUTPUT_DIR"]
    workspace = os.environ["SPU_WORKSPACE"]
    report = {
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "env": sorted(os.environ),
        "uid": os.getuid(),
        "hostname": socket.gethostname(),
        "task_files": sorted(os.listdir(task)),
        "contract_task_id": json.load(open(os.path.join(task, "contract.json")))["task_id"],
        "write_task": attempt(lambda: write(os.path.join(task, "planted.txt"))),
        "append_task": attempt(lambda: write(os.path.join(task, "task.yaml"), "tampered")),
        "write_workspace": attempt(lambda: write(os.path.join(workspace, "scratch.txt"))),
        "write_output": attempt(lambda: write(os.path.join(out, "written-inside.txt"), "inside")),
        "host_file": open(os.path.join(workspace, "from-host.txt")).read()
        if os.path.exists(os.path.join(workspace, "from-host.txt")) else None,
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "interfaces": interfaces(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cpus": len(os.sched_getaffinity(0)),
        "python": sys.version_info[:2],
    }
    print("probe done")
    print("to stderr", file=sys.stderr)
    write(os.path.join(out, "probe.json"), json.dumps(report))
    return int(os.environ.get("PROBE_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
