"""The largest request the gateway takes reaches it from inside the sandbox, on both backends.

The agent reaches its gateway through pasta. Debian 12's pasta (``passt`` 2023-03-09)
stops moving a connection's last bytes for good when the receiving socket is full at the
moment the sender has sent everything (fixed upstream in May 2024): bodies of 16 MiB and
more stalled until the gateway answered 408. The gateway's socket now holds the whole of
its largest request (:func:`spu.serving.listening_socket`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spu.config import ModelGatewayConfig
from spu.gateway import read_requests
from spu.main import spec_from_config
from spu.runner import run_one
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import docker_engine, require_backend  # noqa: F401

BACKENDS = ["local", pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow])]
SIZE = ModelGatewayConfig().max_request_bytes
"""``model_gateway.max_request_bytes``: 32 MiB, the largest body the gateway reads."""
REQUESTS = 3
"""Requests of that size; before the fix each stalled more often than not."""

LARGE_AGENT = '''#!/usr/bin/env python3
"""Send requests of exactly SIZE bytes to the run's gateway; note each status; submit."""
import json, os, pathlib, urllib.error, urllib.request

SIZE, REQUESTS = {size}, {requests}
head = json.dumps({{"model": "presented_order", "max_tokens": 16, "stream": False,
                   "messages": [{{"role": "user", "content": ""}}]}})
before, after = head.split('""')
body = (before + '"' + "x" * (SIZE - len(head)) + '"' + after).encode()
assert len(body) == SIZE
opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
out = pathlib.Path(os.environ["SPU_OUTPUT_DIR"])
statuses = []
for _ in range(REQUESTS):
    request = urllib.request.Request(
        os.environ["SPU_MODEL_URL"] + "/v1/messages", data=body,
        headers={{"x-api-key": os.environ["SPU_MODEL_TOKEN"],
                 "content-type": "application/json"}})
    try:
        with opener.open(request, timeout=60) as answer:
            answer.read()
            statuses.append(answer.status)
    except urllib.error.HTTPError as exc:
        statuses.append(exc.code)
    except OSError as exc:
        statuses.append(str(exc))
(out / "statuses.json").write_text(json.dumps(statuses))
contract = json.loads(pathlib.Path(os.environ["SPU_TASK_DIR"], "contract.json").read_text())
(out / "rankings.json").write_text(json.dumps(
    {{"task_id": contract["task_id"], "task_version": contract["task_version"],
     "rankings": [{{"group_id": g["group_id"], "order": g["items"]}}
                  for g in contract["groups"]]}}))
'''


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_request_of_the_gateways_largest_size_passes_through_pasta(
        request: pytest.FixtureRequest, compose, tmp_path: Path, backend: str) -> None:
    """Three requests of exactly ``model_gateway.max_request_bytes`` from inside the
    sandbox (network through pasta) each reach the gateway whole and are answered 200."""
    require_backend(request, backend)
    agent = tmp_path / "large_agent.py"
    agent.write_text(LARGE_AGENT.format(size=SIZE, requests=REQUESTS))
    agent.chmod(0o755)
    cfg = compose("harness=command", f"harness.entrypoint={agent}", "model=scripted",
                  "model.api_model=presented_order", f"task={EXAMPLE_TASK.name}",
                  f"sandbox={backend}", "sandbox.network=true", "limits.time_s=240",
                  "limits.gpus=0")
    record = run_one(spec_from_config(cfg))
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    assert "network:pasta-filtered" in record.sandbox.isolation, record.sandbox
    entries = read_requests(run_dir / "model" / "requests.jsonl")
    seen = [(e.status, e.bytes_in, e.error_type) for e in entries]
    assert seen == [(200, SIZE, None)] * REQUESTS, (seen, record.notes)
    statuses = (run_dir / "output" / "statuses.json").read_text()
    assert statuses == "[200, 200, 200]", statuses
