"""The run's host-port relay attacked as the agent: another run's relay, the driver's memory.

Each run has its own relay, in the driver's process, at most
:data:`~spu.sandbox.relay.MAX_CONNECTIONS` connections at once. The agent here holds more
than that, each pushing data at a host service that never reads; meanwhile another run's
agent asks its own service once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from spu.sandbox.relay import MAX_CONNECTIONS, HostPortRelay, sockets_in_namespace
from tests.sandbox.test_relay import in_namespace, pytestmark  # noqa: F401 - root, unshare

HOLD = '''
import socket, sys, time
port, many = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(many):
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.setblocking(False)
        held.append(c)
    except OSError:
        pass
chunk = b"x" * (1 << 20)
deadline = time.monotonic() + 8
while time.monotonic() < deadline:  # push at every connection while the service reads none
    for c in held:
        try:
            c.send(chunk)
        except OSError:
            pass
    time.sleep(0.01)
print("pushed", flush=True)
time.sleep(600)
'''


def _namespace() -> subprocess.Popen[str]:
    holder = subprocess.Popen(["unshare", "--net", "sh", "-c",
                               "ip link set lo up && echo up && exec sleep 600"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
    return holder


@pytest.fixture
def two_namespaces() -> Iterator[tuple[int, int]]:
    """Two runs' sandboxes (network namespaces with loopback up): their process ids."""
    holders = [_namespace(), _namespace()]
    yield holders[0].pid, holders[1].pid
    for holder in holders:
        holder.kill()
        holder.wait()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _never_reads() -> tuple[socket.socket, list[socket.socket]]:
    server = socket.create_server(("127.0.0.1", 0), backlog=512)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, held


def _echo() -> socket.socket:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(conn.recv(64).upper())

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_an_agent_flooding_its_relay_starves_neither_another_run_nor_the_drivers_memory(
        two_namespaces: tuple[int, int]) -> None:
    """Attack: run A's agent opens twice the relay's cap and pushes a MiB at a time into
    each while its service reads nothing. Holds: run B's agent is answered through its own
    relay; run A's relay refused what passed its cap; the driver grew by little more than
    the relay's buffers (about 1 MiB a connection), not by what was pushed."""
    a, b = two_namespaces
    sink, _held = _never_reads()
    echo = _echo()
    relay_a = HostPortRelay(sockets_in_namespace(f"/proc/{a}/ns/net",
                                                 [sink.getsockname()[1]])).start()
    relay_b = HostPortRelay(sockets_in_namespace(f"/proc/{b}/ns/net",
                                                 [echo.getsockname()[1]])).start()
    before = _rss_bytes()
    flood = subprocess.Popen(["nsenter", "-t", str(a), "-n", "python3", "-c", HOLD,
                              str(sink.getsockname()[1]), str(2 * MAX_CONNECTIONS)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout is not None and flood.stdout.readline().strip() == "pushed"
        grown = _rss_bytes() - before
        answer = in_namespace(b, (
            "import socket\n"
            f"c = socket.create_connection(('127.0.0.1', {echo.getsockname()[1]}), timeout=10)\n"
            "c.sendall(b'ping')\n"
            "print(c.recv(64).decode())\n"))
    finally:
        flood.kill()
        flood.wait()
        relay_a.close()
        relay_b.close()
        sink.close()
        echo.close()
    assert answer == "PING"
    assert relay_a.refused >= MAX_CONNECTIONS
    assert relay_b.refused == 0
    assert grown < MAX_CONNECTIONS * 2 * 1024 * 1024, grown
