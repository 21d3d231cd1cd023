"""``sandbox=docker``: one container per agent process, through the Docker SDK.

The container runs ``sandbox.image`` (default ``spu-agent:latest``, built by
``docker build -f docker/agent.Dockerfile`` or offline by
``docker/build-base-image.sh``) with the task's public files read-only at ``/task``,
``/workspace`` and ``/output`` bound from the run folder, the harness's read-only
binds, ``docker-init`` as PID 1, ``no-new-privileges``, and the limits of the run:
``nano_cpus``, ``mem_limit`` with swap equal to it, ``pids_limit`` and GPUs as
``device_requests``. Nothing else of the host is mounted; a masked path that a bind
shows (``SandboxRequest.masked_paths``) is covered, as under ``sandbox=local``.

The network: with ``sandbox.network_mode=pasta`` (the default) the run's containers
share the network namespace of one holder container (``network_mode=none``, then
``container:<holder>`` for each agent process), to which pasta gives the same
filtered way out as under ``sandbox=local`` (:mod:`spu.sandbox.network`): the
internet and the run's host ports at ``127.0.0.1``, no address of the host or its
network. pasta runs on this machine, so the engine must be local. Any other
``network_mode`` is handed to Docker as it is (``bridge``: internet, and the host and
its network reachable; recorded as ``network:docker-<mode>`` with a warning);
``sandbox.network=false`` is ``none``. The agent runs as an unprivileged user of its own,
as under ``sandbox=local``: a user id drawn per run (:func:`spu.sandbox.local.agent_uid_for`,
``sandbox.options.agent_uid`` fixes one), which is also its user id on the host (the
engine's user namespace, where it has one, maps it further), with ``/workspace`` and
``/output`` given to it and a ``passwd`` entry of its own (``spu-agent``, home
``/workspace``). Root in the container is the host's root without a remapping engine: a
process escaping the container would be root on the host. ``agent_uid=0`` keeps the
image's user (root), with a warning. Either way the container has no ``MKNOD`` and
``SETFCAP``, and what it leaves for the host is disarmed (:func:`spu.sandbox.disk.disarm`).
GPUs need nothing more: the NVIDIA runtime's device nodes are open to every user.

The workspace and output live on the run's size-limited disk (:mod:`spu.sandbox.disk`,
mounted on this machine and bound into the container); what it writes elsewhere, into
the container's own layer, is measured against the same limit (:class:`LayerMeter`);
stdout and stderr are streamed from the container (Docker keeps no log file of its own)
and capped at ``limits.log_mb``.
Containers carry the id of the process that made them; those of a process that is gone
(a driver killed with ``kill -9``) are removed when the next sandbox is prepared.

The SDK is imported when a container is made, never with :mod:`spu`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spu.sandbox import LAYOUT, ExecCall, Sandbox, SandboxError, SandboxRequest
from spu.sandbox.base import masked_under, remembered_availability
from spu.sandbox.disk import used_bytes
from spu.sandbox.limits import GIB
from spu.sandbox.local import (
    AGENT_NAME,
    agent_uid_for,
    chown_tree,
    make_readable,
    start_check_argv,
    start_report,
)
from spu.sandbox.network import NetworkError, UserNetwork, pasta_available
from spu.sandbox.options import DockerOptions
from spu.sandbox.process import CappedLog, signal_of_exit
from spu.schema import EnforcedLimits, ProcessEvidence

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "spu-agent:latest"
RUN_LABEL = "spu.sandbox"
"""Label carrying the sandbox id, so that cleanup finds every container of a run."""
OWNER_LABEL = "spu.owner"
"""Label carrying ``<host name>:<process id>`` of the framework process that made it."""
PASTA_MODE = "pasta"
"""``sandbox.network_mode`` of the filtered user-mode network."""
POLL_S = 0.2
"""How often a running container's state, memory and disk are looked at (its exit ends
the wait at once: the attach stream closes)."""
STALE_EVERY_S = 60.0
"""How often a process looks for containers left by dead framework processes."""
LAYER_POLL_S = 2.0
"""How often the container's own writable layer is measured against the disk limit."""
DROPPED_CAPABILITIES = ("MKNOD", "SETFCAP", "NET_RAW", "NET_BIND_SERVICE", "AUDIT_WRITE",
                        "SYS_CHROOT", "SETPCAP")
