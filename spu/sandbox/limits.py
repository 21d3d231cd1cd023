"""Memory, CPU and process limits for agents started on this machine (local, subprocess).

Memory: a cgroup memory limit (v2, else v1) where the cgroup tree is writable, which
also gives the peak and the OOM-kill count; else ``RLIMIT_AS`` on the process tree,
reported as such (it caps address space, not resident memory, and leaves no OOM
event). CPUs: affinity to the first ``cpus`` cores the process may use and, where the
cpu controller is writable, a CFS quota of ``cpus`` cores (affinity alone can be
widened by the agent itself). Processes: the pids controller's ``pids.max``. A
machine that has less than asked gives what it has, and the enforced values are what
the run record shows.
"""

from __future__ import annotations

import logging
import os
import resource
import select
import signal
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.schema import EnforcedLimits

if TYPE_CHECKING:
    from spu.sandbox.base import RunLimits

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
GIB = 1024**3
CFS_PERIOD_US = 100_000
EMPTY_TIMEOUT_S = 5.0
"""Seconds a cgroup's killed processes get to leave it before it is reported as stuck."""
FIRST_LOOK_S = 0.001
"""The first wait between looks at a v1 cgroup's processes; doubled up to :data:`LAST_LOOK_S`."""
LAST_LOOK_S = 0.016


def _pids(folder: Path) -> list[int] | None:
    """The processes in the cgroup ``folder`` (None: it is gone or unreadable)."""
    try:
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return None


def _kill_pids(folder: Path) -> bool:
    """SIGKILL every process listed in ``folder``; whether any was listed."""
    pids = _pids(folder) or []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return bool(pids)


def kill_cgroup(folder: Path) -> None:
    """SIGKILL every process of the cgroup ``folder`` now, without waiting for them to go.

    On cgroup v2 all at once (``cgroup.kill``, Linux 5.14 and later), else one by one.
    """
    if (folder / "cgroup.events").exists():
        try:
            (folder / "cgroup.kill").write_text("1")
            return
        except OSError:  # an older kernel: one process at a time
            pass
    _kill_pids(folder)


def empty_cgroup(folder: Path, timeout_s: float = EMPTY_TIMEOUT_S) -> bool:
    """Kill every process of the cgroup ``folder`` and wait until none is left in it.

    On cgroup v2 all at once (``cgroup.kill``), then the wait is for the kernel's word
    (``populated 0`` in ``cgroup.events``, waited on with ``poll``); on v1 (no such
    files) each process is killed and the list looked at again after 1, 2, 4... ms (at
    most 16 ms apart), killing whatever joined meanwhile. Returns whether the cgroup is
    empty (or gone) before ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    events = folder / "cgroup.events"
    if events.exists():
        kill_cgroup(folder)
        return _wait_unpopulated(events, deadline, folder)
    wait = FIRST_LOOK_S
    while _kill_pids(folder):
        if time.monotonic() >= deadline:
            return False
        time.sleep(wait)
        wait = min(2 * wait, LAST_LOOK_S)
    return True


def remove_cgroup(folder: Path, timeout_s: float = EMPTY_TIMEOUT_S) -> bool:
    """Empty the cgroup ``folder`` (:func:`empty_cgroup`) and remove it; whether it is gone.

    A removal refused while a killed process is still on its way out is tried again
    after 1, 2, 4... ms (at most 16 ms apart), until ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    wait = FIRST_LOOK_S
    while True:
        empty_cgroup(folder, max(0.0, deadline - time.monotonic()))
        try:
            folder.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            log.debug("cgroup %s not removed yet: %s", folder, exc)
            if time.monotonic() >= deadline:
                return False
            time.sleep(wait)
            wait = min(2 * wait, LAST_LOOK_S)


def _wait_unpopulated(events: Path, deadline: float, folder: Path) -> bool:
    """Wait until ``cgroup.events`` says ``populated 0`` (woken by the kernel's change)."""
    try:
        f = open(events, "rb", buffering=0)  # noqa: SIM115 - closed below
    except OSError:
        return True  # the cgroup is gone
    with f:
        poller = select.poll()
        poller.register(f, select.POLLPRI | select.POLLERR)
        while True:
            f.seek(0)
            if b"populated 0" in f.read():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # A process that joined after the kill (a fork in flight) is killed too; the
            # kernel's notice wakes the poll at once, the bound is a safety net only.
            _kill_pids(folder)
            poller.poll(max(1, int(min(left, 0.05) * 1000)))


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


