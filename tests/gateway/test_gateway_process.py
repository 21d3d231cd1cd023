"""The run's gateway in a process of its own: the host survives what an agent does to it.

Red team round four (issue 41), replayed as an agent would, on bubblewrap and Docker:

- H2: with the driver's soft ``nofile`` at 1,024, an agent holding about 1,100
  connections to its gateway made the accept loop fail, the gateway's loop died, its
  stop raised out of ``run_agent`` (no ``run.json``), and the leaked sockets failed the
  next runs with ``[Errno 24]``;
- H1: 40 requests naming an 8 MiB model wrote 671 MB to the record (and the runner read
  it whole);
- G5: four parallel ``n=8`` Chat Completions requests under a 0.01 USD cap spent 0.0601.

And a gateway that dies ends only its own run, as an ``infra_error`` that says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spu.gateway import read_requests
from spu.main import spec_from_config
from spu.runner import run_one
from spu.schema import Outcome
from tests.conftest import EXAMPLE_TASK
from tests.gateway.test_gateway_runs import COMMAND_AGENT
from tests.gateway.test_spend_multipliers import BillsEveryAnswer
from tests.gateway_doubles import stand_in
from tests.sandbox.conftest import docker_engine, require_backend  # noqa: F401

BACKENDS = ["local", pytest.param("docker", marks=[pytest.mark.docker])]
"""The two isolating backends."""

SUBMIT = '''
contract = json.loads(pathlib.Path(os.environ["SPU_TASK_DIR"], "contract.json").read_text())
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "rankings.json").write_text(json.dumps(
    {"task_id": contract["task_id"], "task_version": contract["task_version"],
     "rankings": [{"group_id": g["group_id"], "order": g["items"]}
                  for g in contract["groups"]]}))
'''
"""The end of every agent here: a valid file (so that the outcome says what the gateway did)."""

ASK = '''
def ask(path, body, token=os.environ["SPU_MODEL_TOKEN"]):
    request = urllib.request.Request(os.environ["SPU_MODEL_URL"] + path,
                                     data=json.dumps(body).encode(),
                                     headers={"x-api-key": token,
                                              "content-type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return str(exc)
'''

HOLDS_CONNECTIONS = '''#!/usr/bin/env python3
"""Hold 1,100 connections to the model gateway, then ask it once and submit."""
import json, os, pathlib, resource, socket, time, urllib.error, urllib.parse, urllib.request
''' + ASK + '''
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
where = urllib.parse.urlsplit(os.environ["SPU_MODEL_URL"])
held, stopped = [], None
for _ in range(1100):
    try:
        held.append(socket.create_connection((where.hostname, where.port), timeout=10))
    except OSError as exc:
        stopped = str(exc)
        break
time.sleep(3)  # the gateway's accept loop meets its limit meanwhile
for connection in held:
    connection.close()
status, deadline = None, time.monotonic() + 60
while status != 200 and time.monotonic() < deadline:
    status = ask("/v1/messages", {"model": "presented_order", "max_tokens": 100,
                                  "messages": [{"role": "user", "content": "Rank."}]})
    time.sleep(0 if status == 200 else 1)
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "probe.json").write_text(
    json.dumps({"held": len(held), "stopped": stopped, "status": status}))
''' + SUBMIT

LONG_MODEL_NAMES = '''#!/usr/bin/env python3
"""Forty requests naming a model of 8 MiB, then submit."""
import json, os, pathlib, urllib.error, urllib.request
''' + ASK + '''
name = "m" * (8 * 1024 * 1024)
statuses = [ask("/v1/messages", {"model": name, "max_tokens": 16, "messages": []})
            for _ in range(40)]
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "probe.json").write_text(json.dumps(statuses))
''' + SUBMIT

PARALLEL_CHOICES = '''#!/usr/bin/env python3
"""Four Chat Completions requests at once, each asking for eight answers, then submit."""
import json, os, pathlib, threading, urllib.error, urllib.request
''' + ASK + '''
statuses = []
body = {"model": "m", "n": 8, "max_tokens": 375,
        "messages": [{"role": "user", "content": "Rank."}]}
threads = [threading.Thread(target=lambda: statuses.append(ask("/chat/completions", body)))
           for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "probe.json").write_text(json.dumps(statuses))
''' + SUBMIT

KEEPS_ASKING = '''#!/usr/bin/env python3
"""Submit, then ask the model every 0.2 s until stopped (its gateway dies meanwhile)."""
import json, os, pathlib, time, urllib.error, urllib.request
''' + ASK + SUBMIT + '''
while True:
    ask("/v1/messages", {"model": "presented_order", "max_tokens": 100,
                         "messages": [{"role": "user", "content": "Rank."}]})
    time.sleep(0.2)
'''


@pytest.fixture
def driver_nofile_1024() -> Iterator[None]:
    """The driver (this process) with a soft ``nofile`` of 1,024, a common default."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _agent(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o755)
    return path