"""Capabilities of Docker's default set that an agent never gets: device nodes and file
capabilities would reach the host with the run's files; raw sockets (``NET_RAW``: forged
packets, ARP and ICMP to the host's networks), low ports, the audit log, ``chroot`` and
capability changes are nothing the layout needs. What is kept (``CHOWN``, ``DAC_OVERRIDE``,
``FOWNER``, ``FSETID``, ``SETUID``, ``SETGID``, ``KILL``) is what root's package managers
use inside the container (issue 30)."""
BUILD_HINT = (
    "build it offline with docker/build-base-image.sh, or from a registry with "
    "docker build -f docker/agent.Dockerfile -t {image} docker/"
)


def docker_client(timeout: float = 120) -> Any:
    """A client of the Docker engine named by the environment (``DOCKER_HOST``, the socket)."""
    import docker

    return docker.from_env(timeout=int(timeout))


@dataclass(frozen=True)
class _Engine:
    """This process's client of the engine, with its number of CPUs (asked once)."""

    client: Any
    cpus: int


_ENGINES: dict[int, _Engine] = {}
_ENGINES_LOCK = threading.Lock()
_STALE_CHECKED: list[float] = [float("-inf")]


def shared_engine(timeout: float, *, fresh: bool = False) -> _Engine:
    """One client per process and timeout, kept across runs (``fresh``: make a new one).

    A new client asks the engine its API version, and its number of CPUs was asked per
    run: 25 ms and a share of the engine's CPU each, for every run of a sweep.
    """
    key = int(timeout)
    with _ENGINES_LOCK:
        engine = None if fresh else _ENGINES.get(key)
        if engine is None:
            client = docker_client(timeout=key)
            engine = _Engine(client, int(client.info().get("NCPU") or 1))
            old = _ENGINES.pop(key, None)
            _ENGINES[key] = engine
            if old is not None:
                old.client.close()
        return engine


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


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def remove_stale_containers(client: Any) -> int:
    """Remove the containers of framework processes of this machine that are gone."""
    import docker

    removed = 0
    host = socket.gethostname()
    try:
        # The list's own fields (labels included), not an inspection of each container.
        containers = client.api.containers(all=True, filters={"label": OWNER_LABEL})
    except docker.errors.DockerException:
        return 0
    for container in containers:
        labels = container.get("Labels") or {}
        owner_host, _, pid = labels.get(OWNER_LABEL, "").rpartition(":")
        if owner_host != host or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            client.api.remove_container(container["Id"], force=True)
            removed += 1
        except docker.errors.NotFound:
            pass  # removed meanwhile (by its own run's cleanup, or another sandbox)
        except docker.errors.DockerException as exc:
            log.warning("stale container %s not removed: %s", container.get("Names"), exc)
    return removed


def remove_stale_when_due(client: Any) -> None:
    """:func:`remove_stale_containers`, at most once every :data:`STALE_EVERY_S` a process.

    The containers it removes are those of a framework process that died; the runs of a
    sweep on one worker would otherwise list every container of the engine, each.
    """
    with _ENGINES_LOCK:
        now = time.monotonic()
        if now - _STALE_CHECKED[0] < STALE_EVERY_S:
            return
        _STALE_CHECKED[0] = now
    remove_stale_containers(client)


IDENTITY_FOLDER = ".spu-identity-docker"
"""Folder of the run (not shown to the agent) holding the container's ``passwd`` and ``group``."""


