"""A sweep on a Ray cluster of several nodes that share no storage (issue: scale-out).

The cluster (:mod:`tests.launchers.cluster`) is a head node, which is the grading side
(the driver joins it; it offers no sandbox slot, so no agent runs there), and agent
nodes in mount namespaces of their own, where the task root, the output root and the
answer keys of the test do not exist. Every node runs with Ray token authentication.

- ``test_multinode_*``: every run once, placed on more than one node, no node running
  more runs at once than its ``sandbox_slot``, and no answer key on any agent node
  (searched after the sweep, by the file names and by a canary string in the keys).
- ``test_node_loss_*``: an agent node killed mid-run; its runs are recorded as lost
  attempts with what they had spent, run again elsewhere, the sweep completes, no run
  key twice.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, have_bwrap
from tests.launchers.agents import PRESENTED_ORDER_AGENT
from tests.launchers.cluster import LocalCluster, Node, cluster_unavailable

pytestmark = pytest.mark.slow

TIMED_AGENT = """#!/usr/bin/env python3
# Reports what it spends first, takes its time, writes when it ran, then ranks.
import json, os, pathlib, time
start = time.time()
pathlib.Path(os.environ["SPU_WORKSPACE"], "usage.json").write_text(
    json.dumps({"input": int(os.environ.get("BILLED_INPUT_TOKENS", "0"))}))
time.sleep(float(os.environ.get("AGENT_SLEEP_S", "2")))
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "times.json").write_text(
    json.dumps({"start": start, "end": time.time()}))
