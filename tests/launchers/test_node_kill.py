"""A test cluster's node kill ends the node's processes and no other (found in CI).

A node's processes are those of its process group and of its own mount namespace. The
kernel gives a namespace's inode number to the next namespace made once that one is gone
(the lowest free number): while the kill looped, a Docker container made at that moment by
the other test worker had the node's number, and was killed with it (the Harbor verifier's
containers: exit 137, "container process is already dead"). The node holds its namespace
open until its kill ends, so the number stays its own.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.launchers.cluster import Node, cluster_unavailable


def _private(*command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", *command],
                            start_new_session=True)


def _namespace(proc: subprocess.Popen[bytes]) -> str:
    """Its mount namespace once ``unshare`` has made it (and exec'd its command)."""
    for _ in range(200):
        if Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sleep":
            return os.readlink(f"/proc/{proc.pid}/ns/mnt")
        time.sleep(0.01)
    raise AssertionError("unshare did not start its command")


def test_a_namespace_made_after_the_nodes_processes_died_is_not_the_nodes(tmp_path) -> None:
    why = cluster_unavailable()
    if why:
        pytest.skip(f"multi-node Ray cluster: {why}")
    node = Node("agent-0", _private("sleep", "60"), "127.0.0.2", tmp_path / "log",
                private=True, slots=1)
    _namespace(node.proc)
    node.note_namespace()
    # The node's processes die (a power loss), and nothing else holds its namespace...
    os.kill(node.proc.pid, 9)
    node.proc.wait(timeout=10)
    # ...while another worker's test makes a namespace of its own (a container's).
    other = _private("sleep", "60")
    try:
        assert _namespace(other) != node.namespace, "the node's namespace number was reused"
        node.kill()
        time.sleep(0.2)
        assert other.poll() is None, "the node's kill killed a process that is not the node's"
    finally:
        other.kill()
        other.wait(timeout=10)
