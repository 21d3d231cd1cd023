"""The egress proxy records every connection and blocks none; shell downloads are counted."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from spu.schema import ToolCall, TrajectoryStep
from spu.tools.egress import EgressProxy, outside_requests, read_egress, shell_downloads
from tests.tools.pages import LocalSite


@pytest.mark.slow
def test_the_proxy_passes_plain_and_tunnelled_connections_and_records_them(
        tmp_path: Path) -> None:
    site = LocalSite()
    port = site.httpd.server_address[1]
    try:
        proxy = EgressProxy(tmp_path)
        proxy.allow([f"127.0.0.1:{port}"])  # a local endpoint the run may reach
        with proxy:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler(
                {"http": f"http://127.0.0.1:{proxy.port}"}))
            with opener.open(f"{site.url}/html", timeout=20) as answer:
                assert answer.status == 200 and b"Isoxazole" in answer.read()
            # A CONNECT tunnel (what HTTPS clients ask for) is passed through unopened.
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as raw:
                raw.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n"
                            f"Host: 127.0.0.1:{port}\r\n\r\n".encode())
                assert b" 200 " in raw.recv(1024)
                raw.sendall(b"GET /pdf HTTP/1.1\r\nHost: x\r\n\r\n")
                received = b""
                while b"%%EOF" not in received:
                    piece = raw.recv(65536)
                    assert piece, received
                    received += piece
                assert b"%PDF-" in received
        lines = list(read_egress(tmp_path / "egress.jsonl"))
        assert [(e["method"], e["host"], e["port"]) for e in lines] == [
            ("GET", "127.0.0.1", port), ("CONNECT", "127.0.0.1", port)]
        assert lines[0]["path"] == "/html" and lines[1]["path"] is None
        assert not any("refused" in line for line in lines)
    finally:
        site.kill()
    assert outside_requests(lines, {"api.test"}, {("127.0.0.1", port)}) == (0, [])
    assert outside_requests(lines, {"api.test"}, set()) == (2, [f"127.0.0.1:{port}"])


def test_shell_downloads_are_counted_from_the_shell_calls_only() -> None:
    steps = [TrajectoryStep(index=0, tool_calls=[
        ToolCall(name="Bash", arguments={"command": "pip install -q rdkit; wget http://x/y"}),
        ToolCall(name="exec_command", arguments={"cmd": "git clone https://g/r && ls"}),
        ToolCall(name="local_shell", arguments={"command": ["bash", "-lc", "curl -O u"]}),
        ToolCall(name="Write", arguments={"content": "curl is a tool"}),
        ToolCall(name="Bash", arguments={"command": "python -m pip --quiet install numpy"}),
        ToolCall(name="Bash", arguments={"command": "echo pipeline installed"}),
    ])]
    assert shell_downloads(steps) == 5


@pytest.mark.slow
def test_the_proxy_refuses_the_hosts_own_services_and_logs_the_attempt(tmp_path: Path) -> None:
    """The proxy runs on the host: it must not be the agent's way to the tracking server,
    a database or another run's service (loopback, private, link-local addresses)."""
    site = LocalSite()  # stands in for a host service the run was not given
    port = site.httpd.server_address[1]
    try:
        with EgressProxy(tmp_path) as proxy:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler(
                {"http": f"http://127.0.0.1:{proxy.port}"}))
            for url in (f"{site.url}/html", f"http://localhost:{port}/html"):
                with pytest.raises(urllib.error.HTTPError) as refused:
                    opener.open(url, timeout=20)
                assert refused.value.code == 403
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as raw:
                raw.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
                assert b" 403 " in raw.recv(1024)
        assert site.httpd.requests == []  # type: ignore[attr-defined]
    finally:
        site.kill()
    lines = list(read_egress(tmp_path / "egress.jsonl"))
    assert [(e["host"], e.get("refused")) for e in lines] == [
        ("127.0.0.1", "local address"), ("localhost", "local address"),
        ("127.0.0.1", "local address")]


