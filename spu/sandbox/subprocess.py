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

from spu.sandbox import ExecCall, Sandbox, SandboxPaths, SandboxRequest
from spu.schema import ProcessEvidence

log = logging.getLogger(__name__)

WARNING = (
    "NO SANDBOX: the agent runs as a plain process; the answers are protected only by "
    "the file layout (install bubblewrap for sandbox=local)"
)


class SubprocessSandbox(Sandbox):
    """A plain subprocess with limits, in a folder holding only the task's public files."""

    name = "subprocess"
    isolates = False

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Always available."""
        return True, "plain subprocess"

    def _open(self, request: SandboxRequest) -> None:
        """Say, first, that nothing is isolated."""
        self.warnings.append(WARNING)
        log.warning(WARNING)

    def _start(self, request: SandboxRequest) -> None:
        """The agent sees host paths; ``network=false`` is not enforced, loudly."""
        self.layout = SandboxPaths(
            task=str(self.folders.task),
            workspace=str(self.folders.workspace),
            output=str(self.folders.output),
        )
        if not request.network:
            self.warnings.append("sandbox.network=false is not enforced by sandbox=subprocess: "
                                 "the agent has the host's network")

    def _exec(self, call: ExecCall) -> ProcessEvidence:
        """Run the process in the workspace with a cleared environment and the limits."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.folders.workspace),
            **call.env,
            **self.gpus.env(),
        }
        return self._run_on_host(call, call.argv, env, cwd=self.folders.workspace)

    def _isolation(self) -> tuple[list[str], str]:
        """No isolation; the host's network."""
        return ["network:host"], "host"