def _container_identity(run_dir: Path, uid: int) -> Path:
    """A ``passwd`` and a ``group`` naming root and the agent (CLIs look their user up)."""
    folder = run_dir / IDENTITY_FOLDER
    folder.mkdir(mode=0o755, exist_ok=True)
    entries = {"passwd": ("root:x:0:0:root:/root:/bin/sh\n"
                          f"{AGENT_NAME}:x:{uid}:{uid}:SPU agent:{LAYOUT.workspace}:/bin/sh\n"),
               "group": f"root:x:0:\n{AGENT_NAME}:x:{uid}:\n"}
    for name, text in entries.items():
        (folder / name).write_text(text)
        os.chmod(folder / name, 0o644)
    return folder


def _pump(stream: Any, out: CappedLog, err: CappedLog) -> threading.Thread:
    """A started thread copying a demultiplexed attach stream into the two logs."""

    def _copy() -> None:
        try:
            for chunk_out, chunk_err in stream:
                if chunk_out:
                    out.write(chunk_out)
                if chunk_err:
                    err.write(chunk_err)
        except Exception as exc:  # noqa: BLE001 - a closed stream ends the copy
            log.debug("log stream ended: %s", exc)

    thread = threading.Thread(target=_copy, daemon=True)
    thread.start()
    return thread


