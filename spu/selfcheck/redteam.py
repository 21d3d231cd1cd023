"""Red-team checks: an agent attacks the framework and the host, through the real ``run_one``.

They run on every backend that claims isolation (``Sandbox.isolates``), as root (the
isolation needs it). Each runs the kit's ``redteam.py`` agent (``harness=command``)
with one or more of its attacks and checks two things: the attack failed, and nothing
else was lost (the run still has its ``run.json``, its outcome, its evidence). Every
address targeted is this machine's own. What holds each attack is said in
``tests/sandbox/test_redteam.py``, which runs these checks and the attacks that only
concern one backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spu.selfcheck import AGENTS, CheckSkipped, check, expect
from spu.selfcheck.targets import SandboxTarget, compose_spec, environment

REDTEAM = AGENTS / "redteam.py"


@dataclass
class Attacked:
    """One red-team run: its record, the agent's report and the run folder."""

    record: Any
    report: dict[str, Any]
    run_dir: Path

    @property
    def saved(self) -> dict[str, Any]:
        """``run.json`` as written."""
        return json.loads((self.run_dir / "run.json").read_text())


def attack(target: SandboxTarget, attacks: list[str], *overrides: str, repeat: int = 0,
           task: Path | None = None, output_root: Path | None = None) -> Attacked:
    """Run the red-team agent with ``attacks`` in the target backend; the run, recorded."""
    from spu.runner import run_one

    target.require()
    spec = compose_spec(task or target.task_dir, output_root or target.scratch / "outputs",
                        "harness=command", f"harness.entrypoint={REDTEAM}",
                        f"sandbox.name={target.name}", "limits.cpus=1", "limits.gpus=0",
                        "limits.grace_s=1", "limits.memory_gb=1", "limits.time_s=300",
                        "limits.disk_gb=1", *overrides)
    spec = replace(spec, repeat=repeat,
                   sandbox=replace(spec.sandbox, options={**spec.sandbox.options,
                                                          **target.options}),
                   harness=replace(spec.harness, args=[f"--attack={a}" for a in attacks]))
    record = run_one(spec)
    run_dir = spec.output_root / "runs" / record.run_key
    report_file = run_dir / "output" / "redteam.json"
    report = json.loads(report_file.read_text()) if report_file.is_file() else {}
    attacked = Attacked(record, report, run_dir)
    # Nothing lost: the run has its record, with the evidence of its process.
    expect(attacked.saved["outcome"] == record.outcome.value, "run.json lost the outcome")
    expect(attacked.saved["process"]["error"] is None,
           f"the run failed to run: {attacked.saved['process']['error']}")
    return attacked


def failed(result: list[Any]) -> bool:
    """An ``attempt()`` of the agent that did not succeed."""
    return result[0] is False


def bubblewrap_based(target: SandboxTarget) -> bool:
    """Whether the backend is the bubblewrap one or built on it (a plugin's subclass)."""
    from spu.sandbox.local import LocalSandbox

    return issubclass(target.cls, LocalSandbox)


def _outcome(run: Attacked, expected: str) -> None:
    expect(run.record.outcome.value == expected,
           f"the run ended {run.record.outcome.value}, not {expected}")


# --------------------------------------------------------------------------- the kernel


@check("sandbox", "red-team", isolating=True, root=True)
def kernel_keyrings_carry_nothing_between_runs(target: SandboxTarget) -> None:
    """No run can leave a value in a kernel keyring for a later run to read."""
    token = uuid.uuid4().hex[:12]
    writer = attack(target, [f"keyring-write:{token}"])
    reader = attack(target, [f"keyring-read:{token}"], repeat=1)
    written = writer.report["keyring-write"]
    expect(all(isinstance(v, str) for v in written.values()), f"a key was added: {written}")
    read = reader.report["keyring-read"]
    expect(not any(isinstance(v, dict) for v in read.values()), f"a key was read: {read}")
    _outcome(writer, "no_file")
    _outcome(reader, "no_file")


