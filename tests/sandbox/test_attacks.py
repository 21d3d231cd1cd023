"""Adversarial agents against the run's network, disk, logs and process limits (issue 12).

One agent per attack, run through ``run_one`` (or the sandbox directly) in every isolating
backend, each test asserting that the attack fails and that nothing is lost:

- a port scan and HTTP to every listening TCP port of this machine, on every address it
  has, during a parallel sweep with an MLflow server like the launcher's: only the
  run's own host port answers, while a stand-in "internet host" (an address of
  198.18.0.0/15 in a network namespace the test makes) is reached;
- joining a Ray head started on this machine: its ports are unreachable;
- a disk filler: the run ends ``disk_limit`` and the host keeps at most the limit;
- a log flood: stdout and stderr are capped, head and tail kept, the run still scored;
- a fork bomb: held by the pids limit, nothing left behind.

Every address targeted is this machine's or in a namespace the test creates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spu.launch.resume import RETRIED_OUTCOMES
from spu.main import spec_from_config
from spu.runner import LIMIT_OUTCOMES, run_one
from spu.schema import Outcome, RunRecord
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import AGENTS, ISOLATING, bubblewrap_based, read_json, require_backend

pytestmark = pytest.mark.slow

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="network namespaces for the test need root and iproute2")


# --------------------------------------------------------------------------- host services


@contextlib.contextmanager
def http_server(host: str, body: bytes) -> Iterator[int]:
    """An HTTP server on this machine answering ``body``; yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def host_listening_ports() -> list[int]:
    """Every TCP port something listens on in this machine's network namespace."""
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(name).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def host_addresses() -> list[str]:
    """Every IPv4 address of this machine (loopback, interfaces, bridges, test links)."""
    listing = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True,
                                        text=True, check=True).stdout)
    return sorted({a["local"] for link in listing for a in link.get("addr_info", [])})


# --------------------------------------------------------------------------- running agents


def _spec(compose, backend: str, entrypoint: Path, *overrides: str):
    return spec_from_config(compose(
        "harness=command", f"harness.entrypoint={entrypoint}", f"sandbox={backend}",
        f"task={EXAMPLE_TASK.name}", "limits.cpus=1", "limits.gpus=0", "limits.grace_s=1",
        "limits.memory_gb=1", "limits.time_s=300", *overrides))


def _with_args(spec, args: list[str], repeat: int = 0):
    return dataclasses.replace(spec, repeat=repeat,
                               harness=dataclasses.replace(spec.harness, args=args))


def _saved(spec, record: RunRecord) -> dict:
    return json.loads((spec.output_root / "runs" / record.run_key / "run.json").read_text())


def _run_dir(spec, record: RunRecord) -> Path:
    return spec.output_root / "runs" / record.run_key


def _scan_args(targets: dict[str, str], exclude_ports: set[int] = frozenset()) -> list[str]:
    ports = [p for p in host_listening_ports() if p not in exclude_ports][:400]
    args = [f"--target={label}={address}" for label, address in targets.items()]
    return [*args, f"--scan-hosts={','.join(host_addresses())}",
            f"--scan-ports={','.join(map(str, ports))}"]


# --------------------------------------------------------------------------- the attacks


def other_name(name: str) -> str:
    return "b" if name == "a" else "a"


