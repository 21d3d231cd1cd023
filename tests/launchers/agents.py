"""Test agents (``harness=command`` entrypoints), as the text of their files."""

PRESENTED_ORDER_AGENT = """#!/usr/bin/env python3
import json, os, pathlib
contract = json.loads(pathlib.Path(os.environ["SPU_TASK_DIR"], "contract.json").read_text())
rankings = [{"group_id": g["group_id"], "order": g["items"]} for g in contract["groups"]]
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "rankings.json").write_text(json.dumps(
    {"task_id": contract["task_id"], "task_version": contract["task_version"],
     "rankings": rankings}))
"""
"""Ranks every group in its presented order (a valid file)."""

DIES_ONCE_AGENT = """#!/usr/bin/env python3
# First run on a task: kill the process that started it (the Ray worker), like a node
# going down mid-run. Later runs: rank in presented order.
import json, os, pathlib, signal, time
marker = pathlib.Path(os.environ["MARKER_DIR"]) / (os.environ["SPU_TASK_ID"] + ".died")
if not marker.exists():
    marker.write_text("killed my worker\\n")
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)
""" + PRESENTED_ORDER_AGENT.split("\n", 1)[1]

SLOW_AGENT = """#!/usr/bin/env python3
import time
time.sleep(1)
""" + PRESENTED_ORDER_AGENT.split("\n", 1)[1]
"""Takes a second, then ranks in presented order."""

BROKEN_AGENT = "#!/nonexistent/interpreter\n"
"""An executable whose interpreter does not exist: the agent fails to start."""