SCRIPTED = ("model=scripted", "model.api_model=presented_order")


def _run(compose, tmp_path: Path, backend: str, agent: Path, *overrides: str,  # noqa: ANN001, ANN202
         model: tuple[str, ...] = SCRIPTED):
    cfg = compose("harness=command", f"harness.entrypoint={agent}", *model,
                  f"task={EXAMPLE_TASK.name}", f"sandbox={backend}", "limits.time_s=180",
                  "limits.gpus=0", *overrides)
    record = run_one(spec_from_config(cfg))
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    assert (run_dir / "run.json").is_file()
    return record, run_dir


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _tcp_sockets() -> set[str]:
    """This process's TCP sockets (their inodes): a gateway's socket left behind is one."""
    tcp = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            tcp |= {line.split()[9] for line in f.read().splitlines()[1:]}
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in tcp:
            mine.add(target[8:-1])
    return mine


class DescriptorPeak:
    """The most descriptors this process (the driver) held while the ``with`` block ran;
    ``None`` if it ran out of them (the sampling itself then fails: EMFILE)."""

    def __init__(self) -> None:
        self.peak: int | None = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            try:
                count = _open_descriptors()
            except OSError:  # too many open files: the driver is at its limit
                self.peak = None
                return
            self.peak = max(self.peak or 0, count)

    def __enter__(self) -> DescriptorPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def _containers_left(backend: str) -> list[str]:
    """Containers this process made that still exist (Docker only)."""
    if backend != "docker":
        return []
    import docker
    from spu.sandbox.docker import OWNER_LABEL

    owner = f"{socket.gethostname()}:{os.getpid()}"
    client = docker.from_env()
    try:
        return [c.name for c in client.containers.list(
            all=True, filters={"label": f"{OWNER_LABEL}={owner}"})]
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_holding_1100_connections_leaves_its_driver_and_the_next_run_whole(
        request: pytest.FixtureRequest, compose, tmp_path: Path, backend: str,
        driver_nofile_1024: None) -> None:
    """Agent (H2): holds 1,100 connections to its gateway, the driver's soft ``nofile`` at
    1,024; then asks once and submits.

    Holds: the connections are not the driver's (which stays clear of its limit; before,
    it ran out): the run's relay of its host ports (in the driver) holds at most 128 of
    them, passed on to the gateway (its own limit is met directly in
    :func:`test_a_gateway_process_meets_its_own_descriptor_limit_and_serves_on`); the
    honest request then gets its 200; the run is recorded; the driver holds no socket more
    than before; the next run of the sweep is valid.
    """
    require_backend(request, backend)
    honest = _agent(tmp_path, "honest.py", COMMAND_AGENT)
    _run(compose, tmp_path, backend, honest)  # the driver's own connections made once
    before = _tcp_sockets()
    with DescriptorPeak() as driver:
        record, run_dir = _run(compose, tmp_path, backend,
                               _agent(tmp_path, "holds.py", HOLDS_CONNECTIONS), "repeat=1")
    # Not the agent's: the driver's own, and the relay's two a connection, at most
    # MAX_CONNECTIONS (before, the driver ran out: no peak).
    from spu.sandbox.relay import MAX_CONNECTIONS

    assert driver.peak is not None and driver.peak < 384 + 2 * MAX_CONNECTIONS, driver.peak
    probe = json.loads((run_dir / "output" / "probe.json").read_text())
    assert probe["held"] == 1100, probe
    assert record.outcome is Outcome.valid, (record.outcome, record.notes, probe)
    assert probe["status"] == 200, probe
    assert _tcp_sockets() <= before  # no socket of the run left in the driver
    after, _ = _run(compose, tmp_path, backend, honest, "repeat=2")
    assert after.outcome is Outcome.valid and after.attempt == 1, (after.outcome, after.notes)
    assert _tcp_sockets() <= before
    assert _containers_left(backend) == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_forty_8_mib_model_names_leave_a_small_record(
        request: pytest.FixtureRequest, compose, tmp_path: Path, backend: str) -> None:
    """Agent (H1): 40 requests naming a model of 8 MiB. Holds: each refused (403), the
    record a few kilobytes (each name cut), the run recorded valid."""
    require_backend(request, backend)
    record, run_dir = _run(compose, tmp_path, backend,
                           _agent(tmp_path, "names.py", LONG_MODEL_NAMES))
    statuses = json.loads((run_dir / "output" / "probe.json").read_text())
    assert statuses == [403] * 40, statuses
    record_file = run_dir / "model" / "requests.jsonl"
    assert record_file.stat().st_size < 100_000
    entries = read_requests(record_file)
    assert len(entries) == 40 and all(len(e.model or "") <= 256 for e in entries)
    assert record.outcome is Outcome.valid, (record.outcome, record.notes)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_four_parallel_n_8_requests_stay_within_the_spend_cap(
        request: pytest.FixtureRequest, compose, tmp_path: Path, backend: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent (G5): four Chat Completions requests at once, ``n=8`` each, under
    ``limits.max_cost_usd=0.01``, against a provider that bills every answer. Holds: one
    runs (0.015 USD: past the cap alone, as one request may be), three are refused at
    the cap; the run ends ``cost_limit`` (before: all four ran, 0.06 USD)."""
    require_backend(request, backend)
    monkeypatch.setenv("SPU_TEST_PROVIDER_KEY", "sk-stand-in")
    BillsEveryAnswer.seen = []
    with stand_in(BillsEveryAnswer, backlog=16) as provider:
        record, run_dir = _run(
            compose, tmp_path, backend, _agent(tmp_path, "choices.py", PARALLEL_CHOICES),
            "limits.max_cost_usd=0.01", model=(
                "model=scripted", "model.provider=router", "model.api=openai-chat",
                "model.api_model=m", f"model.base_url={provider}/v1",
                "model.api_key_env=SPU_TEST_PROVIDER_KEY",
                # the scripted model is free; nominal prices (USD per million) bill it
                "model.prices.input=1.0", "model.prices.output=5.0"))
    statuses = sorted(json.loads((run_dir / "output" / "probe.json").read_text()))
    assert statuses == [200, 400, 400, 400], statuses
    assert len(BillsEveryAnswer.seen) == 1
    assert record.cost_usd is not None and record.cost_usd <= 0.01 + 0.0151, record.cost_usd
    assert record.outcome is Outcome.cost_limit, (record.outcome, record.notes)


def _kill_the_gateway_once_it_serves(runs: Path, done: threading.Event) -> None:
    """SIGKILL the run's gateway process (as a crash, or the kernel's OOM killer would)."""
    while not done.is_set():
        for found in runs.glob("*/model/gateway.json"):
            said = json.loads(found.read_text() or "{}")
            if said.get("pid") and (found.parent / "requests.jsonl").exists():
                os.kill(int(said["pid"]), signal.SIGKILL)
                return
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gateway_that_dies_ends_only_its_own_run_as_an_infra_error(
        request: pytest.FixtureRequest, compose, tmp_path: Path, backend: str) -> None:
    """The gateway process is killed while its agent keeps asking. Holds: the agent is
    stopped then (not at its time limit), the run recorded ``infra_error`` naming the
    gateway's end; nothing of it is left (no container, no listening socket), and the
    next run is valid."""
    require_backend(request, backend)
    done = threading.Event()
    killer = threading.Thread(target=_kill_the_gateway_once_it_serves,
                              args=(tmp_path / "outputs" / "runs", done), daemon=True)
    killer.start()
    try:
        record, run_dir = _run(compose, tmp_path, backend,
                               _agent(tmp_path, "asks.py", KEEPS_ASKING))
    finally:
        done.set()
    assert not record.process.timed_out, record.process  # stopped when its gateway died
    assert record.outcome is Outcome.infra_error, (record.outcome, record.notes)
    assert any("model gateway process ended" in n and "SIGKILL" in n for n in record.notes), \
        record.notes
    port = json.loads((run_dir / "model" / "gateway.json").read_text())["port"]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert _containers_left(backend) == []
    honest, _ = _run(compose, tmp_path, backend, _agent(tmp_path, "honest.py", COMMAND_AGENT),
                     "repeat=1")
    assert honest.outcome is Outcome.valid, (honest.outcome, honest.notes)


def _limits_of(pid: int) -> dict[str, str]:
    """``/proc/PID/limits``: each limit's name and its soft value."""
    rows = Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]
    return {row[:26].strip(): row[26:47].strip() for row in rows}


