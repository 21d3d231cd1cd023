"""The relay that gives a sandbox its host ports: whole transfers, bounded, nothing left over.

Each test makes its own network namespace (``unshare --net``) and its own servers on this
machine's loopback.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from spu.sandbox import relay
from spu.sandbox.relay import HostPortRelay, RelayError, sockets_in_namespace

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
    reason="joining a network namespace needs root, unshare and nsenter")

SIZE = 32 * 1024 * 1024
"""The model gateway's largest request (``model_gateway.max_request_bytes``)."""


@pytest.fixture
def namespace() -> Iterator[int]:
    """A process in a network namespace of its own, loopback up; its process id."""
    holder = subprocess.Popen(["unshare", "--net", "sh", "-c",
                               "ip link set lo up && echo up && exec sleep 600"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
    yield holder.pid
    holder.kill()
    holder.wait()


def slow_server(delay_s: float) -> tuple[socket.socket, list[int]]:
    """A host server that waits ``delay_s`` before it reads, then answers the byte count."""
    server = socket.create_server(("127.0.0.1", 0))
    got: list[int] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            time.sleep(delay_s)  # the agent's side stays full meanwhile
            n = 0
            while n < SIZE and (chunk := conn.recv(1 << 20)):
                n += len(chunk)
            got.append(n)
            conn.sendall(f"{n}\n".encode())

    threading.Thread(target=serve, daemon=True).start()
    return server, got


def in_namespace(pid: int, code: str, timeout: float = 60) -> str:
    done = subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_request_of_32_mib_reaches_a_host_service_that_reads_late(namespace: int) -> None:
    """Invariant: every byte the agent sends reaches the service, however late it reads,
    and the answer comes back. (pasta's own forwarding of host ports stalled here for good:
    its last bytes stayed in its pipe once the service had been full.)"""
    server, got = slow_server(delay_s=1.0)
    port = server.getsockname()[1]
    forward = HostPortRelay(sockets_in_namespace(f"/proc/{namespace}/ns/net", [port])).start()
    try:
        answer = in_namespace(namespace, (
            "import socket\n"
            f"s = socket.create_connection(('127.0.0.1', {port}))\n"
            f"s.sendall(b'x' * {SIZE})\n"
            "print(s.recv(100).decode().strip())\n"))
    finally:
        forward.close()
        server.close()
    assert answer == str(SIZE) and got == [SIZE]


def test_an_agent_that_closes_its_side_still_gets_the_answer(namespace: int) -> None:
    """A half-close is passed on: the service reads to the end, answers, the agent reads it."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    port = server.getsockname()[1]
    forward = HostPortRelay(sockets_in_namespace(f"/proc/{namespace}/ns/net", [port])).start()
    try:
        answer = in_namespace(namespace, (
            "import socket\n"
            f"s = socket.create_connection(('127.0.0.1', {port}))\n"
            "s.sendall(b'hello'); s.shutdown(socket.SHUT_WR)\n"
            "print(s.makefile().read())\n"))
    finally:
        forward.close()
        server.close()
    assert answer == "HELLO"


def test_connections_past_the_cap_are_closed_at_once(namespace: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: the agent opens connection after connection. Past ``MAX_CONNECTIONS`` open at
    once each is closed on arrival (each costs the run's process two descriptors); those
    within the cap keep working."""
    monkeypatch.setattr(relay, "MAX_CONNECTIONS", 3)
    server = socket.create_server(("127.0.0.1", 0), backlog=16)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(16)],
                     daemon=True).start()
    port = server.getsockname()[1]
    forward = HostPortRelay(sockets_in_namespace(f"/proc/{namespace}/ns/net", [port])).start()
    try:
        report = in_namespace(namespace, (
            "import socket, time\n"
            f"conns = [socket.create_connection(('127.0.0.1', {port})) for _ in range(5)]\n"
            "time.sleep(0.5)\n"
            "alive = []\n"
            "for c in conns:\n"
            "    c.setblocking(False)\n"
            "    try:\n"
            "        alive.append(c.recv(1) != b'')\n"
            "    except BlockingIOError:\n"
            "        alive.append(True)\n"
            "    except OSError:\n"
            "        alive.append(False)\n"
            "print(alive)\n"))
    finally:
        forward.close()
        server.close()
    assert report == "[True, True, True, False, False]"
    assert forward.refused == 2


def test_a_closed_relay_leaves_no_port_open_and_no_thread(namespace: int) -> None:
    """Invariant: after ``close`` the port no longer answers in the namespace, and the
    relay's thread has ended."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    forward = HostPortRelay(sockets_in_namespace(f"/proc/{namespace}/ns/net", [port])).start()
    forward.close()
    server.close()
    answer = in_namespace(namespace, (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "    print('reached')\n"
        "except OSError:\n"
        "    print('refused')\n"))
    assert answer == "refused"
    assert not [t for t in threading.enumerate() if t.name.startswith("spu-host-port-relay")]


def test_a_namespace_that_is_gone_is_one_clear_error() -> None:
    """A sandbox that died before its network was attached: RelayError naming the cause."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(RelayError, match="could not be opened in its namespace"):
        sockets_in_namespace(f"/proc/{gone.pid}/ns/net", [40000])


def test_closing_with_connections_open_cuts_them_without_an_error(
        namespace: int, caplog: pytest.LogCaptureFixture) -> None:
    """A run that ends while its agent still holds kept-alive connections (a CLI's last
    request answered, the run's end seen at once on the agent's exit): ``close`` cuts them
    and logs nothing. Python 3.11's ``start_server`` logged each cancelled handler as an
    "Exception in callback" with a traceback on the run's console."""
    server = socket.create_server(("127.0.0.1", 0), backlog=8)
    accepted = threading.Semaphore(0)
    held: list[socket.socket] = []

    def serve() -> None:
        for _ in range(3):
            held.append(server.accept()[0])
            accepted.release()

    threading.Thread(target=serve, daemon=True).start()
    port = server.getsockname()[1]
    forward = HostPortRelay(sockets_in_namespace(f"/proc/{namespace}/ns/net", [port])).start()
    agent = subprocess.Popen(
        ["nsenter", "-t", str(namespace), "-n", sys.executable, "-c",
         "import socket, sys\n"
         f"conns = [socket.create_connection(('127.0.0.1', {port})) for _ in range(3)]\n"
         "print('open', flush=True)\n"
         "print([c.recv(1) for c in conns], flush=True)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None and agent.stdout.readline().strip() == "open"
        for _ in range(3):  # each reached the service: the relay holds both sides
            assert accepted.acquire(timeout=60)
        with caplog.at_level("DEBUG", logger="asyncio"):
            forward.close()
        cut = agent.stdout.readline().strip()
    finally:
        agent.kill()
        agent.wait()
        server.close()
        for conn in held:
            conn.close()
    assert cut == "[b'', b'', b'']"  # each connection ended for the agent
    assert [r for r in caplog.records if r.levelno >= 30] == []
