"""Each run on a GPU actor (``hydra.launcher.placement=actors``) on a multi-node cluster.

The cluster (:mod:`tests.launchers.cluster`) is a head node (the grading side, no
sandbox slot) and two agent nodes in mount namespaces of their own, each offering two
fake GPUs (a ``GPU`` resource count: Ray hands out their ids and sets
``CUDA_VISIBLE_DEVICES``; there is no NVML here, so the device check says so and
passes, and a probe the test names decides health instead). One cluster serves the
module.

- ``test_actor_sweep_*``: one actor per GPU offered, every run records its actor and
  device, no two runs overlap on one device;
- ``test_unhealthy_device_*``: the probe turns the first actor's device unhealthy after
  its first run; the actor is retired, named, and the rest finish on the others;
- ``test_killed_actor_*``: an actor's worker killed mid-run; the attempt is recorded as
  lost on that actor, runs again on another, and a relaunch adds no duplicate.

Two more run on a local Ray with fake GPUs (no cluster): the budget holding an actor's
place, and every device retired, leaving the runs to fail saying why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, have_bwrap
from tests.launchers.cluster import LocalCluster, Node, cluster_unavailable
from tests.launchers.test_cluster import most_at_once, records, write_agent

pytestmark = pytest.mark.slow

GPUS_PER_NODE = 2


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    why = cluster_unavailable()
    if why:
        pytest.skip(f"multi-node Ray cluster: {why}")
    local = LocalCluster(tmp_path_factory.mktemp("gpu-cluster"))
    try:
        local.start_head()
        local.start_agent_node(0, slots=2, cpus=2, gpus=GPUS_PER_NODE)
        local.start_agent_node(1, slots=2, cpus=2, gpus=GPUS_PER_NODE)
        local.wait_for_nodes(3)
        yield local
    finally:
        local.stop()


def actor_sweep(cluster: LocalCluster, out: Path, tasks: Path, keys: Path, agent: Path,
                repeats: str, *overrides: str,
                timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """A sweep under ``placement=actors``: one GPU, one CPU, a quarter GiB per run."""
    argv = [sys.executable, "-m", "spu.main", "hydra/launcher=ray_cluster",
            f"hydra.launcher.init.address={cluster.address}", f"output_root={out}",
            f"task_root={tasks}", f"answers_root={keys}", "model=opus5", "harness=command",
            "harness.name=tests.launchers.billed_harness:BilledHarness",
            f"harness.entrypoint={agent}", f"repeat={repeats}",
            f"sandbox={'local' if have_bwrap() else 'subprocess'}",
            "hydra.launcher.placement=actors",
            "hydra.launcher.resources.cpus=1", "hydra.launcher.resources.memory_gb=0.25",
            "hydra.launcher.resources.gpus=1", "hydra.launcher.report_every_s=0.5",
            "hydra.launcher.progress_every_s=5", *overrides]
    return subprocess.run(argv, cwd=REPO, env={**cluster.env(), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=timeout)


def device_of(record: dict) -> tuple[str, str]:
    """The device a run got: its node and the actor's CUDA_VISIBLE_DEVICES."""
    return record["node"], record["gpu"]["visible_devices"]


def span(out: Path, record: dict) -> tuple[float, float]:
    times = json.loads((out / "runs" / record["run_key"] / "output" / "times.json").read_text())
    return times["start"], times["end"]