class LimitEnforcer:
    """Sets up the limits of one run, joins the agent to them, and reads back what happened.

    Args:
        limits: The limits asked for.
        label: A readable part of the cgroup names (the run folder's name).
        pids_limit: Maximum number of processes, or None for no limit.
        cgroup_root: Where the cgroup hierarchies are mounted (a parameter for tests).
    """

    def __init__(
        self,
        limits: RunLimits,
        label: str,
        pids_limit: int | None = None,
        cgroup_root: Path = CGROUP_ROOT,
    ) -> None:
        self.limits = limits
        self.pids_limit = pids_limit
        self.warnings: list[str] = []
        self.memory_mechanism = "none"
        self.cpu_mechanism = "affinity"
        self.pids_enforced: int | None = None
        self._root = cgroup_root
        self._name = f"spu-{label}-{uuid.uuid4().hex[:8]}"
        self._groups: dict[str, Path] = {}
        """Controller (``memory``, ``cpu``, ``pids``) -> cgroup folder; one folder on v2."""
        self.cpu_list = self._cpus(limits.cpus)
        try:
            if self._v2_available():
                self._make_v2()
            else:
                self._make_v1()
        except OSError as exc:
            self.warnings.append(f"cannot set up cgroups ({exc})")
            self.cleanup()
        if "memory" not in self._groups:
            self.memory_mechanism = "rlimit-as"
            self.warnings.append(
                "no writable memory cgroup: memory is capped by RLIMIT_AS (address space), "
                "and an agent killed by it is not recognised as memory_limit"
            )

    # ------------------------------------------------------------------ set-up

    def _cpus(self, wanted: int) -> list[int]:
        available = sorted(os.sched_getaffinity(0))
        if wanted > len(available):
            self.warnings.append(
                f"asked for {wanted} CPUs, this machine gives {len(available)}: using all"
            )
        return available[: max(1, wanted)]

    @property
    def _memory_bytes(self) -> int:
        return int(self.limits.memory_gb * GIB)

    def _v2_available(self) -> bool:
        return (self._root / "cgroup.controllers").is_file()

    def _make_v2(self) -> None:
        available = (self._root / "cgroup.controllers").read_text().split()
        subtree = self._root / "cgroup.subtree_control"
        enabled = subtree.read_text().split()
        for controller in ("memory", "cpu", "pids"):
            if controller in available and controller not in enabled:
                try:
                    subtree.write_text(f"+{controller}")
                except OSError:
                    pass
        enabled = subtree.read_text().split()
        if not _writable_dir(self._root) or "memory" not in enabled:
            return
        path = self._root / self._name
        path.mkdir()
        for controller in ("memory", "cpu", "pids"):
            if controller in enabled:
                self._groups[controller] = path
        (path / "memory.max").write_text(str(self._memory_bytes))
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0")
        self.memory_mechanism = "cgroup-v2"
        if "cpu" in self._groups:
            quota = len(self.cpu_list) * CFS_PERIOD_US
            (path / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
            self.cpu_mechanism = "cgroup"
        if "pids" in self._groups and self.pids_limit:
            (path / "pids.max").write_text(str(self.pids_limit))
            self.pids_enforced = self.pids_limit

    def _make_v1(self) -> None:
        for controller in ("memory", "cpu", "pids"):
            hierarchy = self._root / controller
            if not (_writable_dir(hierarchy) and (hierarchy / "cgroup.procs").exists()):
                continue
            path = hierarchy / self._name
            path.mkdir()
            self._groups[controller] = path
        memory = self._groups.get("memory")
        if memory is not None:
            (memory / "memory.limit_in_bytes").write_text(str(self._memory_bytes))
            memsw = memory / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                # Swap equal to the limit: the agent cannot spill past it into swap.
                memsw.write_text(str(self._memory_bytes))
            self.memory_mechanism = "cgroup-v1"
        cpu = self._groups.get("cpu")
        if cpu is not None:
            (cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (cpu / "cpu.cfs_quota_us").write_text(str(len(self.cpu_list) * CFS_PERIOD_US))
            self.cpu_mechanism = "cgroup"
        pids = self._groups.get("pids")
        if pids is not None and self.pids_limit:
            (pids / "pids.max").write_text(str(self.pids_limit))
            self.pids_enforced = self.pids_limit

    # ------------------------------------------------------------------ placing the child

    def place(self, pid: int) -> None:
        """Put process ``pid`` under the limits: its cgroups, its CPUs, else ``RLIMIT_AS``.

        Called by the parent while the child is held before its command
        (:func:`spu.sandbox.process.start_placed`), so that everything the command runs
        and starts inherits them; nothing runs in the child between fork and exec.
        """
        for path in set(self._groups.values()):
            (path / "cgroup.procs").write_text(str(pid))
        if "memory" not in self._groups:
            cap = self._memory_bytes
            resource.prlimit(pid, resource.RLIMIT_AS, (cap, cap))
        os.sched_setaffinity(pid, self.cpu_list)

    # ------------------------------------------------------------------ read back

    def _read(self, controller: str, name: str) -> str | None:
        path = self._groups.get(controller)
        if path is None:
            return None
        try:
            return (path / name).read_text()
        except OSError:
            return None

    def oom_killed(self, sigkilled: bool = False) -> bool:
        """True when the memory limit killed a process of the run.

        The kernel's OOM-kill counter of the run's cgroup decides. Where it does not
        exist (v1 kernels before 4.13) the fallback is the limit having been hit
        (``memory.failcnt``) together with an agent that died of SIGKILL (``sigkilled``).
        """
        if self.memory_mechanism == "cgroup-v2":
            events = (self._read("memory", "memory.events") or "").split()
            return "oom_kill" in events and int(events[events.index("oom_kill") + 1]) > 0
        control = (self._read("memory", "memory.oom_control") or "").split()
        if "oom_kill" in control:
            return int(control[control.index("oom_kill") + 1]) > 0
        failcnt = self._read("memory", "memory.failcnt")
        return sigkilled and failcnt is not None and int(failcnt) > 0

    def peak_memory(self) -> int | None:
        """Peak memory of the run's cgroup in bytes, where the kernel reports it."""
        name = "memory.peak" if self.memory_mechanism == "cgroup-v2" else (
            "memory.max_usage_in_bytes"
        )
        value = self._read("memory", name)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    @property
    def cgroup_paths(self) -> list[Path]:
        """The run's cgroup folders (empty once cleaned up)."""
        return sorted(set(self._groups.values()))

    def leftover_pids(self) -> list[int]:
        """Processes still in the run's cgroups (e.g. daemons an agent left behind)."""
        pids: set[int] = set()
        for path in self.cgroup_paths:
            try:
                pids.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                continue
        return sorted(pids)

    def kill_leftovers(self) -> int:
        """SIGKILL every process left in the run's cgroups; returns how many there were."""
        leftovers = self.leftover_pids()
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(leftovers)

    def enforced(self, gpu_ids: tuple[str, ...] = ()) -> EnforcedLimits:
        """What is in force, for the run record."""
        return EnforcedLimits(
            time_s=self.limits.time_s,
            memory_gb=self.limits.memory_gb,
            memory_mechanism=self.memory_mechanism,
            cpus=len(self.cpu_list),
            cpu_mechanism=self.cpu_mechanism,
            gpus=list(gpu_ids),
            pids_limit=self.pids_enforced,
        )

    def cleanup(self) -> None:
        """Kill what is left in the run's cgroups and remove them.

        Each is emptied and removed (:func:`remove_cgroup`: killed, and waited for on the
        kernel's word or at millisecond steps); nothing waits on a fixed clock.
        """
        if not self._groups:
            return
        for path in set(self._groups.values()):
            if not remove_cgroup(path):
                log.warning("cgroup %s could not be removed (processes still in it?); "
                            "remove it by hand once they are gone", path)
        self._groups.clear()


SERVICE_MIN_MEMORY_BYTES = GIB
"""Memory the host-side services of a run get at least, whatever the agent's limit."""
SERVICE_CPU_MARGIN_S = 60
"""CPU seconds the services get beyond the run's own budget (``time_s`` times ``cpus``)."""


class ServiceGroup:
    """The host-side services of one run (egress proxy, page parser, model gateway) confined.

    They run outside the sandbox, on the host, on the agent's behalf: without limits an
    agent makes them spend the host's memory and CPU for it (a fetched page that costs
    gigabytes to parse, a flood through the proxy). They get a cgroup of their own
    (:class:`LimitEnforcer`'s, named ``...-services-...``): memory the run's
    ``memory_gb`` (at least :data:`SERVICE_MIN_MEMORY_BYTES`) and the run's ``cpus``.
    Where no cgroup is writable, each process gets ``RLIMIT_AS`` of that memory and
    ``RLIMIT_CPU`` of the run's whole CPU budget, ``time_s`` times ``cpus`` (plus
    :data:`SERVICE_CPU_MARGIN_S`). A process joins with :meth:`add` (by id, from the
    host) or :func:`confine_self` with :meth:`confinement` (in a child, before it starts
    others).

    Args:
        limits: The run's limits.
        label: A readable part of the cgroup name (the run folder's name).
        cgroup_root: Where the cgroup hierarchies are mounted (a parameter for tests).
    """

    def __init__(self, limits: RunLimits, label: str, cgroup_root: Path = CGROUP_ROOT) -> None:
        from spu.sandbox.base import RunLimits  # base imports this module

        memory = max(int(limits.memory_gb * GIB), SERVICE_MIN_MEMORY_BYTES)
        self._enforcer = LimitEnforcer(
            RunLimits(time_s=limits.time_s, memory_gb=memory / GIB, cpus=limits.cpus),
            f"{label}-services", cgroup_root=cgroup_root)
        self.memory_bytes = memory
        self.cpu_seconds = int(limits.time_s * len(self._enforcer.cpu_list)) + SERVICE_CPU_MARGIN_S
        self.mechanism = ("cgroup" if self._enforcer.memory_mechanism.startswith("cgroup")
                          else "rlimit")

    def confinement(self, open_files: int | None = None,
                    file_bytes: int | None = None) -> dict[str, Any]:
        """What :func:`confine_self` applies, as JSON-able data (for a forked child).

        ``open_files`` (``RLIMIT_NOFILE``) and ``file_bytes`` (``RLIMIT_FSIZE``, the
        largest file the process may write) are the service's own bounds, where it sets
        them (the model gateway does: its descriptors and its record's disk).
        """
        rlimits: dict[str, Any] = {} if self.mechanism == "cgroup" else {
            "as": self.memory_bytes, "cpu_s": self.cpu_seconds}
        if open_files is not None:
            rlimits["nofile"] = open_files
        if file_bytes is not None:
            rlimits["fsize"] = file_bytes
        return {"cgroups": [str(p) for p in self._enforcer.cgroup_paths], **rlimits}

    def add(self, pid: int) -> None:
        """Put the running process ``pid`` under the services' limits."""
        for path in self._enforcer.cgroup_paths:
            (path / "cgroup.procs").write_text(str(pid))
        if self.mechanism != "cgroup":
            resource.prlimit(pid, resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes))
            resource.prlimit(pid, resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds))

    def oom_killed(self, sigkilled: bool = False) -> bool:
        """True when the services' memory limit (their cgroup's) killed one of them.

        ``sigkilled``: the service in question died of SIGKILL (the fallback of kernels
        without an OOM-kill counter). Always False without a memory cgroup (``RLIMIT_AS``
        fails an allocation instead of killing).
        """
        return self.mechanism == "cgroup" and self._enforcer.oom_killed(sigkilled=sigkilled)

    def cleanup(self) -> None:
        """Kill what is left in the services' cgroup and remove it."""
        self._enforcer.cleanup()


