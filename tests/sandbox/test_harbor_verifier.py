"""The exported Harbor verifier of spu-bhpt, run in containers of the project's agent image.

1. On its own: ``bash tests/test.sh`` from the exported task folder, in a container of the
   agent image (python3 and its standard library only, no network), writes the same
   score as ``spu grade`` for every fixture submission.
2. As Harbor runs it: the exported ``environment/Dockerfile`` (on the agent image) builds
   offline, shows the public files at ``/task`` and no answer key, and ``/tests/test.sh``
   grades ``/output/rankings.json`` into ``/logs/verifier/reward.txt``.

A container SIGKILLed from outside (exit 137, not out of memory), one that died between
its creation and its start ("cannot start a stopped process") or one the engine failed to
start (runc's "OCI runtime create failed") is the engine's doing or a killer's, never the
verifier's: CI saw all three, twice, in this file alone while every other test passed.
The killer, found by the witness below: the Ray cluster tests' node kill, run by the other
worker, matched processes by a mount namespace number the kernel had given to a container
of this file meanwhile (fixed in :mod:`tests.launchers.cluster`; ``test_node_kill``).
Such an attempt is tried again (three tries in all, pauses of 5 and 20 s), on an engine
that answers (started again if it stopped), and a warning names what the engine said of it
(its state and events, dockerd's process id before and after) and who sent SIGKILL
meanwhile (:mod:`tests.sandbox.kill_witness`, where the kernel's tracing is at hand): the
next time says who ends them. An engine that fails all three tries cannot run the test
here: it is skipped with all of that as its reason (a container killed on the third try
the same). A verifier that fails is a failure.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from spu.tasks.harbor import export_harbor
from tests.conftest import TASKS, run_module
from tests.sandbox import kill_witness
from tests.sandbox.conftest import ENGINE_LOG, live_engine
from tests.tasks.submissions import fixture_submissions

pytestmark = [pytest.mark.slow, pytest.mark.docker]

TASK = TASKS / "spu-bhpt"


@dataclass
class Engine:
    """The engine's client and agent image, a way to have it answer again, and the witness
    of the machine's SIGKILLs (None where there is none: ``no_witness`` says why)."""

    client: Any
    image: str
    revive: Callable[[], object]
    witness: kill_witness.KillWitness | None
    no_witness: str

    def kills_since(self, since: float) -> str:
        """Who sent SIGKILL since ``since``, in words."""
        if self.witness is None:
            return f"no witness of SIGKILLs ({self.no_witness})"
        return self.witness.said_since(since)


@pytest.fixture(scope="module")
def witness():
    found, why = kill_witness.start()
    yield found, why
    if found is not None:
        found.close()


@pytest.fixture
def engine(request, witness):
    docker_engine = live_engine(request)
    if docker_engine.skip_reason:
        pytest.skip(f"Docker unavailable: {docker_engine.skip_reason}")
    from spu.sandbox.docker import docker_client

    client = docker_client()
    yield Engine(client, docker_engine.image, lambda: live_engine(request), *witness)
    client.close()


def _engine_pid() -> str:
    """The running dockerd's process id (its pid file), to tell a restart between tries."""
    try:
        return Path("/var/run/docker.pid").read_text().strip()
    except OSError as exc:
        return f"none ({exc.strerror})"


ENGINE_FAILURES = ("OCI runtime create failed", "OCI runtime start failed",
                   "cannot start a stopped process")
"""What the engine says when it could not start a container, or its process died before
(runc: "container process is already dead", "cannot start a container that has stopped")."""
ATTEMPTS = 3
PAUSE_S = (5.0, 20.0)
"""The pause before the second and the third try."""


def _engine_failed(exc: Exception) -> bool:
    return any(said in str(exc) for said in ENGINE_FAILURES)


def _engine_story(client, container_id: str, since: float) -> tuple[bool, str]:
    """Whether the kernel killed the container for memory, and its state and events since
    ``since`` in words: who ended it, and how."""
    import docker

    try:
        state = client.api.inspect_container(container_id)["State"]
        events = client.api.events(since=int(since), until=int(time.time()) + 1,
                                   filters={"container": container_id}, decode=True)
        said = [(e.get("status") or e.get("Action"), e.get("Actor", {}).get("Attributes", {})
                 .get("signal")) for e in events]
    except docker.errors.DockerException as exc:
        return False, f"the engine did not say ({exc})"
    keys = ("Status", "ExitCode", "OOMKilled", "Error", "StartedAt", "FinishedAt")
    return bool(state.get("OOMKilled")), f"state {({k: state.get(k) for k in keys})}, events {said}"


def _again(engine: Engine, attempt: int, what: str, since: float) -> None:
    """Warn of an attempt the engine (or a killer) ended, and wait for the next one."""
    pid = _engine_pid()
    time.sleep(PAUSE_S[attempt - 1])
    engine.revive()
    warnings.warn(f"{what}; tried again (dockerd {pid}, then {_engine_pid()}); "
                  f"{engine.kills_since(since)}", stacklevel=3)


def _engine_gave_up(engine: Engine, what: str, since: float) -> NoReturn:
    """The engine failed every try: Docker cannot run this test here and now (skipped, with
    what it said and who sent SIGKILL). A verifier that fails is a failure, never this."""
    errors = [line for line in _engine_log().splitlines() if "level=error" in line][-3:]
    pytest.skip(f"the Docker engine failed {ATTEMPTS} tries: {what}; "
                f"{engine.kills_since(since)}; dockerd's last errors: {errors}")


