"""Grade in a separate process that sees only what it is given, with no network.

The grading process gets a fresh folder holding a trusted copy of the contract, the
answer key and the submitted bytes, and nothing else: never the agent's workspace.
Isolation, strongest first (paper section 2.5: "a separate container that has no
network access"):

- ``bwrap``: bubblewrap with new mount, network, PID, IPC and UTS namespaces, an
  empty environment, and only the Python runtime, the grading code and the job
  folder mounted (read-only); nothing else of the file system exists for it;
- ``netns``: ``unshare -n`` (or ``unshare -rn`` without root): no network, but the
  process sees the file system as the caller does;
- ``none``: a plain subprocess, recorded loudly in the grade and the run's notes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import spu
from spu.config import GraderIsolation
from spu.schema import AnswerKey, Contract, Grade

log = logging.getLogger(__name__)

WORKER_MODULE = "spu.grading.worker"
GRADING_TIMEOUT_S = 120
ISOLATIONS: tuple[str, ...] = tuple(m.value for m in GraderIsolation if m != "auto")
"""The isolation modes, strongest first; ``auto`` picks the first that works here."""

_SANDBOX_JOB = "/job"
_SANDBOX_CODE_ROOT = "/opt/spu-grader"
_PLAIN_ENV = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}
"""The whole environment of a ``netns`` or ``none`` grading process: no keys, no secrets."""


class GraderIsolationError(RuntimeError):
    """The requested isolation is not available, or the grading process failed."""


class GradingProcessDied(GraderIsolationError):
    """A grading service's process ended before it answered (killed from outside)."""


@dataclass(frozen=True)
class IsolatedGrades:
    """The strict and the recovered grade of one submission, and how they were isolated."""

    strict: Grade
    recovered: Grade
    isolation: str
    warning: str | None = None


