"""``sandbox=docker``: one container per agent process, through the Docker SDK.

The container runs ``sandbox.image`` (default ``spu-agent:latest``, built by
``docker build -f docker/agent.Dockerfile`` or offline by
``docker/build-base-image.sh``) with the task's public files read-only at ``/task``,
``/workspace`` and ``/output`` bound from the run folder, the harness's read-only
binds, ``docker-init`` as PID 1, ``no-new-privileges``, and the limits of the run:
``nano_cpus``, ``mem_limit`` with swap equal to it, ``pids_limit`` and GPUs as
``device_requests``. Nothing else of the host is mounted. The network mode is
``sandbox.network_mode`` (default ``bridge``: the paper's agents have internet), or
``none`` when ``sandbox.network=false``. The agent runs as the image's user (root in
the images above); the container boundary, not the user id, is the isolation.

The SDK is imported when a container is made, never with :mod:`spu`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spu.sandbox.base import (
    LAYOUT,
    RunFolders,
    Sandbox,
    SandboxError,
    SandboxPaths,
    SandboxRequest,
    register_sandbox,
    remembered_availability,
)
from spu.sandbox.gpus import detect_gpus, place_gpus
from spu.sandbox.limits import GIB
from spu.sandbox.process import signal_of_exit, wrapper_error
from spu.schema import EnforcedLimits, ProcessEvidence, SandboxInfo

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "spu-agent:latest"
RUN_LABEL = "spu.sandbox"
"""Label carrying the sandbox id, so that cleanup finds every container of a run."""
POLL_S = 0.2
INIT_PREFIXES = ("[FATAL tini", "[WARN  tini")
"""How docker-init (tini) starts its own messages."""
BUILD_HINT = (
    "build it offline with docker/build-base-image.sh, or from a registry with "
    "docker build -f docker/agent.Dockerfile -t {image} docker/"
)


def docker_client(timeout: float = 120) -> Any:
    """A client of the Docker engine named by the environment (``DOCKER_HOST``, the socket)."""
    import docker

    return docker.from_env(timeout=int(timeout))


def _memory_cgroup_file(pid: int) -> Path | None:
    """The file holding the peak memory of the cgroup of host process ``pid``."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.max_usage_in_bytes"
    for line in lines:
        if line.startswith("0::"):
            return Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "memory.peak"
    return None


