"""A Ray cluster on this machine whose agent nodes have file systems of their own.

The head node (the grading side: the driver joins it) runs in this machine's mount
namespace. Each agent node runs in a mount namespace of its own (``unshare -m``) where
fresh, empty file systems cover ``/tmp`` (pytest's folders: the task root, the output
root and the answer keys of the test), ``/dev/shm``, ``/var/tmp`` and the repository's
``tasks/``: the node sees the installed package and nothing the grading side holds.
Agent nodes listen on their own loopback addresses (127.0.0.2, 127.0.0.3, ...) so that
the driver, on 127.0.0.1, attaches to the head's raylet.

Every node is started with ``RAY_AUTH_MODE=token`` and the cluster's token, as the
README's cluster section says. Everything runs as root (mount namespaces need it).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO
from tests.processes import running

HIDDEN_ON_AGENT_NODES = ("/tmp", "/dev/shm", "/var/tmp", str(REPO / "tasks"))
"""Folders an agent node sees as empty file systems of its own."""

SEARCHED_ON_AGENT_NODES = ("/tmp", "/dev/shm", "/var/tmp")
"""Where an agent node's own files go: searched for answer keys after a sweep."""


def cluster_unavailable() -> str | None:
    """Why a multi-node cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root for private mount namespaces (unshare -m)"
    for hidden in HIDDEN_ON_AGENT_NODES:
        for needed, what in ((REPO, "the checkout"), (Path(sys.prefix), "the environment")):
            if needed.resolve().is_relative_to(hidden):
                return (f"{what} is under {hidden}, which agent nodes cover with an empty "
                        f"file system (clone it elsewhere)")
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs none /mnt"], capture_output=True)
    if probe.returncode != 0:
        return f"unshare -m cannot mount here: {probe.stderr.decode(errors='replace')[:200]}"
    return None


def ray_command(*args: str) -> list[str]:
    """The ``ray`` CLI of this interpreter."""
    return [sys.executable, "-m", "ray.scripts.scripts", *args]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    from spu.launch.server import free_port as free

    return free()


@dataclass
class Node:
    """One Ray node of the cluster."""

    name: str
    proc: subprocess.Popen[bytes]
    ip: str
    log: Path
    private: bool
    slots: int
    gpus: int = 0
    """Fake GPUs offered (a ``GPU`` resource count; Ray hands out their ids)."""
    namespace: str | None = None
    """The node's own mount namespace (``mnt:[...]``), once it runs Ray."""
    _namespace_fd: int | None = None
    """Held open from then until the node is killed: a namespace lives while a file refers
    to it, so its inode number (which the kernel hands to the next namespace made once this
    one is gone: a Docker container's, say) stays the node's while :meth:`kill` looks."""

    def note_namespace(self) -> None:
        """Remember the node's mount namespace (its first process has entered it by now)."""
        if self.private and self.namespace is None and self.proc.poll() is None:
            path = f"/proc/{self.proc.pid}/ns/mnt"
            self._namespace_fd = os.open(path, os.O_RDONLY)
            self.namespace = os.readlink(path)

    def _in_namespace(self, pid: int) -> bool:
        if self._namespace_fd is None:
            return False
        mine, theirs = os.fstat(self._namespace_fd), os.stat(f"/proc/{pid}/ns/mnt")
        return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)

    def pids(self) -> list[int]:
        """Every running process of the node (zombies left out): in its process group or
        its mount namespace.

        The group only while the node's first process is unreaped (its id, and so the
        group's, cannot be taken by another process until then).
        """
        group = self.proc.pid if self.proc.returncode is None else None
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                if (os.getpgid(pid) == group or self._in_namespace(pid)) and running(pid):
                    found.append(pid)
            except OSError:
                continue
        return [p for p in found if p != os.getpid()]

    def kill(self) -> None:
        """SIGKILL every process of the node, as a machine that loses power."""
        self.note_namespace()
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.2)
        self.proc.wait(timeout=30)
        if self._namespace_fd is not None:
            os.close(self._namespace_fd)
            self._namespace_fd = None

    def search(self, needles: list[str], roots: tuple[str, ...] = SEARCHED_ON_AGENT_NODES,
               names: tuple[str, ...] = ("answers.json", "hidden")) -> list[str]:
        """Files under ``roots``, as this node sees them, named ``names`` or holding a needle."""
        code = """
import json, os, sys
needles = [n.encode() for n in json.loads(sys.argv[1])]
names = set(json.loads(sys.argv[2]))
hits = []
for root in json.loads(sys.argv[3]):
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            if name in names:
                hits.append(os.path.join(base, name))
        for name in files:
            path = os.path.join(base, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 1 << 30:
                    continue
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            hits += [f"{path}: {n.decode()}" for n in needles if n in data]
print(json.dumps(hits))
"""
        argv = [sys.executable, "-c", code, json.dumps(needles), json.dumps(list(names)),
                json.dumps(list(roots))]
        if self.private:
            argv = ["nsenter", "-t", str(self.proc.pid), "-m", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout))

    def sees(self, path: Path) -> bool:
        """Whether ``path`` exists as this node sees the file system."""
        argv = ["test", "-e", str(path)]
        if self.private:
            argv = ["nsenter", "-t", str(self.proc.pid), "-m", "--", *argv]
        return subprocess.run(argv).returncode == 0


