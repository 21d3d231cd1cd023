"""The sandbox interface: where an agent runs, with the task read-only and the answers absent.

A backend is one module holding one :class:`Sandbox` subclass, declared by an entry
point of group ``spu.sandboxes`` (:mod:`spu.registry`); ``sandbox=<name>`` in the config
selects it, and its :attr:`Sandbox.options_model` checks ``sandbox.options``. Inside every
backend the agent sees the same layout:

- ``/task``: the task's public files, read-only;
- ``/workspace``: its home and working folder, writable;
- ``/output``: where it writes ``rankings.json``, ``report.md``, ``sources.json``, ``scripts/``.

(The plain-subprocess fallback cannot remap paths and hands out host paths instead,
through the same ``SPU_*`` environment variables.)
"""

from __future__ import annotations

import os
import stat
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from spu.registry import SANDBOXES, Registry
from spu.sandbox.options import SandboxOptions, check_options
from spu.schema import ProcessEvidence, SandboxInfo


@dataclass(frozen=True)
class RunLimits:
    """Limits asked for one run (SPEC section 4); a backend reports what it enforced."""

    time_s: float = 28800.0
    memory_gb: float = 16.0
    cpus: int = 8
    gpus: int = 0
    grace_s: float = 10.0
    disk_gb: float = 50.0
    """Disk the agent may write (workspace and output together); 0: no limit."""
    log_mb: float = 64.0
    """Cap on each of the agent's stdout and stderr, head and tail kept; 0: no cap."""

    @property
    def log_cap_bytes(self) -> int | None:
        """``log_mb`` in bytes, None when uncapped."""
        return int(self.log_mb * 1024 * 1024) if self.log_mb > 0 else None


@dataclass(frozen=True)
class SandboxPaths:
    """The three folders of the layout, as the agent sees them."""

    task: str
    workspace: str
    output: str
    host_address: str = "127.0.0.1"
    """Address at which the agent reaches the host ports of ``SandboxRequest.host_ports``."""


@dataclass
class SandboxRequest:
    """What a run asks of its sandbox."""

    task_dir: Path
    """Host folder holding only the task's public files."""
    run_dir: Path
    """Host folder of this run; the backend keeps workspace and output under it."""
    limits: RunLimits = field(default_factory=RunLimits)
    gpu_ids: Sequence[str] = ()
    """GPU device ids assigned to this run by the launcher."""
    network: bool = True
    """Whether the agent has network access (the paper's agents do)."""
    host_ports: Sequence[int] = ()
    """TCP ports on the host's loopback the agent may reach (its tools service, egress
    proxy, a local model server), at ``SandboxPaths.host_address`` and the same port;
    no other host service is reachable from the sandbox (``network=true``; offline,
    none is)."""
    allowed_networks: Sequence[str] = ()
    """IPv4 networks the agent may reach although they are private or directly connected
    to the host (e.g. a site's HTTP proxy); never an address of the host itself."""
    extra_ro_binds: Mapping[str, str] = field(default_factory=dict)
    """Host path -> sandbox path, mounted read-only (e.g. a cached tools folder)."""
    masked_paths: Sequence[Path] = ()
    """Host paths the agent must not see even where a system folder would show them
    (the task's source folder with its answers, the answer root, the other runs)."""


LAYOUT = SandboxPaths(task="/task", workspace="/workspace", output="/output")
"""The layout inside every backend that can remap paths."""


@dataclass(frozen=True)
class RunFolders:
    """The host folders behind the layout of one run."""

    task: Path
    """The staged public files of the task."""
    workspace: Path
    """``<run_dir>/workspace``."""
    output: Path
    """``<run_dir>/output``."""

    @classmethod
    def create(cls, request: SandboxRequest) -> RunFolders:
        """Make ``workspace/`` and ``output/`` under the run folder."""
        folders = cls(
            task=request.task_dir,
            workspace=request.run_dir / "workspace",
            output=request.run_dir / "output",
        )
        folders.workspace.mkdir(parents=True, exist_ok=True)
        folders.output.mkdir(parents=True, exist_ok=True)
        return folders

    def host_path(self, inside: str, layout: SandboxPaths = LAYOUT) -> Path:
        """Map a path of ``layout`` to the host; anything else is refused."""
        for prefix, host in (
            (layout.workspace, self.workspace),
            (layout.output, self.output),
            (layout.task, self.task),
        ):
            if inside == prefix or inside.startswith(prefix.rstrip("/") + "/"):
                rest = inside[len(prefix) :].lstrip("/")
                if ".." in Path(rest).parts:
                    break
                return host / rest
        raise ValueError(f"{inside!r} is not inside the sandbox layout {layout}")


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


