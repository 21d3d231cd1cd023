"""``dataset.json`` and the tree it describes: what each task is, and whether a tree holds it.

:func:`task_entry` describes one task package as ``dataset.json`` lists it;
:func:`check_tree` holds a dataset's folder (extracted, or pulled earlier) to its
manifest. Both read task files only through :mod:`spu.tasks.package` (bounded, no link
followed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from spu.datasets import DatasetError
from spu.datasets.archive import ANSWERS, MANIFEST, MAX_MANIFEST_BYTES, TASKS
from spu.schema import DatasetManifest, DatasetTask

REVIEW = "review.yaml"
"""A task's review record (SPEC 15): public, and packed with the task."""


def first_error(exc: ValidationError) -> str:
    """The first error of a pydantic validation, in one short line (the rest counted)."""
    errors = exc.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"]) or "<root>"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc}: {str(first['msg'])[:200]}{more}"


def parse_document(data: bytes, model: type[BaseModel], what: str) -> Any:
    """Strict JSON ``data`` validated as ``model``.

    Raises:
        DatasetError: ``<what> is not JSON (...)`` or ``<what>: <key>: <problem>``.
    """
    from spu.strict_json import StrictJSONError, loads_strict

    try:
        text = data.decode("utf-8")
        value = loads_strict(text)
    except (UnicodeDecodeError, StrictJSONError, RecursionError) as exc:
        reason = ("not UTF-8" if isinstance(exc, UnicodeDecodeError)
                  else "nested too deeply" if isinstance(exc, RecursionError)
                  else str(exc)[:200].removeprefix("not JSON: "))
        raise DatasetError(f"{what} is not JSON ({reason})") from None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise DatasetError(f"{what}: {first_error(exc)}") from None


def read_manifest(folder: Path) -> DatasetManifest:
    """``folder/dataset.json``, read bounded and validated.

    Raises:
        DatasetError: missing, a link, too large, not JSON or not a manifest.
    """
    path = folder / MANIFEST
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise DatasetError(f"{MANIFEST} is missing") from None
    except OSError as exc:
        raise DatasetError(f"{MANIFEST} cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise DatasetError(f"{MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes")
    manifest: DatasetManifest = parse_document(data, DatasetManifest, MANIFEST)
    return manifest


def task_entry(task_dir: Path, answers: Literal["included", "withheld"]) -> DatasetTask:
    """``dataset.json``'s entry of one task package.

    Raises:
        DatasetError: the package has a link or a special file, or its ``task.yaml`` is
            not valid.
    """
    from spu.tasks.digest import task_digest
    from spu.tasks.package import TaskLoadError, load_meta, unsafe_entries

    unsafe = unsafe_entries(task_dir, packed_names())
    if unsafe:
        raise DatasetError(f"task {task_dir.name}: {unsafe[0]}; a dataset holds regular "
                           f"files and folders only")
    try:
        meta = load_meta(task_dir)
    except TaskLoadError as exc:
        raise DatasetError(f"task {task_dir.name}: {exc}") from None
    return DatasetTask(id=meta.id, task_version=meta.version, task_digest=task_digest(task_dir),
                       discipline=meta.discipline.value, visibility=meta.visibility.value,
                       answers=answers)


def has_answers(task_dir: Path) -> bool:
    """True when the task's answer key is a regular file in its folder."""
    path = task_dir.joinpath(*ANSWERS)
    return path.is_file() and not path.is_symlink()


def check_tree(root: Path, manifest: DatasetManifest, extra: tuple[str, ...] = ()) -> None:
    """Hold a dataset's folder to its manifest: exactly its tasks, each as listed.

    ``root`` holds ``dataset.json``, ``tasks/`` and nothing else but ``extra`` (the
    pull record of a pulled copy).

    Raises:
        DatasetError: the first difference, in one line.
    """
    found = sorted(os.listdir(root))
    allowed = {MANIFEST, TASKS, *extra}
    stray = [name for name in found if name not in allowed]
    if stray:
        raise DatasetError(f"{stray[0]!r} is not part of a dataset ({MANIFEST} and {TASKS}/ "
                           f"only)")
    tasks_dir = root / TASKS
    present = sorted(os.listdir(tasks_dir)) if tasks_dir.is_dir() else []
    listed = [t.id for t in manifest.tasks]
    if len(set(listed)) != len(listed):
        raise DatasetError(f"{MANIFEST} lists a task twice")
    missing = sorted(set(listed) - set(present))
    if missing:
        raise DatasetError(f"task {missing[0]} is in {MANIFEST} but not in {TASKS}/")
    unlisted = sorted(set(present) - set(listed))
    if unlisted:
        raise DatasetError(f"{TASKS}/{unlisted[0]} is not listed in {MANIFEST}")
    for listed_task in manifest.tasks:
        _check_task(tasks_dir / listed_task.id, listed_task)


def packed_names() -> tuple[str, ...]:
    """The top-level entries a task folder of a dataset may hold."""
    from spu.tasks.package import PUBLIC_PATHS

    return (*PUBLIC_PATHS, REVIEW, ANSWERS[0])


def _check_task(task_dir: Path, listed: DatasetTask) -> None:
    if task_dir.is_symlink() or not task_dir.is_dir():
        raise DatasetError(f"{TASKS}/{listed.id} is not a folder")
    stray = sorted(set(os.listdir(task_dir)) - set(packed_names()))
    hidden = task_dir / ANSWERS[0]
    if not stray and hidden.is_dir():
        stray = [f"{ANSWERS[0]}/{n}" for n in sorted(os.listdir(hidden)) if n != ANSWERS[1]]
    if stray:
        raise DatasetError(f"task {listed.id}: {stray[0]!r} is not part of a task package "
                           f"(its public files, review.yaml and {'/'.join(ANSWERS)} only)")
    actual = task_entry(task_dir, "included" if has_answers(task_dir) else "withheld")
    for field in ("id", "task_version", "discipline", "visibility"):
        if getattr(actual, field) != getattr(listed, field):
            raise DatasetError(f"task {listed.id}: its {field} is {getattr(actual, field)!r}, "
                               f"{MANIFEST} says {getattr(listed, field)!r}")
    if actual.task_digest != listed.task_digest:
        raise DatasetError(f"task {listed.id}: its files' digest {actual.task_digest[:12]}... "
                           f"is not the {listed.task_digest[:12]}... of {MANIFEST}")
    if actual.answers != listed.answers:
        have = "holds" if actual.answers == "included" else "lacks"
        raise DatasetError(f"task {listed.id} {have} an answer key, {MANIFEST} says "
                           f"{listed.answers!r}")