def _read_int(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _engine_answers() -> tuple[bool, str]:
    try:
        client = docker_client(timeout=10)
        version = client.version().get("Version", "?")
        client.close()
    except ImportError:
        return False, "the docker Python SDK is not installed (pip install docker)"
    except Exception as exc:  # noqa: BLE001 - any failure means no usable engine
        return False, (
            f"no Docker engine reachable ({type(exc).__name__}: {exc}); install docker.io "
            f"and start dockerd"
        )
    return True, f"Docker engine {version}"


@register_sandbox
class DockerSandbox(Sandbox):
    """A container per process, with the layout, the limits and GPUs as device requests."""

    name = "docker"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """A Docker engine must answer (once per process; the image is checked in prepare)."""
        return remembered_availability(cls.name, _engine_answers)

    def prepare(self, request: SandboxRequest) -> SandboxPaths:
        """Check the engine and the image, create the layout, decide limits and GPUs."""
        ok, why = self.available()
        if not ok:
            raise SandboxError(why)
        import docker

        self.request = request
        self.client = docker_client(timeout=max(120.0, request.limits.grace_s + 60))
        self.image = self.options.get("image") or DEFAULT_IMAGE
        try:
            self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"docker image {self.image!r} not found: {BUILD_HINT.format(image=self.image)}"
            ) from None
        self.folders = RunFolders.create(request)
        self.sandbox_id = f"{request.run_dir.name}-{uuid.uuid4().hex[:8]}"
        self.warnings: list[str] = []
        engine_cpus = int(self.client.info().get("NCPU") or 1)
        self.cpus = max(1, min(request.limits.cpus, engine_cpus))
        if request.limits.cpus > engine_cpus:
            self.warnings.append(
                f"asked for {request.limits.cpus} CPUs, the Docker engine has {engine_cpus}: "
                f"using all"
            )
        self.gpus = place_gpus(request.limits.gpus, request.gpu_ids, detect_gpus())
        self.warnings += self.gpus.warnings
        self.network_mode = (
            (self.options.get("network_mode") or "bridge") if request.network else "none"
        )
        self._count = 0
        return LAYOUT

    def host_path(self, inside: str) -> Path:
        """Map ``/task``, ``/workspace`` and ``/output`` paths to the host."""
        return self.folders.host_path(inside)

    def container_options(self) -> dict[str, Any]:
        """Everything ``containers.create`` gets besides the image, command and environment."""
        from docker.types import DeviceRequest

        memory = int(self.request.limits.memory_gb * GIB)
        volumes = {
            str(host): {"bind": inside, "mode": "ro"}
            for host, inside in self.request.extra_ro_binds.items()
        }
        volumes[str(self.folders.task)] = {"bind": LAYOUT.task, "mode": "ro"}
        volumes[str(self.folders.workspace)] = {"bind": LAYOUT.workspace, "mode": "rw"}
        volumes[str(self.folders.output)] = {"bind": LAYOUT.output, "mode": "rw"}
        options: dict[str, Any] = {
            "init": True,
            "nano_cpus": self.cpus * 1_000_000_000,
            "mem_limit": memory,
            "memswap_limit": memory,
            "pids_limit": self.options.get("pids_limit"),
            "network_mode": self.network_mode,
            "volumes": volumes,
            "working_dir": LAYOUT.workspace,
            "hostname": "spu-sandbox",
            "security_opt": ["no-new-privileges"],
            "labels": {RUN_LABEL: self.sandbox_id},
            "detach": True,
        }
        if self.gpus.ids:
            options["device_requests"] = [
                DeviceRequest(device_ids=list(self.gpus.ids), capabilities=[["gpu"]])
            ]
        return options

    def create_container(self, argv: Sequence[str], env: Mapping[str, str]) -> Any:
        """Create (not start) the container that will run ``argv``."""
        self._count += 1
        environment = dict(env)
        environment.setdefault("HOME", LAYOUT.workspace)
        return self.client.containers.create(
            self.image,
            command=list(argv),
            environment=environment,
            name=f"spu-{self.sandbox_id}-{self._count}",
            **self.container_options(),
        )

    def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        stdout: Path,
        stderr: Path,
        timeout_s: float | None = None,
    ) -> ProcessEvidence:
        """Run ``argv`` in a fresh container to its end or to the wall-clock limit."""
        import docker

        limit = self.request.limits.time_s if timeout_s is None else timeout_s
        start = time.monotonic()
        try:
            container = self.create_container(argv, env)
        except docker.errors.DockerException as exc:
            return ProcessEvidence(error=f"container not created: {exc}")
        try:
            try:
                container.start()
            except docker.errors.APIError as exc:
                return ProcessEvidence(
                    error=f"container did not start: {exc.explanation or exc}",
                    duration_s=time.monotonic() - start,
                )
            timed_out, peak = self._wait(container, start, limit)
            duration = time.monotonic() - start
            state = self.client.api.inspect_container(container.id)["State"]
            self._save_logs(container, stdout, stderr)
        finally:
            try:
                container.remove(force=True)
            except docker.errors.DockerException as exc:
                log.warning("container %s not removed: %s", container.name, exc)
        exit_code = state.get("ExitCode")
        error = state.get("Error") or None
        if exit_code and not timed_out and error is None:
            failed = wrapper_error(stderr, INIT_PREFIXES)
            error = f"container did not start the agent: {failed}" if failed else None
        return ProcessEvidence(
            exit_code=exit_code,
            signal=signal_of_exit(exit_code),
            timed_out=timed_out,
            oom_killed=bool(state.get("OOMKilled")),
            peak_memory_bytes=peak,
            duration_s=duration,
            error=error,
        )

    def _wait(self, container: Any, start: float, limit: float | None) -> tuple[bool, int | None]:
        """Poll until the container exits; stop it gracefully at the limit."""
        deadline = None if limit is None else start + limit
        peak_file = None
        peak: int | None = None
        while True:
            state = self.client.api.inspect_container(container.id)["State"]
            if not state.get("Running"):
                return False, peak
            if peak_file is None and state.get("Pid"):
                peak_file = _memory_cgroup_file(int(state["Pid"]))
            seen = _read_int(peak_file)
            if seen is not None:
                peak = max(peak or 0, seen)
            if self.stop_requested.is_set():
                # Asked to stop (a monitor saw the key rejected): not a timeout.
                container.stop(timeout=int(round(self.request.limits.grace_s)))
                return False, peak
            if deadline is not None and time.monotonic() >= deadline:
                # SIGTERM to docker-init, which passes it on; SIGKILL after the grace period.
                container.stop(timeout=int(round(self.request.limits.grace_s)))
                return True, peak
            time.sleep(POLL_S)

    def _save_logs(self, container: Any, stdout: Path, stderr: Path) -> None:
        stdout.parent.mkdir(parents=True, exist_ok=True)
        for path, which in ((stdout, {"stdout": True, "stderr": False}),
                            (stderr, {"stdout": False, "stderr": True})):
            with open(path, "wb") as f:
                for chunk in self.client.api.logs(container.id, stream=True, **which):
                    f.write(chunk)

    def collect(self) -> Path:
        """The host folder behind ``/output``."""
        return self.folders.output

    def cleanup(self) -> None:
        """Remove every container of this sandbox that is still there."""
        import docker

        if getattr(self, "client", None) is None:
            return
        try:
            leftovers = self.client.containers.list(
                all=True, filters={"label": f"{RUN_LABEL}={self.sandbox_id}"}
            )
            for container in leftovers:
                container.remove(force=True)
        except docker.errors.DockerException as exc:
            log.warning("containers of sandbox %s not removed: %s", self.sandbox_id, exc)
        self.client.close()
        self.client = None

    def info(self) -> SandboxInfo:
        """The container's isolation and the limits handed to the engine."""
        isolation = ["container", "mount-namespace", "pid-namespace", "ipc-namespace",
                     "uts-namespace", "init", "no-new-privileges"]
        if self.network_mode != "host":
            isolation.append("network-namespace")
        return SandboxInfo(
            backend=self.name,
            isolation=isolation,
            warnings=list(self.warnings),
            limits=EnforcedLimits(
                time_s=self.request.limits.time_s,
                memory_gb=self.request.limits.memory_gb,
                memory_mechanism="docker",
                cpus=self.cpus,
                cpu_mechanism="docker",
                gpus=list(self.gpus.ids),
                pids_limit=self.options.get("pids_limit"),
            ),
        )
