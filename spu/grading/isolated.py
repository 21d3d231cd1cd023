"""Grade in a separate process that sees only what it is given, with no network.

The grading process gets a fresh folder holding a trusted copy of the contract, the
answer key and the submitted bytes, and nothing else: never the agent's workspace.
Where bubblewrap exists it runs in new mount, network, PID and IPC namespaces with
only the Python runtime and the grading code mounted; else under ``unshare -n``;
else as a plain subprocess, which the grade records loudly as ``isolation="none"``.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import spu
from spu.schema import AnswerKey, Contract, Grade

log = logging.getLogger(__name__)

WORKER_MODULE = "spu.grading.worker"
GRADING_TIMEOUT_S = 120


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
    return sorted(p for p in paths | set(system) if p.exists())


def _bwrap_command(job: Path) -> list[str]:
    spu_dir = Path(spu.__file__).resolve().parent
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
           "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    # Mounts made after the /tmp tmpfs, so a runtime living under /tmp stays visible.
    for path in _runtime_paths():
        cmd += ["--ro-bind", str(path), str(path)]
    cmd += [
        "--ro-bind", str(spu_dir), "/opt/spu-grader/spu",
        "--ro-bind", str(job), "/job",
        "--chdir", "/job",
        "--setenv", "PYTHONPATH", "/opt/spu-grader",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--setenv", "PYTHONNOUSERSITE", "1",
        "--",
        sys.executable, "-I", "-c",
        "import sys; sys.path.insert(0, '/opt/spu-grader'); "
        f"import runpy; runpy.run_module('{WORKER_MODULE}', run_name='__main__')",
        "/job",
    ]  # fmt: skip
    return cmd


def _probe(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_ISOLATION_CACHE: dict[str, str] = {}


def available_isolation(preferred: str = "auto") -> str:
    """The strongest isolation this machine allows: ``bwrap``, ``netns`` or ``none``."""
    if preferred in _ISOLATION_CACHE:
        return _ISOLATION_CACHE[preferred]
    choice = "none"
    if preferred in ("auto", "bwrap") and shutil.which("bwrap") and _probe(
        ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"]
    ):
        choice = "bwrap"
    elif preferred in ("auto", "netns") and shutil.which("unshare") and _probe(
        ["unshare", "-n", "true"]
    ):
        choice = "netns"
    _ISOLATION_CACHE[preferred] = choice
    return choice


def grade_isolated(
    contract: Contract,
    answers: AnswerKey,
    submission: bytes | None,
    isolation: str = "auto",
) -> IsolatedGrades:
    """Grade ``submission`` strictly and with recovery in an isolated process.

    Raises
    ------
    RuntimeError
        When the grading process fails; the run is then an infrastructure error.
    """
    mode = available_isolation(isolation)
    with tempfile.TemporaryDirectory(prefix="spu-grade-") as tmp:
        job = Path(tmp)
        (job / "contract.json").write_text(contract.model_dump_json(), encoding="utf-8")
        (job / "answers.json").write_text(answers.model_dump_json(), encoding="utf-8")
        if submission is not None:
            (job / "rankings.json").write_bytes(submission)
        worker = [sys.executable, "-m", WORKER_MODULE, str(job)]
        if mode == "bwrap":
            cmd = _bwrap_command(job)
        elif mode == "netns":
            cmd = ["unshare", "-n", *worker]
        else:
            cmd = worker
        proc = subprocess.run(cmd, capture_output=True, timeout=GRADING_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(
            f"grading process failed (isolation {mode}, exit {proc.returncode}): "
            f"{proc.stderr.decode(errors='replace')[-2000:]}"
        )
    out = json.loads(proc.stdout)
    strict = Grade.model_validate(out["strict"]).model_copy(update={"isolation": mode})
    recovered = Grade.model_validate(out["recovered"]).model_copy(update={"isolation": mode})
    warning = None
    if mode == "none":
        warning = (
            "GRADER NOT ISOLATED: neither bubblewrap nor 'unshare -n' works on this machine; "
            "the grading process ran with network access"
        )
        log.warning(warning)
    return IsolatedGrades(strict=strict, recovered=recovered, isolation=mode, warning=warning)
