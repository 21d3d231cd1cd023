"""The agent kills its own gateway mid-stream, by its memory, on both backends.

The run's gateway is a process of its own in the run's service group: memory the run's
``memory_gb`` (at least 1 GiB). The agent writes a valid file, then keeps a streamed
answer going while a dozen threads send bodies of 30 MiB made of a million small JSON
objects each (cheap to send, costly to parse): the kernel kills the gateway in about a
second. Before the fix the run was an ``infra_error``: excluded and retried, so an agent
that disliked the file it wrote excluded its run at will, which the run's own memory limit
does not allow (``grading.outcome.LIMIT_OUTCOMES``). Now it is ``memory_limit`` (the run's
services' memory, the agent's doing), scored from the file written before; nothing of the
gateway is left (no process, no listening port, no container); the next run is valid.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from spu.schema import Outcome
from tests.gateway import test_gateway_process as process_tests
from tests.gateway.test_gateway_process import ASK, BACKENDS, SUBMIT, _agent, _run
from tests.gateway.test_gateway_runs import COMMAND_AGENT
from tests.sandbox.conftest import docker_engine, require_backend  # noqa: F401

pytestmark = pytest.mark.slow

FLOODS = '''#!/usr/bin/env python3
"""Stream answers while a dozen bodies of a million objects each reach the gateway."""
import json, os, pathlib, threading, urllib.error, urllib.request
''' + ASK + SUBMIT + '''
stop = threading.Event()
streams = []

def stream():
    body = {"model": "presented_order", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "Rank."}]}
    while not stop.is_set():
        streams.append(ask("/v1/messages", body))

block = '{"type": "text", "text": "a"}, '
count = 30 * 1024 * 1024 // len(block)
heavy = ('{"model": "presented_order", "max_tokens": 10, "messages": [{"role": "user", '
         '"content": [' + block * count + '{"type": "text", "text": "b"}]}]}').encode()
statuses = []

def flood():
    request = urllib.request.Request(
        os.environ["SPU_MODEL_URL"] + "/v1/messages", data=heavy,
        headers={"x-api-key": os.environ["SPU_MODEL_TOKEN"], "content-type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=120) as answer:
            statuses.append(answer.status)
    except urllib.error.HTTPError as exc:
        statuses.append(exc.code)
    except OSError as exc:
        statuses.append(type(exc).__name__)

streamer = threading.Thread(target=stream, daemon=True)
streamer.start()
threads = [threading.Thread(target=flood) for _ in range(12)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
stop.set()
pathlib.Path(os.environ["SPU_OUTPUT_DIR"], "probe.json").write_text(
    json.dumps({"floods": statuses, "streams": streams[-5:]}))
'''


def _memory_cgroup() -> bool:
    from spu.sandbox.base import RunLimits
    from spu.sandbox.limits import ServiceGroup

    group = ServiceGroup(RunLimits(time_s=10, memory_gb=1, cpus=1), "probe-memory")
    try:
        return group.mechanism == "cgroup"
    finally:
        group.cleanup()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_that_floods_its_gateways_memory_mid_stream_leaves_a_recorded_run(
        request: pytest.FixtureRequest, compose, tmp_path: Path, backend: str) -> None:
    require_backend(request, backend)
    sockets = process_tests._tcp_sockets()
    record, run_dir = _run(compose, tmp_path, backend, _agent(tmp_path, "floods.py", FLOODS),
                           "limits.memory_gb=1")
    said = json.loads((run_dir / "model" / "gateway.json").read_text())
    print("outcome", record.outcome, record.notes)
    if (run_dir / "output" / "probe.json").exists():
        print("probe", (run_dir / "output" / "probe.json").read_text()[:2000])
    if not _memory_cgroup():
        pytest.skip("no memory cgroup here: the gateway meets RLIMIT_AS, not the OOM killer")
    assert record.outcome is Outcome.memory_limit, (record.outcome, record.notes)
    assert record.scored, record.notes  # from the file it wrote before the flood
    assert any("model gateway" in n and "memory limit" in n for n in record.notes), \
        record.notes
    assert not _alive(int(said["pid"]))
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(said["port"])), timeout=5).close()
    assert process_tests._containers_left(backend) == []
    assert process_tests._tcp_sockets() <= sockets  # no socket of the run left in the driver
    assert not list(Path("/sys/fs/cgroup").glob(f"**/spu-{run_dir.name}*"))  # its groups
    honest, _ = _run(compose, tmp_path, backend, _agent(tmp_path, "honest.py", COMMAND_AGENT),
                     "repeat=1")
    assert honest.outcome is Outcome.valid, (honest.outcome, honest.notes)
