"""``sandbox=local``: bubblewrap on this machine (the default backend).

The agent gets new mount, PID, IPC and UTS namespaces; the host's system folders
read-only; the task's public files read-only at ``/task``; a writable ``/workspace``
and ``/output``; a cleared environment; and it dies with its parent. Nothing else
of the host is mounted, so another run's workspace and every answer key are absent;
where a system folder would show them (a repository under ``/opt``), they are masked.

Started by root, bubblewrap keeps every capability for the sandboxed process, and a
process with user id 0 may write the host's ``/proc/sys`` even without capabilities.
So under root the agent runs as an unprivileged user of its own (``spu-agent``, a user id
drawn per run: :data:`AGENT_UID_BASE`), dropped inside the sandbox by ``setpriv`` with an
empty bounding set and ``no_new_privs``.
A seccomp filter (:mod:`spu.sandbox.seccomp`) keeps it from the kernel keyrings, shared
by every process of its user (a channel from one run to the next), and from user
namespaces.

The agent has a network namespace of its own. With ``network=true`` (the paper's
agents have internet) bubblewrap holds the agent back (``--block-fd``) until pasta has
given that namespace its filtered way out (:mod:`spu.sandbox.network`): the internet
and the run's host ports, nothing else of the host. With ``network=false`` the
namespace has only its loopback. Without root, pasta cannot join bubblewrap's
namespace: the agent then keeps the host's network (``network:host``), loudly.

The workspace and output live on a file system of ``limits.disk_gb``
(:mod:`spu.sandbox.disk`); stdout and stderr are capped at ``limits.log_mb`` each.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pwd
import secrets
import select
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spu.sandbox import LAYOUT, ExecCall, Sandbox, SandboxError, SandboxRequest
from spu.sandbox.base import masked_under, remembered_availability, within
from spu.sandbox.gpus import NVIDIA_CONTROL_DEVICES
from spu.sandbox.network import NetworkError, UserNetwork, pasta_available
from spu.sandbox.options import LocalOptions
from spu.sandbox.process import wrapper_error
from spu.sandbox.seccomp import SeccompError, filter_fd
from spu.schema import ProcessEvidence

log = logging.getLogger(__name__)

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

AGENT_UID_BASE = 1_900_000_000
AGENT_UID_SPAN = 1 << 24
"""A root framework runs each agent under a user id of its own, drawn from the run
folder's path in ``[AGENT_UID_BASE, AGENT_UID_BASE + AGENT_UID_SPAN)``: what the kernel
counts per user (inotify instances, keyrings, processes) is then the run's alone, where
a shared ``nobody`` let one run starve another (``sandbox.agent_uid`` fixes one id)."""
AGENT_NAME = "spu-agent"
"""The name of that user inside the sandbox (its own ``/etc/passwd`` and ``/etc/group``)."""

WRAPPER_PREFIXES = ("bwrap: ", "setpriv: ")
"""How bubblewrap and setpriv start their own error messages."""

START_TIMEOUT_S = 30.0
"""How long bubblewrap may take to report its namespaces (``--info-fd``)."""


def _read_child_pid(info: int, timeout_s: float = START_TIMEOUT_S) -> int:
    """The sandbox's process id, from bubblewrap's ``--info-fd`` JSON."""
    data = b""
    while True:
        ready, _, _ = select.select([info], [], [], timeout_s)
        if not ready:
            raise NetworkError("bubblewrap did not report its namespaces in time")
        chunk = os.read(info, 4096)
        if not chunk:
            raise NetworkError("bubblewrap ended before the network was set up")
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except ValueError:
            continue


@dataclass(frozen=True)
class StartStatus:
    """What bubblewrap itself wrote on its ``--json-status-fd``: the start handshake.

    bubblewrap writes ``child-pid`` once it has cloned the sandbox, and ``exit-code`` at the
    end only when the sandbox's command was exec'd (its setup pipe saw exactly the byte
    written before a successful exec). The descriptor is bubblewrap's alone: neither the
    agent nor the sandbox's init holds it, so nothing inside can write or withhold a line.
    """

    child_pid: int | None = None
    """The sandbox's process id (None: bubblewrap failed before it cloned one)."""
    exit_code: int | None = None
    """The command's exit status (None: the command was never exec'd, or bubblewrap was
    killed before it could say)."""

    @property
    def executed(self) -> bool:
        """The sandbox's command ran: the sandbox started."""
        return self.exit_code is not None

    @classmethod
    def parse(cls, data: bytes) -> StartStatus:
        r"""The status from bubblewrap's JSON documents, one a line; a broken line is skipped.

        Examples:
            >>> StartStatus.parse(b'{ "child-pid": 7 }\n{ "exit-code": 3 }\n')
            StartStatus(child_pid=7, exit_code=3)
            >>> StartStatus.parse(b'{ "child-pid": 7 }\n').executed
            False
        """
        child_pid = exit_code = None
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                document = json.loads(line)
            except ValueError:
                continue
            if not isinstance(document, dict):
                continue
            if isinstance(document.get("child-pid"), int) and child_pid is None:
                child_pid = document["child-pid"]
            if isinstance(document.get("exit-code"), int):
                exit_code = document["exit-code"]
        return cls(child_pid=child_pid, exit_code=exit_code)


