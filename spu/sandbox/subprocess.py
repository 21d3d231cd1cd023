"""``sandbox=subprocess``: a plain process in the run folder, for machines without bubblewrap.

It isolates nothing: the answers are protected only by not being copied into the
run folder. Every run on it says so in its record and in the log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from spu.sandbox.base import Sandbox, SandboxPaths, SandboxRequest, register_sandbox
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
    """A plain subprocess with rlimits, in a folder holding only the task's public files."""

    name = "subprocess"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Always available."""
        return True, "plain subprocess"

    def prepare(self, request: SandboxRequest) -> SandboxPaths:
        """Create the workspace and output folders; the agent sees host paths."""
        self.request = request
        self.workspace = request.run_dir / "workspace"
        self.output = request.run_dir / "output"
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.output.mkdir(parents=True, exist_ok=True)
        self.limits = LimitEnforcer(request.limits, request.run_dir.name)
        log.warning(WARNING)
        return SandboxPaths(
            task=str(request.task_dir), workspace=str(self.workspace), output=str(self.output)
        )

    def host_path(self, inside: str) -> Path:
        """Paths are host paths already."""
        return Path(inside)

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
            "HOME": str(self.workspace),
            **env,
        }
        return run_with_limits(
            argv,
            full_env,
            cwd=self.workspace,
            stdout=stdout,
            stderr=stderr,
            timeout_s=self.request.limits.time_s if timeout_s is None else timeout_s,
            grace_s=self.request.limits.grace_s,
            preexec_fn=self.limits.preexec,
            oom_check=self.limits.oom_killed,
            peak_memory=self.limits.peak_memory,
        )

    def collect(self) -> Path:
        """The output folder."""
        return self.output

    def cleanup(self) -> None:
        """Remove the run's cgroup, if one was made."""
        self.limits.cleanup()

    def info(self) -> SandboxInfo:
        """No isolation, loudly."""
        return SandboxInfo(
            backend=self.name,
            isolation=[],
            warnings=[WARNING, *self.limits.warnings],
            limits=self.limits.enforced(list(self.request.gpu_ids)),
        )