def test_actor_sweep_places_every_run_on_one_actor_per_gpu_without_overlap(
        gpu_cluster: LocalCluster, keyed_tasks: tuple[Path, Path, str], tmp_path: Path) -> None:
    """Invariant: actors == GPUs offered; each run on one device, alone on it."""
    tasks, keys, _ = keyed_tasks
    out = tmp_path / "outputs"
    done = actor_sweep(gpu_cluster, out, tasks, keys, write_agent(tmp_path), "0,1,2",
                       "+harness.env.AGENT_SLEEP_S=2")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    offered = sum(n.gpus for n in gpu_cluster.nodes)
    assert f"placement on actors: {offered} actors" in done.stdout, done.stdout[-3000:]

    runs = records(out)
    assert len(runs) == 6 and {r["outcome"] for r in runs} == {"valid"}
    assert all(r["gpu"] and r["gpu"]["actor"].startswith("spu-") for r in runs)
    assert all(r["gpu"]["visible_devices"] in {"0", "1"} for r in runs)
    assert all(r["gpu"]["devices"] == [r["gpu"]["visible_devices"]] for r in runs)
    assert all(r["gpu"]["uuid"] is None for r in runs)  # no NVML here
    # An actor owns one device for its life: the same actor, the same device.
    by_actor = defaultdict(set)
    for r in runs:
        by_actor[r["gpu"]["actor"]].add(device_of(r))
    assert all(len(devices) == 1 for devices in by_actor.values()), by_actor
    assert len(by_actor) <= offered
    by_device = defaultdict(list)
    for r in runs:
        by_device[device_of(r)].append(span(out, r))
    assert len(by_device) >= 2
    assert all(most_at_once(spans) == 1 for spans in by_device.values()), by_device
    # The summary gives each GPU's utilization; the no-NVML note is said once.
    assert "GPU actors (utilization per GPU):" in done.stdout
    assert done.stdout.count("no NVML here") == 1, done.stdout[-3000:]


def test_unhealthy_device_retires_its_actor_after_its_run_and_the_rest_finish(
        gpu_cluster: LocalCluster, keyed_tasks: tuple[Path, Path, str], tmp_path: Path) -> None:
    """Invariant: a device found unhealthy takes no run after the one it finished."""
    tasks, keys, _ = keyed_tasks
    out = tmp_path / "outputs"
    done = actor_sweep(gpu_cluster, out, tasks, keys, write_agent(tmp_path), "0,1,2",
                       "+harness.env.AGENT_SLEEP_S=2",
                       "hydra.launcher.health_probe="
                       "tests.launchers.probes:first_actor_fails_after_one_run")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    runs = records(out)
    assert len(runs) == 6 and {r["outcome"] for r in runs} == {"valid"}
    placed = Counter(r["gpu"]["actor"] for r in runs)
    first = next(a for a in placed if a.endswith("-0"))
    assert placed[first] == 1, placed
    assert len(placed) >= 2
    assert f"device retired: {first}" in done.stdout
    assert "marked unhealthy" in done.stdout.split("retired devices:")[-1]


def ray_worker_of(pid: int) -> int | None:
    """The Ray worker process above ``pid`` (its title starts with ``ray::``)."""
    import psutil

    try:
        process = psutil.Process(pid)
        for above in (process, *process.parents()):
            if " ".join(above.cmdline()).startswith("ray::"):
                return above.pid
    except psutil.Error:
        return None
    return None


def agent_pids(node: Node) -> list[int]:
    found = []
    for pid in node.pids():
        try:
            if b"timed_agent" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def test_killed_actor_records_the_lost_attempt_reruns_it_elsewhere_and_relaunch_adds_none(
        gpu_cluster: LocalCluster, keyed_tasks: tuple[Path, Path, str], tmp_path: Path) -> None:
    """Invariant: an actor lost mid-run costs a recorded attempt, never a run or a duplicate."""
    tasks, keys, _ = keyed_tasks
    out = tmp_path / "outputs"
    agent = write_agent(tmp_path)
    killed: list[int] = []

    def kill_a_busy_actor() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            for node in gpu_cluster.nodes:
                if not node.private:
                    continue
                for pid in agent_pids(node):
                    worker = ray_worker_of(pid)
                    if worker is not None:
                        time.sleep(6)  # its spending reports (every 0.5 s) reach the driver
                        os.kill(worker, signal.SIGKILL)
                        killed.append(worker)
                        return
            time.sleep(0.3)

    killer = threading.Thread(target=kill_a_busy_actor, daemon=True)
    killer.start()
    done = actor_sweep(gpu_cluster, out, tasks, keys, agent, "0,1",
                       "+harness.env.AGENT_SLEEP_S=12", "+harness.env.BILLED_INPUT_TOKENS=100000")
    killer.join(timeout=5)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert killed, "no agent was seen running"

    runs = records(out)
    assert len(runs) == 4 and {r["outcome"] for r in runs} == {"valid"}, \
        [(r["outcome"], r["notes"]) for r in runs]
    lost = [json.loads(p.read_text()) for p in (out / "runs").glob("*/attempts/*/run.json")]
    assert len(lost) == 1, done.stdout[-3000:]
    gone = lost[0]
    assert gone["outcome"] == "infra_error" and gone["attempt"] == 1
    assert gone["gpu"]["actor"].startswith("spu-") and gone["usage"]["input"] == 100_000
    rerun = next(r for r in runs if r["run_key"] == gone["run_key"])
    assert rerun["attempt"] == 2 and rerun["gpu"]["actor"] != gone["gpu"]["actor"]
    assert f"actor {gone['gpu']['actor']} lost" in done.stdout

    # The same overrides: harness.env is part of the run identity.
    again = actor_sweep(gpu_cluster, out, tasks, keys, agent, "0,1",
                        "+harness.env.AGENT_SLEEP_S=12", "+harness.env.BILLED_INPUT_TOKENS=100000")
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "none to launch on Ray (4 skipped" in again.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("spu-default")
    assert exp is not None
    tracked = [(r.data.tags["run_key"], int(r.data.tags["attempt"]))
               for r in client.search_runs([exp.experiment_id])]
    assert len(tracked) == len(set(tracked)) == 5


