"""Load a task package from disk: one loader used by every stage.

A task folder holds public files (what the agent sees) and ``hidden/answers.json``
(what only the grader sees). The answer root is configurable so that maintainers
can keep answer keys outside the task tree.

A task package is data, never instructions. Whoever wrote it, reading it must not
reach anything else:

- every file is read as a regular file: a link (to a file or a folder, inside the
  package or out), a device, a FIFO or a socket is refused, never followed or opened
  (:func:`read_task_file`); staging copies regular files only (:func:`stage_public_files`);
- every file read has a size limit (:data:`MAX_YAML_BYTES`, :data:`MAX_TABLE_BYTES`,
  :data:`MAX_STAGED_FILE_BYTES`), is decoded as UTF-8 and parsed by a bounded parser: a
  YAML loader that refuses anchors and aliases (no "billion laughs"), strict JSON, CSV
  with the module's field limit;
- a task id is :data:`~spu.schema.TASK_ID_PATTERN` (letters, digits, ``.``, ``_``,
  ``-``), so a path built from it stays in its root;
- every problem is a :class:`TaskLoadError` of one line naming the file.
"""

from __future__ import annotations

import csv
import errno
import io
import logging
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from spu.schema import TASK_ID_PATTERN, AnswerKey, Contract, Protocol, TargetRow, TaskMeta
from spu.strict_json import StrictJSONError, loads_strict

PUBLIC_PATHS: tuple[str, ...] = (
    "task.yaml",
    "instruction.md",
    "experiment.md",
    "protocol.json",
    "targets.csv",
    "contract.json",
    "files",
)
"""The paths of a task folder that the agent may see; nothing else is staged."""

REQUIRED_PUBLIC: tuple[str, ...] = (
    "task.yaml",
    "instruction.md",
    "experiment.md",
    "protocol.json",
    "targets.csv",
    "contract.json",
)


log = logging.getLogger(__name__)

MAX_YAML_BYTES = 1 << 20
"""Largest ``task.yaml`` (or build spec) read: 1 MiB."""

MAX_TABLE_BYTES = 64 << 20
"""Largest JSON or CSV task file read (contract, protocol, targets, answer key): 64 MiB."""

MAX_STAGED_FILE_BYTES = 1 << 30
"""Largest public file staged for the agent: 1 GiB."""

MAX_STAGED_BYTES = 4 << 30
"""Largest total of the public files staged for one run: 4 GiB."""

MAX_STAGED_FILES = 10_000
"""Most public files staged for one run."""


class TaskLoadError(Exception):
    """A task package cannot be read; the message names the file and the problem."""


