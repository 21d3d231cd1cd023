"""A run split between an agent node and the grading side, with no storage shared between them.

The paper's runs take hours on a GPU each; the answer keys must stay where the grading
happens. So a cluster sweep splits :func:`spu.runner.run_one` along its steps:

- the **grading side** (the sweep's driver) loads the trusted task and its key, stages
  the public files into ``runs/<run_key>/task/`` and packs them (:class:`FileBundle`);
- an **agent node** gets that bundle, the run's spec (no answer root, no output root
  of the driver's) and, for ``harness=command``, the agent's executable; it unpacks the
  public files into a scratch folder of its own, runs the agent in its sandbox
  (:func:`run_agent_job`: steps 1-4) and returns the submission, the trajectory and the
  logs (:class:`AgentReturn`), then deletes its scratch folder;
- the grading side writes them into ``runs/<run_key>/`` and grades, prices, screens
  and records the run there (:func:`settle_agent_return`: steps 5-8).

An agent node never receives ``hidden/``, an answers root or the answer key: only the
files :func:`spu.tasks.package.stage_public_files` lets through. What comes back is the
agent's work, handled as untrusted: regular files only, relative paths inside the run
folder, sizes capped.

Nothing here imports Ray: the launcher moves these objects with its object store.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from spu.schema import ProcessEvidence

log = logging.getLogger(__name__)

RETURNED_DIRS = ("output", "logs", "tools", "model")
"""Folders of an agent node's run folder that travel back to the grading side."""

MAX_RETURNED_FILE_BYTES = 256 << 20
"""A returned file with more data than this is left out (a note says so)."""
MAX_RETURNED_BYTES = 512 << 20
"""Data bytes of all the returned files together; what is over stays on the node, named."""
MAX_RETURNED_FILES = 10_000
"""Returned files at most; what is over stays on the node, named."""


class BundleError(ValueError):
    """A bundle holds a path that would leave its folder."""


@dataclass(frozen=True)
class BundledFile:
    """One regular file of a bundle."""

    path: str
    """POSIX path relative to the bundle's folder."""
    data: bytes
    executable: bool = False
    size: int | None = None
    """Apparent size of a sparse file (its holes are not in ``data``); None: dense."""
    extents: tuple[tuple[int, int], ...] = ()
    """``(offset, length)`` of each run of data of a sparse file, ``data`` their bytes."""