@check("sandbox", "red-team", isolating=True, root=True)
def no_user_namespace_no_capability_no_kernel_knob(target: SandboxTarget) -> None:
    """The agent gets no capability anywhere.

    No user namespace of its own, no sysctl, sysrq or cgroup file, no file opened by
    handle outside its mounts.
    """
    run = attack(target, ["userns", "proc", "handle"])
    expect(run.report["userns"] == {"created": False}, "a user namespace was created")
    proc = run.report["proc"]
    for path, result in proc["open_for_write"].items():
        if path != "/proc/self/oom_score_adj":  # its own process: allowed everywhere
            expect(failed(result), f"{path} is writable")
    expect(run.report["handle"].get("open_by_handle_at") in (None, "EPERM"),
           f"open_by_handle_at: {run.report['handle']}")
    if bubblewrap_based(target):
        expect(proc["uid"] != 0 and failed(proc["pid1_root"]) and failed(proc["pid1_environ"]),
               "the agent is root, or reads its namespace's first process")
        expect("CapEff:\t0000000000000000" in proc["caps"], "the agent has capabilities")
    _outcome(run, "no_file")


@check("sandbox", "red-team", isolating=True, root=True)
def nothing_of_the_host_is_inherited_or_signalled(target: SandboxTarget) -> None:
    """Nothing of the host is inherited or signalled.

    The agent inherits no host file descriptor and no variable of the framework's
    environment (a credential), cannot signal a host process of its own user id, ptrace
    its sandbox, type into a terminal, or move its folders away.
    """
    if shutil.which("setpriv") is None:
        raise CheckSkipped("setpriv (util-linux) is missing")
    secret = f"spu-redteam-secret-{uuid.uuid4().hex}"
    victim = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "sleep", "600"], start_new_session=True)
    try:
        with environment(MLFLOW_TRACKING_PASSWORD=secret, SPU_REDTEAM_SECRET=secret):
            run = attack(target, ["inherited", "escape-layout", "kill-all"],
                         "limits.time_s=60")
        expect(victim.poll() is None, "a host process of the agent's user id was killed")
    finally:
        victim.kill()
        victim.wait()
    fds = run.report["inherited"]["fds"]
    # stdin, stdout, stderr and the listing's own descriptor (gone when read: ENOENT).
    leaked = {fd: t for fd, t in fds.items() if int(fd) > 2 and t != "ENOENT"}
    expect(leaked == {}, f"file descriptors inherited: {leaked}")
    expect(secret not in json.dumps(run.report), "the framework's environment leaked")
    escaped = {k: v for k, v in run.report["escape-layout"].items() if v[0]}
    if "docker" in target.cls.needs:  # its PID 1 is the container's init, its own process
        escaped.pop("ptrace pid 1", None)
    expect(escaped == {}, f"escaped: {escaped}")
    # kill(-1) ended the agent itself (its own processes are all it may signal): recorded.
    _outcome(run, "no_file")


# --------------------------------------------------------------------------- host services