def confine_self(confinement: dict[str, Any]) -> None:
    """Apply :meth:`ServiceGroup.confinement` to this process (in a child, before its work)."""
    join_service_cgroups(confinement)
    set_service_rlimits(confinement)


def join_service_cgroups(confinement: dict[str, Any]) -> None:
    """Move this process into the services' cgroups (part of :func:`confine_self`).

    On cgroup v1 each move waits for the kernel (tens of milliseconds for three
    hierarchies), so a service may do it once it listens, its rlimits set before.
    """
    for path in confinement.get("cgroups", []):
        try:
            Path(path, "cgroup.procs").write_text(str(os.getpid()))
        except OSError as exc:  # gone or not ours: the process runs, said in its log
            log.warning("not joined to the services' cgroup %s: %s", path, exc)


def set_service_rlimits(confinement: dict[str, Any]) -> None:
    """Set this process's rlimits of :meth:`ServiceGroup.confinement` (no cgroup joined)."""
    if "as" in confinement:
        size = int(confinement["as"])
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if "cpu_s" in confinement:
        seconds = int(confinement["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
    if "nofile" in confinement:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        most = int(confinement["nofile"])
        most = most if hard == resource.RLIM_INFINITY else min(most, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (most, most))
    if "fsize" in confinement:
        # A write past it fails (EFBIG) instead of killing the process (SIGXFSZ).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        size = int(confinement["fsize"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; the (old, new) soft.

    A driver runs many runs' host-side work; a soft limit of 1,024 (a common default)
    is the first thing a busy sweep, or an agent holding connections, would exhaust.
    Each service then sets its own bound (:meth:`ServiceGroup.confinement`).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # a hard limit the kernel caps lower
            log.debug("soft RLIMIT_NOFILE left at %d: %s", soft, exc)
            return soft, soft
    return soft, hard