@needs_root
@pytest.mark.parametrize("backend", ISOLATING)
def test_port_scan_in_a_parallel_sweep_reaches_the_internet_and_its_own_port_only(
        backend, request, compose, internet_host, tmp_path) -> None:
    """Invariant: an agent reaches the internet and its own host ports, nothing else here.

    Two runs at once, each with one host port of its own, beside an MLflow server like
    the launcher's and servers on the host's loopback and on every host address. Each
    agent scans every listening port of the machine on every address it has.
    """
    require_backend(request, backend)
    from spu.launch.server import TrackingServer

    store = tmp_path / "mlflow"
    store.mkdir()
    tracking = TrackingServer(f"sqlite:///{store / 'mlflow.db'}", str(store / "artifacts"),
                              store / "server.log")
    tracking.start()
    try:
        with contextlib.ExitStack() as stack:
            own = {name: stack.enter_context(http_server("127.0.0.1", f"own-{name}".encode()))
                   for name in ("a", "b")}
            unlisted = stack.enter_context(http_server("127.0.0.1", b"unlisted-loopback"))
            everywhere = stack.enter_context(http_server("0.0.0.0", b"every-host-address"))
            records: dict[str, RunRecord] = {}
            specs = {}
            for repeat, (name, other) in enumerate((("a", "b"), ("b", "a"))):
                targets = {
                    "internet": f"{internet_host.address}:{internet_host.port}",
                    "own": f"127.0.0.1:{own[name]}",
                    "other_run": f"127.0.0.1:{own[other]}",
                    "unlisted": f"127.0.0.1:{unlisted}",
                    "mlflow": f"127.0.0.1:{tracking.port}",
                    **{f"everywhere@{a}": f"{a}:{everywhere}" for a in host_addresses()},
                }
                spec = _spec(compose, backend, AGENTS / "net_probe.py",
                             f"sandbox.host_ports=[{own[name]}]")
                specs[name] = _with_args(spec, _scan_args(targets), repeat=repeat)

            def _run(name: str) -> None:
                records[name] = run_one(specs[name])

            threads = [threading.Thread(target=_run, args=(n,)) for n in specs]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            # The host's services still answer as before: nothing was taken down.
            import urllib.request

            with urllib.request.urlopen(f"{tracking.uri}/health", timeout=10) as answer:
                assert answer.status == 200
    finally:
        tracking.stop()
    for name in ("a", "b"):
        record, spec = records[name], specs[name]
        report = read_json(_run_dir(spec, record) / "output" / "net.json")
        targets = report["targets"]
        assert internet_host.token in (targets["internet"] or ""), "the internet is reachable"
        assert f"own-{name}" in (targets["own"] or ""), "its own host port is reachable"
        unreached = {k: v for k, v in targets.items() if k not in ("internet", "own")}
        assert all(v is None for v in unreached.values()), unreached
        # The scan: only its own host ports (its port, its tools service and egress
        # proxy), forwarded at 127.0.0.1, answer; the other run's are out of reach.
        saved = _saved(spec, record)
        ports = set(saved["sandbox"]["host_ports"])
        other_ports = set(_saved(specs[other_name(name)], records[other_name(name)])
                          ["sandbox"]["host_ports"])
        assert own[name] in ports and not ports & other_ports
        assert report["scanned"] > 10
        assert {(h, p) for h, p, _ in report["open"]} == {("127.0.0.1", p) for p in ports}, (
            report["open"])
        assert report["own_listeners"] == sorted(ports)
        assert saved["sandbox"]["network"] == "pasta-filtered"
        assert "network:pasta-filtered" in saved["sandbox"]["isolation"]
        assert record.outcome is Outcome.no_file and record.process.error is None


