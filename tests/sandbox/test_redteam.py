"""Red-team suite: an agent attacks the framework and the host, through the real ``run_one``.

Each test runs ``agents/redteam.py`` (``harness=command``) with one or more of its
attacks in every isolating backend and asserts two things: the attack failed, and
nothing else was lost (the run still has its ``run.json``, its outcome, its evidence).
Attacks and what holds them:

- kernel keyrings as a channel between runs, user namespaces: the sandbox's seccomp
  filter (``local``), Docker's default profile (``docker``);
- ``/proc``, sysrq, sysctls, cgroup files, ``open_by_handle_at``: no capabilities,
  read-only ``/proc/sys``;
- every route to a host service (TCP and UDP on each IPv4 and IPv6 address of this
  machine, link-local, Unix sockets in ``/tmp`` and ``/run``, abstract sockets, the
  Docker socket): the network namespace and pasta's filter;
- device nodes, setuid/setgid files and file capabilities left for the host: disarmed
  when the run's files come back (:func:`spu.sandbox.disk.disarm`);
- links, FIFOs, sockets, sparse, deep, crowded and non-UTF-8 outputs: read without
  following, recorded, logged;
- writes outside ``/workspace`` and ``/output``: memory (``local``'s tmpfs) or the
  disk limit (``docker``'s container layer);
- a SIGTERM-deaf daemon: gone with its run;
- other tasks' answers and the answer root where a system folder would show them:
  masked.

Every address targeted is this machine's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from pathlib import Path

import pytest

from spu.main import spec_from_config
from spu.runner import run_one
from spu.schema import Outcome, RunRecord
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import (
    BACKENDS,
    CHECK_AGENTS,
    ISOLATING,
    bubblewrap_based,
    require_backend,
)

REDTEAM = CHECK_AGENTS / "redteam.py"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's isolation needs root")


# --------------------------------------------------------------------------- running the agent


@dataclasses.dataclass
class Attacked:
    """One red-team run: its record, the agent's report and the run folder."""

    record: RunRecord
    report: dict
    run_dir: Path

    @property
    def saved(self) -> dict:
        """``run.json`` as written."""
        return json.loads((self.run_dir / "run.json").read_text())


def _attack(request, compose, backend: str, attacks: list[str], *overrides: str,
            repeat: int = 0, task: Path = EXAMPLE_TASK) -> Attacked:
    require_backend(request, backend)
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("SPU_TASK_ROOT", str(task.parent))  # where task=<id> is looked up
    cfg = compose("harness=command", f"harness.entrypoint={REDTEAM}", f"sandbox={backend}",
                  f"task_root={task.parent}", f"task={task.name}", "limits.cpus=1",
                  "limits.gpus=0", "limits.grace_s=1", "limits.memory_gb=1",
                  "limits.time_s=300", "limits.disk_gb=1", *overrides)
    spec = spec_from_config(cfg)
    if backend == "docker":
        spec = dataclasses.replace(spec, sandbox=dataclasses.replace(
            spec.sandbox, image=require_backend(request, backend)["image"]))
    spec = dataclasses.replace(spec, repeat=repeat, harness=dataclasses.replace(
        spec.harness, args=[f"--attack={a}" for a in attacks]))
    record = run_one(spec)
    run_dir = spec.output_root / "runs" / record.run_key
    report_file = run_dir / "output" / "redteam.json"
    report = json.loads(report_file.read_text()) if report_file.is_file() else {}
    attacked = Attacked(record, report, run_dir)
    # Nothing lost: the run has its record, with the evidence of its process.
    assert attacked.saved["outcome"] == record.outcome.value
    assert attacked.saved["process"]["error"] is None, attacked.saved["process"]
    return attacked


def _failed(result: list) -> bool:
    """An ``attempt()`` of the agent that did not succeed."""
    return result[0] is False


