"""The grading process: no network, nothing of the file system beyond what it was given.

A probe runs in exactly the process the grader runs in (``run_isolated``, the same
command and environment as ``grade_isolated``) and reports what it can reach.
"""

from __future__ import annotations

import contextlib
import json
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spu.grading.isolated import (
    _AVAILABLE,
    GraderIsolationError,
    available_isolation,
    grade_isolated,
    run_isolated,
    write_job,
)
from spu.grading.rules import grade_submission
from tests.conftest import EXAMPLE_TWO_GROUPS, REPO
from tests.grading.conftest import as_bytes, hand_answers, hand_contract, submission

PROBE = r"""
import json, os, socket, sys
job = sys.argv[1]
spec = json.load(open(os.path.join(job, "probe.json")))

def can_read(path):
    try:
        with open(path, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False

def connect(host, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        return "connected"
    except OSError as exc:
        return type(exc).__name__
    finally:
        s.close()

with open("/proc/net/dev") as f:
    interfaces = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
import spu
print(json.dumps({
    "job_files": sorted(os.listdir(job)),
    "read": {p: can_read(p) for p in spec["paths"]},
    "loopback": connect("127.0.0.1", spec["port"]),
    "outside": connect("192.0.2.1", 80),
    "interfaces": interfaces,
    "env": sorted(os.environ),
    "spu": spu.__file__,
}))
"""


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on the host's loopback: reachable from any process in the host's netns."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def secrets(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Files the grader must not read: the task's real answer key and a file of the repository,
    a file in a temporary folder and a file in the home folder."""
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    paths = {
        "answers in the task tree": str(EXAMPLE_TWO_GROUPS / "hidden" / "answers.json"),
        "repository file": str(REPO / "pyproject.toml"),
        "temporary folder": str(outside),
        "system file": "/etc/passwd",
    }
    home = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=Path.home(), prefix=".spu-secret-",
                                         delete=False) as f:
            f.write("secret")
            home = Path(f.name)
        paths["home folder"] = str(home)
    except OSError:
        pass  # a read-only home: the other paths still test the mount namespace
    yield paths
    if home is not None:
        home.unlink(missing_ok=True)


def probe(mode: str, port: int, paths: dict[str, str], tmp_path: Path) -> dict:
    job = tmp_path / f"job-{mode}"
    job.mkdir()
    write_job(job, hand_contract(), hand_answers(), as_bytes(submission()))
    (job / "probe.json").write_text(json.dumps({"port": port, "paths": list(paths.values())}))
    proc = run_isolated(job, mode, PROBE, timeout_s=60)
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    report["job"] = str(job)
    return report


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bwrap", "netns"])
def test_grading_process_cannot_open_a_network_connection(mode, listener, tmp_path) -> None:
    try:
        available_isolation(mode)
    except GraderIsolationError as exc:
        pytest.skip(str(exc))
    report = probe(mode, listener, {}, tmp_path)
    assert report["interfaces"] == ["lo"], "a fresh network namespace has only a loopback"
    assert report["loopback"] != "connected", "the host's loopback server must be out of reach"
    assert report["outside"] != "connected"


@pytest.mark.slow
def test_control_an_unisolated_process_reaches_the_listener(listener, tmp_path) -> None:
    """Shows the network probe can succeed: without isolation it connects."""
    report = probe("none", listener, {}, tmp_path)
    assert report["loopback"] == "connected"


@pytest.mark.slow
def test_grading_process_reads_nothing_but_its_job(listener, secrets, tmp_path,
                                                  monkeypatch) -> None:
    try:
        available_isolation("bwrap")
    except GraderIsolationError as exc:
        pytest.skip(f"bubblewrap is needed to hide the file system: {exc}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    report = probe("bwrap", listener, secrets, tmp_path)
    unreadable = dict(zip(secrets, report["read"].values(), strict=True))
    assert not any(unreadable.values()), f"readable from the grader: {unreadable}"
    assert report["job_files"] == ["answers.json", "contract.json", "probe.json",
                                   "rankings.json"]
    assert report["spu"].startswith("/opt/spu-grader/"), "the grading code is the mounted copy"
    assert "ANTHROPIC_API_KEY" not in report["env"]
    # Control: the same paths are readable from the unisolated process.
    control = probe("none", listener, secrets, tmp_path)
    assert all(control["read"].values())
    assert "ANTHROPIC_API_KEY" not in control["env"], "no mode passes the caller's environment"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bwrap", "netns", "none"])
def test_isolated_grade_equals_the_pure_function(mode, contract, answers) -> None:
    try:
        available_isolation(mode)
    except GraderIsolationError as exc:
        pytest.skip(str(exc))
    data = as_bytes({"task": "spu-hand", "rankings": {"G1": ["b", "a", "c", "d"],
                                                      "G2": ["p", "q", "r"]}})
    grades = grade_isolated(contract, answers, data, isolation=mode)
    assert grades.isolation == mode
    assert grades.strict.isolation == mode and grades.recovered.isolation == mode
    assert grades.strict.model_copy(update={"isolation": None}) == \
        grade_submission(contract, answers, data)
    assert grades.recovered.model_copy(update={"isolation": None}) == \
        grade_submission(contract, answers, data, recover=True)
    assert (grades.warning is not None) == (mode == "none")


def test_unknown_isolation_is_refused() -> None:
    """A composed config cannot hold one (an Enum of the schema); a direct call raises."""
    with pytest.raises(ValueError, match="'chroot' is not a valid GraderIsolation"):
        available_isolation("chroot")


def test_isolation_asked_for_is_never_silently_weakened(monkeypatch, tmp_path) -> None:
    """Invariant: with no bwrap or unshare on PATH, asking for bwrap fails loudly; only auto
    falls back, and the grade then says isolation none with a warning."""
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no bwrap, no unshare
    saved = dict(_AVAILABLE)
    _AVAILABLE.clear()
    try:
        with pytest.raises(GraderIsolationError, match="grader_isolation=bwrap"):
            available_isolation("bwrap")
        assert available_isolation("auto") == "none"
    finally:
        _AVAILABLE.clear()
        _AVAILABLE.update(saved)


def _kill_grading_processes(count: int, stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL the first ``count`` grading processes that appear (as the OOM killer would)."""
    import os
    import signal

    me = os.getpid()

    def parent_of(pid: int) -> int:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

    def descends_from_me(pid: int) -> bool:
        # Only this test's grading processes: the other xdist worker may be grading too, and
        # a kill of its process once counted here as the second kill (CI, stop 35).
        while pid > 1:
            pid = parent_of(pid)
            if pid == me:
                return True
        return False

    while not stop.is_set() and len(killed) < count:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in killed:
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            # The interpreter the grading process runs, a child of this test's process
            # (or of bubblewrap under it), once it runs the worker.
            if ppid == me or not argv or b"spu.grading.worker" not in b" ".join(argv):
                continue
            if argv[0].endswith(b"bwrap"):
                continue
            try:
                if not descends_from_me(int(entry.name)):
                    continue
            except (OSError, ValueError, IndexError):
                continue
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
        stop.wait(0.002)


