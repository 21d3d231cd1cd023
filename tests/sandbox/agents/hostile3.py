#!/usr/bin/env python3
"""Round-three attacks (issue 30): each writes a valid submission first, then one attack.

``hostile3.py MODE``: ``sparse`` (eight sparse 250 MiB files in the output), ``perms``
(the output made writable by everyone), ``netraw`` (raw and packet sockets tried, the
findings in ``$SPU_OUTPUT_DIR/netraw.json``), ``oom`` (memory until the OOM killer fires).
"""

import json
import os
import socket
import sys


def submit():
    with open(os.path.join(os.environ["SPU_TASK_DIR"], "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    submission = {"task_id": contract["task_id"], "task_version": contract["task_version"],
                  "rankings": [{"group_id": g["group_id"], "order": g["items"]}
                               for g in contract["groups"]]}
    path = os.path.join(os.environ["SPU_OUTPUT_DIR"], "rankings.json")
    with open(path, "w") as f:
        json.dump(submission, f)
    return path


def sparse(output):
    for k in range(8):
        with open(os.path.join(output, f"sparse{k}.bin"), "wb") as f:
            f.write(b"head")
            f.truncate(250 << 20)


def perms(output, submission):
    os.makedirs(os.path.join(output, "shared"), exist_ok=True)
    with open(os.path.join(output, "shared", "notes.txt"), "w") as f:
        f.write("anyone may edit this\n")
    for path in (os.path.join(output, "shared", "notes.txt"), submission):
        os.chmod(path, 0o666)
    for path in (os.path.join(output, "shared"), output):
        os.chmod(path, 0o777)


def netraw(output):
    found = {}
    for name, args in (("raw_icmp", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
                       ("packet", (socket.AF_PACKET, socket.SOCK_RAW, 0x0300))):
        try:
            socket.socket(*args).close()
            found[name] = "opened"
        except OSError as exc:
            found[name] = f"refused: {exc.errno}"
    with open("/proc/self/status") as f:
        found["CapEff"] = next(line.split()[1] for line in f if line.startswith("CapEff"))
    with open(os.path.join(output, "netraw.json"), "w") as f:
        json.dump(found, f)


def oom():
    chunks = []
    for _ in range(4096):
        chunks.append(b"\x01" * (32 * 1024 * 1024))


def main():
    mode = sys.argv[1]
    output = os.environ["SPU_OUTPUT_DIR"]
    submission = submit()
    if mode == "sparse":
        sparse(output)
    elif mode == "perms":
        perms(output, submission)
    elif mode == "netraw":
        netraw(output)
    elif mode == "oom":
        oom()


if __name__ == "__main__":
    main()