@pytest.fixture(scope="module")
def ray_head() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A Ray head on this machine (its process and port), shared by the backends' probes."""
    ray = str(Path(sys.executable).parent / "ray")
    if not os.path.exists(ray):
        pytest.skip("ray is not installed")
    import socket

    from spu.launch.server import free_port

    port = free_port()
    temp = Path(f"/tmp/spu-ray-{uuid.uuid4().hex[:6]}")
    head = subprocess.Popen(
        [ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--num-cpus=1", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}", "--block"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(600):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if head.poll() is not None:
                pytest.skip("the Ray head did not start here")
            time.sleep(0.2)
        yield head, port
    finally:
        # SIGKILL: ``ray start --block`` takes more than 30 s to end on SIGTERM.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            head.wait(timeout=30)
        _kill_processes_mentioning(str(temp))
        shutil.rmtree(temp, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("backend", ISOLATING)
def test_ray_head_on_this_machine_cannot_be_joined(backend, request, compose, ray_head,
                                                   tmp_path) -> None:
    """Invariant: no port of a Ray head on this machine answers the agent (no escape to root)."""
    require_backend(request, backend)
    head, port = ray_head
    spec = _spec(compose, backend, AGENTS / "net_probe.py")
    targets = {f"ray@{a}": f"{a}:{port}" for a in host_addresses()}
    record = run_one(_with_args(spec, _scan_args(targets)))
    assert head.poll() is None, "the Ray head still runs"
    report = read_json(_run_dir(spec, record) / "output" / "net.json")
    assert all(v is None for v in report["targets"].values()), report["targets"]
    # Only the run's own services (its audited tools and egress proxy) answer.
    ports = set(_saved(spec, record)["sandbox"]["host_ports"])
    assert port not in ports
    assert {(h, p) for h, p, _ in report["open"]} == {("127.0.0.1", p) for p in ports}, (
        "no other port of this machine answers an agent")
    assert record.process.error is None


def _kill_processes_mentioning(needle: str) -> None:
    """SIGKILL the processes this test started (their command line names its temp folder)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle.encode() in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), 9)


@pytest.mark.parametrize("backend", ISOLATING)
def test_disk_filler_ends_as_disk_limit_and_the_host_keeps_at_most_the_limit(
        backend, request, compose) -> None:
    """Invariant: an agent cannot write more than ``limits.disk_gb``; the valid file it wrote
    before is scored like a timeout's (issue 30), and the outcome stays ``disk_limit``."""
    require_backend(request, backend)
    spec = _spec(compose, backend, AGENTS / "filler.py", "limits.disk_gb=0.05")
    record = run_one(spec)
    run_dir = _run_dir(spec, record)
    assert record.outcome is Outcome.disk_limit and record.process.disk_full
    assert record.scored, "a file left before a resource limit is scored (issue 30)"
    assert record.grade.status.value == "valid"
    assert Outcome.disk_limit in LIMIT_OUTCOMES and "disk_limit" in RETRIED_OUTCOMES
    limits = record.sandbox.limits
    assert limits is not None and limits.disk_gb == 0.05
    if os.geteuid() == 0:
        assert limits.disk_mechanism == "loop-ext4"
    # Nothing left mounted, no image left, and the files kept are within the limit.
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(run_dir) not in mounts
    assert not list(run_dir.glob(".spu-disk*"))
    kept = sum(p.stat().st_blocks * 512 for p in (run_dir / "workspace").rglob("*")
               if p.is_file())
    assert 0.5 * 0.05 * 2**30 < kept <= 0.05 * 2**30, kept
    assert (run_dir / "output" / "rankings.json").is_file(), "the submission is kept"
    assert _saved(spec, record)["outcome"] == "disk_limit"


@pytest.mark.parametrize("backend", ISOLATING)
def test_log_flood_is_capped_with_head_tail_and_a_note(backend, request, compose) -> None:
    """Invariant: stdout and stderr never exceed ``limits.log_mb``; the run still counts."""
    require_backend(request, backend)
    spec = _spec(compose, backend, AGENTS / "flood.py", "limits.log_mb=1")
    record = run_one(spec)
    logs = _run_dir(spec, record) / "logs"
    stdout = (logs / "agent.stdout").read_bytes()
    stderr = (logs / "agent.stderr").read_bytes()
    note = 200  # the truncation line
    assert len(stdout) <= 2**20 + note and len(stderr) <= 2**20 + note
    assert stdout.startswith(b"FLOOD-FIRST-LINE\n") and stdout.endswith(b"FLOOD-LAST-LINE\n")
    assert b"bytes of this log dropped here" in stdout and b"dropped here" in stderr
    # 8 MiB each way were written, 1 MiB each kept.
    assert record.process.log_dropped_bytes >= 2 * 7 * 2**20
    assert record.outcome is Outcome.valid and record.scored
    assert record.sandbox.limits is not None and record.sandbox.limits.log_mb == 1


@pytest.mark.parametrize("backend", ISOLATING)
def test_fork_bomb_is_held_by_the_pids_limit(backend, request, compose) -> None:
    """Invariant: a fork bomb meets the pids limit, ends, and leaves no process behind."""
    require_backend(request, backend)
    if bubblewrap_based(backend):
        from spu.sandbox import RunLimits
        from spu.sandbox.limits import LimitEnforcer

        probe = LimitEnforcer(RunLimits(), "pids-probe", pids_limit=64)
        enforced = probe.pids_enforced
        probe.cleanup()
        if enforced is None:
            pytest.skip("no writable pids cgroup here: a fork bomb would not be held")
    spec = _spec(compose, backend, AGENTS / "forkbomb.py", "sandbox.pids_limit=64",
                 "limits.time_s=60")
    record = run_one(spec)
    report = read_json(_run_dir(spec, record) / "output" / "forkbomb.json")
    assert report["refused"] > 0 and report["made"] < 64
    assert record.outcome is Outcome.no_file and not record.process.timed_out
    time.sleep(1)
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit()
            and b"forkbomb.py" in _cmdline(p)]
    assert left == [], "every process of the bomb is gone"


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""
