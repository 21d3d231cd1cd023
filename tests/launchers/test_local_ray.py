"""A local sweep joins this user's Ray where one runs here, and says why it starts its own.

The rules are read from the processes (``/proc``); the unit tests give them processes of
their own making, the last test a real ``ray start --head`` and a real sweep.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from spu.launch.local_ray import find_local_ray
from tests.launchers.conftest import processes_mentioning, run_sweep, sandbox_name


def fake_ray(proc: Path, temp: Path, *, token: Path | None, slots: int | None,
             recorded: bool = True, pid: int = 4242) -> str:
    """A GCS server and a raylet of this user in a ``/proc`` of the test's own; the address."""
    session = "session_2026-01-01_00-00-00_000000_1"
    address = "127.0.0.1:6379"
    environ = [b"HOME=/nonexistent"]
    if token is not None:
        environ += [b"RAY_AUTH_MODE=token", f"RAY_AUTH_TOKEN_PATH={token}".encode()]
    programs = {
        pid: [b"/opt/ray/core/src/ray/gcs/gcs_server", f"--log_dir={temp}/{session}/logs".encode(),
              b"--gcs_server_port=6379", b"--node-ip-address=127.0.0.1",
              f"--session-name={session}".encode()],
        pid + 1: [b"/opt/ray/core/src/ray/raylet/raylet",
                  f"--raylet_socket_name={temp}/{session}/sockets/raylet".encode(),
                  b"--static_resource_list=" + (f"sandbox_slot,{slots},CPU,2".encode()
                                                if slots is not None else b"CPU,2")],
    }
    for number, argv in programs.items():
        folder = proc / str(number)
        folder.mkdir(parents=True)
        (folder / "cmdline").write_bytes(b"\0".join(argv) + b"\0")
        (folder / "environ").write_bytes(b"\0".join(environ) + b"\0")
    (temp / session / "logs").mkdir(parents=True)
    if recorded:  # what `ray start` writes, and a driver's ray.init does not
        (temp / "ray_current_cluster").write_text(address)
    return address


def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("a" * 64)
    return path


def test_no_ray_running_is_said(tmp_path: Path) -> None:
    found = find_local_ray(proc=tmp_path / "proc")
    assert found.address is None and "no Ray of this user" in found.why


def test_a_ray_started_with_ray_start_token_and_slots_is_joined(tmp_path: Path) -> None:
    token = token_file(tmp_path)
    address = fake_ray(tmp_path / "proc", tmp_path / "ray", token=token, slots=2)
    found = find_local_ray(str(tmp_path / "ray"), proc=tmp_path / "proc")
    assert (found.address, found.token_path, found.slots) == (address, str(token), 2.0)


def test_another_sweeps_own_ray_is_never_joined(tmp_path: Path) -> None:
    """A Ray a driver started (``ray.init``: no ``ray_current_cluster``) ends with that
    sweep; joining it would lose the runs in flight when it does."""
    fake_ray(tmp_path / "proc", tmp_path / "ray", token=token_file(tmp_path), slots=2,
             recorded=False)
    found = find_local_ray(proc=tmp_path / "proc")
    assert found.address is None and "'ray start'" in found.why


def test_a_ray_without_token_authentication_is_not_joined(tmp_path: Path) -> None:
    """Attack surface: a Ray that lets any client in is an open door (docs/ray.md); the
    sweep starts its own, token and all, and says why."""
    fake_ray(tmp_path / "proc", tmp_path / "ray", token=None, slots=2)
    found = find_local_ray(proc=tmp_path / "proc")
    assert found.address is None and "without token authentication" in found.why


def test_a_ray_without_sandbox_slots_or_in_another_folder_is_not_joined(tmp_path: Path) -> None:
    fake_ray(tmp_path / "proc", tmp_path / "ray", token=token_file(tmp_path), slots=None)
    found = find_local_ray(proc=tmp_path / "proc")
    assert found.address is None and "offers no sandbox slot" in found.why
    elsewhere = find_local_ray(str(tmp_path / "other"), proc=tmp_path / "proc")
    assert elsewhere.address is None and "temporary folder" in elsewhere.why


@pytest.mark.slow
def test_join_local_false_starts_a_ray_of_its_own_and_says_so(tmp_path: Path) -> None:
    """``hydra.launcher.join_local=false``: no Ray is looked for; the line says why."""
    from types import SimpleNamespace

    from hydra_plugins.spu_ray_launcher._driver import join_local_ray

    said: list[str] = []
    init = SimpleNamespace(address=None, temp_dir=None)
    launcher = SimpleNamespace(init=init, insecure=False, join_local=False)
    join_local_ray(launcher, SimpleNamespace(say=said.append))  # type: ignore[arg-type]
    assert said == ["SPU sweep: starting a Ray of its own (hydra.launcher.join_local=false)"]
    assert init.address is None


@pytest.mark.slow  # a real `ray start`, and the sweep's runs in bubblewrap
def test_a_sweep_joins_the_users_ray_and_leaves_it_running(task_root: Path,
                                                          tmp_path: Path) -> None:
    """A ``ray start --head`` with token authentication and sandbox slots: a ``ray_local``
    sweep joins it (no Ray start of its own), records its runs, and the Ray is still up."""
    ray = Path(sys.executable).parent / "ray"
    if not ray.exists():
        pytest.skip("ray is not installed (its command line)")
    temp = Path(f"/tmp/spu-ray-{uuid.uuid4().hex[:6]}")
    secret = tmp_path / "auth"
    secret.mkdir(mode=0o700)
    token = secret / "token"
    token.write_text(uuid.uuid4().hex * 2)
    token.chmod(0o600)
    port = 20000 + os.getpid() % 20000
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env.pop("RAY_AUTH_TOKEN", None)
    started = subprocess.run(
        [str(ray), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--num-cpus=2", '--resources={"sandbox_slot": 2}', "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp}"],
        env=env, capture_output=True, text=True, timeout=180)
    try:
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        out = tmp_path / "outputs"
        done = run_sweep("hydra/launcher=ray_local", f"output_root={out}",
                         f"task_root={task_root}", "hydra.launcher.progress=lines",
                         f"hydra.launcher.init.temp_dir={temp}", "model=random",
                         "hydra.launcher.join_local=true",
                         "task=example-coupling-conditions", "repeat=0,1",
                         f"sandbox={sandbox_name()}")
        said = done.stdout + done.stderr
        assert done.returncode == 0, said[-4000:]
        address = (temp / "ray_current_cluster").read_text().strip()
        assert address.endswith(f":{port}")
        assert f"joining this user's Ray at {address}" in said, said[-4000:]
        assert "Started a local Ray instance" not in said
        records = [json.loads(p.read_text()) for p in (out / "runs").glob("*/run.json")]
        assert sorted(r["outcome"] for r in records) == ["valid", "valid"]
        host, _, number = address.rpartition(":")
        with socket.create_connection((host, int(number)), timeout=5):
            pass  # its GCS still answers: the sweep left it running
        assert processes_mentioning(str(temp))
    finally:
        for entry in Path("/proc").iterdir():  # this test's Ray only (named by its folder)
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if str(temp).encode() in (entry / "cmdline").read_bytes():
                        os.kill(int(entry.name), signal.SIGKILL)
        time.sleep(0.5)
        shutil.rmtree(temp, ignore_errors=True)
