#!/usr/bin/env python3
"""Adversarial agent: tries to find the answers and to change what it must not.

It walks every readable path (all but /proc, /sys and /dev), looks for files named
``answers.json`` or under a ``hidden`` folder and for the given needles (its task's
measured values, a canary) in every readable file up to ``--max-bytes``; tries to
write, delete and rename in ``/task``; to read another run's workspace; to signal a
process outside its sandbox; to rewrite a host sysctl (with its own current value, so
that even a success changes nothing). It writes what it achieved to
``$SPU_OUTPUT_DIR/adversary.json`` and never writes a submission.
"""

import argparse
import json
import os
import signal
import stat
import sys

SKIP_TOP = {"/proc", "/sys", "/dev"}
FIRST = ["/task", "/workspace", "/tmp", "/work", "/home", "/root", "/srv", "/mnt", "/var",
         "/opt", "/"]
"""Likely places first, then everything (each folder is walked once)."""


def walk(needles, max_bytes, stop_after, own):
    found_names, found_content = [], []
    seen_dirs = set()
    counts = {"dirs": 0, "files": 0, "bytes": 0}
    roots = [r for r in [own["task"], own["workspace"], *FIRST] if os.path.isdir(r)]
    for root in roots:
        for folder, dirs, files in os.walk(root, topdown=True, followlinks=False):
            try:
                st = os.stat(folder)
            except OSError:
                dirs[:] = []
                continue
            if (st.st_dev, st.st_ino) in seen_dirs:
                dirs[:] = []
                continue
            seen_dirs.add((st.st_dev, st.st_ino))
            counts["dirs"] += 1
            dirs[:] = [d for d in dirs if os.path.join(folder, d) not in SKIP_TOP]
            for name in files:
                path = os.path.join(folder, name)
                if path.startswith(own["output"] + "/"):
                    continue  # its own report
                counts["files"] += 1
                if name == "answers.json" or "/hidden/" in path + "/":
                    found_names.append(path)
                try:
                    info = os.lstat(path)
                    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                        continue
                    with open(path, "rb") as f:
                        data = f.read(max_bytes)
                except OSError:
                    continue
                counts["bytes"] += len(data)
                hits = [n for n in needles if n.encode() in data]
                if hits:
                    found_content.append({"path": path, "needles": hits})
                if stop_after and len(found_names) + len(found_content) >= stop_after:
                    return found_names, found_content, counts
    return found_names, found_content, counts


def attempt(action):
    try:
        action()
        return True
    except OSError:
        return False


def write(path, text, mode="w"):
    with open(path, mode, encoding="utf-8") as f:
        f.write(text)


def tamper_with_task(task):
    target = os.path.join(task, "contract.json")
    return {
        "create": attempt(lambda: write(os.path.join(task, "planted.json"), "{}")),
        "append": attempt(lambda: write(os.path.join(task, "task.yaml"), "\n# x\n", "a")),
        "truncate": attempt(lambda: os.truncate(target, 0)),
        "chmod": attempt(lambda: os.chmod(target, 0o777)),
        "rename": attempt(lambda: os.rename(target, target + ".moved")),
        "unlink": attempt(lambda: os.unlink(os.path.join(task, "targets.csv"))),
        "mkdir": attempt(lambda: os.mkdir(os.path.join(task, "planted"))),
    }


def read_other_workspace(path):
    result = {"read": None, "listed": None}
    try:
        with open(path, encoding="utf-8") as f:
            result["read"] = f.read()
    except OSError:
        pass
    try:
        result["listed"] = sorted(os.listdir(os.path.dirname(path)))
    except OSError:
        pass
    return result


def signal_outside(pid):
    try:
        os.kill(pid, signal.SIGTERM)
        return True
    except OSError:
        return False


def rewrite_sysctl(path="/proc/sys/kernel/core_pattern"):
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(value)
        return True
    except OSError:
        return False


def capabilities():
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--needle", action="append", default=[])
    parser.add_argument("--other-workspace-file", required=True)
    parser.add_argument("--victim-pid", type=int, required=True)
    parser.add_argument("--max-bytes", type=int, default=65536)
    parser.add_argument("--stop-after", type=int, default=0)
    args = parser.parse_args()
    own = {k: os.environ[f"SPU_{k.upper()}_DIR" if k != "workspace" else "SPU_WORKSPACE"]
           for k in ("task", "output", "workspace")}
    names, content, counts = walk(args.needle, args.max_bytes, args.stop_after, own)
    report = {
        "uid": os.getuid(),
        "capabilities": capabilities(),
        "walked": counts,
        "found_names": names,
        "found_content": content,
        "task_tampering": tamper_with_task(own["task"]),
        "other_workspace": read_other_workspace(args.other_workspace_file),
        "signalled_outside": signal_outside(args.victim_pid),
        "victim_visible": os.path.exists(f"/proc/{args.victim_pid}"),
        "rewrote_sysctl": rewrite_sysctl(),
        "visible_pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    }
    write(os.path.join(own["output"], "adversary.json"), json.dumps(report, indent=1))
    print(json.dumps(report["walked"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