def read_nonblocking(fd: int, limit: int = 1 << 16) -> bytes:
    """What a pipe holds now, up to ``limit`` bytes, without waiting for its writers."""
    os.set_blocking(fd, False)
    data = b""
    while len(data) < limit:
        try:
            chunk = os.read(fd, limit - len(data))
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return data


def started_evidence(evidence: ProcessEvidence, status: StartStatus,
                     stderr: Path) -> ProcessEvidence:
    """The process evidence with the sandbox's start decided by bubblewrap's handshake.

    The sandbox did not start when bubblewrap says no command was exec'd and it ended by
    itself with a failure (bubblewrap's own ``die``: exit 1), or an ``on_start`` step (the
    network) failed: bubblewrap's stderr then holds only its own words (the agent never
    ran), so it is read for the reason. A run that bubblewrap reports as exec'd started,
    whatever its stderr says (the agent writes it); its exit status is bubblewrap's
    ``exit-code``. One stopped by a signal or a limit before bubblewrap could report is
    left to the limits that stopped it.

    Examples:
        >>> from pathlib import Path
        >>> started_evidence(ProcessEvidence(exit_code=1), StartStatus(7, 1),
        ...                  Path("/nonexistent")).error is None
        True
        >>> started_evidence(ProcessEvidence(exit_code=1), StartStatus(7, None),
        ...                  Path("/nonexistent")).error
        'sandbox did not start: bubblewrap exited 1 before it ran the command'
    """
    if status.executed:
        return evidence.model_copy(update={"exit_code": status.exit_code})
    code = evidence.exit_code
    failed_itself = (code is not None and 0 < code < 128 and not evidence.timed_out
                     and not evidence.oom_killed and not evidence.disk_full)
    if not (evidence.error or failed_itself):
        return evidence
    reason = wrapper_error(stderr, WRAPPER_PREFIXES) or evidence.error or (
        f"bubblewrap exited {code} before it ran the command")
    return evidence.model_copy(update={"error": f"sandbox did not start: {reason}"})


START_NONCE_VARIABLE = "SPU_START_NONCE"
"""The variable that hands :func:`start_check_argv`'s step its per-exec nonce (unset before
the command is exec'd)."""