@dataclass
class LocalCluster:
    """A Ray head (grading side, no sandbox slot) and agent nodes with private files."""

    workdir: Path
    port: int = 0
    ray_dir: Path | None = None
    """The head's Ray folder: short, for Ray's sockets (107 bytes at most)."""
    token_file: Path | None = None
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        """The head's GCS address."""
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment of every node and of the driver: token auth, quick failure checks."""
        assert self.token_file is not None
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("RAY_") or k == "RAY_USAGE_STATS_ENABLED"}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file),
                   RAY_USAGE_STATS_ENABLED="0",
                   # A lost node is declared dead within a few seconds, not half a minute.
                   RAY_health_check_period_ms="1000", RAY_health_check_timeout_ms="1000",
                   RAY_health_check_failure_threshold="3")
        return env

    def start_head(self) -> Node:
        """Start the head node: grading side, no sandbox slot, so no agent runs there."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token_file = self.workdir / "ray-token"
        self.token_file.write_text(secrets.token_hex(32))
        self.token_file.chmod(0o600)
        self.port = free_port()
        self.ray_dir = Path(tempfile.mkdtemp(prefix="spu-rh-", dir="/tmp"))
        log = self.workdir / "head.log"
        argv = ray_command("start", "--head", f"--port={self.port}",
                           "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0",
                           "--resources", json.dumps({"sandbox_slot": 0}),
                           f"--temp-dir={self.ray_dir}", "--include-dashboard=false",
                           f"--dashboard-port={free_port()}",
                           "--object-store-memory=100000000", "--block")
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env(), start_new_session=True, cwd=REPO)
        node = Node("head", proc, "127.0.0.1", log, private=False, slots=0)
        self.nodes.append(node)
        return node

    def start_agent_node(self, index: int, slots: int = 2, cpus: int = 2, gpus: int = 0) -> Node:
        """Start an agent node in a mount namespace of its own (``gpus``: fake ones)."""
        ip = f"127.0.0.{index + 2}"
        log = self.workdir / f"node{index}.log"
        start = ray_command("start", f"--address={self.address}", f"--node-ip-address={ip}",
                            f"--num-cpus={cpus}", f"--num-gpus={gpus}",
                            "--resources", json.dumps({"sandbox_slot": slots}),
                            "--temp-dir=/tmp/ray", "--object-store-memory=100000000",
                            "--block")
        assert self.token_file is not None
        mounts = " && ".join(f"mount -t tmpfs -o mode=1777 spu-node{index} {p}"
                             for p in HIDDEN_ON_AGENT_NODES)
        # The token is read before /tmp is covered, and kept in the node's own /tmp.
        script = (f"T=$(cat '{self.token_file}') && {mounts} && mkdir -m 700 /tmp/home && "
                  f"printf %s \"$T\" > /tmp/home/ray-token && chmod 600 /tmp/home/ray-token "
                  f"&& cd / && exec env HOME=/tmp/home RAY_AUTH_TOKEN_PATH=/tmp/home/ray-token "
                  + " ".join(f"'{a}'" for a in start))
        with open(log, "wb") as out:
            proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                     script], stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env(), start_new_session=True)
        node = Node(f"node{index}", proc, ip, log, private=True, slots=slots, gpus=gpus)
        self.nodes.append(node)
        return node

    def wait_for_nodes(self, count: int, timeout_s: float = 300) -> list[dict[str, object]]:
        """Wait until ``count`` nodes are alive; returns Ray's node table."""
        code = ("import json, ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
                "print(json.dumps([{'id': n['NodeID'], 'ip': n['NodeManagerAddress'], "
                "'alive': n['Alive'], 'resources': n['Resources']} for n in ray.nodes()]))")
        deadline = time.monotonic() + timeout_s
        last = ""
        # `ray start` says so once its node runs; asking the cluster before that only waits.
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc.poll() is not None and node.private is not None:
                    if node.namespace is None:
                        raise RuntimeError(f"Ray node {node.name} exited: "
                                           f"{node.log.read_text()[-3000:]}")
            if all("Ray runtime started" in n.log.read_text(errors="replace")
                   for n in self.nodes if n.proc.poll() is None):
                break
            time.sleep(1)
        while time.monotonic() < deadline:
            try:
                done = subprocess.run([sys.executable, "-c", code, self.address],
                                      capture_output=True, text=True, env=self.env(),
                                      timeout=max(30.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                last = str(exc)
                continue
            last = done.stderr[-2000:]
            if done.returncode == 0:
                table = json.loads(done.stdout.strip().splitlines()[-1])
                if sum(1 for n in table if n["alive"]) >= count:
                    for node in self.nodes:
                        node.note_namespace()
                    return list(table)
            time.sleep(2)
        raise RuntimeError(f"{count} Ray nodes not alive within {timeout_s:.0f} s: {last}")

    def stop(self) -> None:
        """Kill every node, agent nodes first."""
        for node in reversed(self.nodes):
            node.kill()
        if self.ray_dir is None:
            return
        stray = subprocess.run(["pgrep", "-f", str(self.ray_dir)],
                               capture_output=True, text=True).stdout.split()
        for pid in stray:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.ray_dir, ignore_errors=True)