def _runtime_paths() -> list[Path]:
    """Folders the Python runtime needs, read-only: the interpreter and its packages."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)}
    paths |= {Path(p) for p in sys.path if p and "site-packages" in p}
    system = [Path(p) for p in ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc/alternatives")]
    # Never the root itself (a Python installed with prefix /): that would mount everything.
    return sorted(p for p in paths | set(system) if p.exists() and p != Path("/"))


WORKER_CODE = (f"import runpy; runpy.run_module({WORKER_MODULE!r}, run_name='__main__', "
               "alter_sys=True)")
"""What the grading process runs: the worker, which grades the job folder ``sys.argv[1]``."""


def _with_code_root(code_root: str, code: str) -> str:
    # -I ignores PYTHONPATH and the user's site folder; the grading code is put first on
    # the path explicitly, so the process runs the code the caller runs.
    return f"import sys; sys.path.insert(0, {code_root!r})\n{code}"


def isolated_command(job: Path, mode: str, code: str = WORKER_CODE) -> list[str]:
    """The argv that runs Python ``code`` under isolation ``mode`` on the job folder.

    ``code`` runs with the grading code importable and the job folder's path in
    ``sys.argv[1]``; under ``bwrap`` that folder appears, read-only, at ``/job``.
    The same command serves the grading worker and the isolation tests.
    """
    spu_dir = Path(spu.__file__).resolve().parent
    if mode == "bwrap":
        cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
               "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        # Mounts made after the /tmp tmpfs, so a runtime living under /tmp stays visible.
        for path in _runtime_paths():
            cmd += ["--ro-bind", str(path), str(path)]
        cmd += [
            "--ro-bind", str(spu_dir), f"{_SANDBOX_CODE_ROOT}/spu",
            "--ro-bind", str(job), _SANDBOX_JOB,
            "--chdir", _SANDBOX_JOB,
            "--setenv", "PATH", os.defpath,
            "--setenv", "LC_ALL", "C.UTF-8",
            "--",
            sys.executable, "-I", "-B", "-c", _with_code_root(_SANDBOX_CODE_ROOT, code),
            _SANDBOX_JOB,
        ]  # fmt: skip
        return cmd
    plain = [sys.executable, "-I", "-B", "-c", _with_code_root(str(spu_dir.parent), code),
             str(job)]
    if mode == "netns":
        return [*_netns_prefix(), *plain]
    if mode == "none":
        return plain
    raise GraderIsolationError(f"unknown grader isolation {mode!r}; one of {ISOLATIONS}")


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_NETNS_PREFIX: list[str] = []


def _netns_prefix() -> list[str]:
    """``unshare -n`` as root; ``unshare -rn`` (a user namespace) for everyone else."""
    if not _NETNS_PREFIX:
        plain = ["unshare", "-n"]
        _NETNS_PREFIX.extend(plain if _works([*plain, "true"]) else ["unshare", "-rn"])
    return _NETNS_PREFIX


def _mode_works(mode: str) -> bool:
    if mode == "bwrap":
        return shutil.which("bwrap") is not None and _works(
            ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"]
        )
    if mode == "netns":
        return shutil.which("unshare") is not None and _works([*_netns_prefix(), "true"])
    return mode == "none"


_AVAILABLE: dict[str, bool] = {}


def available_isolation(preferred: str = "auto") -> str:
    """The isolation to grade under: ``preferred``, or with ``auto`` the strongest that works.

    Raises
    ------
    GraderIsolationError
        When ``preferred`` names a mode this machine cannot provide (asking for
        ``bwrap`` never silently grades with less).
    """
    # An unknown name cannot come from a composed config; called directly, it raises here.
    preferred = GraderIsolation(preferred)
    candidates = ISOLATIONS if preferred is GraderIsolation.auto else (preferred.value,)
    for mode in candidates:
        if mode not in _AVAILABLE:
            _AVAILABLE[mode] = _mode_works(mode)
        if _AVAILABLE[mode]:
            return mode
    raise GraderIsolationError(
        f"sandbox.grader_isolation={preferred}: not available on this machine "
        f"({'bubblewrap' if preferred == 'bwrap' else 'unshare -n'} does not work here)"
    )


def not_isolated_warning(mode: str) -> str | None:
    """The loud warning that goes with a grade made under ``mode``, or ``None``."""
    if mode == "none":
        return ("GRADER NOT ISOLATED: the grading process ran as a plain subprocess, "
                "with network access and the whole file system in view")
    return None


def write_job(job: Path, contract: Contract, answers: AnswerKey, submission: bytes | None) -> None:
    """Fill the job folder: everything the grading process is given, and nothing else."""
    (job / "contract.json").write_text(contract.model_dump_json(), encoding="utf-8")
    (job / "answers.json").write_text(answers.model_dump_json(), encoding="utf-8")
    if submission is not None:
        (job / "rankings.json").write_bytes(submission)


def run_isolated(job: Path, mode: str, code: str = WORKER_CODE,
                 timeout_s: float = GRADING_TIMEOUT_S) -> subprocess.CompletedProcess[bytes]:
    """Run ``code`` on ``job`` under ``mode`` with an environment holding no secrets.

    Raises:
        GraderIsolationError: When the process runs over ``timeout_s``.
    """
    try:
        return subprocess.run(isolated_command(job, mode, code), capture_output=True,
                              timeout=timeout_s, env=_PLAIN_ENV)
    except subprocess.TimeoutExpired:
        raise GraderIsolationError(
            f"grading process (isolation {mode}) ran over {timeout_s} s"
        ) from None


def _killed(returncode: int, mode: str) -> bool:
    """The grading process died of SIGKILL (bubblewrap reports a signal as 128 + n)."""
    return returncode == -signal.SIGKILL or (mode == "bwrap"
                                             and returncode == 128 + signal.SIGKILL)


def grade_isolated(
    contract: Contract,
    answers: AnswerKey,
    submission: bytes | None,
    isolation: str = "auto",
) -> IsolatedGrades:
    """Grade ``submission`` strictly and with recovery in an isolated process.

    Args:
        contract: Trusted copy of the task's contract.
        answers: The answer key.
        submission: The submitted bytes (``None``: no file).
        isolation: ``auto`` (the strongest available), ``bwrap``, ``netns`` or ``none``.

    Returns:
        Both grades, each with ``isolation`` set, and the warning of an unisolated grade.

    Raises:
        GraderIsolationError: When the isolation asked for is unavailable or the grading
            process fails; the run is then an infrastructure error.
    """
    mode = available_isolation(isolation)
    with tempfile.TemporaryDirectory(prefix="spu-grade-") as tmp:
        job = Path(tmp)
        write_job(job, contract, answers, submission)
        proc = run_isolated(job, mode)
        if _killed(proc.returncode, mode):
            # Killed from outside (the host's OOM killer under memory pressure): grading
            # is a pure function of the job folder, so a second process gives the grade.
            log.warning("grading process (isolation %s) killed by a signal (exit %d); "
                        "grading again", mode, proc.returncode)
            proc = run_isolated(job, mode)
    if proc.returncode != 0:
        how = " (killed by a signal, twice)" if _killed(proc.returncode, mode) else ""
        raise GraderIsolationError(
            f"grading process failed (isolation {mode}, exit {proc.returncode}{how}): "
            f"{proc.stderr.decode(errors='replace')[-2000:]}"
        )
    try:
        out = json.loads(proc.stdout)
        strict = Grade.model_validate(out["strict"])
        recovered = Grade.model_validate(out["recovered"])
    except (ValueError, KeyError, TypeError) as exc:
        raise GraderIsolationError(
            f"grading process (isolation {mode}) printed no grade: {exc}"
        ) from None
    warning = not_isolated_warning(mode)
    if warning:
        log.warning(warning)
    return IsolatedGrades(
        strict=strict.model_copy(update={"isolation": mode}),
        recovered=recovered.model_copy(update={"isolation": mode}),
        isolation=mode,
        warning=warning,
    )


SERVE_CODE = "import sys; from spu.grading.worker import serve; sys.exit(serve())"
"""What a grading service runs: requests on stdin, grades on stdout, no file in view."""

_SPAWNER: tuple[int, Any] | None = None


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    """Start a grading service's process from a thread that lives as long as this process.

    bubblewrap's ``--die-with-parent`` ends the process with the *thread* that started it:
    a service first used by a run's short-lived thread would die after that run.
    """
    global _SPAWNER
    from concurrent.futures import ThreadPoolExecutor

    if _SPAWNER is None or _SPAWNER[0] != os.getpid():  # none yet, or a fork's copy
        _SPAWNER = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="spu-grader"))
    started = _SPAWNER[1].submit(
        subprocess.Popen, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=_PLAIN_ENV)
    return started.result(timeout=60)


class GradingService:
    """One isolated grading process that grades many submissions (a sweep's grader).

    A process per run costs an interpreter start (about 0.2 s); a sweep of thousands of
    short runs pays that once here. The process is isolated as :func:`grade_isolated`'s
    (``bwrap``: no network, no file of the host but the runtime, here not even a job
    folder: contract, key and submission come through its stdin). Thread-safe: one
    request at a time. A process that dies is started again for the next request.

    Args:
        isolation: ``auto``, ``bwrap``, ``netns`` or ``none``.
        timeout_s: longest wait for one grade.
    """

    def __init__(self, isolation: str = "auto", timeout_s: float = GRADING_TIMEOUT_S) -> None:
        import threading

        self.mode = available_isolation(isolation)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sent: set[str] = set()
        self._empty = tempfile.mkdtemp(prefix="spu-grader-")

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = _spawn(isolated_command(Path(self._empty), self.mode, SERVE_CODE))
            self._sent = set()
        return self._proc

    def grade(self, key_name: str, contract: Contract, answers: AnswerKey,
              submission: bytes | None) -> IsolatedGrades:
        """Grade ``submission`` strictly and with recovery, as :func:`grade_isolated`.

        Raises:
            GraderIsolationError: When the grading process fails or falls silent.
        """
        import base64
        import select

        request: dict[str, object] = {
            "key": key_name,
            "submission": None if submission is None else base64.b64encode(submission).decode()}
        with self._lock:
            proc = self._start()
            if key_name not in self._sent:
                request["contract"] = contract.model_dump(mode="json")
                request["answers"] = answers.model_dump(mode="json")
            assert proc.stdin is not None and proc.stdout is not None
            ended = False  # the pipe closed (or broke): the process is ending
            try:
                proc.stdin.write(json.dumps(request).encode() + b"\n")
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
                line = proc.stdout.readline() if ready else b""
                ended = bool(ready) and not line
            except OSError as exc:
                line, ended = b"", True
                log.error("grading service (isolation %s): %s", self.mode, exc)
            if not line:
                died = proc.poll()
                if ended and died is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        died = proc.wait(timeout=10)
                self._stop_locked()
                if died is not None:
                    raise GradingProcessDied(
                        f"grading service (isolation {self.mode}) ended (exit {died}) "
                        "before its grade")
                raise GraderIsolationError(
                    f"grading service (isolation {self.mode}) gave no grade within "
                    f"{self.timeout_s:g} s")
            self._sent.add(key_name)
        out = json.loads(line)
        if "error" in out:
            raise GraderIsolationError(f"grading service (isolation {self.mode}): "
                                       f"{out['error']}")
        warning = not_isolated_warning(self.mode)
        return IsolatedGrades(
            strict=Grade.model_validate(out["strict"]).model_copy(update={"isolation": self.mode}),
            recovered=Grade.model_validate(out["recovered"]).model_copy(
                update={"isolation": self.mode}),
            isolation=self.mode, warning=warning)

    def _stop_locked(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def close(self) -> None:
        """Stop the grading process."""
        with self._lock:
            self._stop_locked()
        shutil.rmtree(self._empty, ignore_errors=True)

    def __enter__(self) -> GradingService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED: dict[str, GradingService] = {}
_SHARED_PID = os.getpid()


def shared_service(isolation: str = "auto") -> GradingService:
    """This process's grading service for ``isolation``, started on first use.

    A sweep's runs in one process (the basic launcher's jobs, a regrade of a store)
    share it, as the Ray driver shares one: an interpreter start is most of a grade's
    time. A forked child starts its own. Closed when the interpreter exits.
    """
    global _SHARED_PID
    if os.getpid() != _SHARED_PID:  # a fork: the parent's pipes are not this process's
        _SHARED.clear()
        _SHARED_PID = os.getpid()
    mode = available_isolation(isolation)
    if mode not in _SHARED:
        if not _SHARED:
            import atexit

            atexit.register(close_shared_services)
        _SHARED[mode] = GradingService(mode)
    return _SHARED[mode]


def close_shared_services() -> None:
    """Stop this process's grading services (they start again when next used)."""
    while _SHARED:
        _SHARED.popitem()[1].close()


def grade_shared(contract: Contract, answers: AnswerKey, submission: bytes | None,
                 isolation: str = "auto") -> IsolatedGrades:
    """:func:`grade_isolated`'s grades, from this process's grading service.

    The service's process sees no file (contract, key and submission come through its
    stdin) and is isolated as :func:`grade_isolated`'s. Killed from outside (the OOM
    killer), it is started again and asked once more, as :func:`grade_isolated` grades
    again once.

    Raises:
        GraderIsolationError: the isolation is unavailable, the process died twice, or
            it gave no grade in time.
    """
    import hashlib

    service = shared_service(isolation)
    # Named by what it grades with: two keys of one task id never share a cached key.
    name = hashlib.sha256(contract.model_dump_json().encode() + b"\0"
                          + answers.model_dump_json().encode()).hexdigest()
    try:
        grades = service.grade(name, contract, answers, submission)
    except GradingProcessDied as exc:
        log.warning("%s; grading again", exc)
        try:
            grades = service.grade(name, contract, answers, submission)
        except GradingProcessDied as again:
            raise GradingProcessDied(f"{again} (killed, twice)") from None
    if grades.warning:
        log.warning(grades.warning)
    return grades
