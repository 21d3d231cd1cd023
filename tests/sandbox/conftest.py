"""Fixtures of the sandbox tests: every backend of the machine, a Docker engine, canary tasks.

The Docker engine is the machine's own when one answers; otherwise, where ``dockerd`` is
installed and the tests run as root, a session-scoped fixture starts one (data root
``/var/lib/docker`` unless ``SPU_TEST_DOCKER_DATA_ROOT`` says otherwise, so images
persist between sessions), builds the agent image offline with
``docker/build-base-image.sh`` when the tag is missing, and stops the engine at the end.
Backends that cannot run are skipped with the reason, never silently.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spu.sandbox import RunLimits, Sandbox, SandboxRequest, get_sandbox
from spu.sandbox.base import sandbox_names
from spu.sandbox.docker import DEFAULT_IMAGE
from spu.schema import ProcessEvidence
from spu.selfcheck import AGENTS as CHECK_AGENTS
from spu.selfcheck.targets import Opened
from spu.tasks import load_task
from spu.tasks.package import stage_public_files
from tests.conftest import EXAMPLE_TASK, REPO
from tests.processes import running

AGENTS = Path(__file__).parent / "agents"
"""Agents of the tests here; those of the self-check kit's checks are in CHECK_AGENTS."""
collect_ignore = ["agents"]  # scripts run inside sandboxes, not test modules


def _backend_param(name: str) -> Any:
    """Backend ``name`` as a test parameter, marked with what it needs (and slow if anything)."""
    needs = get_sandbox(name).needs
    marks = [getattr(pytest.mark, need) for need in needs]
    return pytest.param(name, marks=[*marks, pytest.mark.slow] if marks else [])


BACKENDS = [_backend_param(name) for name in sandbox_names()]
"""Every registered backend: the conformance suite runs over each."""
ISOLATING = [_backend_param(name) for name in sandbox_names() if get_sandbox(name).isolates]
"""The backends that promise isolation (``subprocess`` promises none): the red-team suite's."""


@dataclass(frozen=True)
class DockerEngine:
    """A Docker engine for the tests, or why there is none."""

    image: str | None
    """The agent image, present in the engine."""
    skip_reason: str | None = None


def _engine_answers(timeout: float = 5) -> bool:
    from spu.sandbox.docker import docker_client

    try:
        client = docker_client(timeout=timeout)
        client.ping()
        client.close()
        return True
    except Exception:  # noqa: BLE001 - any failure means not (yet) running
        return False