class LayerMeter:
    """What an agent wrote into its container's own layer, on the engine's disk.

    That is everything outside ``/workspace`` and ``/output`` (``/tmp``, ``/root``,
    ``/usr/local``...). The run's disk does not hold that layer, so it is measured
    (the engine's overlay ``UpperDir``, every :data:`LAYER_POLL_S` or ten times as long
    as a measurement takes) and held to the same limit: a run past it ends
    ``disk_limit``. A fast writer can pass it between two measurements; the layer goes
    with the container.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.upper: Path | None = None
        self._next = 0.0
        self._full = False

    def watch(self, upper: str | None) -> None:
        """Measure the layer at host path ``upper`` (None: not visible here)."""
        self.upper = Path(upper) if upper and os.path.isdir(upper) else None
        self._next, self._full = 0.0, False

    def full(self, now: bool = False) -> bool:
        """True once the layer holds the limit (measured when due, or ``now``)."""
        if self.upper is None or self.limit_bytes <= 0 or self._full:
            return self._full
        clock = time.monotonic()
        if now or clock >= self._next:
            self._full = used_bytes([self.upper]) >= self.limit_bytes
            took = time.monotonic() - clock
            self._next = time.monotonic() + max(LAYER_POLL_S, 10 * took)
        return self._full


class DockerSandbox(Sandbox):
    """A container per process, with the layout, the limits and GPUs as device requests."""

    name = "docker"
    options_model = DockerOptions
    needs = ("docker",)
    host_limits = False
    unreachable_port_fix = ("set sandbox.network_mode=pasta (Docker's own network modes "
                            "cannot forward host ports)")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """A Docker engine must answer (once per process; the image is checked in prepare)."""
        return remembered_availability(cls.name, _engine_answers)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.image = str(self.options.get("image") or DEFAULT_IMAGE)
        self.client: Any = None
        """This process's shared client of the engine (:func:`shared_engine`)."""
        self.sandbox_id = ""
        """The label of every container of this run."""
        self.cpus = 1
        self.holder: Any = None
        self.network: UserNetwork | None = None
        self.network_mode, self.network_name = "none", "offline"
        self.layer = LayerMeter(0)
        self._count = 0
        self.agent_uid: int | None = None
        """The agent's user id in the container and on the host (None: the image's user)."""
        self.identity: Path | None = None

    def _open(self, request: SandboxRequest) -> None:
        """Reach the engine and find the image; decide the CPUs the engine can give."""
        engine = self._engine(max(120.0, request.limits.grace_s + 60))
        self.client = engine.client
        self.cpus = max(1, min(request.limits.cpus, engine.cpus))
        if request.limits.cpus > engine.cpus:
            self.warnings.append(
                f"asked for {request.limits.cpus} CPUs, the Docker engine has {engine.cpus}: "
                f"using all"
            )

    def _start(self, request: SandboxRequest) -> None:
        """Choose the agent's user, remove stale containers, meter the layer, open the network."""
        self.sandbox_id = f"{request.run_dir.name}-{uuid.uuid4().hex[:8]}"
        chosen = self.options.get("agent_uid")
        self.agent_uid = agent_uid_for(request.run_dir) if chosen is None else int(chosen)
        if self.agent_uid == 0:
            self.agent_uid = None
            self.warnings.append(
                "sandbox.options.agent_uid=0: the agent runs as the image's user (root in the "
                "container, and root on the host unless the engine remaps user namespaces)")
        else:
            make_readable(self.folders.task)
            self.identity = _container_identity(request.run_dir, self.agent_uid)
        remove_stale_when_due(self.client)
        self.layer = LayerMeter(self.disk.limit_bytes if self.disk.mechanism != "none" else 0)
        mode = str(self.options.get("network_mode") or PASTA_MODE)
        if not request.network:
            self.network_mode, self.network_name = "none", "offline"
        elif mode == PASTA_MODE:
            self.network_mode = f"container:{self._open_network()}"
            self.network_name = self.network.mode if self.network else "offline"
        else:
            self.network_mode, self.network_name = mode, (
                "host" if mode == "host" else f"docker-{mode}")
            self.warnings.append(
                f"sandbox.network_mode={mode}: Docker's own network, not filtered; the agent "
                f"may reach this machine's services and its local network"
                + ("" if not request.host_ports else
                   f", and not the host ports {list(request.host_ports)}"))

    def _engine(self, timeout: float) -> _Engine:
        """This process's engine client, answering, with :attr:`image` present.

        The image is looked up for each run (which also shows the client still reaches
        the engine: one made before the engine restarted is replaced).
        """
        import requests

        import docker

        for attempt in (0, 1):
            try:
                engine = shared_engine(timeout, fresh=bool(attempt))
                engine.client.api.inspect_image(self.image)
                return engine
            except docker.errors.ImageNotFound:
                raise SandboxError(f"docker image {self.image!r} not found: "
                                   f"{BUILD_HINT.format(image=self.image)}") from None
            except (docker.errors.DockerException, requests.RequestException) as exc:
                if attempt:  # a new client did not answer either
                    raise SandboxError(f"the Docker engine did not answer: {exc}") from exc
                # else the engine may have restarted since this process's client was made
        raise AssertionError("unreachable")

    def _open_network(self) -> str:
        """Start the holder container and connect its network namespace; returns its id."""
        import docker

        ok, why = pasta_available()
        if not ok:
            raise SandboxError(why)
        if os.geteuid() != 0:
            raise SandboxError("sandbox.network_mode=pasta needs root (pasta joins the "
                               "container's network namespace); run as root, or accept an "
                               "unfiltered network with sandbox.network_mode=bridge")
        try:
            self.holder = self.client.containers.create(
                self.image, command=["sleep", "infinity"], init=True, network_mode="none",
                hostname="spu-sandbox", name=f"spu-{self.sandbox_id}-net",
                labels={RUN_LABEL: self.sandbox_id, OWNER_LABEL: _owner()},
                security_opt=["no-new-privileges"], detach=True,
                mem_limit=64 * 1024 * 1024, pids_limit=8)
            self.holder.start()
            pid = int(self.client.api.inspect_container(self.holder.id)["State"]["Pid"] or 0)
        except docker.errors.DockerException as exc:
            raise SandboxError(f"the network holder container did not start: {exc}") from exc
        if not pid or not os.path.exists(f"/proc/{pid}/ns/net"):
            raise SandboxError(
                "sandbox.network_mode=pasta needs the Docker engine on this machine (its "
                "containers' processes are not visible here); use a local engine, or accept "
                "an unfiltered network with sandbox.network_mode=bridge")
        self.network = UserNetwork(self.request.host_ports, self.request.allowed_networks)
        try:
            self.network.attach(pid)
        except NetworkError as exc:
            raise SandboxError(str(exc)) from exc
        self.warnings += self.network.warnings
        return str(self.holder.id)

    def container_options(self) -> dict[str, Any]:
        """Everything ``containers.create`` gets besides the image, command and environment."""
        from docker.types import DeviceRequest

        memory = int(self.request.limits.memory_gb * GIB)
        volumes = {
            str(host): {"bind": inside, "mode": "ro"}
            for host, inside in self.request.extra_ro_binds.items()
        }
        tmpfs, mounts = docker_masks(self.request)
        volumes[str(self.folders.task)] = {"bind": LAYOUT.task, "mode": "ro"}
        volumes[str(self.folders.workspace)] = {"bind": LAYOUT.workspace, "mode": "rw"}
        volumes[str(self.folders.output)] = {"bind": LAYOUT.output, "mode": "rw"}
        if self.identity is not None:
            for name in ("passwd", "group"):
                volumes[str(self.identity / name)] = {"bind": f"/etc/{name}", "mode": "ro"}
        options: dict[str, Any] = {
            "init": True,
            "nano_cpus": self.cpus * 1_000_000_000,
            "mem_limit": memory,
            "memswap_limit": memory,
            "pids_limit": self.options.get("pids_limit"),
            "network_mode": self.network_mode,
            "volumes": volumes,
            "tmpfs": tmpfs,
            "mounts": mounts,
            "working_dir": LAYOUT.workspace,
            "security_opt": ["no-new-privileges"],
            # Root in the container may not make device nodes or file capabilities: both
            # would reach the host with the run's files (spu.sandbox.disk.disarm).
            "cap_drop": list(DROPPED_CAPABILITIES),
            "labels": {RUN_LABEL: self.sandbox_id, OWNER_LABEL: _owner()},
            "log_config": {"type": "none", "config": {}},
            "detach": True,
        }
        if self.agent_uid is not None:
            options["user"] = f"{self.agent_uid}:{self.agent_uid}"
        if not self.network_mode.startswith("container:"):
            options["hostname"] = "spu-sandbox"  # else the holder's: Docker refuses both
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

    def _exec(self, call: ExecCall) -> ProcessEvidence:
        """Run the process in a fresh container to its end or to the wall-clock limit."""
        import docker

        start = time.monotonic()
        if self.agent_uid is not None:  # the harness filled them as root
            chown_tree(self.folders.workspace, self.agent_uid)
            chown_tree(self.folders.output, self.agent_uid)
        nonce, name, nonce_path = self._start_nonce()
        try:
            container = self.create_container(
                start_check_argv(call.argv, f"{LAYOUT.workspace}/{name}"), call.env)
        except docker.errors.DockerException as exc:
            nonce_path.unlink(missing_ok=True)
            return ProcessEvidence(error=f"container not created: {exc}")
        try:
            self.layer.watch(self._upper_dir(container))
            cap = self.request.limits.log_cap_bytes or 1 << 62
            call.stdout.parent.mkdir(parents=True, exist_ok=True)
            # Unbuffered: the key monitor and the status line read the log while it grows.
            with open(call.stdout, "wb", buffering=0) as out_file, \
                    open(call.stderr, "wb", buffering=0) as err_file:
                out, err = CappedLog(out_file, cap), CappedLog(err_file, cap)
                stream = self.client.api.attach(container.id, stdout=True, stderr=True,
                                                stream=True, demux=True)
                pump = _pump(stream, out, err)
                try:
                    container.start()
                except docker.errors.APIError as exc:
                    stream.close()
                    return ProcessEvidence(
                        error=f"container did not start: {exc.explanation or exc}",
                        duration_s=time.monotonic() - start,
                    )
                timed_out, disk_full, peak, state = self._wait(container, start, call.timeout_s,
                                                               self._over_limit, pump)
                # A writer that filled its layer and exited at once (the layer goes with
                # the container: measured now).
                disk_full = disk_full or (not timed_out and self.layer.full(now=True))
                duration = time.monotonic() - start
                if state is None:  # stopped by this process: how it ended is known now
                    state = self.client.api.inspect_container(container.id)["State"]
                pump.join(timeout=max(5.0, self.request.limits.grace_s))
                stream.close()
                dropped = out.close() + err.close()
        finally:
            nonce_path.unlink(missing_ok=True)
            try:
                container.remove(force=True)
            except docker.errors.DockerException as exc:
                log.warning("container %s not removed: %s", container.name, exc)
        exit_code = state.get("ExitCode")
        # Whether the container started is the engine's word (created, started, its
        # State.Error), never the agent's stderr: an agent can print docker-init's failure
        # as all of it and exit 1, and is then an agent that exited 1.
        error = state.get("Error") or None
        if error is not None:
            error = f"container did not start the agent: {error}"
        elif (report := start_report(call.stderr, nonce)) is not None:
            error = f"container did not start the agent: {report}"
        if not disk_full:
            disk_full = self.disk.full()  # filled the disk and exited at once
        return ProcessEvidence(
            exit_code=exit_code,
            signal=signal_of_exit(exit_code),
            timed_out=timed_out,
            oom_killed=bool(state.get("OOMKilled")),
            peak_memory_bytes=peak,
            duration_s=duration,
            disk_full=disk_full,
            log_dropped_bytes=dropped,
            error=error,
        )

    def _start_nonce(self) -> tuple[str, str, Path]:
        """A start check's nonce, the name of its file in the workspace, and that file."""
        # The command behind the start check (local.start_check_argv): a command that
        # cannot be found is reported with a nonce the agent never sees, read from a file
        # the check deletes before anything of the agent's runs.
        nonce, name = secrets.token_hex(16), f".spu-start-{secrets.token_hex(8)}"
        nonce_path = self.folders.workspace / name
        nonce_path.write_text(nonce)
        nonce_path.chmod(0o600)
        if self.agent_uid is not None:
            os.chown(nonce_path, self.agent_uid, self.agent_uid)
        return nonce, name, nonce_path

    def _upper_dir(self, container: Any) -> str | None:
        """Host folder of the container's writable layer (overlay2), where visible."""
        import docker

        try:
            # The SDK inspected the container as it made it: its attrs are fresh.
            attrs = getattr(container, "attrs", None) or \
                self.client.api.inspect_container(container.id)
            driver = attrs.get("GraphDriver") or {}
        except docker.errors.DockerException:
            return None
        upper = (driver.get("Data") or {}).get("UpperDir")
        if (not upper or not os.path.isdir(upper)) and self.layer.limit_bytes > 0:
            note = (f"the container's own layer (storage driver {driver.get('Name')!r}) is not "
                    f"visible here: what the agent writes outside /workspace and /output is "
                    f"not held to limits.disk_gb")
            if note not in self.warnings:
                self.warnings.append(note)
        return upper

    def _over_limit(self) -> bool:
        return self.disk.full() or self.layer.full()

    def _wait(self, container: Any, start: float, limit: float | None,
              over_limit: Callable[[], bool],
              pump: threading.Thread | None = None,
              ) -> tuple[bool, bool, int | None, dict[str, Any] | None]:
        """Poll until the container exits; stop it gracefully at the time or disk limit.

        Between two looks it waits on ``pump``, the copy of the container's attach stream,
        which ends when the container does: an exit is seen at once, not up to
        :data:`POLL_S` later. Returns whether the time limit fired, whether the disk
        filled, the peak memory, and the container's final state where it exited by
        itself (None where this process stopped it).
        """
        deadline = None if limit is None else start + limit
        peak_file = None
        peak: int | None = None
        while True:
            state = self.client.api.inspect_container(container.id)["State"]
            if not state.get("Running"):
                return False, False, peak, state
            if peak_file is None and state.get("Pid"):
                peak_file = _memory_cgroup_file(int(state["Pid"]))
            seen = _read_int(peak_file)
            if seen is not None:
                peak = max(peak or 0, seen)
            if self.stop_requested.is_set():
                # Asked to stop (a monitor saw the key rejected): not a timeout.
                container.stop(timeout=int(round(self.request.limits.grace_s)))
                return False, False, peak, None
            timed_out = deadline is not None and time.monotonic() >= deadline
            disk_full = not timed_out and over_limit()
            if timed_out or disk_full:
                # SIGTERM to docker-init, which passes it on; SIGKILL after the grace period.
                container.stop(timeout=int(round(self.request.limits.grace_s)))
                return timed_out, disk_full, peak, None
            if pump is not None and pump.is_alive():
                pump.join(POLL_S)
            else:
                time.sleep(POLL_S)

    def _stop(self) -> None:
        """Remove every container of this sandbox, and its network."""
        import docker

        if self.client is not None and self.sandbox_id:
            try:
                leftovers = self.client.api.containers(
                    all=True, quiet=True, filters={"label": f"{RUN_LABEL}={self.sandbox_id}"}
                )
                for container in leftovers:
                    with contextlib.suppress(docker.errors.NotFound):
                        self.client.api.remove_container(container["Id"], force=True)
            except docker.errors.DockerException as exc:
                log.warning("containers of sandbox %s not removed: %s", self.sandbox_id, exc)
        self.client = None  # the process's shared client (shared_engine) stays open
        if self.network is not None:
            self.network.close()
            self.network = None
        if self.identity is not None:
            shutil.rmtree(self.identity, ignore_errors=True)
            self.identity = None

    def _isolation(self) -> tuple[list[str], str]:
        """The container's isolation and its network."""
        isolation = ["container", "mount-namespace", "pid-namespace", "ipc-namespace",
                     "uts-namespace", "init", "no-new-privileges"]
        if self.agent_uid is not None:
            isolation.append("unprivileged-user")
        if self.network_mode != "host":
            isolation.append("network-namespace")
        isolation.append(f"network:{self.network_name}")
        return isolation, self.network_name

    def _forwards_ports(self) -> bool:
        """Host ports are forwarded by pasta into the holder's namespace."""
        return self.network is not None or self.network_mode.startswith("container:")

    def _limits_in_force(self) -> EnforcedLimits:
        """The limits handed to the engine."""
        return EnforcedLimits(
            time_s=self.request.limits.time_s,
            memory_gb=self.request.limits.memory_gb,
            memory_mechanism="docker",
            cpus=self.cpus,
            cpu_mechanism="docker",
            gpus=list(self.gpus.ids),
            pids_limit=self.options.get("pids_limit"),
        )


def docker_masks(request: SandboxRequest) -> tuple[dict[str, str], list[Any]]:
    """The masked paths that a harness's bind shows, hidden as under ``sandbox=local``.

    Nothing of the host's system folders is mounted (the image has its own ``/usr``,
    ``/opt``); only a bind (e.g. a tools folder that holds ``$SPU_DATA_DIR``) can show
    a masked path: an empty read-only tmpfs covers a folder, ``/dev/null`` a file.
    """
    from docker.types import Mount

    tmpfs: dict[str, str] = {}
    mounts: list[Any] = []
    masked = [*request.masked_paths, request.run_dir.parent]
    for host, inside in request.extra_ro_binds.items():
        for target, folder in masked_under(masked, Path(host), Path(inside)):
            if folder:
                tmpfs[target] = "ro,size=4k,mode=0555"
            else:
                mounts.append(Mount(target, "/dev/null", type="bind", read_only=True))
    return tmpfs, mounts