# --------------------------------------------------------------------------- the kernel


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_kernel_keyrings_carry_nothing_from_one_run_to_the_next(backend, request,
                                                                 compose) -> None:
    """Invariant: no run can leave a value in a kernel keyring for a later run to read."""
    token = uuid.uuid4().hex[:12]
    writer = _attack(request, compose, backend, [f"keyring-write:{token}"])
    reader = _attack(request, compose, backend, [f"keyring-read:{token}"], repeat=1)
    written = writer.report["keyring-write"]
    assert all(isinstance(v, str) for v in written.values()), f"a key was added: {written}"
    read = reader.report["keyring-read"]
    assert not any(isinstance(v, dict) for v in read.values()), f"a key was read: {read}"
    assert writer.record.outcome is reader.record.outcome is Outcome.no_file


@needs_root
@pytest.mark.slow
def test_a_run_cannot_starve_a_concurrent_run_of_per_user_kernel_resources(
        request, compose, tmp_path) -> None:
    """Invariant: two runs at once never share a user id: one holding every inotify
    instance its user may have leaves the other its own (and both differ from host users).
    (``docker`` agents are all root: see the README's security section.)"""
    outputs = tmp_path / "hog-outputs"
    done: dict[str, Attacked] = {}
    request.getfixturevalue("monkeypatch")  # set up here, used from the hog's thread
    hog = threading.Thread(target=lambda: done.setdefault("hog", _attack(
        request, compose, "local", ["proc", "inotify-hog:25"], f"output_root={outputs}")))
    hog.start()
    try:
        deadline = time.monotonic() + 120
        while not list(outputs.glob("runs/*/output/inotify-held")):
            assert time.monotonic() < deadline and hog.is_alive(), "the hog never started"
            time.sleep(0.2)
        probe = _attack(request, compose, "local", ["inotify-probe", "proc"], repeat=1)
    finally:
        hog.join()
    assert done["hog"].report["inotify-hog"]["held"] >= 64, done["hog"].report
    assert probe.report["inotify-probe"]["errno"] is None, probe.report
    assert probe.report["proc"]["uid"] != done["hog"].report["proc"]["uid"]
    assert done["hog"].record.outcome is probe.record.outcome is Outcome.no_file


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_no_user_namespace_no_capability_no_kernel_knob(backend, request, compose) -> None:
    """Invariant: the agent gets no capability anywhere: no user namespace of its own, no
    sysctl, sysrq or cgroup file, no file opened by handle outside its mounts."""
    run = _attack(request, compose, backend, ["userns", "proc", "handle"])
    assert run.report["userns"] == {"created": False}
    proc = run.report["proc"]
    for path, result in proc["open_for_write"].items():
        if path != "/proc/self/oom_score_adj":  # its own process: allowed everywhere
            assert _failed(result), f"{path} is writable"
    assert run.report["handle"].get("open_by_handle_at") in (None, "EPERM")
    if bubblewrap_based(backend):
        assert proc["uid"] != 0 and _failed(proc["pid1_root"]) and _failed(proc["pid1_environ"])
        assert "CapEff:\t0000000000000000" in proc["caps"]
    assert run.record.outcome is Outcome.no_file


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_nothing_of_the_host_is_inherited_or_signalled(backend, request, compose,
                                                       monkeypatch) -> None:
    """Invariant: the agent inherits no host file descriptor and no variable of the
    framework's environment (a credential), cannot signal a host process of its own
    user id, ptrace bubblewrap, type into a terminal, or move its folders away."""
    secret = f"spu-redteam-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", secret)
    monkeypatch.setenv("SPU_REDTEAM_SECRET", secret)
    victim = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "sleep", "600"], start_new_session=True)
    try:
        run = _attack(request, compose, backend, ["inherited", "escape-layout", "kill-all"],
                      "limits.time_s=60")
        assert victim.poll() is None, "a host process of the agent's user id was killed"
    finally:
        victim.kill()
        victim.wait()
    fds = run.report["inherited"]["fds"]
    # stdin, stdout, stderr and the listing's own descriptor (gone when read: ENOENT).
    leaked = {fd: target for fd, target in fds.items() if int(fd) > 2 and target != "ENOENT"}
    assert leaked == {}, f"file descriptors inherited: {leaked}"
    assert secret not in json.dumps(run.report), "the framework's environment leaked"
    escaped = {k: v for k, v in run.report["escape-layout"].items() if v[0]}
    if backend == "docker":  # its PID 1 is the container's docker-init, a process of its own
        escaped.pop("ptrace pid 1", None)
    assert escaped == {}, escaped
    # kill(-1) ended the agent itself (its own processes are all it may signal): recorded.
    assert run.record.outcome is Outcome.no_file