@pytest.mark.slow
def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (``SigCgt`` in its status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_proxy_stopped_as_asked_exits_0_and_its_log_holds_no_traceback(
        tmp_path: Path) -> None:
    """proxy.py leaves on SIGTERM by ``sys.exit(0)``: that is its normal end, not a crash
    (the log is one of every run's artifacts: a traceback there reads as a failure).

    proxy.py writes its port file before it sets its SIGTERM handler: a stop in between
    ends it by the signal (-15, as the exit status says). The test waits for the handler.
    """
    import signal

    proxy = EgressProxy(tmp_path).start()
    assert proxy.pid is not None
    deadline = time.monotonic() + 30
    while not _catches(proxy.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.stop() == 0
    assert proxy.stop() is None  # stopped already
    log = (tmp_path / "egress.proxy.log").read_text()
    assert "Traceback" not in log and "SystemExit" not in log, log


def test_no_proxy_outlives_a_runner_killed_with_sigkill(tmp_path: Path) -> None:
    """The proxy runs in its own session; a ``kill -9`` of the runner must still end it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("import sys, time; from pathlib import Path; from spu.tools.egress import "
            "EgressProxy; p = EgressProxy(Path(sys.argv[1])).start(); "
            "print(p.pid, flush=True); time.sleep(120)")
    runner = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    assert runner.stdout is not None
    proxy_pid = int(runner.stdout.readline())
    os.kill(proxy_pid, 0)  # alive
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(proxy_pid, 0)
        except ProcessLookupError:
            break
        try:  # reap it if it became our child's orphan in our session (it did not)
            os.waitpid(proxy_pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.2)
    else:
        os.killpg(proxy_pid, signal.SIGKILL)
        pytest.fail("the egress proxy outlived its runner")


def test_every_address_of_the_hosts_own_interfaces_counts_as_local() -> None:
    """A host with a public address answers on it too: the proxy treats each address of its
    own interfaces as local, whatever its range; an address of no interface is not."""
    import subprocess

    from spu.tools.addresses import own_address
    from spu.tools.egress_plugin import _local

    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    addresses = found.stdout.split() + ["127.0.0.1"]
    for address in addresses:
        assert own_address(address) and _local(address), address
    # Documentation addresses (RFC 5737, 3849) that no interface of a test machine holds.
    assert not own_address("198.51.100.254") and not own_address("2001:db8::ffff")


def test_a_proxy_outlives_the_thread_that_started_the_forker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs start proxies from short-lived threads: the forker must not end with one."""
    import threading

    from spu.tools.egress import ProxyForker

    # A forker of its own, started by the short-lived thread below (not an earlier test's).
    monkeypatch.setattr(ProxyForker, "_shared", None)
    first: list[EgressProxy] = []
    starter = threading.Thread(target=lambda: first.append(EgressProxy(tmp_path / "a").start()))
    starter.start()
    starter.join(timeout=60)
    second = EgressProxy(tmp_path / "b").start()
    try:
        time.sleep(0.5)  # a SIGTERM sent at the thread's end would have landed by now
        assert ProxyForker.shared().poll(first[0].pid) is None  # type: ignore[arg-type]
        for proxy in (first[0], second):
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=5):  # type: ignore[arg-type]
                pass
        forker = ProxyForker.shared()
    finally:
        first[0].stop()
        second.stop()
    assert first[0].pid is None and second.pid is None
    assert forker._process.stdin is not None
    forker._process.stdin.close()  # the end of its starter: it ends too
    assert forker._process.wait(timeout=30) == 0


@pytest.mark.slow
def test_the_proxy_refuses_the_model_providers_hosts_before_any_lookup(tmp_path: Path) -> None:
    """With a model gateway the providers' API hosts are refused by name, logged with why."""
    from spu.tools.egress_plugin import MODEL_API_REFUSED

    with EgressProxy(tmp_path) as proxy:
        proxy.refuse_hosts(["api.anthropic.com", "API.OpenAI.com."])
        for target in ("api.anthropic.com:443", "api.openai.com.:443", "Api.Anthropic.Com:8443"):
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as raw:
                raw.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
                assert b" 403 " in raw.recv(1024), target
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(
            {"http": f"http://127.0.0.1:{proxy.port}"}))
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open("http://api.openai.com/v1/models", timeout=20)
        assert refused.value.code == 403
    lines = list(read_egress(tmp_path / "egress.jsonl"))
    assert [(e["host"], e["port"], e.get("refused")) for e in lines] == [
        ("api.anthropic.com", 443, MODEL_API_REFUSED), ("api.openai.com.", 443, MODEL_API_REFUSED),
        ("Api.Anthropic.Com", 8443, MODEL_API_REFUSED), ("api.openai.com", 80, MODEL_API_REFUSED)]
    assert all("address" not in e for e in lines)  # refused before any DNS lookup


def test_the_proxy_hands_its_port_over_without_a_file_polled_for(tmp_path: Path,
                                                                monkeypatch) -> None:
    """Invariant: the start returns with the port as soon as the proxy listens: the port
    comes through a pipe the forker waits on, not a file the runner looks for every 10 ms
    (72 of the proxy's 98 start-up samples were that wait). No sleep runs in the runner,
    and no port file is left in the run's folder."""
    from tests.clocks import clock_waits, record_sleeps

    slept = record_sleeps(monkeypatch)
    proxy = EgressProxy(tmp_path).start()
    monkeypatch.undo()
    try:
        assert proxy.port is not None
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10):
            pass  # it listens
        assert not (tmp_path / "egress.port").exists()
    finally:
        proxy.stop()
    assert [s for s in slept if s >= 0.005] == [] and clock_waits(slept) == [], slept


def test_a_proxy_that_ends_before_it_listens_is_one_clear_error_at_once(tmp_path: Path) -> None:
    """A proxy that cannot start (here: an option proxy.py does not know) ends the wait when
    it ends, not after the start's time limit: the error says it exited, and with what."""
    from spu.tools.egress import EgressProxyError, ProxyForker

    with pytest.raises(EgressProxyError, match="exited with code 2"):
        ProxyForker.shared().start(["--no-such-option"], tmp_path / "egress.proxy.log", {},
                                   tmp_path / "egress.port")
    assert not (tmp_path / "egress.port").exists()
