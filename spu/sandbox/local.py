"""``sandbox=local``: bubblewrap on this machine (the default backend).

The agent gets new mount, PID, IPC and UTS namespaces; the host's system folders
read-only; the task's public files read-only at ``/task``; a writable ``/workspace``
and ``/output``; a cleared environment; and it dies with its parent. Nothing else
of the host is mounted, so another run's workspace and every answer key are absent.
The network stays on unless ``network=false`` (the paper's agents have internet).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from spu.sandbox.base import (
    Sandbox,
    SandboxError,
    SandboxPaths,
    SandboxRequest,
    register_sandbox,
)
from spu.sandbox.limits import LimitEnforcer
from spu.sandbox.process import run_with_limits
from spu.schema import ProcessEvidence, SandboxInfo

SYSTEM_DIRS: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
)
"""Host folders mounted read-only: the programs and libraries an agent may use."""

LAYOUT = SandboxPaths(task="/task", workspace="/workspace", output="/output")


def _bwrap_works() -> tuple[bool, str]:
    if shutil.which("bwrap") is None:
        return False, "bubblewrap is not installed (Debian package 'bubblewrap')"
    probe = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--unshare-pid", "--dev", "/dev", "true"],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return False, f"bubblewrap cannot create namespaces here: {probe.stderr.decode()[-300:]}"
    return True, "bubblewrap works"


@register_sandbox
class LocalSandbox(Sandbox):
    """Bubblewrap sandbox: namespaces, read-only system, the three-folder layout."""

    name = "local"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Bubblewrap must be installed and able to create namespaces."""
        return _bwrap_works()

    def prepare(self, request: SandboxRequest) -> SandboxPaths:
        """Create ``workspace/`` and ``output/`` under the run folder."""
        ok, why = self.available()
        if not ok:
            raise SandboxError(why)
        self.request = request
        self.workspace = request.run_dir / "workspace"
        self.output = request.run_dir / "output"
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.output.mkdir(parents=True, exist_ok=True)
        self.limits = LimitEnforcer(request.limits, request.run_dir.name)
        return LAYOUT

    def host_path(self, inside: str) -> Path:
        """Map ``/task``, ``/workspace`` and ``/output`` paths to the host."""
        for prefix, host in (
            (LAYOUT.workspace, self.workspace),
            (LAYOUT.output, self.output),
            (LAYOUT.task, self.request.task_dir),
        ):
            if inside == prefix or inside.startswith(prefix + "/"):
                return host / inside[len(prefix) :].lstrip("/")
        raise ValueError(f"{inside!r} is not inside the sandbox layout")

    def _bwrap_argv(self, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
        cmd = [
            "bwrap",
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname", "spu-sandbox",
            "--clearenv",
        ]  # fmt: skip
        if not self.request.network:
            cmd.append("--unshare-net")
        # tmpfs first: binds made after it stay visible even when they live under /tmp.
        cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
        for d in SYSTEM_DIRS:
            if os.path.exists(d):
                cmd += ["--ro-bind", d, d]
        for host, inside in self.request.extra_ro_binds.items():
            cmd += ["--ro-bind", str(host), inside]
        cmd += [
            "--ro-bind", str(self.request.task_dir), LAYOUT.task,
            "--bind", str(self.workspace), LAYOUT.workspace,
            "--bind", str(self.output), LAYOUT.output,
            "--chdir", LAYOUT.workspace,
        ]  # fmt: skip
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        return [*cmd, "--", *argv]

    def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        stdout: Path,
        stderr: Path,
        timeout_s: float | None = None,
    ) -> ProcessEvidence:
        """Run ``argv`` under bubblewrap with the wall-clock, memory and CPU limits."""
        limit = self.request.limits.time_s if timeout_s is None else timeout_s
        full_env = {"HOME": LAYOUT.workspace, **env}
        host_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        return run_with_limits(
            self._bwrap_argv(argv, full_env),
            host_env,
            cwd=None,
            stdout=stdout,
            stderr=stderr,
            timeout_s=limit,
            grace_s=self.request.limits.grace_s,
            preexec_fn=self.limits.preexec,
            oom_check=self.limits.oom_killed,
            peak_memory=self.limits.peak_memory,
        )

    def collect(self) -> Path:
        """The host folder behind ``/output``."""
        return self.output

    def cleanup(self) -> None:
        """Remove the run's cgroup, if one was made."""
        self.limits.cleanup()

    def info(self) -> SandboxInfo:
        """Namespaces in force and the limits enforced."""
        isolation = ["mount-namespace", "pid-namespace", "ipc-namespace", "uts-namespace",
                     "read-only-system", "cleared-environment", "die-with-parent"]
        if not self.request.network:
            isolation.append("network-namespace")
        return SandboxInfo(
            backend=self.name,
            isolation=isolation,
            warnings=list(self.limits.warnings),
            limits=self.limits.enforced(self.request.gpu_ids),
        )
