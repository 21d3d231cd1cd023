"""What an agent in the sandbox can reach of the gateway's new surface, on both backends.

The run's gateway is a process of its own, forked by the driver's :class:`GatewayHost`
and spoken to over unnamed socket pairs; the sandbox reaches its host ports through the
run's relay. The agent here tries, from inside the sandbox:

- another run's gateway: a listener on the host's ``127.0.0.1`` and one on every
  interface, at ``127.0.0.1``, ``localhost``, the sandbox's default route and every address
  of the host's own interfaces;
- the driver's channels: every socket it was handed (its inherited descriptors), compared
  with the sockets the driver and the gateway host hold while it runs.

Holds if nothing of another run answers and no descriptor it holds is one of theirs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from spu.gateway.process import GatewayHost
from spu.schema import Outcome
from tests.gateway.test_gateway_process import BACKENDS, SUBMIT, _agent, _run
from tests.sandbox.conftest import docker_engine, require_backend  # noqa: F401

pytestmark = pytest.mark.slow

PROBE = '''#!/usr/bin/env python3
"""Knock at other runs' ports and list what this process was handed."""
import json, os, pathlib, socket

inherited = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        inherited[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass

def route():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        f = line.split()
        if f[1] == "00000000":
            return socket.inet_ntoa(int(f[2], 16).to_bytes(4, "little"))

hosts = {"127.0.0.1", "localhost", *HOSTS}
if route():
    hosts.add(route())
reached = {}
for host in sorted(hosts):
    for port in PORTS:
        try:
            socket.create_connection((host, port), timeout=3).close()
            reached[f"{host}:{port}"] = "connected"
        except OSError as exc:
            reached[f"{host}:{port}"] = type(exc).__name__
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "probe.json").write_text(
    json.dumps({"inherited": inherited, "reached": reached}))
''' + SUBMIT


def _host_addresses() -> list[str]:
    """The IPv4 addresses of this machine's interfaces but loopback."""
    done = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True)
    if done.returncode != 0:
        return []
    return [a["local"] for link in json.loads(done.stdout) for a in link.get("addr_info", [])
            if not a["local"].startswith("127.")]


class Listener:
    """A stand-in for another run's gateway: counts the connections it accepts."""

    def __init__(self, host: str) -> None:
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    with os.scandir(f"/proc/{pid}/fd") as fds:
        for fd in fds:
            try:
                target = os.readlink(fd.path)
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target)
    return out


class SocketWatch:
    """Every socket the driver and its gateway host hold while the ``with`` block runs."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            pids = [os.getpid(), GatewayHost.shared()._process.pid]
            for pid in pids:
                try:
                    self.seen |= _socket_inodes(pid)
                except OSError:
                    pass

    def __enter__(self) -> SocketWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_reaches_no_other_runs_gateway_and_none_of_the_drivers_channels(
        request: pytest.FixtureRequest, compose, tmp_path: Path, backend: str) -> None:
    """Attack: another run's gateway on the host (on loopback, and on every interface),
    knocked at every address the sandbox may know for the host; the agent's inherited
    descriptors read for a socket of the driver or its gateway host. Holds: nothing
    answers, no descriptor is theirs."""
    require_backend(request, backend)
    others = [Listener("127.0.0.1"), Listener("0.0.0.0")]
    hosts = _host_addresses()
    agent = _agent(tmp_path, "probe.py", PROBE.replace("*HOSTS", f"*{hosts!r}")
                   .replace("PORTS", repr([o.port for o in others])))
    try:
        with SocketWatch() as watch:
            record, run_dir = _run(compose, tmp_path, backend, agent)
    finally:
        for other in others:
            other.server.close()
    assert record.outcome is Outcome.valid, (record.outcome, record.notes)
    probe = json.loads((run_dir / "output" / "probe.json").read_text())
    assert "connected" not in probe["reached"].values(), probe["reached"]
    assert [o.accepted for o in others] == [0, 0]
    theirs = set(probe["inherited"].values()) & watch.seen
    assert not theirs, (theirs, probe["inherited"])