def start_check_argv(argv: Sequence[str], nonce_file: str | None = None) -> list[str]:
    """``argv`` behind a shell step that checks, before the agent runs, that it can start.

    bubblewrap's handshake (:class:`StartStatus`) covers what bubblewrap execs: ``setpriv``
    where the agent has a user of its own. The step after it (``/bin/sh``, from the
    read-only system folders) looks the command up on ``PATH`` as ``execvp`` would, and the
    interpreter of a ``#!`` script (and the program ``#!/usr/bin/env`` names); one that is
    missing or not executable is reported as the first line of stderr, with the nonce of
    :data:`START_NONCE_VARIABLE`, and the sandbox did not start (:func:`start_report`).
    The step unsets the variable and execs the command: the agent never sees the nonce
    (the sandbox's environment reaches bubblewrap in a memory file, not its argv), so it
    cannot write a report. ``nonce_file``: where a container, whose init shows every
    process its environment, reads the nonce instead; the step deletes it first.
    """
    if nonce_file is None:
        take = f'n=${START_NONCE_VARIABLE}; unset {START_NONCE_VARIABLE}; '
    else:
        quoted = nonce_file.replace("'", "'\\''")
        take = f"n=$(cat '{quoted}'); rm -f '{quoted}'; "
    script = take + (
        'found() { case $1 in */*) [ -f "$1" ] && [ -x "$1" ] && return 0;; '
        '*) IFS=:; for d in $PATH; do if [ -n "$d" ] && [ -f "$d/$1" ] && [ -x "$d/$1" ]; '
        'then unset IFS; p=$d/$1; return 0; fi; done; unset IFS;; esac; return 1; }; '
        'fail() { printf "spu-start %s: %s\\n" "$n" "$1" >&2; exit 127; }; '
        'p=$1; found "$1" || fail "$1: not found or not executable"; '
        'l=; IFS= read -r l < "$p" 2>/dev/null; '
        'case $l in "#!"*) s=${l#??}; s=${s# }; i=${s%% *}; r=${s#"$i"}; r=${r# }; '
        'e=${r%% *}; found "$i" || fail "$1: its interpreter $i is not found"; '
        'case $i in */env) case $e in ""|-*) ;; *) found "$e" || '
        'fail "$1: its interpreter $e is not found";; esac;; esac;; esac; '
        'exec "$@"'
    )
    return ["/bin/sh", "-c", script, "spu-start", *argv]


def start_report(stderr: Path, nonce: str) -> str | None:
    """The report of :func:`start_check_argv`'s step, from stderr's first line (None: none)."""
    try:
        with open(stderr, "rb") as f:
            first = f.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    prefix = f"spu-start {nonce}: "
    return first[len(prefix):] if first.startswith(prefix) else None


def options_fd(options: Sequence[str]) -> int:
    """A memory file holding ``options`` NUL-separated, at offset 0: bubblewrap's ``--args FD``.

    Raises:
        SandboxError: an option holds a NUL byte (it would split into two).
    """
    if any("\0" in option for option in options):
        raise SandboxError("a sandbox option or environment value holds a NUL byte")
    fd = os.memfd_create("spu-bwrap-args", 0)  # no MFD_CLOEXEC: bubblewrap inherits it
    data = b"".join(option.encode() + b"\0" for option in options)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


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


def agent_uid_for(run_dir: Path) -> int:
    """The user id of the agent of ``run_dir`` (distinct for concurrent runs, stable).

    Examples:
        >>> agent_uid_for(Path("/runs/a")) == agent_uid_for(Path("/runs/a"))
        True
        >>> AGENT_UID_BASE <= agent_uid_for(Path("/runs/b")) < AGENT_UID_BASE + AGENT_UID_SPAN
        True
    """
    digest = hashlib.sha256(str(run_dir.resolve()).encode()).digest()
    return AGENT_UID_BASE + int.from_bytes(digest[:8], "big") % AGENT_UID_SPAN


IDENTITY_FOLDER = ".spu-identity"
"""Folder of the run (not shown to the agent) holding its ``passwd`` and ``group``."""