# --------------------------------------------------------------------------- host services


@contextlib.contextmanager
def _host_services(token: str) -> Iterator[dict[str, str]]:
    """Services on every address and socket kind of this machine; yields reach targets.

    Each answers ``<token>-<label>``: TCP and UDP on ``0.0.0.0`` and ``::`` (every
    address of the machine), two TCP ports on the IPv4 loopback only (``allowed``: the
    one a test lets the run reach, its control), Unix sockets in
    ``/tmp`` and ``/run`` (world-writable, so that the agent's user could connect)
    and an abstract Unix socket.
    """
    stop = threading.Event()
    sockets: list[socket.socket] = []
    paths: list[Path] = []

    def _serve_stream(sock: socket.socket, label: str) -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2)
                conn.recv(100)  # the agent's hello first: closing on unread data resets
                conn.sendall(f"{token}-{label}".encode())
                conn.shutdown(socket.SHUT_WR)

    def _serve_datagram(sock: socket.socket, label: str) -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                _, peer = sock.recvfrom(100)
            except OSError:
                continue
            with contextlib.suppress(OSError):
                sock.sendto(f"{token}-{label}".encode(), peer)

    def _start(sock: socket.socket, label: str, stream: bool = True) -> None:
        if stream:
            sock.listen(16)
        sockets.append(sock)
        threading.Thread(target=_serve_stream if stream else _serve_datagram,
                         args=(sock, label), daemon=True).start()

    targets: dict[str, str] = {}
    try:
        for family, any_address, kind in ((socket.AF_INET, "0.0.0.0", "v4"),
                                          (socket.AF_INET6, "::", "v6")):
            tcp = socket.socket(family, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            tcp.bind((any_address, 0))
            _start(tcp, f"tcp-{kind}")
            udp = socket.socket(family, socket.SOCK_DGRAM)
            if family == socket.AF_INET6:
                udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            udp.bind((any_address, 0))
            _start(udp, f"udp-{kind}", stream=False)
            for address in _host_addresses(kind):
                host = f"[{address}]" if kind == "v6" else address
                targets[f"tcp@{address}"] = f"tcp:{host}:{tcp.getsockname()[1]}"
                targets[f"udp@{address}"] = f"udp:{host}:{udp.getsockname()[1]}"
        loop = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        loop.bind(("127.0.0.1", 0))
        _start(loop, "loopback")
        targets["loopback"] = f"tcp:127.0.0.1:{loop.getsockname()[1]}"
        allowed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        allowed.bind(("127.0.0.1", 0))
        _start(allowed, "allowed")
        targets["allowed"] = f"tcp:127.0.0.1:{allowed.getsockname()[1]}"
        for folder in ("/tmp", "/run"):
            path = Path(folder) / f"spu-redteam-{token}.sock"
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(str(path))
            path.chmod(0o777)
            paths.append(path)
            _start(unix, f"unix{folder}")
            targets[f"unix@{folder}"] = f"unix:{path}"
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind(f"\0spu-redteam-{token}")
        _start(abstract, "abstract")
        targets["abstract"] = f"abstract:spu-redteam-{token}"
        for path in ("/var/run/docker.sock", "/run/docker.sock"):
            targets[f"docker@{path}"] = f"unix:{path}"
        yield targets
    finally:
        stop.set()
        for sock in sockets:
            sock.close()
        for path in paths:
            path.unlink(missing_ok=True)


def _host_addresses(kind: str) -> list[str]:
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


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("network", ["true", "false"], ids=["online", "offline"])
@pytest.mark.parametrize("backend", ISOLATING)
def test_no_host_service_answers_by_any_route(backend, network, request, compose) -> None:
    """Invariant: TCP, UDP, IPv6, link-local, Unix, abstract and Docker sockets of the host
    are all out of reach, online and offline, but for the run's own host port; the
    machine's own services keep running."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2 is missing")
    token = uuid.uuid4().hex[:10]
    with _host_services(token) as targets:
        allowed = targets.pop("allowed")
        reach = [f"reach:{label}={target}" for label, target in targets.items()]
        run = _attack(request, compose, backend, [f"reach:allowed={allowed}", *reach],
                      f"sandbox.network={network}",
                      f"sandbox.host_ports=[{allowed.rsplit(':', 1)[1]}]")
        # The host still reaches its own services (the test's control).
        with socket.create_connection(("127.0.0.1", int(targets["loopback"].rsplit(":", 1)[1])),
                                      timeout=5) as conn:
            conn.sendall(b"hello\n")
            assert conn.recv(100).decode().startswith(token)
    answers = {k: v for k, v in run.report.items() if k.startswith("reach:")}
    assert len(answers) == len(targets) + 1, "every target was tried"
    own = answers.pop(f"reach:allowed={allowed}")["answer"]
    reached = {k: v["answer"] for k, v in answers.items() if v["answer"]}
    assert reached == {}, f"host services answered the agent: {reached}"
    if network == "true":
        assert own == f"{token}-allowed", "the probe works: its own host port answers"
        assert run.record.sandbox.network == "pasta-filtered"
    else:
        assert own is None and run.record.sandbox.network == "offline"
    assert run.record.outcome is Outcome.no_file


# --------------------------------------------------------------------------- files for the host


def _special_entries(root: Path) -> dict[str, list[str]]:
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


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
@pytest.mark.parametrize("disk_gb", ["1", "0"], ids=["run-disk", "no-disk-limit"])
def test_no_device_node_setuid_file_or_file_capability_reaches_the_host(
        backend, disk_gb, request, compose) -> None:
    """Invariant: the run folder the host keeps holds no device node (a raw disk), no
    setuid/setgid file (a root shell) and no file capability, whatever the agent made."""
    run = _attack(request, compose, backend, ["mknod", "suid"], f"limits.disk_gb={disk_gb}")
    assert run.report["suid"]["/workspace/suid-mode"], "the agent made its copies"
    assert _special_entries(run.run_dir) == {"devices": [], "setid": [], "filecaps": []}
    # Its files are still there, disarmed, and the run is recorded.
    shell = run.run_dir / "workspace" / "suid-sh"
    assert shell.is_file() and stat.S_IMODE(shell.stat().st_mode) == 0o755
    assert run.record.outcome is Outcome.no_file
    if backend == "docker":
        assert _failed(run.report["mknod"]["/workspace/mem-node"]), "MKNOD is dropped"
        assert _failed(run.report["suid"]["/workspace/filecap"]), "SETFCAP is dropped"


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_odd_outputs_are_recorded_and_logged_without_being_followed(
        backend, request, compose, tmp_path, monkeypatch) -> None:
    """Invariant: links, a FIFO, a socket, a link as the submission, sparse files (one of
    20 GiB), non-UTF-8 and control-character names, a tree deeper than Python recurses,
    many files and forged run records: the run is recorded (the link rejected, not
    followed), its files come back as they were, no forged record is taken for one,
    MLflow logs a bounded part of them, and the tree can be removed."""
    from mlflow.tracking import MlflowClient

    from spu.sandbox.disk import remove_tree
    from spu.tracking import store
    from spu.tracking.store import TrackingTarget, log_run

    run = _attack(request, compose, backend,
                  ["specials", "link-submission:/etc/passwd", "sparse:20", "sparse-files:4,60",
                   "deep:1500", "many:2000", "forge"])
    report = run.report
    assert report["deep"] == {"depth": 1500} and report["many"] == {"made": 2000}
    out = run.run_dir / "output"
    assert (out / "rankings.json").is_symlink() and (out / "report.md").is_fifo()
    assert (out / "etc-link").is_symlink() and os.readlink(out / "etc-link") == "/etc"
    assert (out / "sparse.bin").stat().st_size == 20 * 2**30
    assert (out / "sparse.bin").stat().st_blocks * 512 < 2**20, "copied back sparse"
    assert os.path.exists(os.path.join(bytes(out), b"bad-\xff\xfe.txt"))
    assert len(os.listdir(out / "many")) == 2000
    # The link was not followed: the submission is rejected as not JSON.
    assert run.record.outcome is Outcome.rejected and not run.record.scored
    assert run.record.grade.status.value == "invalid"
    # The forged records are files of the run, never records: the export sees one run.
    from spu.tracking.export import record_paths

    runs = run.run_dir.parent
    assert record_paths(runs) == [(run.run_dir / "run.json", run.run_dir.name)]
    # MLflow logs regular files only, a bounded number and size of them, none too deep.
    monkeypatch.setattr(store, "MAX_ARTIFACT_FILES", 300)
    monkeypatch.setattr(store, "MAX_ARTIFACT_TOTAL_BYTES", 100 * 2**20)
    target = TrackingTarget(uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                            artifact_root=str(tmp_path / "artifacts"), experiment="redteam")
    run_id = log_run(run.record, run.run_dir, target)
    stored = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    names = {p.name for p in stored}
    assert "passwd" not in names and "rankings.json" not in names and "report.md" not in names
    assert len([p for p in stored if p.parent.name == "many"]) < 300
    assert sum(p.stat().st_blocks * 512 for p in stored) < 110 * 2**20
    mlflow_run = MlflowClient(target.uri).get_run(run_id)
    assert mlflow_run.info.status == "FINISHED"
    skipped = mlflow_run.data.tags["artifacts_skipped"]
    assert "deeper than" in skipped and "files past the first 300" in skipped
    # A run folder can be removed whole, however deep (a rerun of a crashed run does).
    remove_tree(run.run_dir)
    assert not run.run_dir.exists()


# --------------------------------------------------------------------------- disk, processes


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_running_the_disk_out_of_inodes_ends_as_disk_limit(backend, request, compose) -> None:
    """Invariant: empty files by the hundred thousand fill a run disk's inodes, not the
    host's: the run ends ``disk_limit`` with its record."""
    run = _attack(request, compose, backend, ["many:200000"], "limits.disk_gb=0.02")
    # Out of inodes, the agent could not even write its report.
    assert len(os.listdir(run.run_dir / "output" / "many")) < 20000
    assert run.record.outcome is Outcome.disk_limit and run.record.process.disk_full


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_writing_outside_the_layout_is_held_by_a_limit(backend, request, compose) -> None:
    """Invariant: what the agent writes outside ``/workspace`` and ``/output`` is bounded:
    ``local`` gives it only tmpfs folders, charged to its memory limit; ``docker``
    measures the container's own layer against ``limits.disk_gb`` (``disk_limit``)."""
    if bubblewrap_based(backend):
        run = _attack(request, compose, backend, ["fill-outside:1500"], "limits.memory_gb=0.5")
        if run.record.sandbox.limits.memory_mechanism == "rlimit-as":
            pytest.skip("no writable memory cgroup here")
        written = run.report.get("fill-outside", {})
        assert written.get("/tmp", {}).get("mib", 0) < 600, written
        assert all(v.get("mib", 0) == 0 for k, v in written.items() if k != "/tmp"), written
        assert run.record.outcome is Outcome.memory_limit and not run.record.scored
    else:
        # 400 MiB each: the agent is not root in its container, so root's folders refuse
        # it and /tmp alone must hold more than the limit.
        run = _attack(request, compose, backend, ["fill-outside:400"], "limits.disk_gb=0.3")
        assert run.record.outcome is Outcome.disk_limit and run.record.process.disk_full
        assert not run.record.scored


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_a_sigterm_deaf_daemon_does_not_outlive_its_run(backend, request, compose) -> None:
    """Invariant: a daemon in its own session, deaf to SIGTERM and SIGHUP, that keeps
    writing to the output, is gone when the run is recorded; nothing writes afterwards."""
    run = _attack(request, compose, backend, ["daemon"])
    late = run.run_dir / "output" / "late.txt"
    assert run.report["daemon"] == {"started": True} and late.is_file()
    size = late.stat().st_size
    time.sleep(1.5)
    assert late.stat().st_size == size, "something still writes into the run folder"
    left = [p.name for p in Path("/proc").iterdir() if p.name.isdigit()
            and b".agent/redteam.py" in _cmdline(p)]
    assert left == [], "a process of the run survived it"
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(run.run_dir) not in mounts, "the run's disk was released"
    assert run.record.outcome is Outcome.no_file


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_a_submission_nested_a_million_deep_is_rejected(backend, request, compose) -> None:
    """Invariant: a ``rankings.json`` built to exhaust a recursive parser is graded (invalid),
    and the run is recorded as ``rejected``, not as a grader crash."""
    run = _attack(request, compose, backend, ["deep-json"])
    assert run.record.outcome is Outcome.rejected
    assert run.record.grade.status.value == "invalid"
    assert run.saved["process"]["error"] is None


# --------------------------------------------------------------------------- answers


def _task_tree(root: Path, canary: str) -> tuple[Path, Path]:
    """Two tasks under ``root``; the second's answers hold ``canary``. Returns both."""
    first, second = root / EXAMPLE_TASK.name, root / "spu-redteam-other"
    shutil.copytree(EXAMPLE_TASK, first)
    shutil.copytree(EXAMPLE_TASK, second)
    meta = (second / "task.yaml").read_text().replace(EXAMPLE_TASK.name, second.name)
    (second / "task.yaml").write_text(meta)
    answers = json.loads((second / "hidden" / "answers.json").read_text())
    answers["source"] = {"title": canary}
    (second / "hidden" / "answers.json").write_text(json.dumps(answers))
    return first, second


@pytest.fixture
def system_folder() -> Iterator[Path]:
    """A folder under ``/opt``, which ``sandbox=local`` shows the agent (read-only)."""
    if os.geteuid() != 0:
        pytest.skip("writing under /opt needs root")
    folder = Path("/opt") / f"spu-redteam-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["task_root", "answers_root"])
def test_answers_of_other_tasks_are_masked_under_a_system_folder(
        where, request, compose, system_folder) -> None:
    """Invariant: a task root or an answer root deployed under a folder the sandbox shows
    (``/opt``) is hidden whole: no task's answers, not only the run's own."""
    canary = f"spu-redteam-canary-{uuid.uuid4().hex}"
    tasks = system_folder / "tasks"
    first, second = _task_tree(tasks, canary)
    overrides: list[str] = []
    if where == "answers_root":
        answers = system_folder / "answers"
        for task in (first, second):
            (answers / task.name).mkdir(parents=True)
            shutil.move(str(task / "hidden" / "answers.json"), answers / task.name)
        overrides.append(f"answers_root={answers}")
        probe = answers / second.name / "answers.json"
    else:
        probe = second / "hidden" / "answers.json"
    run = _attack(request, compose, "local",
                  ["read:" + str(probe), "read:" + str(tasks)], *overrides, task=first)
    assert probe.is_file(), "the host still has them"
    assert run.report["read:" + str(probe)]["content"] is None, run.report
    assert run.report["read:" + str(tasks)]["content"] in (None, []), run.report
    assert canary not in json.dumps(run.report)
    assert run.record.outcome is Outcome.no_file


# --------------------------------------------------------------------------- session files


def _planted_sessions(home: Path, host_file: Path) -> Path:
    """A CLI home the agent booby-trapped; returns its ``.claude/projects`` folder."""
    projects = home / ".claude" / "projects" / "p"
    (projects / "subagents").mkdir(parents=True)
    os.mkfifo(projects / "fifo.jsonl")  # never ends: a blocking reader hangs
    os.symlink(host_file, projects / "host.jsonl")  # the framework reads as root
    os.symlink("/dev/zero", projects / "zero.jsonl")  # endless, no newline
    os.symlink(host_file.parent, projects / "folder-link")
    (projects / "subagents" / "agent-x.jsonl").write_text("")
    os.mkfifo(projects / "subagents" / "agent-x.meta.json")
    (projects / "long.jsonl").write_bytes(b'{"type": "user", "x": "' + b"a" * 5000 + b'"}\n'
                                          + b'{"type": "nothing"}\n')
    return projects.parent


def _within_seconds(fn, seconds: float = 30.0):
    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, "the reader hung on a file the agent planted"
    return result[0]


@pytest.mark.parametrize("cli", ["claude_code", "codex"])
def test_session_files_the_agent_planted_are_not_followed(cli, tmp_path, monkeypatch) -> None:
    """Invariant: reading the agent's session files (as root, after the run) never follows
    a link to a host file, never blocks on a FIFO, never reads an endless file or holds a
    giant line; a home folder replaced by a link is not read."""
    from spu.harness.trajectory import jsonl
    from spu.harness.trajectory.claude_code import read_claude_code_sessions
    from spu.harness.trajectory.codex import read_codex_sessions

    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(jsonl, "MAX_FILE_BYTES", 1 << 20)
    canary = f"spu-redteam-host-{uuid.uuid4().hex}"
    host = tmp_path / "host"
    host.mkdir()
    line = {"type": "user", "message": {"role": "user", "content": canary}}
    (host / "secret.jsonl").write_text(json.dumps(line) + "\n")
    (host / "rollout-secret.jsonl").write_text(json.dumps(line) + "\n")
    home = tmp_path / "home"
    projects = _planted_sessions(home, host / "secret.jsonl")
    if cli == "codex":
        sessions = home / ".codex" / "sessions"
        sessions.parent.mkdir()
        projects.rename(sessions)
        for path in list(sessions.rglob("*.jsonl")):
            path.rename(path.with_name(f"rollout-{path.name}"))
        os.symlink(host / "rollout-secret.jsonl", sessions / "p" / "rollout-link.jsonl")
        reading = _within_seconds(lambda: read_codex_sessions(sessions))
    else:
        reading = _within_seconds(lambda: read_claude_code_sessions(projects))
    assert canary not in reading.model_dump_json() if hasattr(reading, "model_dump_json") \
        else canary not in repr(reading)
    assert all("host" not in f and "zero" not in f and "fifo" not in f for f in reading.files)
    assert any("longer than" in w for w in reading.warnings), reading.warnings
    # The CLI's whole folder replaced by a link to a host folder: not read at all.
    linked = tmp_path / "linked-home"
    linked.mkdir()
    os.symlink(host, linked / ".claude")
    reading = _within_seconds(lambda: read_claude_code_sessions(linked / ".claude"))
    assert reading.files == () and canary not in repr(reading)


@pytest.mark.parametrize("backend", BACKENDS)
def test_framework_file_access_never_follows_a_planted_link(backend, open_sandbox,
                                                            tmp_path) -> None:
    """Invariant: ``Sandbox.write_file``/``read_file`` (the framework, as root) refuse a path
    through a link the agent left in its workspace: no host file written or read."""
    from spu.sandbox import SandboxError

    box = open_sandbox(backend)
    host = tmp_path / "host-folder"
    host.mkdir()
    (host / "secret.txt").write_text("host secret")
    workspace = box.sandbox.layout_roots().workspace
    os.symlink(host, workspace / ".agent")
    os.symlink(host / "secret.txt", workspace / "notes.txt")
    inside = box.paths.workspace
    with pytest.raises(SandboxError):
        box.sandbox.write_file(f"{inside}/.agent/agent.py", b"overwritten")
    with pytest.raises(SandboxError):
        box.sandbox.read_file(f"{inside}/.agent/secret.txt")
    with pytest.raises(OSError):
        box.sandbox.read_file(f"{inside}/notes.txt")
    with pytest.raises(OSError):
        box.sandbox.write_file(f"{inside}/notes.txt", b"overwritten")
    assert sorted(p.name for p in host.iterdir()) == ["secret.txt"]
    assert (host / "secret.txt").read_text() == "host secret"
    box.sandbox.write_file(f"{inside}/sub/ok.txt", b"fine")
    assert box.sandbox.read_file(f"{inside}/sub/ok.txt") == b"fine"
