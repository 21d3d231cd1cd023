"""``sandbox=subprocess``: a plain process in the run folder, for machines without bubblewrap.

It isolates nothing: the agent runs as the framework's own user and sees the host's
files and processes; the answers are protected only by not being copied into the run
folder. Limits (cgroup memory, CPU quota and affinity, pids, the disk and the log
caps) still apply. It shares the host's network (``network:host``; ``network=false`` is
not enforced). Every run on it says so in its record and in the log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from spu.sandbox.base import (
    RunFolders,
    Sandbox,
    SandboxPaths,
    SandboxRequest,
    register_sandbox,
)
from spu.sandbox.disk import RunDisk
from spu.sandbox.gpus import detect_gpus, place_gpus
from spu.sandbox.limits import LimitEnforcer
from spu.sandbox.process import run_with_limits
from spu.schema import ProcessEvidence, SandboxInfo

log = logging.getLogger(__name__)

WARNING = (
    "NO SANDBOX: the agent runs as a plain process; the answers are protected only by "
    "the file layout (install bubblewrap for sandbox=local)"
)


@register_sandbox
class SubprocessSandbox(Sandbox):
    """A plain subprocess with limits, in a folder holding only the task's public files."""

    name = "subprocess"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Always available."""
        return True, "plain subprocess"

    def prepare(self, request: SandboxRequest) -> SandboxPaths:
        """Create the workspace and output folders; the agent sees host paths."""
        self.request = request
        self.folders = RunFolders.create(request)
        self.layout = SandboxPaths(
            task=str(self.folders.task),
            workspace=str(self.folders.workspace),
            output=str(self.folders.output),
        )
        self.limits = LimitEnforcer(
            request.limits, request.run_dir.name, pids_limit=self.options.get("pids_limit")
        )
        self.gpus = place_gpus(request.limits.gpus, request.gpu_ids, detect_gpus())
        self.disk = RunDisk(request.run_dir, request.limits.disk_gb)
        self.disk.set_up()
        self.warnings = [WARNING, *self.limits.warnings, *self.gpus.warnings,
                         *self.disk.warnings]
        if not request.network:
            self.warnings.append("sandbox.network=false is not enforced by sandbox=subprocess: "
                                 "the agent has the host's network")
        log.warning(WARNING)
        return self.layout

    def host_path(self, inside: str) -> Path:
        """Paths of the layout are host paths already."""
        return self.folders.host_path(inside, self.layout)

    def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        stdout: Path,
        stderr: Path,
        timeout_s: float | None = None,
    ) -> ProcessEvidence:
        """Run ``argv`` in the workspace with a cleared environment and the limits."""
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.folders.workspace),
            **env,
            **self.gpus.env(),
        }
        return run_with_limits(
            argv,
            full_env,
            cwd=self.folders.workspace,
            stdout=stdout,
            stderr=stderr,
            timeout_s=self.request.limits.time_s if timeout_s is None else timeout_s,
            grace_s=self.request.limits.grace_s,
            enforcer=self.limits,
            log_cap_bytes=self.request.limits.log_cap_bytes,
            over_limit=self.disk.full,
            stop=self.stop_requested,
        )

    def collect(self) -> Path:
        """The output folder."""
        return self.folders.output

    def cleanup(self) -> None:
        """Kill what is left of the run, remove its cgroups, release its disk."""
        if hasattr(self, "limits"):
            self.limits.cleanup()
        if hasattr(self, "disk"):
            self.disk.release()

    def info(self) -> SandboxInfo:
        """No isolation, loudly; the host's network."""
        limits = self.disk.enforced(self.limits.enforced(self.gpus.ids),
                                    self.request.limits.log_mb)
        return SandboxInfo(
            backend=self.name,
            isolation=["network:host"],
            warnings=list(self.warnings),
            limits=limits,
            network="host",
        )
