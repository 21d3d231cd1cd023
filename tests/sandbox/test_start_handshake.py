"""The sandbox's start is decided by the wrapper's own handshake, never by the agent's stderr.

``sandbox=local``: bubblewrap's ``--json-status-fd`` (its ``exit-code`` line comes only once
the command was exec'd; the descriptor is bubblewrap's alone). ``sandbox=docker``: the
engine's own state (the container created and started). An agent that prints a wrapper's
failure as all of its stderr and exits 1 is an agent that exited 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spu.sandbox import RunLimits, SandboxError, SandboxRequest, get_sandbox
from spu.sandbox.local import LocalSandbox, StartStatus
from spu.tasks.package import load_task, stage_public_files
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import require_backend

BACKENDS = [pytest.param("local", marks=pytest.mark.slow),  # a real sandbox
            pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow])]

FORGED = {
    "local": "bwrap: execvp /workspace/.agent/run.py: Permission denied",
    "docker": "[FATAL tini (7)] exec /workspace/.agent/run.py failed: Permission denied",
}


def _request(tmp_path: Path, **fields: object) -> SandboxRequest:
    run_dir = tmp_path / "run"
    staged = stage_public_files(load_task(EXAMPLE_TASK), run_dir / "task")
    return SandboxRequest(task_dir=staged, run_dir=run_dir,
                          limits=RunLimits(time_s=60, memory_gb=1, cpus=1, gpus=0, grace_s=1),
                          **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wrapper_failure_written_by_the_agent_is_the_agents_exit(
        request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> None:
    options = require_backend(request, backend)
    sandbox = get_sandbox(backend)(options=options)
    sandbox.prepare(_request(tmp_path))
    try:
        line = FORGED[backend]
        evidence = sandbox.exec(["sh", "-c", f"echo '{line}' >&2; exit 1"],
                                {"PATH": "/usr/bin:/bin"}, stdout=tmp_path / "out",
                                stderr=tmp_path / "err")
    finally:
        sandbox.cleanup()
    assert (tmp_path / "err").read_text().strip() == line  # the forgery was written
    assert evidence.error is None and evidence.exit_code == 1, evidence


@pytest.mark.slow  # a real sandbox
def test_a_real_bubblewrap_failure_is_the_sandboxs(request: pytest.FixtureRequest,
                                                   tmp_path: Path) -> None:
    """A bind whose source is missing fails inside bubblewrap, before any exec."""
    options = require_backend(request, "local")
    sandbox = LocalSandbox(options=options)
    missing = tmp_path / "missing"
    sandbox.prepare(_request(tmp_path, extra_ro_binds={missing: "/spu-missing"}))
    try:
        evidence = sandbox.exec(["true"], {"PATH": "/usr/bin:/bin"}, stdout=tmp_path / "out",
                                stderr=tmp_path / "err")
    finally:
        sandbox.cleanup()
    assert evidence.error is not None, evidence
    assert evidence.error.startswith("sandbox did not start: bwrap: "), evidence.error
    assert str(missing) in evidence.error


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_that_cannot_be_found_never_started(
        request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> None:
    """The start check (behind setpriv / docker-init) reports it with a nonce the agent
    never sees: the sandbox did not start."""
    options = require_backend(request, backend)
    sandbox = get_sandbox(backend)(options=options)
    sandbox.prepare(_request(tmp_path))
    try:
        evidence = sandbox.exec(["/nonexistent/agent"], {"PATH": "/usr/bin:/bin"},
                                stdout=tmp_path / "out", stderr=tmp_path / "err")
        forged = sandbox.exec(["sh", "-c", "echo 'spu-start 0123: x: not found or not "
                               "executable' >&2; exit 127"], {"PATH": "/usr/bin:/bin"},
                              stdout=tmp_path / "out2", stderr=tmp_path / "err2")
        seen = sandbox.exec(["sh", "-c", "env; ls -a /workspace; "
                             "cat /proc/1/environ 2>/dev/null; true"],
                            {"PATH": "/usr/bin:/bin"}, stdout=tmp_path / "out3",
                            stderr=tmp_path / "err3")
    finally:
        sandbox.cleanup()
    assert evidence.error is not None and "/nonexistent/agent" in evidence.error, evidence
    assert "did not start" in evidence.error
    assert forged.error is None and forged.exit_code == 127, forged
    assert seen.exit_code == 0 and seen.error is None, seen
    shown = (tmp_path / "out3").read_text(errors="replace")
    assert "SPU_START_NONCE" not in shown and ".spu-start" not in shown, shown
    assert not list((tmp_path / "run").rglob(".spu-start-*"))  # the nonce file is gone


def test_the_status_lines_are_read_as_bubblewrap_writes_them() -> None:
    assert StartStatus.parse(b'{ "child-pid": 3, "pid-namespace": 1 }\n{ "exit-code": 0 }\n'
                             ) == StartStatus(child_pid=3, exit_code=0)
    assert not StartStatus.parse(b"").executed
    assert not StartStatus.parse(b'{ "child-pid": 3 }\nnot json\n[1]\n').executed


@pytest.mark.docker
@pytest.mark.slow
def test_a_missing_image_is_the_sandboxs(request: pytest.FixtureRequest,
                                         tmp_path: Path) -> None:
    options = require_backend(request, "docker")
    sandbox = get_sandbox("docker")(options={**options, "image": "spu-no-such-image:never"})
    try:
        sandbox.prepare(_request(tmp_path))
        evidence = sandbox.exec(["true"], {"PATH": "/usr/bin:/bin"}, stdout=tmp_path / "out",
                                stderr=tmp_path / "err")
    except SandboxError as exc:  # prepare may refuse the image first
        assert "spu-no-such-image" in str(exc), exc
    else:
        assert evidence.error is not None and "spu-no-such-image" in evidence.error, evidence
    finally:
        sandbox.cleanup()