@pytest.mark.slow
@pytest.mark.parametrize("kills", [1, 2])
@pytest.mark.parametrize("grader", ["a process per grade", "the shared service"])
def test_a_grading_process_killed_from_outside_is_graded_again_once(
        grader: str, kills: int, contract, answers, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed once (the host's OOM killer under memory pressure), the grade still comes:
    the job is graded by a second process (a shared service starts again and is asked
    once more). Killed twice, the error says so."""
    from spu.grading import isolated

    try:
        available_isolation("bwrap")
    except GraderIsolationError as exc:
        pytest.skip(str(exc))
    # Each grading process lives a second before it grades, so that the killer finds it
    # however loaded the machine (CI once saw the second one end before it was found).
    pause = "import time; time.sleep(1.0); "
    if grader == "the shared service":
        isolated.close_shared_services()
        monkeypatch.setattr(isolated, "SERVE_CODE", pause + isolated.SERVE_CODE)
        grade, twice = isolated.grade_shared, "killed, twice"
    else:
        run = isolated.run_isolated
        monkeypatch.setattr(isolated, "run_isolated", lambda job, mode: run(
            job, mode, pause + isolated.WORKER_CODE))
        grade, twice = grade_isolated, "killed by a signal, twice"
    data = as_bytes({"task": "spu-hand", "rankings": {"G1": ["b", "a", "c", "d"],
                                                      "G2": ["p", "q", "r"]}})
    stop, killed = threading.Event(), list[int]()
    killer = threading.Thread(target=_kill_grading_processes, args=(kills, stop, killed))
    killer.start()
    try:
        if kills == 1:
            grades = grade(contract, answers, data, isolation="bwrap")
            assert grades.recovered.model_copy(update={"isolation": None}) == \
                grade_submission(contract, answers, data, recover=True)
        else:
            with pytest.raises(GraderIsolationError, match=twice):
                grade(contract, answers, data, isolation="bwrap")
    finally:
        stop.set()
        killer.join(timeout=10)
        isolated.close_shared_services()
    assert len(killed) == kills


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bwrap", "netns", "none"])
def test_a_shared_grading_service_gives_the_per_run_grades(mode, contract, answers) -> None:
    """A sweep's runs share one grading process (the basic launcher, a regrade): each grade
    is the one a process of its own gives, and two answer keys of one task id are never
    confused (the service caches each key by what it holds, not by the task's name)."""
    from spu.grading.isolated import close_shared_services, grade_shared, shared_service

    try:
        available_isolation(mode)
    except GraderIsolationError as exc:
        pytest.skip(str(exc))
    close_shared_services()
    other = answers.model_copy(update={"groups": {"G1": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0},
                                                  "G2": answers.groups["G2"]}})
    submissions = [as_bytes({"task": "spu-hand", "rankings": {"G1": ["b", "a", "c", "d"],
                                                              "G2": ["p", "q", "r"]}}),
                   None, b"{not json", as_bytes({"task": "spu-hand", "rankings": {}})]
    try:
        for key in (answers, other, answers):
            for data in submissions:
                shared = grade_shared(contract, key, data, isolation=mode)
                alone = grade_isolated(contract, key, data, isolation=mode)
                assert (shared.strict, shared.recovered, shared.isolation) == \
                    (alone.strict, alone.recovered, alone.isolation)
        first = grade_shared(contract, answers, submissions[0], isolation=mode).recovered.score
        second = grade_shared(contract, other, submissions[0], isolation=mode).recovered.score
        assert first != second  # the reversed key scores the same order otherwise
        assert shared_service(mode) is shared_service(mode)  # one process for all of them
    finally:
        close_shared_services()


def test_a_shared_service_first_used_by_a_thread_outlives_that_thread(
        contract, answers) -> None:
    """bubblewrap's --die-with-parent ends a process with the thread that started it: the
    service a run's short-lived thread started must still grade the next run."""
    from spu.grading.isolated import close_shared_services, grade_shared, shared_service

    try:
        available_isolation("bwrap")
    except GraderIsolationError as exc:
        pytest.skip(str(exc))
    close_shared_services()
    try:
        worker = threading.Thread(target=grade_shared, args=(contract, answers, None, "bwrap"))
        worker.start()
        worker.join(timeout=120)
        proc = shared_service("bwrap")._proc
        assert proc is not None
        grade_shared(contract, answers, None, "bwrap")
        assert shared_service("bwrap")._proc is proc and proc.poll() is None
    finally:
        close_shared_services()
