"""The run's secrets stay where they belong, on both backends (issue 23).

- the provider key never enters the sandbox: what an agent can read (its environment,
  every ``/proc/*/environ`` and ``/proc/*/cmdline`` it sees, every readable file outside
  the host's read-only system folders) comes back to the host, which searches it;
- no host process's command line holds the key, the gateway token or the tools service's
  secret URL while the run is live (``/proc/<pid>/cmdline`` is readable by every user);
- under ``sandbox=docker`` the container's environment holds the token, never the key.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from spu.main import spec_from_config
from spu.runner import run_one
from spu.sandbox.docker import RUN_LABEL, docker_client
from spu.schema import Outcome
from spu.scripted import ScriptedModelServer, load_script
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import docker_engine, require_backend  # noqa: F401

pytestmark = pytest.mark.slow

KEY_VARIABLE = "SPU_TEST_PROVIDER_KEY"

SEARCHING_AGENT = '''#!/usr/bin/env python3
"""Call the model once, gather everything readable for the host to search, wait, submit."""
import json, os, pathlib, time, urllib.request

out = pathlib.Path(os.environ["SPU_OUTPUT_DIR"])
url, token = os.environ["SPU_MODEL_URL"], os.environ["SPU_MODEL_TOKEN"]
body = {"model": "presented_order", "max_tokens": 100, "stream": False,
        "messages": [{"role": "user", "content": "Rank."}],
        "tools": [{"name": "Bash", "input_schema": {}}]}
request = urllib.request.Request(url + "/v1/messages", data=json.dumps(body).encode(),
                                 headers={"x-api-key": token, "content-type": "application/json"})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
status = opener.open(request, timeout=30).status
seen = bytearray(json.dumps(dict(os.environ)).encode())
for pid in os.listdir("/proc"):
    if pid.isdigit() or pid in ("self", "thread-self"):
        for name in ("environ", "cmdline"):
            try:
                seen += open(f"/proc/{pid}/{name}", "rb").read()
            except OSError:
                pass
files = 0
for root in ("/workspace", "/task", "/tmp", "/run", "/etc", "/dev/shm", "/var", "/home",
             "/root", "/mnt", "/srv"):
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 8 << 20:
                    continue
                seen += open(path, "rb").read()
                files += 1
            except OSError:
                pass
(out / "seen.bin").write_bytes(bytes(seen))
(out / "ready.json").write_text(json.dumps({
    "token": token, "tools_url": os.environ.get("SPU_TOOLS_URL"), "status": status,
    "files": files}))
deadline = time.time() + 90
while not (out / "scanned").exists() and time.time() < deadline:
    time.sleep(0.2)
contract = json.loads(pathlib.Path(os.environ["SPU_TASK_DIR"], "contract.json").read_text())
(out / "rankings.json").write_text(json.dumps({
    "task_id": contract["task_id"], "task_version": contract["task_version"],
    "rankings": [{"group_id": g["group_id"], "order": g["items"]} for g in contract["groups"]]}))
'''


def _host_cmdlines() -> dict[int, bytes]:
    """Every command line of this machine's processes (what any user may read)."""
    lines: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
    return lines


class HostScan(threading.Thread):
    """While the run is live: search the host's command lines (and the containers' env)."""

    def __init__(self, outputs: Path, key: str, backend: str) -> None:
        super().__init__(daemon=True)
        self.outputs, self.key, self.backend = outputs, key, backend
        self.found: dict[str, list[int]] = {}
        self.ready: dict[str, Any] = {}
        self.container_envs: list[list[str]] = []
        self.error: str | None = None

    def run(self) -> None:
        """Wait for the agent's ``ready.json``, scan, then let the agent go on."""
        deadline = time.monotonic() + 240
        ready = None
        while ready is None and time.monotonic() < deadline:
            ready = next(self.outputs.rglob("ready.json"), None) if self.outputs.exists() \
                else None
            time.sleep(0.2)
        if ready is None:
            self.error = "the agent never wrote ready.json"
            return
        try:
            self.ready = json.loads(ready.read_text())
            secret_values = {"key": self.key, "token": self.ready["token"],
                             "tools_url": urlparse(self.ready["tools_url"]).path}
            lines = _host_cmdlines()
            self.found = {name: [pid for pid, line in lines.items() if value.encode() in line]
                          for name, value in secret_values.items()}
            if self.backend == "docker":
                client = docker_client()
                for container in client.containers.list(filters={"label": RUN_LABEL}):
                    env = client.api.inspect_container(container.id)["Config"]["Env"] or []
                    if f"SPU_MODEL_TOKEN={self.ready['token']}" in env:
                        self.container_envs.append(env)
        finally:
            (ready.parent / "scanned").write_text("1")


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_no_secret_on_a_command_line_and_the_key_never_in_the_sandbox(
        request: pytest.FixtureRequest, compose, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path, backend: str) -> None:
    options = require_backend(request, backend)
    key = f"sk-ant-test-{secrets.token_hex(16)}"
    monkeypatch.setenv(KEY_VARIABLE, key)
    agent = tmp_path / "agent.py"
    agent.write_text(SEARCHING_AGENT)
    agent.chmod(0o755)
    with ScriptedModelServer(load_script("presented_order"),
                             log_path=tmp_path / "upstream.jsonl") as upstream:
        cfg = compose("harness=command", f"harness.entrypoint={agent}", f"sandbox={backend}",
                      "model=scripted", "model.provider=anthropic",
                      f"model.base_url={upstream.url}", f"model.api_key_env={KEY_VARIABLE}",
                      "model.api_model=presented_order", f"task={EXAMPLE_TASK.name}",
                      "limits.time_s=300", "limits.gpus=0", "limits.cpus=1")
        spec = spec_from_config(cfg)
        if backend == "docker":
            spec = dataclasses.replace(spec, sandbox=dataclasses.replace(
                spec.sandbox, image=options["image"]))
        scan = HostScan(spec.output_root, key, backend)
        scan.start()
        record = run_one(spec)
        scan.join(timeout=30)
    run_dir = spec.output_root / "runs" / record.run_key
    assert scan.error is None, (scan.error, record.process, record.notes)
    assert scan.ready["status"] == 200 and scan.ready["tools_url"], scan.ready
    assert scan.ready["files"] > 0  # the search read files, not nothing
    # No command line of the host holds a secret of the run, bubblewrap's included.
    assert scan.found == {"key": [], "token": [], "tools_url": []}, scan.found
    # The agent could read nothing that holds the key; the gateway used it upstream.
    seen = (run_dir / "output" / "seen.bin").read_bytes()
    assert scan.ready["token"].encode() in seen  # the search saw the agent's own environment
    assert key.encode() not in seen
    assert record.outcome is Outcome.valid, (record.process, record.notes)
    if backend == "docker":
        assert len(scan.container_envs) == 1, "the agent's container, inspected while live"
        env = scan.container_envs[0]
        assert not any(key in item for item in env)
        assert not any(item.startswith(f"{KEY_VARIABLE}=") for item in env)