LOCK = Path("/tmp/spu-test-dockerd.lock")
"""Held while a session starts the engine, builds the image or stops the engine."""
USERS = Path("/tmp/spu-test-dockerd.users")
"""Held shared by every test session that uses the engine, so that the last one stops it."""
PID_FILE = Path("/tmp/spu-test-dockerd.pid")
"""The dockerd that test sessions started (never an engine that was already running)."""
ENGINE_LOG = Path("/tmp/spu-test-dockerd.log")
"""Its log (each start appends), for a test that has to say what the engine said."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _stop_test_dockerd() -> None:
    """Stop the dockerd recorded in PID_FILE, if it is still that dockerd."""
    try:
        pid = int(PID_FILE.read_text())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        PID_FILE.unlink(missing_ok=True)
        return
    if comm == "dockerd":
        os.kill(pid, signal.SIGTERM)
        for _ in range(600):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it when this session started it
            if not running(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    PID_FILE.unlink(missing_ok=True)


def _prepare_engine() -> DockerEngine:
    """Start dockerd where needed and build the image where missing (under LOCK)."""
    if not _engine_answers():
        if shutil.which("dockerd") is None:
            return DockerEngine(None, "Docker is not installed (Debian package docker.io: "
                                      "dockerd missing)")
        if os.geteuid() != 0:
            return DockerEngine(None, "dockerd is installed but not running, and only root "
                                      "can start it")
        data_root = os.environ.get("SPU_TEST_DOCKER_DATA_ROOT", "/var/lib/docker")
        with open(ENGINE_LOG, "ab") as log:
            proc = subprocess.Popen(["dockerd", "--data-root", data_root], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        PID_FILE.write_text(str(proc.pid))
        for _ in range(120):
            if _engine_answers(timeout=2) or proc.poll() is not None:
                break
            time.sleep(0.5)
        if not _engine_answers():
            _stop_test_dockerd()
            tail = ENGINE_LOG.read_text(errors="replace")[-800:]
            return DockerEngine(None, f"dockerd did not start: {tail}")
    build = subprocess.run([str(REPO / "docker" / "build-base-image.sh"), DEFAULT_IMAGE],
                           capture_output=True, text=True, timeout=1200)
    if build.returncode != 0:
        return DockerEngine(None, "could not build the agent image offline "
                                  f"(docker/build-base-image.sh): {build.stderr[-800:]}")
    return DockerEngine(DEFAULT_IMAGE)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    """A running engine with the agent image; starts dockerd where needed.

    Concurrent test sessions share the engine: the last session that used it stops the
    dockerd that a test session started; an engine that was already running is left alone.
    """
    try:
        import docker  # noqa: F401
    except ImportError:
        yield DockerEngine(None, "the docker Python SDK is not installed")
        return
    with open(USERS, "a") as users:
        fcntl.flock(users, fcntl.LOCK_SH)
        with _locked(LOCK):
            engine = _prepare_engine()
        try:
            yield engine
        finally:
            with _locked(LOCK):
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass  # another session still uses the engine; it stops it
                else:
                    _stop_test_dockerd()


def live_engine(request: pytest.FixtureRequest) -> DockerEngine:
    """The session's engine, started again if it stopped answering since.

    Sessions share one dockerd (pytest-xdist workers included); something outside a test's
    control (the last user's teardown, a recycled process id) may stop it. A test then
    gets it started again instead of failing on a missing socket.
    """
    engine: DockerEngine = request.getfixturevalue("docker_engine")
    if engine.skip_reason or _engine_answers():
        return engine
    with _locked(LOCK):
        _wait_for_engine_exit()
        return _prepare_engine()


def _wait_for_engine_exit(timeout_s: float = 60) -> None:
    """Wait until a stopping dockerd is gone: it removes its pid file and, last, its socket
    path, which would take the socket of a dockerd started meanwhile with it."""
    pids = set()
    for path in (PID_FILE, Path("/var/run/docker.pid")):
        with contextlib.suppress(OSError, ValueError):
            pids.add(int(path.read_text()))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it when this session started it
            if running(pid):
                alive.append(pid)
        if not alive:
            return
        time.sleep(0.5)


def bubblewrap_based(name: str) -> bool:
    """Whether backend ``name`` is the bubblewrap one or built on it (a plugin's subclass).

    Tests that check how bubblewrap holds an attack (tmpfs folders charged to memory, the
    agent's user id) hold such a backend to the same expectations.
    """
    from spu.sandbox.local import LocalSandbox

    return issubclass(get_sandbox(name), LocalSandbox)


def require_backend(request: pytest.FixtureRequest, name: str) -> dict[str, object]:
    """Skip (with the reason) unless backend ``name`` runs here; returns its options."""
    if name == "docker":
        engine = live_engine(request)
        if engine.skip_reason:
            pytest.skip(f"sandbox=docker unavailable: {engine.skip_reason}")
        return {"image": engine.image, "network_mode": "pasta", "pids_limit": 512}
    ok, why = get_sandbox(name).available()
    if not ok:
        pytest.skip(f"sandbox={name} unavailable: {why}")
    return {"pids_limit": 512}


@pytest.fixture
def open_sandbox(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., Opened]]:
    """Factory: a prepared sandbox of a backend on the example task, cleaned up at the end."""
    opened: list[Sandbox] = []

    def _open(name: str, limits: RunLimits | None = None, run: str = "run",
              runs: Path | None = None, **request_fields: object) -> Opened:
        options = require_backend(request, name)
        run_dir = (runs or tmp_path / "runs") / run
        staged = stage_public_files(load_task(EXAMPLE_TASK), run_dir / "task")
        sandbox = get_sandbox(name)(options=options)
        paths = sandbox.prepare(SandboxRequest(
            task_dir=staged,
            run_dir=run_dir,
            limits=limits or RunLimits(time_s=60, memory_gb=1, cpus=1, gpus=0, grace_s=1),
            **request_fields,  # type: ignore[arg-type]
        ))
        opened.append(sandbox)
        return Opened(sandbox, paths, run_dir)

    yield _open
    for sandbox in opened:
        sandbox.cleanup()


def run_agent(box: Opened, script: str, *args: str, env: dict[str, str] | None = None,
              timeout_s: float | None = None) -> ProcessEvidence:
    """Copy the agent ``script`` (the kit's, else the tests') into the workspace and run it."""
    inside = f"{box.paths.workspace}/.agent/{script}"
    source = CHECK_AGENTS / script if (CHECK_AGENTS / script).is_file() else AGENTS / script
    box.sandbox.write_file(inside, source.read_bytes(), mode=0o755)
    base = {
        "SPU_TASK_DIR": box.paths.task,
        "SPU_OUTPUT_DIR": box.paths.output,
        "SPU_WORKSPACE": box.paths.workspace,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    logs = box.run_dir / "logs"
    return box.sandbox.exec(["python3", inside, *args], {**base, **(env or {})},
                            stdout=logs / f"{script}.stdout", stderr=logs / f"{script}.stderr",
                            timeout_s=timeout_s)


def read_json(path: Path) -> dict:
    """A JSON file an agent left."""
    return json.loads(path.read_text())


# --------------------------------------------------------------------------- canary tasks


@dataclass(frozen=True)
class CanaryTask:
    """A task whose answers carry strings found nowhere else on the machine."""

    path: Path
    needles: tuple[str, ...]
    """The canary source title and the measured values as written in answers.json."""


@pytest.fixture
def canary_task(tmp_path: Path) -> CanaryTask:
    """The example task with answers rewritten to unique values (seeded by a fresh uuid)."""
    task_dir = tmp_path / "tasks" / EXAMPLE_TASK.name
    shutil.copytree(EXAMPLE_TASK, task_dir)
    answers_file = task_dir / "hidden" / "answers.json"
    answers = json.loads(answers_file.read_text())
    token = uuid.uuid4().hex
    rng = random.Random(token)
    values: list[str] = []
    for group in answers["groups"].values():
        for item in group:
            value = round(rng.uniform(1000, 9000), 5)
            group[item] = value
            values.append(repr(value))
    answers["source"] = {"title": f"spu-canary-{token}"}
    answers_file.write_text(json.dumps(answers, indent=1))
    return CanaryTask(task_dir, (f"spu-canary-{token}", *values))


def tree_digest(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its content (to show that nothing changed)."""
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


@contextlib.contextmanager
def victim_process() -> Iterator[subprocess.Popen[bytes]]:
    """A host process outside every sandbox, for agents to try to signal."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- the internet


@dataclass(frozen=True)
class InternetHost:
    """A stand-in for a host on the internet: a web server in a network namespace."""

    address: str
    port: int
    token: str


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=30)


@pytest.fixture
def internet_host(tmp_path: Path) -> Iterator[InternetHost]:
    """A network namespace reached through a veth link and a route, like the internet.

    The host's side of the link is 198.18.N.1/30, the namespace's 198.18.N.2/30, and the
    web server listens on 198.19.N.1, routed through the namespace (so that it is not on
    a subnet the host is directly connected to, as no internet host is). Only this
    machine and this namespace ever see the traffic.
    """
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a test network namespace needs root and iproute2")
    tag = uuid.uuid4().hex[:6]
    n = random.Random(tag).randrange(1, 254)
    ns, veth, peer = f"spu-inet-{tag}", f"spuh{tag}", f"spun{tag}"
    address = f"198.19.{n}.1"
    token = f"internet-{tag}"
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text(token)
    server = None
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("addr", "add", f"198.18.{n}.1/30", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("-n", ns, "addr", "add", f"198.18.{n}.2/30", "dev", peer)
        _ip("-n", ns, "link", "set", peer, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{address}/32", "dev", "lo")
        _ip("route", "add", f"{address}/32", "via", f"198.18.{n}.2")
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, "python3", "-m", "http.server", "8080", "--bind",
             address, "--directory", str(tmp_path / "www")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://{address}:8080/", timeout=2) as answer:
                    assert answer.read().decode() == token
                    break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the test's internet host did not answer from the host")
        yield InternetHost(address, 8080, token)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        _ip("route", "del", f"{address}/32", check=False)
        _ip("link", "del", veth, check=False)
        _ip("netns", "del", ns, check=False)


def kit_check(entry: Any, backend: str, request: pytest.FixtureRequest,
              tmp_path: Path) -> Any:
    """Run the self-check kit's check ``entry`` on ``backend``, as a test.

    The check is the one ``spu selfcheck sandbox=<backend>`` runs (:mod:`spu.selfcheck`):
    it raises with its traceback when it fails, skips with its reason (and where the
    backend cannot run here), and a failure the backend declares expected is an xfail
    with its reason. Returns what the check returned.
    """
    from spu.selfcheck import CheckSkipped, Status, run_check
    from spu.selfcheck.targets import SandboxTarget

    cls = get_sandbox(backend)
    if entry.isolating and not cls.isolates:
        pytest.skip(f"sandbox={backend} claims no isolation")
    if entry.unisolated and cls.isolates:
        pytest.skip(f"sandbox={backend} claims isolation")
    if entry.root and os.geteuid() != 0:
        pytest.skip("the sandbox's isolation needs root")
    target = SandboxTarget(backend, require_backend(request, backend), tmp_path / entry.name,
                           task_home=tmp_path)
    reason = cls.selfcheck_expected_failures.get(entry.name)
    try:
        if reason is None:
            try:
                return entry(target)
            except CheckSkipped as exc:
                pytest.skip(str(exc))
        result = run_check(entry, target, {entry.name: reason})
    finally:
        target.close()
    if result.status is Status.expected_failure:
        pytest.xfail(result.detail)
    if result.status is Status.skipped:
        pytest.skip(result.detail)
    pytest.fail(result.line, pytrace=False)