def test_a_runs_gateway_is_a_process_of_its_own_in_the_runs_service_group(
        tmp_path: Path) -> None:
    """The gateway runs outside the driver, in the run's service cgroup (where one can be
    made) once it serves a request (it joins as it starts listening, before it reads one),
    its descriptors and file sizes bounded; stopped, it is gone and its record whole."""
    from spu.config import ModelConfig
    from spu.gateway.process import OPEN_FILES, file_size_limit
    from spu.gateway.session import GatewaySession
    from spu.sandbox.base import RunLimits
    from spu.sandbox.limits import ServiceGroup

    limits = RunLimits(time_s=60, memory_gb=1, cpus=1)
    group = ServiceGroup(limits, "gateway-test")
    session = GatewaySession(ModelConfig(name="scripted", provider="scripted"), "anthropic",
                             tmp_path / "run", limits=limits, group=group).start()
    try:
        pid = session.gateway.pid
        assert pid != os.getpid()
        import httpx

        answer = httpx.get(session.gateway.url() + "/v1/models", timeout=30, trust_env=False)
        assert answer.status_code == 401  # served: it has joined its group
        cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        assert group.mechanism != "cgroup" or "gateway-test-services" in cgroups, cgroups
        limit = _limits_of(pid)
        assert limit["Max open files"] == str(OPEN_FILES)
        assert limit["Max file size"] == str(file_size_limit(session.cfg))
        if group.mechanism != "cgroup":
            assert limit["Max address space"] == str(group.memory_bytes)
        url = session.gateway.url()
    finally:
        session.close()
        group.cleanup()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