def _engine_log() -> str:
    """The end of the log of the dockerd the tests started (empty for the machine's own)."""
    try:
        with open(ENGINE_LOG, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 200_000))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _run(engine: Engine, image: str, command: list[str], volumes: dict[str, dict[str, str]],
         workdir: str | None = None) -> str:
    import docker

    options = {"working_dir": workdir} if workdir else {}
    client = engine.client
    for attempt in range(1, ATTEMPTS + 1):
        since = time.time()
        name = f"spu-test-harbor-{uuid.uuid4().hex[:10]}"
        try:
            container = client.containers.run(image, command, name=name, volumes=volumes,
                                              network_mode="none", detach=True, **options)
        except docker.errors.APIError as exc:
            with contextlib.suppress(docker.errors.DockerException):
                client.api.remove_container(name, force=True)
            if not _engine_failed(exc):
                raise
            if attempt == ATTEMPTS:
                _engine_gave_up(engine, f"{name} did not start ({exc})", since)
            _again(engine, attempt, f"{name} did not start ({exc})", since)
            continue
        try:
            status = container.wait(timeout=120)
            logs = container.logs().decode(errors="replace")
            out_of_memory, story = _engine_story(client, container.id, since)
        finally:
            container.remove(force=True)
        if status["StatusCode"] != 137 or out_of_memory:
            break
        if attempt == ATTEMPTS:
            _engine_gave_up(engine, f"{name} was SIGKILLed from outside: {story}", since)
        _again(engine, attempt, f"{name} was SIGKILLed from outside: {story}", since)
    assert status["StatusCode"] == 0, f"{logs}\n{story}\n{engine.kills_since(since)}"
    return logs


def _build(engine: Engine, path: Path, tag: str) -> None:
    import docker

    for attempt in range(1, ATTEMPTS + 1):
        since = time.time()
        try:
            engine.client.images.build(path=str(path), tag=tag, network_mode="none", rm=True,
                                       forcerm=True)
            return
        except docker.errors.BuildError as exc:
            if not _engine_failed(exc):
                raise
            if attempt == ATTEMPTS:
                _engine_gave_up(engine, f"the build of {tag} ({exc})", since)
            _again(engine, attempt, f"the engine failed to start the build's container ({exc})",
                   since)


def _spu_grade(task: Path, submission: Path) -> float:
    out = run_module(["spu", "grade", str(submission), "--task", str(task), "--json"])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["score"]


def test_plain_test_sh_in_the_agent_image_writes_the_spu_grade(engine, tmp_path) -> None:
    harbor = export_harbor(TASK, tmp_path / "spu-bhpt").path
    names = ["measured", "reversed", "presented", "shuffle-1", "shuffle-2", "group-absent",
             "misses-one", "wrong-task", "keyed-by-group", "not-json", "over-1-mib"]
    fixtures = fixture_submissions(TASK)
    for name in names:
        output, logs = tmp_path / name / "output", tmp_path / name / "logs"
        output.mkdir(parents=True)
        logs.mkdir()
        (output / "rankings.json").write_bytes(fixtures[name] or b"")
        _run(engine, engine.image, ["bash", "tests/test.sh"], workdir="/harbor/spu-bhpt", volumes={
            str(harbor): {"bind": "/harbor/spu-bhpt", "mode": "ro"},
            str(output): {"bind": "/output", "mode": "ro"},
            str(logs): {"bind": "/logs/verifier", "mode": "rw"}})
        reward = float((logs / "reward.txt").read_text())
        assert reward == _spu_grade(TASK, output / "rankings.json"), name
        grade = json.loads((logs / "grade.json").read_text())
        assert grade["task_id"] == "spu-bhpt" and grade["reward"] == reward


def test_exported_environment_builds_and_grades_as_harbor_does(engine, tmp_path) -> None:
    harbor = export_harbor(TASK, tmp_path / "spu-bhpt", base_image=engine.image).path
    tag = f"spu-test-harbor-env:{uuid.uuid4().hex[:10]}"
    _build(engine, harbor / "environment", tag)
    try:
        listing = _run(engine, tag, ["sh", "-c", "find /task -type f | sort && "
                                     "echo SPU_OUTPUT_DIR=$SPU_OUTPUT_DIR && pwd"], volumes={})
        files = {line.removeprefix("/task/") for line in listing.split()
                 if line.startswith("/task/")}
        assert files == {"task.yaml", "instruction.md", "experiment.md", "protocol.json",
                         "targets.csv", "contract.json"}
        assert "SPU_OUTPUT_DIR=/output" in listing and listing.strip().endswith("/workspace")

        output, logs = tmp_path / "output", tmp_path / "logs"
        output.mkdir()
        logs.mkdir()
        (output / "rankings.json").write_bytes(fixture_submissions(TASK)["shuffle-3"] or b"")
        _run(engine, tag, ["bash", "/tests/test.sh"], volumes={
            str(harbor / "tests"): {"bind": "/tests", "mode": "ro"},
            str(output): {"bind": "/output", "mode": "ro"},
            str(logs): {"bind": "/logs/verifier", "mode": "rw"}})
        assert float((logs / "reward.txt").read_text()) == \
            _spu_grade(TASK, output / "rankings.json")
    finally:
        engine.client.images.remove(tag, force=True)