""" + PRESENTED_ORDER_AGENT.split("\n", 1)[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    why = cluster_unavailable()
    if why:
        pytest.skip(f"multi-node Ray cluster: {why}")
    local = LocalCluster(tmp_path_factory.mktemp("cluster"))
    try:
        local.start_head()
        local.start_agent_node(0, slots=2, cpus=2)
        local.start_agent_node(1, slots=2, cpus=2)
        local.wait_for_nodes(3)
        yield local
    finally:
        local.stop()


def cluster_sweep(cluster: LocalCluster, out: Path, tasks: Path, keys: Path, agent: Path,
                  *overrides: str, timeout: float = 900) -> object:
    import subprocess
    import sys

    argv = [sys.executable, "-m", "spu.main", "hydra/launcher=ray_cluster",
            f"hydra.launcher.init.address={cluster.address}", f"output_root={out}",
            f"task_root={tasks}", f"answers_root={keys}", "model=opus5", "harness=command",
            "harness.name=tests.launchers.billed_harness:BilledHarness",
            f"harness.entrypoint={agent}", "repeat=0,1",
            f"sandbox={'local' if have_bwrap() else 'subprocess'}",
            "hydra.launcher.resources.cpus=1", "hydra.launcher.resources.memory_gb=0.25",
            "hydra.launcher.resources.gpus=0", "hydra.launcher.report_every_s=0.5",
            "hydra.launcher.progress_every_s=5", *overrides]
    return subprocess.run(argv, cwd=REPO, env={**cluster.env(), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=timeout)


def write_agent(tmp_path: Path) -> Path:
    agent = tmp_path / "timed_agent"
    agent.write_text(TIMED_AGENT)
    agent.chmod(0o755)
    return agent


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/run.json"))]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals open at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def test_multinode_sweep_places_runs_on_several_nodes_and_no_key_reaches_them(
        cluster: LocalCluster, keyed_tasks: tuple[Path, Path, str], tmp_path: Path) -> None:
    """Invariant: agent nodes get the public files only; every run once; slots hold."""
    tasks, keys, canary = keyed_tasks
    out = tmp_path / "outputs"
    agent_nodes = [n for n in cluster.nodes if n.private]
    for node in agent_nodes:
        assert not node.sees(tasks) and not node.sees(keys) and not node.sees(out)
    done = cluster_sweep(cluster, out, tasks, keys, write_agent(tmp_path),
                         "+harness.env.AGENT_SLEEP_S=3", "+harness.env.BILLED_INPUT_TOKENS=10")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]  # type: ignore[attr-defined]

    runs = records(out)
    assert len(runs) == 4 and Counter(r["run_key"] for r in runs).most_common(1)[0][1] == 1
    assert {r["outcome"] for r in runs} == {"valid"}
    assert all(r["grade"]["isolation"] in ("bwrap", "netns") for r in runs)
    placed = Counter(r["node"] for r in runs)
    assert len(placed) >= 2, placed
    alive = {n["ip"]: n["id"] for n in cluster.wait_for_nodes(3) if n["alive"]}
    agent_ids = {alive[n.ip] for n in agent_nodes}
    assert set(placed) <= agent_ids, "a run was placed on the grading side"

    slots = {alive[n.ip]: n.slots for n in agent_nodes}
    for node_id in placed:
        spans = [tuple(json.loads((out / "runs" / r["run_key"] / "output" / "times.json")
                                  .read_text()).values()) for r in runs if r["node"] == node_id]
        assert 1 <= most_at_once(spans) <= slots[node_id]  # type: ignore[arg-type]

    # The driver wrote everything the runs left, here: nothing was shared.
    for r in runs:
        folder = out / "runs" / r["run_key"]
        assert (folder / "grade.json").is_file() and (folder / "output" / "rankings.json").is_file()
        assert not (folder / "task" / "hidden").exists()
    # The keys never reached an agent node: not by name, not by content.
    for node in agent_nodes:
        assert node.search([canary]) == [], node.name
    # The sweep ran with token authentication: nothing says otherwise.
    assert not any("WITHOUT TOKEN" in " ".join(r["notes"]) for r in runs)

    # Resume from tracking alone: without the run folders, nothing runs again.
    shutil.rmtree(out / "runs")
    # the same command (harness.env is part of each run's key)
    again = cluster_sweep(cluster, out, tasks, keys, write_agent(tmp_path),
                          "+harness.env.AGENT_SLEEP_S=3", "+harness.env.BILLED_INPUT_TOKENS=10")
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]  # type: ignore[attr-defined]
    assert "none to launch on Ray (4 skipped" in again.stdout  # type: ignore[attr-defined]


def agent_running_on(node: Node) -> bool:
    """Whether one of the test's agents runs on ``node`` now."""
    for pid in node.pids():
        try:
            if b"timed_agent" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def test_node_loss_records_the_lost_attempts_and_reruns_them_elsewhere(
        cluster: LocalCluster, keyed_tasks: tuple[Path, Path, str], tmp_path: Path) -> None:
    """Invariant: a node lost mid-run costs a recorded attempt, never a run or a duplicate.

    Each attempt reports 100,000 input tokens at once (Opus 5 lists $5 per million:
    $0.50), then takes 20 s. The node running the first agent seen is killed 6 s later,
    after the spending report (every 0.5 s) has reached the driver.
    """
    import threading

    tasks, keys, _ = keyed_tasks
    cluster.start_agent_node(2, slots=2, cpus=2)
    cluster.wait_for_nodes(len(cluster.nodes))
    out = tmp_path / "outputs"
    agent = write_agent(tmp_path)
    killed: list[Node] = []

    def kill_a_busy_node() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            for node in cluster.nodes:
                if node.private and node.proc.poll() is None and agent_running_on(node):
                    time.sleep(6)  # its spending reports (every 0.5 s) reach the driver
                    node.kill()
                    killed.append(node)
                    return
            time.sleep(0.3)

    killer = threading.Thread(target=kill_a_busy_node, daemon=True)
    killer.start()
    done = cluster_sweep(cluster, out, tasks, keys, agent, "+harness.env.AGENT_SLEEP_S=20",
                         "+harness.env.BILLED_INPUT_TOKENS=100000")
    killer.join(timeout=5)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]  # type: ignore[attr-defined]
    assert killed, "no agent was seen running"

    runs = records(out)
    assert len(runs) == 4 and len({r["run_key"] for r in runs}) == 4
    odd = [(r["outcome"], r["attempt"], r["node"], r["process"], r["notes"])
           for r in runs if r["outcome"] != "valid"]
    earlier = [(json.loads(a.read_text())["node"], json.loads(a.read_text())["outcome"])
               for a in (out / "runs").glob("*/attempts/*/run.json")]
    assert not odd, (odd, killed[0].name, killed[0].ip, earlier,
                     cluster.wait_for_nodes(1), done.stdout[-3000:])  # type: ignore[attr-defined]
    lost = []
    for r in runs:
        for attempt in sorted((out / "runs" / r["run_key"] / "attempts").glob("*/run.json")):
            lost.append(json.loads(attempt.read_text()))
    assert lost, "no attempt was lost with the node"
    dead = {x["node"] for x in lost}
    assert len(dead) == 1 and all(r["node"] not in dead for r in runs)
    for x in lost:
        assert x["outcome"] == "infra_error" and x["attempt"] == 1
        assert x["usage"]["input"] == 100_000 and x["cost_usd"] == pytest.approx(0.5)
    retried = [r for r in runs if r["attempt"] == 2]
    assert len(retried) == len(lost)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("spu-default")
    tracked = [(r.data.tags["run_key"], int(r.data.tags["attempt"]), r.data.tags["outcome"])
               for r in client.search_runs([exp.experiment_id])]
    assert len(tracked) == len(set(tracked)) == 4 + len(lost)
    # The budget counted what the lost attempts spent: 0.50 per attempt, lost or not.
    total = 0.5 * (4 + len(lost))
    assert f"cost ${total:.2f}" in done.stdout  # type: ignore[attr-defined]