def test_budget_stops_launching_on_actors_of_a_local_ray_with_fake_gpus(
        task_root: Path, tmp_path: Path) -> None:
    """One actor (max_concurrent=1) on one of two fake GPUs; $0.50 a run, a $1 cap.

    The budget holds an actor's place until its run's cost is counted: run 1, run 2
    (the cap reached), then no launch.
    """
    from tests.launchers.billed_harness import AGENT as BILLED_AGENT
    from tests.launchers.conftest import run_sweep, sandbox_name

    out = tmp_path / "outputs"
    agent = tmp_path / "billed_agent"
    agent.write_text(BILLED_AGENT)
    agent.chmod(0o755)
    result = run_sweep(
        "hydra/launcher=ray_local", f"output_root={out}", f"task_root={task_root}",
        "hydra.launcher.progress=lines", "hydra.launcher.placement=actors",
        "hydra.launcher.init.num_gpus=2", "hydra.launcher.resources.gpus=1",
        "model=opus5", "harness=command",
        "harness.name=tests.launchers.billed_harness:BilledHarness",
        f"harness.entrypoint={agent}", "+harness.env.BILLED_INPUT_TOKENS=100000",
        "repeat=0,1", f"sandbox={sandbox_name()}", "hydra.launcher.max_concurrent=1",
        "budget.max_cost_usd=1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "placement on actors: 1 actor," in result.stdout
    assert ("budget.max_cost_usd=1 reached: $1.00 spent by 2 finished runs; 2 runs not "
            "launched") in result.stdout
    runs = records(out)
    assert [r["cost_usd"] for r in runs] == pytest.approx([0.5, 0.5], abs=1e-12)
    assert len({r["gpu"]["actor"] for r in runs}) == 1
    assert {r["gpu"]["visible_devices"] for r in runs} <= {"0", "1"}
    assert "spu-" in result.stdout.split("GPU actors (utilization per GPU):")[1]


def test_with_every_device_retired_the_runs_left_fail_saying_why(
        task_root: Path, tmp_path: Path) -> None:
    """Invariant: no healthy actor left means no run is launched, and each says why."""
    from tests.launchers.conftest import run_sweep, sandbox_name

    out = tmp_path / "outputs"
    result = run_sweep(
        "hydra/launcher=ray_local", f"output_root={out}", f"task_root={task_root}",
        "hydra.launcher.progress=lines", "hydra.launcher.placement=actors",
        "hydra.launcher.init.num_gpus=2", "hydra.launcher.resources.gpus=1",
        "hydra.launcher.health_probe=tests.launchers.probes:every_device_unhealthy",
        "model=random", f"sandbox={sandbox_name()}",
        "repeat=0,1")
    text = result.stdout + result.stderr
    assert "placement on actors: 2 actors" in text, text[-3000:]
    assert text.count("device retired: spu-") == 2, text[-3000:]
    assert "4 runs not run: no actor left to run it (2 retired, 0 lost" in text, text[-3000:]
    assert not list((out / "runs").glob("*/run.json"))
    assert "retired 2: " in text