DRIVER = '''
import sys, time
from pathlib import Path
from spu.config import ModelConfig
from spu.gateway.session import GatewaySession
session = GatewaySession(ModelConfig(name="m", provider="anthropic", api_model="m",
                                     base_url="http://127.0.0.1:9"), "anthropic",
                         Path(sys.argv[1])).start()
print(session.gateway.pid, session.gateway.port, session.gateway.token, flush=True)
time.sleep(600)
'''


def test_a_gateway_whose_driver_is_killed_stops_and_keeps_its_record(tmp_path: Path) -> None:
    """The driver is killed (``kill -9``) while its run's gateway serves. Holds: the
    gateway sees its channel end, stops (its port closed) and its record holds what it
    answered; no process of it is left."""
    import subprocess
    import sys

    import httpx

    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "run")],
                              stdout=subprocess.PIPE, text=True)
    assert driver.stdout is not None
    pid, port, token = driver.stdout.readline().split()
    answer = httpx.post(f"http://127.0.0.1:{port}/v1/messages", headers={"x-api-key": token},
                        json={"model": "other", "messages": []}, timeout=30, trust_env=False)
    assert answer.status_code == 403
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # its channel ends with the driver: it stops, then exits
    assert not Path(f"/proc/{pid}").exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(port)), timeout=5)
    (entry,) = read_requests(tmp_path / "run" / "model" / "requests.jsonl")
    assert entry.error_type == "gateway.model_refused"