class HostServices:
    """Services on every address and socket kind of this machine, each answering a token.

    TCP and UDP on ``0.0.0.0`` and ``::`` (every address of the machine), two TCP ports on
    the IPv4 loopback only (``allowed``: the one the run may reach, its control), Unix
    sockets in ``/tmp`` and ``/run`` (world-writable, so that the agent's user could
    connect) and an abstract Unix socket. :attr:`targets` maps a label to an address the
    agent's ``reach:`` attack takes.
    """

    def __init__(self, token: str) -> None:
        self.token = token
        self.stop = threading.Event()
        self.sockets: list[socket.socket] = []
        self.paths: list[Path] = []
        self.targets: dict[str, str] = {}

    def _serve_stream(self, sock: socket.socket, label: str) -> None:
        sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2)
                conn.recv(100)  # the agent's hello first: closing on unread data resets
                conn.sendall(f"{self.token}-{label}".encode())
                conn.shutdown(socket.SHUT_WR)

    def _serve_datagram(self, sock: socket.socket, label: str) -> None:
        sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                _, peer = sock.recvfrom(100)
            except OSError:
                continue
            with contextlib.suppress(OSError):
                sock.sendto(f"{self.token}-{label}".encode(), peer)

    def _start(self, sock: socket.socket, label: str, stream: bool = True) -> None:
        if stream:
            sock.listen(16)
        self.sockets.append(sock)
        threading.Thread(target=self._serve_stream if stream else self._serve_datagram,
                         args=(sock, label), daemon=True).start()

    def _any_address(self, family: socket.AddressFamily, address: str, kind: str) -> None:
        tcp = socket.socket(family, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        udp = socket.socket(family, socket.SOCK_DGRAM)
        if family == socket.AF_INET6:
            tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        tcp.bind((address, 0))
        self._start(tcp, f"tcp-{kind}")
        udp.bind((address, 0))
        self._start(udp, f"udp-{kind}", stream=False)
        for local in host_addresses(kind):
            host = f"[{local}]" if kind == "v6" else local
            self.targets[f"tcp@{local}"] = f"tcp:{host}:{tcp.getsockname()[1]}"
            self.targets[f"udp@{local}"] = f"udp:{host}:{udp.getsockname()[1]}"

    def _local(self) -> None:
        for label in ("loopback", "allowed"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            self._start(sock, label)
            self.targets[label] = f"tcp:127.0.0.1:{sock.getsockname()[1]}"
        for folder in ("/tmp", "/run"):
            path = Path(folder) / f"spu-redteam-{self.token}.sock"
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(str(path))
            path.chmod(0o777)
            self.paths.append(path)
            self._start(unix, f"unix{folder}")
            self.targets[f"unix@{folder}"] = f"unix:{path}"
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind(f"\0spu-redteam-{self.token}")
        self._start(abstract, "abstract")
        self.targets["abstract"] = f"abstract:spu-redteam-{self.token}"
        for path_text in ("/var/run/docker.sock", "/run/docker.sock"):
            self.targets[f"docker@{path_text}"] = f"unix:{path_text}"

    @contextlib.contextmanager
    def running(self) -> Iterator[dict[str, str]]:
        """Start every service; yields the reach targets; stops them all."""
        try:
            self._any_address(socket.AF_INET, "0.0.0.0", "v4")
            self._any_address(socket.AF_INET6, "::", "v6")
            self._local()
            yield self.targets
        finally:
            self.stop.set()
            for sock in self.sockets:
                sock.close()
            for path in self.paths:
                path.unlink(missing_ok=True)


def host_addresses(kind: str) -> list[str]:
    """This machine's addresses of one family, link-local ones with their interface."""
    listing = json.loads(subprocess.run(["ip", "-j", "-4" if kind == "v4" else "-6", "addr"],
                                        capture_output=True, text=True, check=True).stdout)
    out = []
    for link in listing:
        for addr in link.get("addr_info", []):
            local = addr["local"]
            if addr.get("scope") == "link" and kind == "v6":
                local = f"{local}%eth0"  # as the agent would name it: its own interface
            out.append(local)
    return sorted(set(out))


def _no_host_service_answers(target: SandboxTarget, network: str) -> None:
    if shutil.which("ip") is None:
        raise CheckSkipped("iproute2 is missing")
    token = uuid.uuid4().hex[:10]
    with HostServices(token).running() as targets:
        allowed = targets.pop("allowed")
        reach = [f"reach:{label}={address}" for label, address in targets.items()]
        run = attack(target, [f"reach:allowed={allowed}", *reach],
                     f"sandbox.network={network}",
                     f"sandbox.host_ports=[{allowed.rsplit(':', 1)[1]}]")
        # The host still reaches its own services (the check's control).
        port = int(targets["loopback"].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"hello\n")
            expect(conn.recv(100).decode().startswith(token), "the control did not answer")
    answers = {k: v for k, v in run.report.items() if k.startswith("reach:")}
    expect(len(answers) == len(targets) + 1, "not every target was tried")
    own = answers.pop(f"reach:allowed={allowed}")["answer"]
    reached = {k: v["answer"] for k, v in answers.items() if v["answer"]}
    expect(reached == {}, f"host services answered the agent: {reached}")
    if network == "true":
        expect(own == f"{token}-allowed", "the run's own host port did not answer")
        expect(run.record.sandbox.network == "pasta-filtered",
               f"network {run.record.sandbox.network}")
    else:
        expect(own is None and run.record.sandbox.network == "offline",
               "an offline run reached its host port")
    _outcome(run, "no_file")


@check("sandbox", "red-team", isolating=True, root=True)
def no_host_service_answers_online(target: SandboxTarget) -> None:
    """No host service answers the agent, by any route, online.

    TCP, UDP, IPv6, link-local, Unix, abstract and Docker sockets of the host are out of
    reach, but for the run's own host port; the machine's own services keep running.
    """
    _no_host_service_answers(target, "true")


@check("sandbox", "red-team", isolating=True, root=True)
def no_host_service_answers_offline(target: SandboxTarget) -> None:
    """The same with ``sandbox.network=false``: not even the run's own host port."""
    _no_host_service_answers(target, "false")


# --------------------------------------------------------------------------- files for the host


def special_entries(root: Path) -> dict[str, list[str]]:
    """Device nodes, setuid/setgid files and file capabilities under ``root``."""
    found: dict[str, list[str]] = {"devices": [], "setid": [], "filecaps": []}
    for path in root.rglob("*"):
        info = path.lstat()
        if stat.S_ISBLK(info.st_mode) or stat.S_ISCHR(info.st_mode):
            found["devices"].append(str(path))
        elif stat.S_ISREG(info.st_mode):
            if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                found["setid"].append(str(path))
            with contextlib.suppress(OSError):
                os.getxattr(path, "security.capability", follow_symlinks=False)
                found["filecaps"].append(str(path))
    return found


@check("sandbox", "red-team", isolating=True, root=True)
def no_device_node_setuid_file_or_file_capability_reaches_the_host(
        target: SandboxTarget) -> None:
    """No device node, setuid file or file capability the agent made reaches the host.

    The run folder the host keeps holds none of them, whatever the agent made, with a run
    disk and without.
    """
    for disk_gb in ("1", "0"):
        run = attack(target, ["mknod", "suid"], f"limits.disk_gb={disk_gb}",
                     output_root=target.scratch / f"outputs-disk-{disk_gb}")
        expect(run.report["suid"]["/workspace/suid-mode"], "the agent made no copies")
        expect(special_entries(run.run_dir) == {"devices": [], "setid": [], "filecaps": []},
               f"limits.disk_gb={disk_gb}: {special_entries(run.run_dir)}")
        # Its files are still there, disarmed, and the run is recorded.
        shell = run.run_dir / "workspace" / "suid-sh"
        expect(shell.is_file() and stat.S_IMODE(shell.stat().st_mode) == 0o755,
               "the agent's file is gone or kept its bits")
        _outcome(run, "no_file")
        if "docker" in target.cls.needs:
            expect(failed(run.report["mknod"]["/workspace/mem-node"]), "MKNOD is not dropped")
            expect(failed(run.report["suid"]["/workspace/filecap"]), "SETFCAP is not dropped")


@check("sandbox", "red-team", isolating=True, root=True)
def odd_outputs_are_recorded_without_being_followed(target: SandboxTarget) -> Attacked:
    """Odd outputs are recorded as they are, never followed.

    Links, a FIFO, a socket, a link as the submission, sparse files (one of 20 GiB),
    non-UTF-8 names, a tree deeper than Python recurses, many files and forged run
    records: the run is recorded (the link rejected, not followed), its files come back
    as they were, and no forged record is taken for one.
    """
    from spu.tracking.export import record_paths

    run = attack(target, ["specials", "link-submission:/etc/passwd", "sparse:20",
                          "sparse-files:4,60", "deep:1500", "many:2000", "forge"])
    report = run.report
    expect(report["deep"] == {"depth": 1500} and report["many"] == {"made": 2000},
           f"the agent did not make its tree: {report.get('deep')}, {report.get('many')}")
    out = run.run_dir / "output"
    expect((out / "rankings.json").is_symlink() and (out / "report.md").is_fifo(),
           "the link and the FIFO did not come back as they were")
    expect((out / "etc-link").is_symlink() and os.readlink(out / "etc-link") == "/etc",
           "a link was followed")
    expect((out / "sparse.bin").stat().st_size == 20 * 2**30, "the sparse file changed size")
    expect((out / "sparse.bin").stat().st_blocks * 512 < 2**20, "copied back dense")
    expect(os.path.exists(os.path.join(bytes(out), b"bad-\xff\xfe.txt")), "a name was lost")
    expect(len(os.listdir(out / "many")) == 2000, "files were lost")
    # The link was not followed: the submission is rejected as not JSON.
    expect(run.record.outcome.value == "rejected" and not run.record.scored,
           f"the linked submission was {run.record.outcome.value}")
    expect(run.record.grade.status.value == "invalid", "the grade is not invalid")
    # The forged records are files of the run, never records: one run is seen.
    runs = run.run_dir.parent
    expect(record_paths(runs) == [(run.run_dir / "run.json", run.run_dir.name)],
           "a forged record was taken for a run")
    return run


# --------------------------------------------------------------------------- disk, processes


@check("sandbox", "red-team", isolating=True, root=True)
def running_the_disk_out_of_inodes_ends_as_disk_limit(target: SandboxTarget) -> None:
    """Running the run disk out of inodes ends ``disk_limit``.

    Empty files by the hundred thousand fill a run disk's inodes, not the host's: the run
    ends ``disk_limit`` with its record.
    """
    run = attack(target, ["many:200000"], "limits.disk_gb=0.02")
    # Out of inodes, the agent could not even write its report.
    expect(len(os.listdir(run.run_dir / "output" / "many")) < 20000, "no inode limit")
    expect(run.record.outcome.value == "disk_limit" and run.record.process.disk_full,
           f"the run ended {run.record.outcome.value}")


@check("sandbox", "red-team", isolating=True, root=True)
def writing_outside_the_layout_is_held_by_a_limit(target: SandboxTarget) -> None:
    """What the agent writes outside ``/workspace`` and ``/output`` is bounded.

    Bubblewrap backends give it only tmpfs folders, charged to its memory limit; a
    container backend measures its own layer against ``limits.disk_gb`` (``disk_limit``).
    """
    if bubblewrap_based(target):
        run = attack(target, ["fill-outside:1500"], "limits.memory_gb=0.5")
        if run.record.sandbox.limits.memory_mechanism == "rlimit-as":
            raise CheckSkipped("no writable memory cgroup here")
        written = run.report.get("fill-outside", {})
        expect(written.get("/tmp", {}).get("mib", 0) < 600, f"{written}")
        expect(all(v.get("mib", 0) == 0 for k, v in written.items() if k != "/tmp"),
               f"{written}")
        expect(run.record.outcome.value == "memory_limit" and not run.record.scored,
               f"the run ended {run.record.outcome.value}")
    else:
        # 400 MiB each: the agent is not root in its container, so root's folders refuse
        # it and /tmp alone must hold more than the limit.
        run = attack(target, ["fill-outside:400"], "limits.disk_gb=0.3")
        expect(run.record.outcome.value == "disk_limit" and run.record.process.disk_full,
               f"the run ended {run.record.outcome.value}")
        expect(not run.record.scored, "a disk_limit run is scored")


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _environ(proc: Path) -> list[bytes]:
    """The process's environment, one ``NAME=value`` each (empty where unreadable)."""
    try:
        return (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return []


@check("sandbox", "red-team", isolating=True, root=True)
def a_sigterm_deaf_daemon_does_not_outlive_its_run(target: SandboxTarget) -> None:
    """A SIGTERM-deaf daemon does not outlive its run.

    A daemon in its own session, deaf to SIGTERM and SIGHUP, that keeps writing to the
    output, is gone when the run is recorded; nothing writes afterwards.
    """
    run = attack(target, ["daemon"])
    late = run.run_dir / "output" / "late.txt"
    expect(run.report["daemon"] == {"started": True} and late.is_file(), "no daemon started")
    size = late.stat().st_size
    time.sleep(1.5)
    expect(late.stat().st_size == size, "something still writes into the run folder")
    # This run's processes only: other runs of the same agent may be running beside it.
    seed = f"SPU_SEED={int(run.record.run_key[:8], 16)}".encode()
    left = [p.name for p in Path("/proc").iterdir() if p.name.isdigit()
            and b".agent/redteam.py" in _cmdline(p) and seed in _environ(p)]
    expect(left == [], f"a process of the run survived it: {left}")
    mounts = Path("/proc/self/mountinfo").read_text()
    expect(str(run.run_dir) not in mounts, "the run's disk is still mounted")
    _outcome(run, "no_file")


@check("sandbox", "red-team", isolating=True, root=True)
def a_submission_nested_a_million_deep_is_rejected(target: SandboxTarget) -> None:
    """A submission nested a million deep is rejected, not a grader crash.

    A ``rankings.json`` built to exhaust a recursive parser is graded (invalid), and the
    run is recorded as ``rejected``.
    """
    run = attack(target, ["deep-json"])
    _outcome(run, "rejected")
    expect(run.record.grade.status.value == "invalid", "the grade is not invalid")