class SandboxError(RuntimeError):
    """The sandbox could not be prepared or started: the run is an infrastructure error."""


_AVAILABLE: dict[str, tuple[bool, str]] = {}


def remembered_availability(key: str, probe: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
    """``probe()``, remembered for the rest of the process once it succeeds.

    The runner asks a backend whether it is available before it builds one, and the
    backend's ``prepare`` asks again (so that a direct call fails clearly); with this,
    a working backend is probed once per process. A failure is probed again each time:
    an engine may be started later in the same process.
    """
    known = _AVAILABLE.get(key)
    if known is not None:
        return known
    ok, why = probe()
    if ok:
        _AVAILABLE[key] = (ok, why)
    return ok, why


class Sandbox(ABC):
    """One isolated environment for one run."""

    name: ClassVar[str]
    options_model: ClassVar[type[SandboxOptions]] = SandboxOptions
    """The backend's options (``sandbox.options``), checked by
    :func:`spu.sandbox.options.backend_options` before the run starts."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = check_options(self.name, self.options_model, options or {})
        """Every option of :attr:`options_model`, checked (SandboxOptionsError if not)."""
        self.stop_requested = threading.Event()
        """Set by :meth:`request_stop`; a running :meth:`exec` stops its agent gracefully."""

    def request_stop(self) -> None:
        """Ask a running :meth:`exec` (from another thread) to stop the agent now.

        The agent is stopped as at the time limit (graceful stop, then kill), without
        ``timed_out``; the caller records why (a monitor that saw the key rejected).
        """
        self.stop_requested.set()

    @classmethod
    @abstractmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the backend works on this machine, and why not when it does not."""

    @abstractmethod
    def prepare(self, request: SandboxRequest) -> SandboxPaths:
        """Create the layout for ``request``; returns the paths the agent will see."""

    @abstractmethod
    def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        stdout: Path,
        stderr: Path,
        timeout_s: float | None = None,
    ) -> ProcessEvidence:
        """Run ``argv`` inside the sandbox under the prepared limits and return the evidence."""

    @abstractmethod
    def host_path(self, inside: str) -> Path:
        """The host path behind a path of the layout (for reading and writing files)."""

    def _unlinked_host_path(self, inside: str) -> Path:
        """``host_path(inside)``, refused when a link is on the way from its layout folder.

        The framework writes and reads as root: a link the agent planted in its
        workspace must never lead it to a host file. (Call it while no agent process
        runs: a folder swapped for a link after the check is not seen.)
        """
        path = self.host_path(inside)
        roots = self.layout_roots()
        root = next((r for r in (roots.workspace, roots.output, roots.task)
                     if _within(path, r)), None)
        parts = path.relative_to(root).parts[:-1] if root is not None else ()
        current = root
        for part in parts:
            assert current is not None
            current = current / part
            if current.is_symlink():
                raise SandboxError(f"{inside!r} passes through a link ({part}): not followed")
        return path

    def layout_roots(self) -> RunFolders:
        """The host folders behind the layout (backends keep them as ``folders``)."""
        return self.folders  # type: ignore[attr-defined,no-any-return]

    def write_file(self, inside: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` at path ``inside`` of the layout (never through a link)."""
        path = self._unlinked_host_path(inside)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)

    def read_file(self, inside: str) -> bytes:
        """Read the regular file at path ``inside`` of the layout (never through a link)."""
        path = self._unlinked_host_path(inside)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SandboxError(f"{inside!r} is not a regular file")
            return f.read()

    @abstractmethod
    def collect(self) -> Path:
        """Host folder holding what the agent wrote to ``/output``."""

    def cleanup(self) -> None:  # noqa: B027 - optional hook
        """Release what the backend holds (containers, cgroups); files stay in the run folder."""

    @abstractmethod
    def info(self) -> SandboxInfo:
        """The backend and the isolation and limits actually in force."""


_REGISTRY: Registry[Sandbox] = Registry("sandbox", SANDBOXES, Sandbox)

register_sandbox = _REGISTRY.register
"""Class decorator: make a sandbox selectable by its ``name`` (without an entry point)."""

get_sandbox = _REGISTRY.get
"""The sandbox class called ``name`` (or ``package.module:Class``), imported on first use."""

sandbox_names = _REGISTRY.names
"""Every backend name declared (group ``spu.sandboxes``) or registered, sorted."""
