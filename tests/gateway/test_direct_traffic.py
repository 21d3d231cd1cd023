"""A run with a model gateway cannot reach the model providers directly (issue 23).

The agent's way to its model is the gateway; through the egress proxy, a ``CONNECT`` to a
provider's API host is refused (403, before any DNS lookup: no network is needed) and
logged in ``tools/egress.jsonl`` with the reason, on both backends.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from spu.main import spec_from_config
from spu.runner import run_one
from spu.tools.egress import read_egress
from spu.tools.egress_plugin import MODEL_API_REFUSED
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import docker_engine, require_backend  # noqa: F401

pytestmark = pytest.mark.slow

DIRECT_AGENT = '''#!/usr/bin/env python3
"""Try the providers' API hosts through the proxy the run gives, and report the answers."""
import json, os, socket, urllib.parse

proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
answers = {}
for target in ("api.anthropic.com:443", "api.openai.com:443"):
    with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as raw:
        raw.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
        answers[target] = raw.recv(1024).decode(errors="replace").split("\\r\\n")[0]
out = os.environ["SPU_OUTPUT_DIR"]
json.dump(answers, open(os.path.join(out, "direct.json"), "w"))
'''


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_direct_connection_to_a_provider_is_refused_and_logged(
        request: pytest.FixtureRequest, compose, tmp_path: Path, backend: str) -> None:
    options = require_backend(request, backend)
    agent = tmp_path / "agent.py"
    agent.write_text(DIRECT_AGENT)
    agent.chmod(0o755)
    cfg = compose("harness=command", f"harness.entrypoint={agent}", f"sandbox={backend}",
                  "model=scripted", "model.api_model=presented_order",
                  f"task={EXAMPLE_TASK.name}", "limits.time_s=120", "limits.gpus=0",
                  "limits.cpus=1")
    spec = spec_from_config(cfg)
    if backend == "docker":
        spec = dataclasses.replace(spec, sandbox=dataclasses.replace(
            spec.sandbox, image=options["image"]))
    record = run_one(spec)
    run_dir = spec.output_root / "runs" / record.run_key
    answers = json.loads((run_dir / "output" / "direct.json").read_text())
    assert all(" 403 " in line for line in answers.values()), answers
    lines = list(read_egress(run_dir / "tools" / "egress.jsonl"))
    assert {(e["method"], e["host"], e["port"], e.get("refused")) for e in lines} == {
        ("CONNECT", "api.anthropic.com", 443, MODEL_API_REFUSED),
        ("CONNECT", "api.openai.com", 443, MODEL_API_REFUSED)}
    # Refused, still counted: the record says what the agent tried outside the tools.
    assert record.requests_outside_tools == 2, record.requests_outside_tools
