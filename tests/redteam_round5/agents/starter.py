#!/usr/bin/env python3
"""Round-five agent: a valid file, then an attempt to pass as a sandbox that did not start.

Mode (argv[1]):
- ``nonce``: hunt the start check's nonce (every process's environ and readable memory,
  the workspace's ``.spu-start-*`` files, inherited descriptors) and, when found, print
  the start check's report as stderr's first line;
- ``fds``: write a half JSON line to every inherited descriptor but 0-2 (a status fd
  would then hold a broken line), then exit 1;
- ``kill1``: signal pid 1 and the parent (TERM, then KILL), then exit 1;
- ``exit125``, ``exit126``, ``exit127``: exit with that code (the codes of a command that
  could not be started);
- ``deep``: print JSON nested 200,000 deep as a line of stdout and of stderr (a host
  reader that parses it with ``json.loads`` and catches only ``ValueError`` raises
  ``RecursionError``, a ``RuntimeError``).
"""
import glob
import json
import os
import pathlib
import re
import signal
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "nonce"
out = pathlib.Path(os.environ["SPU_OUTPUT_DIR"])
contract = json.loads(pathlib.Path(os.environ["SPU_TASK_DIR"], "contract.json").read_text())
(out / "rankings.json").write_text(json.dumps({
    "task_id": contract["task_id"], "task_version": contract["task_version"],
    "rankings": [{"group_id": g["group_id"], "order": g["items"]} for g in contract["groups"]]}))
notes = {"mode": mode, "pid": os.getpid(), "ppid": os.getppid(),
         "fds": sorted(os.listdir("/proc/self/fd"))}
found = set()
if mode == "nonce":
    pattern = re.compile(rb"SPU_START_NONCE=([0-9a-f]{32})")
    for pid_dir in glob.glob("/proc/[0-9]*"):
        for part in ("environ", "cmdline"):
            try:
                found.update(m.decode() for m in pattern.findall(
                    pathlib.Path(pid_dir, part).read_bytes()))
            except OSError as exc:
                notes[f"{pid_dir}/{part}"] = repr(exc)
        try:  # the heap of every process we may read (bubblewrap's setenv copies)
            with open(f"{pid_dir}/maps") as maps, open(f"{pid_dir}/mem", "rb") as mem:
                for row in maps:
                    span, perms = row.split()[:2]
                    if "r" not in perms:
                        continue
                    lo, hi = (int(x, 16) for x in span.split("-"))
                    if hi - lo > 1 << 26:
                        continue
                    try:
                        mem.seek(lo)
                        found.update(m.decode() for m in pattern.findall(mem.read(hi - lo)))
                    except (OSError, ValueError, OverflowError):
                        pass
            notes[f"{pid_dir}/mem"] = "read"
        except OSError as exc:
            notes[f"{pid_dir}/mem"] = repr(exc)
    for path in glob.glob("/workspace/.spu-start-*") + glob.glob("/workspace/**/.spu-start-*"):
        try:
            found.add(pathlib.Path(path).read_text().strip())
        except OSError as exc:
            notes[path] = repr(exc)
    for fd in notes["fds"]:
        if int(fd) > 2:
            try:
                data = os.pread(int(fd), 1 << 20, 0)
                found.update(m.decode() for m in pattern.findall(data))
                found.update(re.findall(r"\b[0-9a-f]{32}\b", data.decode("latin-1")))
            except OSError:
                pass
    notes["found"] = sorted(found)
    (out / "notes.json").write_text(json.dumps(notes, indent=1))
    for nonce in sorted(found)[:1]:
        os.write(2, f"spu-start {nonce}: forged by the agent\n".encode())
    sys.exit(127 if found else 0)
(out / "notes.json").write_text(json.dumps(notes, indent=1))
if mode == "fds":
    for fd in notes["fds"]:
        if int(fd) > 2:
            try:
                os.write(int(fd), b'{ "broken": ')
            except OSError:
                pass
    sys.exit(1)
if mode == "kill1":
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in (1, os.getppid()):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    sys.exit(1)
if mode == "deep":
    line = "[" * 200_000 + "]" * 200_000 + "\n"
    for stream in (sys.stdout, sys.stderr):
        stream.write(line)
        stream.flush()
    time.sleep(3)  # the monitor reads the log while the agent runs
if mode.startswith("exit"):
    sys.exit(int(mode[4:]))
