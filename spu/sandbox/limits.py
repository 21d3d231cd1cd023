"""Memory and CPU limits for processes started on this machine.

Memory: a cgroup (v2, else v1) memory limit where the cgroup tree is writable, which
also gives the peak and the OOM-kill count; else ``RLIMIT_AS`` on the process tree,
reported as such (it caps address space, not resident memory). CPUs: affinity to the
first ``cpus`` cores the process may use. A machine that has less than asked gives
what it has, and the enforced values are what the run record shows.
"""

from __future__ import annotations

import logging
import os
import resource
import uuid
from pathlib import Path

from spu.sandbox.base import RunLimits
from spu.schema import EnforcedLimits

log = logging.getLogger(__name__)

CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")
GIB = 1024**3


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


class LimitEnforcer:
    """Sets up the limits of one run and reads back what happened."""

    def __init__(self, limits: RunLimits, label: str) -> None:
        self.limits = limits
        self.warnings: list[str] = []
        self.cgroup: Path | None = None
        self.mechanism = "none"
        self.cpu_list = self._cpus(limits.cpus)
        name = f"spu-{label}-{uuid.uuid4().hex[:8]}"
        self._make_cgroup(name)

    def _cpus(self, wanted: int) -> list[int]:
        available = sorted(os.sched_getaffinity(0))
        if wanted > len(available):
            self.warnings.append(
                f"asked for {wanted} CPUs, this machine gives {len(available)}: using all"
            )
        return available[: max(1, wanted)]

    def _make_cgroup(self, name: str) -> None:
        limit_bytes = int(self.limits.memory_gb * GIB)
        v2_controllers = CGROUP_V2 / "cgroup.controllers"
        try:
            if v2_controllers.is_file() and "memory" in v2_controllers.read_text().split():
                path = CGROUP_V2 / name
                path.mkdir()
                (path / "memory.max").write_text(str(limit_bytes))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
                self.cgroup, self.mechanism = path, "cgroup-v2"
                return
            if _writable_dir(CGROUP_V1_MEMORY) and (CGROUP_V1_MEMORY / "cgroup.procs").exists():
                path = CGROUP_V1_MEMORY / name
                path.mkdir()
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                memsw = path / "memory.memsw.limit_in_bytes"
                if memsw.exists():
                    try:
                        memsw.write_text(str(limit_bytes))
                    except OSError:
                        pass
                self.cgroup, self.mechanism = path, "cgroup-v1"
                return
        except OSError as exc:
            self.warnings.append(f"cannot create a memory cgroup ({exc}); using RLIMIT_AS")
        self.mechanism = "rlimit-as"
        if not self.warnings:
            self.warnings.append(
                "no writable memory cgroup: memory is capped by RLIMIT_AS (address space)"
            )

    def preexec(self) -> None:
        """Runs in the child between fork and exec: join the cgroup, pin CPUs, set rlimits."""
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))
        elif self.mechanism == "rlimit-as":
            limit = int(self.limits.memory_gb * GIB)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.sched_setaffinity(0, self.cpu_list)

    def oom_killed(self) -> bool:
        """True when the memory limit killed a process of the run."""
        if self.cgroup is None:
            return False
        try:
            if self.mechanism == "cgroup-v2":
                events = (self.cgroup / "memory.events").read_text().split()
                return int(events[events.index("oom_kill") + 1]) > 0
            control = (self.cgroup / "memory.oom_control").read_text().split()
            if "oom_kill" in control:
                return int(control[control.index("oom_kill") + 1]) > 0
            return int((self.cgroup / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def peak_memory(self) -> int | None:
        """Peak memory of the run's cgroup in bytes, where the kernel reports it."""
        if self.cgroup is None:
            return None
        name = "memory.peak" if self.mechanism == "cgroup-v2" else "memory.max_usage_in_bytes"
        try:
            return int((self.cgroup / name).read_text())
        except (OSError, ValueError):
            return None

    def enforced(self, gpu_ids: list[str] | tuple[str, ...] | object = ()) -> EnforcedLimits:
        """What is in force, for the run record."""
        return EnforcedLimits(
            time_s=self.limits.time_s,
            memory_gb=self.limits.memory_gb,
            memory_mechanism=self.mechanism,
            cpus=len(self.cpu_list),
            cpu_mechanism="affinity",
            gpus=[str(g) for g in gpu_ids] if isinstance(gpu_ids, (list, tuple)) else [],
        )

    def cleanup(self) -> None:
        """Remove the cgroup once its processes are gone."""
        if self.cgroup is None:
            return
        try:
            self.cgroup.rmdir()
        except OSError as exc:
            log.debug("cgroup %s not removed: %s", self.cgroup, exc)
