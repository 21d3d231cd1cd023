"""Load a task package from disk: one loader used by every stage.

A task folder holds public files (what the agent sees) and ``hidden/answers.json``
(what only the grader sees). The answer root is configurable so that maintainers
can keep answer keys outside the task tree.
"""

from __future__ import annotations

import csv
import io
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from spu.schema import AnswerKey, Contract, Protocol, TargetRow, TaskMeta
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


class TaskLoadError(Exception):
    """A task package cannot be read; the message names the file and the problem."""


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
        ``<root>/<task_id>/answers.json`` (or ``<root>/<task_id>.json``).
        """
        if answers_root is None:
            return self.path / "hidden" / "answers.json"
        nested = Path(answers_root) / self.id / "answers.json"
        flat = Path(answers_root) / f"{self.id}.json"
        return flat if flat.exists() and not nested.exists() else nested

    def targets(self) -> list[TargetRow]:
        """The task's ``targets.csv`` rows, validated, in file order."""
        return load_targets(self.path / "targets.csv")

    def targets_rows(self) -> list[dict[str, str]]:
        """Rows of ``targets.csv`` as dictionaries, in file order."""
        with open(self.path / "targets.csv", newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))


def _read_json(path: Path) -> object:
    """A trusted task file, parsed by the grader's strict rules (no duplicate key, no NaN)."""
    try:
        return loads_strict(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskLoadError(f"{path}: file is missing") from None
    except (UnicodeDecodeError, StrictJSONError) as exc:
        raise TaskLoadError(f"{path}: not valid strict UTF-8 JSON ({exc})") from None


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

    Raises
    ------
    TaskLoadError
        When the file is missing, is not YAML, or does not match ``model``.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskLoadError(f"{path}: file is missing") from None
    except yaml.YAMLError as exc:
        raise TaskLoadError(f"{path}: not valid YAML ({exc})") from None
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
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskLoadError(f"{path}: file is missing") from None
    except UnicodeDecodeError as exc:
        raise TaskLoadError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
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
    """Task folders directly under ``task_root`` (those holding a ``task.yaml``), sorted."""
    root = Path(task_root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "task.yaml").is_file())


def select_tasks(
    task_root: str | Path,
    discipline: str | None = None,
    visibility: str | None = None,
    subfield: str | None = None,
) -> list[TaskPackage]:
    """Task packages under ``task_root`` matching every filter given, sorted by folder.

    Filters compare case-insensitively with the ``task.yaml`` fields; a folder whose
    ``task.yaml`` cannot be read raises :class:`TaskLoadError` naming it.
    """
    wanted = {
        "discipline": discipline,
        "visibility": visibility,
        "subfield": subfield,
    }
    selected = []
    for folder in discover_tasks(task_root):
        meta = load_meta(folder)
        values = {
            "discipline": meta.discipline.value,
            "visibility": meta.visibility.value,
            "subfield": meta.subfield,
        }
        if all(v is None or values[k].casefold() == v.casefold() for k, v in wanted.items()):
            selected.append(load_task(folder))
    return selected


def stage_public_files(task: TaskPackage, dest: Path) -> Path:
    """Copy the public files of ``task`` into ``dest`` (created), and nothing else.

    The agent's view of a task is built from this allow-list, so that a file
    left in a task folder by mistake (answers, build notes) never reaches it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for name in PUBLIC_PATHS:
        src = task.path / name
        if src.is_dir():
            shutil.copytree(src, dest / name, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dest / name)
    return dest