def _identity_files(run_dir: Path, uid: int) -> Path:
    """The host's ``passwd`` and ``group`` plus the agent's user and group.

    They live in the run folder, so that a driver killed mid-run leaves nothing elsewhere.
    """
    folder = run_dir / IDENTITY_FOLDER
    folder.mkdir(mode=0o755, exist_ok=True)
    for name, line in (("passwd", f"{AGENT_NAME}:x:{uid}:{uid}:SPU agent:/workspace:/bin/sh"),
                       ("group", f"{AGENT_NAME}:x:{uid}:")):
        try:
            host = Path("/etc", name).read_text()
        except OSError:
            host = ""
        (folder / name).write_text(host.rstrip("\n") + ("\n" if host else "") + line + "\n")
        os.chmod(folder / name, 0o644)
    return folder


def chown_tree(root: Path, uid: int) -> None:
    """Give the agent's user the folders it writes (harnesses fill them as root)."""
    os.chown(root, uid, uid, follow_symlinks=False)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)


def make_readable(root: Path) -> None:
    """Let an unprivileged agent read the staged task (copies keep the source's modes)."""
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, os.stat(folder).st_mode | 0o555)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


class LocalSandbox(Sandbox):
    """Bubblewrap sandbox: namespaces, read-only system, the three-folder layout."""

    name = "local"
    options_model = LocalOptions
    fallback = "subprocess"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Bubblewrap must be installed and able to create namespaces (probed once per process)."""
        return remembered_availability(cls.name, _bwrap_works)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.host_network = False
        """Not root: pasta cannot join bubblewrap's namespace, the agent keeps the host's."""
        self.networks: list[UserNetwork] = []
        self.network_mode = "offline"
        self.seccomp = False
        self.agent_uid: int | None = None
        self.identity: Path | None = None

    def _open(self, request: SandboxRequest) -> None:
        """Refuse binds into missing system folders, and a filtered network without pasta."""
        for inside in request.extra_ro_binds.values():
            system = [d for d in SYSTEM_DIRS if within(Path(inside), Path(d))]
            if system and not os.path.exists(inside):
                raise SandboxError(
                    f"read-only bind target {inside!r} lies in the read-only system folder "
                    f"{system[0]} and does not exist there; mount it elsewhere (e.g. /spu-tools)"
                )
        if request.network and os.geteuid() == 0:
            ok, why = pasta_available()
            if not ok:
                raise SandboxError(why)

    def _start(self, request: SandboxRequest) -> None:
        """Decide the network, probe the seccomp filter, and choose the agent's user."""
        # pasta joins a namespace bubblewrap made only with root's rights (bubblewrap's
        # processes cannot be inspected by their own user); without them the agent keeps
        # the host's network, and the record says so.
        self.host_network = request.network and os.geteuid() != 0
        if self.host_network:
            self.warnings.append(
                "NETWORK NOT ISOLATED: not running as root, the agent shares the host's network "
                "namespace (network:host) and reaches every service of this machine; run as "
                "root for the filtered network, or set sandbox.network=false")
        self.seccomp = True
        try:
            os.close(filter_fd())
        except (SeccompError, OSError) as exc:
            self.seccomp = False
            self.warnings.append(
                f"no seccomp filter ({exc}): the agent can use the kernel keyrings (a channel "
                f"between runs) and create user namespaces")
        if os.geteuid() != 0:
            return
        if shutil.which("setpriv") is None:
            self.warnings.append(
                "setpriv (util-linux) is missing: the agent runs as root inside the "
                "sandbox, with capabilities, and could reach the host through /proc/sys"
            )
            return
        self.agent_uid = int(self.options.get("agent_uid") or agent_uid_for(request.run_dir))
        make_readable(self.folders.task)
        try:
            pwd.getpwuid(self.agent_uid)
        except KeyError:
            self.identity = _identity_files(request.run_dir, self.agent_uid)

    def _masks(self, source: Path, inside: Path) -> list[str]:
        """Arguments hiding the masked paths that the bind ``source -> inside`` shows."""
        args: list[str] = []
        masked = [*self.request.masked_paths, self.request.run_dir.parent]
        for target, folder in masked_under(masked, source, inside):
            args += ["--tmpfs", target] if folder else ["--ro-bind", "/dev/null", target]
        return args

    def _gpu_args(self) -> list[str]:
        if not self.gpus.ids:
            return []
        args = ["--ro-bind", "/sys", "/sys"]
        nodes = [f"nvidia{g}" for g in self.gpus.ids if g.isdigit()]
        for node in [*NVIDIA_CONTROL_DEVICES, *nodes]:
            if os.path.exists(f"/dev/{node}"):
                args += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
        return args

    def bwrap_argv(self, argv: Sequence[str], env: Mapping[str, str],
                   sync_fds: tuple[int, int] | None = None,
                   seccomp_fd: int | None = None, status_fd: int | None = None) -> list[str]:
        """Everything bubblewrap is told to run ``argv`` with ``env``, as one list (to inspect).

        The sandbox itself never starts from this list: its options (the environment among
        them) go through a file descriptor (:meth:`bwrap_options`, ``--args``).
        """
        return ["bwrap", *self.bwrap_options(env, sync_fds, seccomp_fd, status_fd), "--",
                *self.inner_argv(argv)]

    def inner_argv(self, argv: Sequence[str], start_check: bool = False) -> list[str]:
        """``argv`` as the sandbox starts it: behind ``setpriv`` when the agent has a user.

        ``start_check``: the command goes through :func:`start_check_argv`, which reports
        a command that cannot be found before the agent runs.
        """
        if start_check:
            argv = start_check_argv(argv)
        if self.agent_uid is None:
            return list(argv)
        uid = str(self.agent_uid)
        return [
            "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--", *argv,
        ]  # fmt: skip

    def bwrap_options(self, env: Mapping[str, str], sync_fds: tuple[int, int] | None = None,
                      seccomp_fd: int | None = None,
                      status_fd: int | None = None) -> list[str]:
        """Bubblewrap's options: namespaces, mounts, the environment, the sync descriptors.

        ``sync_fds`` (info, block): bubblewrap reports its namespaces on the first and
        waits on the second before it starts ``argv`` (the network is set up between).
        ``seccomp_fd``: the filter of :mod:`spu.sandbox.seccomp`, installed by bubblewrap.
        ``status_fd``: bubblewrap's ``--json-status-fd``, the start handshake
        (:class:`StartStatus`).
        """
        cmd = [
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname", "spu-sandbox",
            "--clearenv",
        ]  # fmt: skip
        if not self.host_network:
            cmd.append("--unshare-net")
        # tmpfs first: binds made after it stay visible even when they live under /tmp.
        # /tmp is world-writable with the sticky bit, as on any host: the agent runs as nobody.
        cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
                "--tmpfs", "/run"]
        for d in SYSTEM_DIRS:
            if os.path.exists(d):
                cmd += ["--ro-bind", d, d]
        for d in SYSTEM_DIRS:
            if os.path.exists(d):
                cmd += self._masks(Path(d), Path(d))
        if self.identity is not None:
            for name in ("passwd", "group"):
                cmd += ["--ro-bind", str(self.identity / name), f"/etc/{name}"]
        for host, inside in self.request.extra_ro_binds.items():
            cmd += ["--ro-bind", str(host), inside, *self._masks(Path(host), Path(inside))]
        cmd += self._gpu_args()
        cmd += [
            "--ro-bind", str(self.folders.task), LAYOUT.task,
            "--bind", str(self.folders.workspace), LAYOUT.workspace,
            "--bind", str(self.folders.output), LAYOUT.output,
            "--chdir", LAYOUT.workspace,
        ]  # fmt: skip
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        if sync_fds is not None:
            cmd += ["--info-fd", str(sync_fds[0]), "--block-fd", str(sync_fds[1])]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        if status_fd is not None:
            cmd += ["--json-status-fd", str(status_fd)]
        return cmd

    def _exec(self, call: ExecCall) -> ProcessEvidence:
        """Run the process under bubblewrap with the wall-clock, memory, CPU and pids limits."""
        full_env = {"HOME": LAYOUT.workspace, **call.env, **self.gpus.env()}
        host_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if self.agent_uid is not None:
            chown_tree(self.folders.workspace, self.agent_uid)
            chown_tree(self.folders.output, self.agent_uid)
        pass_fds: tuple[int, ...] = ()
        on_start: Callable[[int], None] | None = None
        sync_fds = None
        open_fds: set[int] = set()
        seccomp_fd = None
        if self.seccomp:
            try:
                seccomp_fd = filter_fd()
            except (SeccompError, OSError) as exc:
                return ProcessEvidence(error=f"sandbox did not start: no seccomp filter: {exc}")
            open_fds.add(seccomp_fd)
            pass_fds = (seccomp_fd,)
        if self.request.network and not self.host_network:
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            open_fds |= {info_r, info_w, block_r, block_w}
            sync_fds = (info_w, block_r)
            pass_fds = (*pass_fds, *sync_fds)
            network = UserNetwork(self.request.host_ports, self.request.allowed_networks)
            self.networks.append(network)

            def on_start(_pid: int) -> None:
                # bubblewrap holds its own copies: close ours so that its end reads EOF.
                for fd in (info_w, block_r):
                    os.close(fd)
                    open_fds.discard(fd)
                network.attach(_read_child_pid(info_r))
                self.network_mode = network.mode
                self.warnings += [w for w in network.warnings if w not in self.warnings]
                os.write(block_w, b"1")
        # The start handshake: bubblewrap's own status lines (StartStatus), on a pipe
        # that only bubblewrap holds; never the agent's stderr, which the agent writes.
        status_r, status_w = os.pipe()
        open_fds |= {status_r, status_w}
        nonce = secrets.token_hex(16)
        full_env[START_NONCE_VARIABLE] = nonce
        # The options, the environment with its secrets among them, travel in a memory
        # file (bubblewrap's --args, closed by bubblewrap before the agent starts): on the
        # command line, any user of the host would read them in /proc/<pid>/cmdline.
        try:
            args_fd = options_fd(self.bwrap_options(full_env, sync_fds, seccomp_fd, status_w))
            open_fds.add(args_fd)
            argv = ["bwrap", "--args", str(args_fd), "--",
                    *self.inner_argv(call.argv, start_check=True)]
            evidence = self._run_on_host(
                call, argv, host_env, cwd=None, wrapped=True,
                pass_fds=(*pass_fds, args_fd, status_w), on_start=on_start,
            )
            status = StartStatus.parse(read_nonblocking(status_r))
        finally:
            for fd in open_fds:
                os.close(fd)
            for network in self.networks:
                network.close()
            self.networks.clear()
        report = start_report(call.stderr, nonce)
        if report is not None and not evidence.error:
            evidence = evidence.model_copy(update={"error": f"sandbox did not start: {report}"})
        return started_evidence(evidence, status, call.stderr)

    def _stop(self) -> None:
        """Close the run's network and remove the agent's identity files."""
        for network in self.networks:
            network.close()
        self.networks.clear()
        if self.identity is not None:
            shutil.rmtree(self.identity, ignore_errors=True)
            self.identity = None

    def network_mode_planned(self) -> str:
        """The network the agent gets: the one in force once it ran, else the one planned."""
        if not self.request.network:
            return "offline"
        if self.host_network:
            return "host"
        if self.network_mode != "offline":
            return self.network_mode
        return UserNetwork.mode_filtered

    def _isolation(self) -> tuple[list[str], str]:
        """Namespaces in force and the network."""
        isolation = ["mount-namespace", "pid-namespace", "ipc-namespace", "uts-namespace",
                     "read-only-system", "cleared-environment", "die-with-parent"]
        if self.seccomp:
            isolation.append("seccomp")
        if os.geteuid() != 0 or self.agent_uid is not None:
            isolation.append("unprivileged-user")
        network = self.network_mode_planned()
        if network != "host":
            isolation.append("network-namespace")
        isolation.append(f"network:{network}")
        return isolation, network

    def _forwards_ports(self) -> bool:
        """The agent reaches the run's host ports whenever it has a network."""
        return self.request.network