def _safe_relative(path: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if rel.is_absolute() or not rel.parts or any(p in ("..", "", ".") for p in rel.parts):
        raise BundleError(f"bundle path {path!r} leaves its folder")
    return rel


def _regular_files(folder: Path) -> Iterator[Path]:
    """Regular files under ``folder``, links never followed (an agent may plant them)."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if stat.S_ISREG(path.lstat().st_mode):
                yield path


class _Over(Exception):
    """A file over a cap of the bundle (the message says which)."""


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of the runs of data of an open file (``SEEK_DATA``/``SEEK_HOLE``)."""
    extents = []
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        extents.append((start, end - start))
        offset = end
    return extents


def _read_file(path: Path, rel: str, max_file_bytes: int | None, max_total_bytes: int | None,
               total: int) -> BundledFile:
    """One regular file as a :class:`BundledFile`, never following a link or blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Over("not a regular file")
        extents = _data_extents(fd, info.st_size)
        data_bytes = sum(length for _, length in extents)
        if max_file_bytes is not None and data_bytes > max_file_bytes:
            raise _Over(f"{data_bytes} bytes")
        if max_total_bytes is not None and total + data_bytes > max_total_bytes:
            raise _Over(f"{data_bytes} bytes, over the bundle's {max_total_bytes} bytes")
        executable = bool(info.st_mode & stat.S_IXUSR)
        dense = data_bytes >= info.st_size
        chunks = []
        for start, length in extents:
            f.seek(start)
            chunks.append(f.read(length))
        data = b"".join(chunks)
        if dense:
            return BundledFile(rel, data, executable)
        return BundledFile(rel, data, executable, size=info.st_size, extents=tuple(extents))


def _write_sparse(target: Path, item: BundledFile) -> None:
    """Write a sparse file's runs of data at their offsets; the holes stay holes."""
    size = int(item.size or 0)
    with open(target, "wb") as f:
        position = 0
        for start, length in item.extents:
            if start < 0 or length < 0 or start + length > size:
                raise BundleError(f"bundle path {item.path!r}: an extent leaves the file")
            f.seek(start)
            f.write(item.data[position:position + length])
            position += length
        f.truncate(size)


@dataclass(frozen=True)
class FileBundle:
    """Regular files of a folder, as bytes, to move between machines."""

    files: tuple[BundledFile, ...] = ()
    left_out: tuple[str, ...] = ()
    """Files not bundled, with why (too large)."""

    @classmethod
    def of(cls, folder: Path, only: tuple[str, ...] | None = None,
           max_file_bytes: int | None = None, max_total_bytes: int | None = None,
           max_files: int | None = None) -> FileBundle:
        """Bundle the regular files under ``folder`` (or under its subfolders ``only``).

        A sparse file travels as its runs of data (its holes stay holes); the caps count
        data bytes. A file over ``max_file_bytes``, or past ``max_total_bytes`` or
        ``max_files`` of the bundle, is left out and named in :attr:`left_out`.
        """
        folder = Path(folder)
        roots = [folder / name for name in only] if only is not None else [folder]
        files: list[BundledFile] = []
        left_out: list[str] = []
        total = 0
        for root in roots:
            if not root.is_dir() or root.is_symlink():
                continue
            for path in _regular_files(root):
                rel = path.relative_to(folder).as_posix()
                if max_files is not None and len(files) >= max_files:
                    left_out.append(f"{rel} (over the bundle's {max_files} files)")
                    continue
                try:
                    item = _read_file(path, rel, max_file_bytes, max_total_bytes, total)
                except _Over as over:
                    left_out.append(f"{rel} ({over})")
                    continue
                except OSError as exc:
                    left_out.append(f"{rel} (not read: {exc.strerror})")
                    continue
                total += len(item.data)
                files.append(item)
        return cls(tuple(files), tuple(left_out))

    @property
    def size(self) -> int:
        """Bytes of file content."""
        return sum(len(f.data) for f in self.files)

    def write(self, dest: Path) -> Path:
        """Write the files under ``dest`` (created); a path leaving it raises BundleError."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for item in self.files:
            target = dest.joinpath(*_safe_relative(item.path).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or (target.exists() and not target.is_file()):
                raise BundleError(f"bundle path {item.path!r}: {target} is not a regular file")
            if item.size is None:
                target.write_bytes(item.data)
            else:
                _write_sparse(target, item)
            target.chmod(0o755 if item.executable else 0o644)
        return dest


@dataclass(frozen=True)
class AgentJob:
    """What an agent node gets for one attempt of one run."""

    spec: Any
    """The run's :class:`~spu.runner.RunSpec`; its paths are the grading side's and are
    replaced on the node (the answer root is dropped)."""
    run_key: str
    """The run key the grading side computed (the node checks it matches)."""
    entrypoint: BundledFile | None = None
    """The agent's executable (``harness=command``), shipped: nodes share no storage."""
    report_every_s: float = 10.0
    """Seconds between spending reports while the agent runs."""


@dataclass
class AgentReturn:
    """What an agent node sends back after the agent's side of one attempt."""

    phase: Any
    """The :class:`~spu.runner.AgentPhase` (its ``staged`` path is the node's)."""
    files: FileBundle
    """The run folder's ``output/``, ``logs/`` and ``tools/``."""
    node: str
    """Where the agent ran: the Ray node id (or the host name outside Ray)."""
    host: str
    started: float
    """Wall-clock start of the attempt on the node (seconds since the epoch)."""
    finished: float
    slot_notes: list[str] = field(default_factory=list)


SpendReport = Callable[[dict[str, int], float | None, dict[str, Any] | None], None]
"""Called with the usage so far, its cost and the agent's live status (its
``status.json``, :class:`spu.harness.monitor.AgentStatus`) while an agent runs."""


def _watch_spending(run: Any, ctx: Any, report: SpendReport, every_s: float,
                    stop: threading.Event) -> None:
    """Report the run's usage so far every ``every_s`` seconds until ``stop``.

    The usage is that of the run's gateway record as it grows (of the session files for
    an agent without a gateway); a node that dies mid-run takes the files with it, so
    what was last reported is what the lost attempt counts as spent.
    """
    from dataclasses import asdict

    from spu.gateway.verdict import gateway_verdict, read_requests
    from spu.harness.evidence import gateway_evidence
    from spu.harness.monitor import read_status
    from spu.runner import price

    record = run.run_dir / "model" / "requests.jsonl"
    last: tuple[Any, ...] | None = None
    while not stop.wait(every_s):
        try:
            result = run.harness.parse(ctx, ProcessEvidence())
            if ctx.model is not None:  # the gateway's record, not the agent's files
                result = gateway_evidence(result, gateway_verdict(read_requests(record)))
            cost = price(run, result)
        except Exception:  # noqa: BLE001 - a session half-written is not an error yet
            continue
        usage = (result.trajectory.usage if result.trajectory is not None
                 and result.model_requests is None else result.usage).model_dump()
        status = read_status(run.run_dir)
        shown = asdict(status) if status is not None else None
        if (tuple(usage.values()), cost.estimate.total, shown) != last:
            last = (tuple(usage.values()), cost.estimate.total, shown)
            try:
                report(usage, cost.estimate.total, shown)
            except Exception as exc:  # noqa: BLE001 - reporting is best effort
                log.warning("spending report failed: %s", exc)


def run_agent_job(job: AgentJob, task_files: FileBundle, node: str = "",
                  report: SpendReport | None = None) -> AgentReturn:
    """The agent's side of one attempt, on the machine that runs agents (steps 1-4).

    The public files are unpacked into a scratch folder of this machine, the agent runs
    in the sandbox, and the folder is deleted once its results are bundled.

    Raises:
        spu.runner.RunConfigError: The harness cannot start here (e.g. its CLI is missing).
    """
    from spu.runner import collect, prepare_agent, run_agent
    from spu.tasks.package import stage_public_files

    started = time.time()
    scratch = Path(tempfile.mkdtemp(prefix=f"spu-{job.run_key}-"))
    try:
        source = task_files.write(scratch / "task-source")
        harness = job.spec.harness
        if job.entrypoint is not None:
            entry = FileBundle((job.entrypoint,)).write(scratch / "agent")
            harness = replace(harness, entrypoint=str(entry / job.entrypoint.path))
        spec = replace(job.spec, harness=harness, task_dir=source,
                       output_root=scratch / "out", answers_root=None, gpu_ids=job.spec.gpu_ids)
        run = prepare_agent(spec)
        if run.key != job.run_key:
            raise BundleError(f"run key {run.key} on the agent node differs from the grading "
                              f"side's {job.run_key}: the task files changed in transit")
        run.run_dir.mkdir(parents=True, exist_ok=True)
        staged = stage_public_files(run.task, run.run_dir / "task")
        stop = threading.Event()
        watchers: list[threading.Thread] = []

        def watch(ctx: Any) -> None:
            if report is None:
                return
            thread = threading.Thread(target=_watch_spending, daemon=True,
                                      args=(run, ctx, report, job.report_every_s, stop))
            thread.start()
            watchers.append(thread)

        try:
            phase = run_agent(run, staged, started=watch)
        finally:
            stop.set()
            for thread in watchers:
                thread.join(timeout=30)
        phase.submission = collect(run.run_dir)
        files = FileBundle.of(run.run_dir, RETURNED_DIRS, MAX_RETURNED_FILE_BYTES,
                              MAX_RETURNED_BYTES, MAX_RETURNED_FILES)
        notes = [f"left on the agent node (over the bundle's caps: {MAX_RETURNED_FILE_BYTES} "
                 f"bytes a file, {MAX_RETURNED_BYTES} bytes and {MAX_RETURNED_FILES} files in "
                 f"all): {f}" for f in files.left_out]
        return AgentReturn(phase=phase, files=files, node=node or socket.gethostname(),
                           host=socket.gethostname(), started=started, finished=time.time(),
                           slot_notes=notes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def agent_job(spec: Any, run_key: str, report_every_s: float = 10.0) -> AgentJob:
    """The job an agent node gets for ``spec``: the executable shipped, nothing secret."""
    entry = None
    path = spec.harness.entrypoint
    if path and Path(path).is_file():
        entry = BundledFile(Path(path).name, Path(path).read_bytes(), executable=True)
    return AgentJob(spec=spec, run_key=run_key, entrypoint=entry,
                    report_every_s=report_every_s)


def settle_agent_return(run: Any, staged: Path, returned: AgentReturn, grader: Any,
                        extra_notes: list[str] | None = None) -> Any:
    """The grading side of one attempt (steps 5-8): write, grade, price, screen, record.

    Args:
        run: the :class:`~spu.runner.PreparedRun` (trusted task and key).
        staged: where the grading side staged the public files.
        returned: what the agent node sent back.
        grader: a :class:`~spu.grading.isolated.GradingService`, or None to grade in a
            process of its own.
        extra_notes: notes for the record (e.g. a cluster without authentication).

    Returns:
        The :class:`~spu.schema.RunRecord`, written to ``runs/<run_key>/run.json``.
    """
    from spu.runner import RunGrades, grade, price, record, screen

    returned.files.write(run.run_dir)
    phase = returned.phase
    phase.staged = staged
    phase.notes = [*phase.notes, *returned.slot_notes, *(extra_notes or [])]
    phase.node = returned.node
    if grader is None or run.answers is None:  # no key: sealed, nothing to grade
        grades = grade(run, phase.submission)
    else:
        try:
            graded = grader.grade(f"{run.task.id}@{run.task.version}", run.task.contract,
                                  run.answers, phase.submission)
            grades = RunGrades(graded.strict, graded.recovered, note=graded.warning)
        except (RuntimeError, OSError) as exc:
            log.error("grading of run %s failed: %s", run.key, exc)
            grades = grade(run, phase.submission)
    return record(run, phase, grades, price(run, phase.result), screen(run, phase.result))