def file_kind(mode: int) -> str:
    """What a file is, in words, from its ``st_mode``.

    Examples
    --------
    >>> file_kind(stat.S_IFLNK | 0o777), file_kind(stat.S_IFIFO | 0o644)
    ('link', 'FIFO')
    """
    kinds = ((stat.S_ISLNK, "link"), (stat.S_ISDIR, "folder"), (stat.S_ISREG, "regular file"),
             (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """An open descriptor on ``path`` and its status; refuses anything but a regular file.

    ``lstat`` first, so a device or FIFO is never opened; then ``O_NOFOLLOW`` and a
    second check on the descriptor, so a file swapped for a link in between is refused.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise TaskLoadError(f"{path}: file is missing") from None
    except OSError as exc:
        raise TaskLoadError(f"{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise TaskLoadError(f"{path}: is a {file_kind(mode)}, not a regular file (task "
                            f"packages hold regular files only)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = "is a link" if exc.errno == errno.ELOOP else exc.strerror
        raise TaskLoadError(f"{path}: cannot be read ({why})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise TaskLoadError(f"{path}: is a {file_kind(st.st_mode)}, not a regular file")
    return fd, st


def read_task_file(path: str | Path, limit: int) -> bytes:
    """The bytes of one task file: a regular file (never a link) of at most ``limit`` bytes.

    Raises
    ------
    TaskLoadError
        When the file is missing, is not a regular file, or is larger than ``limit``.
    """
    path = Path(path)
    fd, st = _open_regular(path)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise TaskLoadError(f"{path}: {st.st_size} bytes, over the limit of {limit} "
                                f"bytes for this file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TaskLoadError(f"{path}: over the limit of {limit} bytes for this file")
    return data


def read_task_text(path: str | Path, limit: int) -> str:
    """A task file as UTF-8 text (:func:`read_task_file`); not UTF-8 is one-line error."""
    data = read_task_file(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskLoadError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}); save it "
                            f"as UTF-8") from None


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases.

    An alias makes a small file expand into an exponentially large value (the
    "billion laughs"); task files never need one.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (&name, *name) are not allowed in task files",
                event.start_mark)
        return super().compose_node(parent, index)


def load_yaml_text(text: str, path: Path | str) -> Any:
    """Parse YAML with :class:`_NoAliasLoader`; errors are one line naming ``path``."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise TaskLoadError(f"{path}: not valid YAML ({where}"
                            f"{_one_line(exc.problem or exc.context or '')})") from None
    except yaml.YAMLError as exc:
        raise TaskLoadError(f"{path}: not valid YAML ({_one_line(str(exc))})") from None
    except RecursionError:
        raise TaskLoadError(f"{path}: not valid YAML (nested too deeply)") from None


@dataclass(frozen=True)
class TaskPackage:
    """A loaded task: its folder, metadata and contract (answers are loaded apart)."""

    path: Path
    meta: TaskMeta
    contract: Contract

    @property
    def id(self) -> str:
        """The task id."""
        return self.meta.id

    @property
    def version(self) -> str:
        """The task version."""
        return self.meta.version

    @property
    def n_items(self) -> int:
        """Number of experiments over all comparison groups."""
        return sum(len(g.items) for g in self.contract.groups)

    def answers_path(self, answers_root: Path | None = None) -> Path:
        """Where this task's answer key lives under ``answers_root``.

        With no root the key is ``<task>/hidden/answers.json``; with a root it is
        ``<root>/<task_id>/answers.json`` (or ``<root>/<task_id>.json``). The id is a
        safe name (:data:`~spu.schema.TASK_ID_PATTERN`), so the path stays in the root.
        """
        if answers_root is None:
            return self.path / "hidden" / "answers.json"
        root = Path(answers_root)
        nested = path_under(root, self.id, "answers.json")
        flat = path_under(root, f"{self.id}.json")
        return flat if flat.exists() and not nested.exists() else nested

    def targets(self) -> list[TargetRow]:
        """The task's ``targets.csv`` rows, validated, in file order."""
        return load_targets(self.path / "targets.csv")

    def targets_rows(self) -> list[dict[str, str]]:
        """Rows of ``targets.csv`` as dictionaries, in file order."""
        text = read_task_text(self.path / "targets.csv", MAX_TABLE_BYTES)
        return list(csv.DictReader(io.StringIO(text, newline="")))


def path_under(root: Path, *names: str) -> Path:
    """``root / names...``, refusing any name that could leave ``root``.

    Each name must be a safe file name (:data:`~spu.schema.TASK_ID_PATTERN`): no
    separator, no ``..``, no leading dot.

    Examples
    --------
    >>> path_under(Path("/keys"), "spu-bhpt", "answers.json").as_posix()
    '/keys/spu-bhpt/answers.json'
    >>> path_under(Path("/keys"), "../etc", "answers.json")
    Traceback (most recent call last):
    ...
    spu.tasks.package.TaskLoadError: '../etc' is not a safe name under /keys
    """
    for name in names:
        if not TASK_ID_PATTERN.fullmatch(name):
            raise TaskLoadError(f"{name!r} is not a safe name under {root}")
    return root.joinpath(*names)


def _read_json(path: Path) -> object:
    """A trusted task file, parsed by the grader's strict rules (no duplicate key, no NaN)."""
    text = read_task_text(path, MAX_TABLE_BYTES)
    try:
        return loads_strict(text)
    except StrictJSONError as exc:
        raise TaskLoadError(f"{path}: not valid strict JSON ({_one_line(str(exc))})") from None


def validation_message(path: Path | str, exc: ValidationError) -> str:
    """``<path>: <key>: <problem>; ...`` for a pydantic error (keys dotted, lists by index)."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    return f"{path}: " + "; ".join(parts)


_Model = TypeVar("_Model", bound=BaseModel)


def _load_json_model(path: str | Path, model: type[_Model]) -> _Model:
    path = Path(path)
    try:
        return model.model_validate(_read_json(path))
    except ValidationError as exc:
        raise TaskLoadError(validation_message(path, exc)) from None


def load_yaml_model(path: str | Path, model: type[_Model]) -> _Model:
    """Read a YAML file into ``model``; errors name the file and the key.

    The file is read as a task file: regular, at most :data:`MAX_YAML_BYTES`, UTF-8,
    no anchors or aliases.

    Raises
    ------
    TaskLoadError
        When the file is missing, is not YAML, or does not match ``model``.
    """
    path = Path(path)
    data = load_yaml_text(read_task_text(path, MAX_YAML_BYTES), path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TaskLoadError(validation_message(path, exc)) from None


def load_meta(task_dir: Path) -> TaskMeta:
    """Read and validate ``task.yaml``."""
    return load_yaml_model(Path(task_dir) / "task.yaml", TaskMeta)


def load_contract(path: str | Path) -> Contract:
    """Read and validate a ``contract.json``."""
    return _load_json_model(path, Contract)


def load_task(task_dir: str | Path) -> TaskPackage:
    """Load the public part of a task package.

    Raises
    ------
    TaskLoadError
        When a required file is missing or does not match its schema; the
        message names the file and the key.
    """
    task_dir = Path(task_dir).resolve()
    if not task_dir.is_dir():
        raise TaskLoadError(f"{task_dir}: task folder does not exist")
    meta = load_meta(task_dir)
    contract = load_contract(task_dir / "contract.json")
    if contract.task_id != meta.id:
        raise TaskLoadError(
            f"{task_dir / 'contract.json'}: task_id {contract.task_id!r} does not match "
            f"task.yaml id {meta.id!r}"
        )
    return TaskPackage(path=task_dir, meta=meta, contract=contract)


def load_protocol(path: str | Path) -> Protocol:
    """Read and validate a ``protocol.json``."""
    return _load_json_model(path, Protocol)


TARGET_KEYS: tuple[str, ...] = ("experiment_id", "group_id")
"""The first two columns of every ``targets.csv``; the varied settings follow."""


def load_targets(path: str | Path) -> list[TargetRow]:
    """Read ``targets.csv`` into rows, in file order.

    Raises
    ------
    TaskLoadError
        When the file is missing, not UTF-8, lacks the ``experiment_id`` and
        ``group_id`` columns, or has a row with too few or too many cells; the
        message names the file and the line.
    """
    path = Path(path)
    text = read_task_text(path, MAX_TABLE_BYTES)
    try:
        return _parse_targets(path, text)
    except csv.Error as exc:
        raise TaskLoadError(f"{path}: not valid CSV ({_one_line(str(exc))})") from None


def _parse_targets(path: Path, text: str) -> list[TargetRow]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None or tuple(header[:2]) != TARGET_KEYS:
        raise TaskLoadError(
            f"{path}: the header must start with experiment_id,group_id (found {header!r})"
        )
    if len(set(header)) != len(header):
        raise TaskLoadError(f"{path}: duplicate column names in the header {header!r}")
    rows = []
    for line, cells in enumerate(reader, start=2):
        if not cells:
            continue
        if len(cells) != len(header):
            raise TaskLoadError(
                f"{path}: line {line} has {len(cells)} cells, the header has {len(header)}"
            )
        record = dict(zip(header, cells, strict=True))
        if not record["experiment_id"] or not record["group_id"]:
            raise TaskLoadError(f"{path}: line {line} has an empty experiment_id or group_id")
        rows.append(TargetRow.model_validate(record))
    return rows


def load_answers(path: str | Path) -> AnswerKey:
    """Read and validate an answer key (``hidden/answers.json``)."""
    return _load_json_model(path, AnswerKey)


def discover_tasks(task_root: str | Path) -> list[Path]:
    """Task folders directly under ``task_root`` (those holding a ``task.yaml``), sorted.

    Names starting with a dot are left out; broken packages are not (see
    :func:`scan_task_root` for the ones a sweep can run).
    """
    root = Path(task_root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if not p.name.startswith(".") and p.is_dir()
                  and os.path.lexists(p / "task.yaml"))


@dataclass(frozen=True)
class BrokenTask:
    """A folder of the task root that looks like a task package but cannot be one."""

    name: str
    """The folder name (as Hydra would list it)."""
    path: Path
    """The folder."""
    reason: str
    """Why, in one line naming the file."""

    def __str__(self) -> str:
        return f"broken task {self.name!r} skipped: {self.reason}"


@dataclass(frozen=True)
class TaskRootScan:
    """The task packages of a task root that can run, and the broken ones with a reason."""

    root: Path
    tasks: dict[str, TaskMeta] = field(default_factory=dict)
    """Folder name -> its ``task.yaml``, for every package whose folder and metadata are sound."""
    broken: tuple[BrokenTask, ...] = ()
    """Folders holding a ``task.yaml`` that are refused, each with its reason."""


def check_task_folder(folder: Path) -> TaskMeta:
    """The metadata of a task folder, checked for what a sweep relies on before a run.

    The folder name is a safe task name, the folder and its ``task.yaml`` are not
    links, and ``task.yaml`` reads (bounded, UTF-8, no aliases) into a valid
    :class:`~spu.schema.TaskMeta`.

    Raises
    ------
    TaskLoadError
        One line naming the folder or file and what is wrong.
    """
    name = folder.name
    if not TASK_ID_PATTERN.fullmatch(name):
        raise TaskLoadError(f"{folder}: folder name {name!r} is not a safe task name (letters, "
                            f"digits, '.', '_' and '-' only, not starting with a dot); rename it")
    if folder.is_symlink():
        raise TaskLoadError(f"{folder}: the task folder is a link; task packages are "
                            f"regular folders (copy the package instead)")
    return load_meta(folder)


_SCANS: dict[tuple[str, tuple[tuple[str, int, int, int], ...]], TaskRootScan] = {}


def scan_task_root(task_root: str | Path) -> TaskRootScan:
    """Sort the folders of ``task_root`` holding a ``task.yaml`` into sound and broken ones.

    A broken folder (see :func:`check_task_folder`) is reported, never raised, so that
    one bad package cannot stop a sweep over the others. The result is cached while no
    ``task.yaml`` under the root changes (Hydra asks for the options many times).
    """
    root = Path(task_root).expanduser().resolve()
    if not root.is_dir():
        return TaskRootScan(root)
    folders = discover_tasks(root)
    stamp = []
    for folder in folders:
        try:
            st = os.lstat(folder / "task.yaml")
            stamp.append((folder.name, st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            stamp.append((folder.name, 0, 0, 0))
    key = (str(root), tuple(stamp))
    cached = _SCANS.get(key)
    if cached is not None:
        return cached
    tasks: dict[str, TaskMeta] = {}
    broken: list[BrokenTask] = []
    for folder in folders:
        try:
            tasks[folder.name] = check_task_folder(folder)
        except TaskLoadError as exc:
            # A folder name need not be UTF-8: keep the reason printable.
            reason = _one_line(str(exc)).encode("utf-8", "backslashreplace").decode("utf-8")
            broken.append(BrokenTask(folder.name, folder, reason))
    scan = TaskRootScan(root, tasks, tuple(broken))
    _SCANS.clear()  # one root at a time is the common case; keep the cache small
    _SCANS[key] = scan
    return scan


def retired_task_names(task_root: str | Path) -> set[str]:
    """Folder names of the retired task packages under ``task_root`` (SPEC section 15)."""
    return {name for name, meta in scan_task_root(task_root).tasks.items()
            if meta.retired is not None}


def select_tasks(
    task_root: str | Path,
    discipline: str | None = None,
    visibility: str | None = None,
    subfield: str | None = None,
    on_broken: Callable[[BrokenTask], None] | None = None,
    include_retired: bool = False,
) -> list[TaskPackage]:
    """Task packages under ``task_root`` matching every filter given, sorted by folder.

    Filters compare case-insensitively with the ``task.yaml`` fields. A broken package
    (:func:`scan_task_root`, or a contract that does not load) is left out, as a sweep
    leaves it out, and reported to ``on_broken`` (default: a logged warning). A retired
    task is left out too, as ``task='glob(*)'`` leaves it out, unless ``include_retired``.
    """
    wanted = {
        "discipline": discipline,
        "visibility": visibility,
        "subfield": subfield,
    }
    report = on_broken or (lambda b: log.warning("%s", b))
    scan = scan_task_root(task_root)
    for broken in scan.broken:
        report(broken)
    selected = []
    for name, meta in scan.tasks.items():
        if meta.retired is not None and not include_retired:
            continue
        values = {
            "discipline": meta.discipline.value,
            "visibility": meta.visibility.value,
            "subfield": meta.subfield,
        }
        if all(v is None or values[k].casefold() == v.casefold() for k, v in wanted.items()):
            try:
                selected.append(load_task(scan.root / name))
            except TaskLoadError as exc:
                report(BrokenTask(name, scan.root / name, _one_line(str(exc))))
    return selected


@dataclass(frozen=True)
class UnsafeEntry:
    """An entry of a task package that is not a regular file or folder."""

    path: str
    """Relative to the task folder."""
    kind: str
    """What it is (``link``, ``FIFO``, ``character device``...)."""
    target: str | None = None
    """Where a link points, as written in it."""

    def __str__(self) -> str:
        to = f" to {self.target!r}" if self.target is not None else ""
        return f"{self.path} is a {self.kind}{to}"


def unsafe_entries(task_dir: Path, names: tuple[str, ...] | None = None) -> list[UnsafeEntry]:
    """Every link, device, FIFO or socket in a task package, never following a link.

    Args:
        task_dir: the task folder.
        names: only these top-level entries (e.g. :data:`PUBLIC_PATHS`); None for all.
    """
    task_dir = Path(task_dir)
    found: list[UnsafeEntry] = []

    def check(path: Path) -> bool:
        """Record ``path`` when unsafe; True when it is a folder to walk."""
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            return True
        if not stat.S_ISREG(mode):
            target = os.readlink(path) if stat.S_ISLNK(mode) else None
            found.append(UnsafeEntry(path.relative_to(task_dir).as_posix(), file_kind(mode),
                                     target))
        return False

    tops = names if names is not None else tuple(sorted(os.listdir(task_dir)))
    for name in tops:
        top = task_dir / name
        if not os.path.lexists(top) or not check(top):
            continue
        for root, dirs, files in os.walk(top, followlinks=False):
            dirs.sort()
            # os.walk lists a link to a folder among dirs: check it as an entry, never enter it.
            for entry in list(dirs):
                if not check(Path(root) / entry):
                    dirs.remove(entry)
            for entry in sorted(files):
                check(Path(root) / entry)
    return found


def stage_public_files(task: TaskPackage, dest: Path) -> Path:
    """Copy the public files of ``task`` into ``dest`` (created), and nothing else.

    The agent's view of a task is built from this allow-list, so that a file
    left in a task folder by mistake (answers, build notes) never reaches it.
    Only regular files are copied, read without following links; a link, device,
    FIFO or socket among the public paths refuses the whole package, as does a file
    over :data:`MAX_STAGED_FILE_BYTES` (or more than :data:`MAX_STAGED_FILES` files,
    :data:`MAX_STAGED_BYTES` in all). The copy is made in a sibling folder and renamed
    into place, so a failure (a full disk) leaves no half-staged ``dest``.

    Raises
    ------
    TaskLoadError
        When the package holds an unsafe entry or is over a limit.
    OSError
        When the copy fails (a full disk): nothing is left behind.
    """
    unsafe = unsafe_entries(task.path, PUBLIC_PATHS)
    if unsafe:
        more = f" (and {len(unsafe) - 1} more)" if len(unsafe) > 1 else ""
        raise TaskLoadError(f"{task.path}: {unsafe[0]}{more}; task packages hold regular "
                            f"files only, nothing was staged")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"{dest}: staging folder exists and is not empty")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.staging-{os.getpid()}")
    if partial.exists():
        shutil.rmtree(partial)
    budget = _StageBudget()
    try:
        partial.mkdir()
        for name in PUBLIC_PATHS:
            src = task.path / name
            if not os.path.lexists(src):
                continue
            if stat.S_ISDIR(os.lstat(src).st_mode):
                _copy_tree(src, partial / name, budget)
            else:
                _copy_regular(src, partial / name, budget)
        if dest.exists():
            dest.rmdir()
        partial.rename(dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return dest


@dataclass
class _StageBudget:
    files: int = 0
    bytes: int = 0


def _copy_tree(src: Path, dst: Path, budget: _StageBudget) -> None:
    dst.mkdir(mode=0o755)
    for entry in sorted(os.listdir(src)):
        path = src / entry
        if stat.S_ISDIR(os.lstat(path).st_mode):
            _copy_tree(path, dst / entry, budget)
        else:
            _copy_regular(path, dst / entry, budget)


def _copy_regular(src: Path, dst: Path, budget: _StageBudget) -> None:
    """Copy one regular file (refusing anything else) within the staging limits."""
    fd, st = _open_regular(src)
    with os.fdopen(fd, "rb") as f:
        budget.files += 1
        budget.bytes += st.st_size
        if budget.files > MAX_STAGED_FILES:
            raise TaskLoadError(f"{src}: more than {MAX_STAGED_FILES} public files")
        if st.st_size > MAX_STAGED_FILE_BYTES:
            raise TaskLoadError(f"{src}: {st.st_size} bytes, over the limit of "
                                f"{MAX_STAGED_FILE_BYTES} bytes for a public file")
        if budget.bytes > MAX_STAGED_BYTES:
            raise TaskLoadError(f"{src}: the public files exceed {MAX_STAGED_BYTES} bytes")
        # Readable by the agent; executable only where it was; no set-id bits.
        mode = 0o755 if st.st_mode & 0o111 else 0o644
        with open(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
            shutil.copyfileobj(f, out, length=1 << 20)
    os.chmod(dst, mode)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
