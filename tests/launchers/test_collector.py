"""The launcher's garbage-collection policy: set once, by the launcher only."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.test_layering import ROOT, project_files

PROBE = """
import gc
from spu.launch.collector import YOUNG_THRESHOLD, set_launcher_policy
before = gc.get_threshold()
set_launcher_policy()
frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
set_launcher_policy()  # idempotent
assert gc.get_threshold() == threshold and gc.get_freeze_count() == frozen
assert threshold == (YOUNG_THRESHOLD, *before[1:]) and frozen > 0
print("ok")
"""


def test_the_policy_freezes_what_is_imported_and_makes_young_collections_rare() -> None:
    """Run in a fresh interpreter, the policy's effect is the documented one, once."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "ok"


def test_only_the_collector_module_touches_the_collector() -> None:
    """No library module (a statistic, the driver) freezes, thaws or tunes the collector."""
    touching = []
    for path in project_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "gc" and node.attr in
                    ("freeze", "unfreeze", "disable", "enable", "set_threshold", "collect")):
                touching.append(f"{path.relative_to(ROOT)}:{node.lineno}: gc.{node.attr}")
    owners = ("spu/launch/collector.py",) + tuple(FORK_SERVERS)
    assert touching and all(t.startswith(owners) for t in touching), touching


FORK_SERVERS = {
    "spu/gateway/process.py": "the gateway host, a process of its own that only forks a "
                              "run's gateway: frozen once warm, its forks share its pages",
}
"""Processes whose whole policy is their own (no library code), with why."""