def test_the_driver_raises_its_soft_open_files_limit_at_start(tmp_path: Path) -> None:
    """``python -m spu.main`` (and ``spu run``) started with a soft ``nofile`` of 1,024
    raise it to the hard limit before anything else (Ray's run actors do the same)."""
    import subprocess
    import sys

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 1024:
        pytest.skip(f"the hard nofile limit here is {hard}: nothing to raise")
    probe = ("import resource, sys\nfrom spu.main import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], file=sys.stderr)\n")
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)))
    assert done.stderr.strip().splitlines()[-1] == str(hard), done.stderr[-2000:]


FORKED_DRIVER = '''
import os, sys
from spu.gateway.process import GatewayHost
parent = GatewayHost.shared()
child = os.fork()
if child == 0:
    own = GatewayHost.shared()
    os._exit(0 if own is not parent and own._process.pid != parent._process.pid else 3)
_, status = os.waitpid(child, 0)
sys.exit(os.waitstatus_to_exitcode(status))
'''


def test_a_forked_driver_gets_a_gateway_host_of_its_own() -> None:
    """A driver forked after its gateway host started (a launcher's worker pool) would
    share the host's socket with its parent: their requests and answers would cross, and
    a lock held at the fork would never be released. Holds: the fork starts a host of its
    own."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FORKED_DRIVER], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_gateway_whose_loop_died_stops_without_raising(tmp_path: Path) -> None:
    """H2's last step: the gateway's event loop died (there, the accept loop's failure
    killed it), and ``stop`` then woke a closed loop: the RuntimeError escaped
    ``run_agent``. Holds: stopping (and asking to stop) a gateway whose loop is gone
    returns quietly."""
    from spu.gateway.server import ModelGateway

    gateway = ModelGateway(tmp_path, upstream="http://127.0.0.1:9", api_model="m").start()
    server, thread = gateway._server, gateway._thread
    assert server is not None and thread is not None and server._loop is not None
    server._loop.call_soon_threadsafe(server._loop.stop)  # the loop dies under the server
    thread.join(timeout=60)
    assert not thread.is_alive() and server._loop.is_closed()
    gateway.stop()
    gateway.request_stop()


def test_a_gateway_process_meets_its_own_descriptor_limit_and_serves_on(tmp_path: Path) -> None:
    """H2 at the gateway itself: 1,100 connections straight to a run's gateway process
    (no relay between). Holds: they are the gateway's, not this driver's; it meets its own
    ``RLIMIT_NOFILE`` (:data:`~spu.gateway.process.OPEN_FILES`) and logs it; once they end
    it serves on (a request gets its answer); stopped, its port is closed."""
    import httpx

    from spu.config import ModelConfig
    from spu.gateway.process import OPEN_FILES
    from spu.gateway.session import GatewaySession
    from spu.sandbox.base import RunLimits

    session = GatewaySession(ModelConfig(name="m", provider="anthropic", api_model="m",
                                         base_url="http://127.0.0.1:9"), "anthropic",
                             tmp_path / "run", limits=RunLimits(time_s=60, memory_gb=1, cpus=1))
    session.start()
    before = _open_descriptors()
    held: list[socket.socket] = []
    try:
        gateway = session.gateway
        assert _limits_of(gateway.pid)["Max open files"] == str(OPEN_FILES)
        held = [socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
                for _ in range(1100)]
        answer = None
        with contextlib.suppress(httpx.HTTPError):  # the gateway is at its limit now
            answer = httpx.get(gateway.url() + "/v1/models", timeout=5, trust_env=False)
        assert answer is None or answer.status_code in (401, 503), answer
        log_text = (tmp_path / "run" / "model" / "gateway.log").read_text()
        assert "Too many open files" in log_text
        for connection in held:
            connection.close()
        held = []
        answer = httpx.get(gateway.url() + "/v1/models", timeout=30, trust_env=False)
        assert answer.status_code == 401  # served on: no token, the gateway's own answer
        url = gateway.url()
    finally:
        for connection in held:
            connection.close()
        session.close()
    assert _open_descriptors() <= before
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5)
