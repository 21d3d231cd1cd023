"""``spu dataset pack``: a task root into one archive and its entry in ``registry.json``.

Every sound task package under the task root goes in (a broken one stops the pack: a
dataset is whole), as ``tasks/<id>/``: its public files, its ``review.yaml`` and, unless
answers are withheld, ``hidden/answers.json``; nothing else of its folder. The archive is
reproducible: members in path order, owner and permissions fixed, gzip without a name or
time, so the same tasks packed at the same ``created`` time give the same bytes.

A published registry is a folder of static files: ``registry.json`` and the archives
beside it (docs/datasets.md). Packing into a folder that holds a registry adds the
archive's entry, or replaces the entry of the same name and version.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from spu.datasets import DatasetError, DatasetRef
from spu.datasets import archive as archives
from spu.datasets.archive import (
    ANSWERS,
    MANIFEST,
    TASKS,
    ArchiveLimits,
    archive_name,
    file_sha256,
)
from spu.datasets.manifest import REVIEW, has_answers, task_entry
from spu.datasets.registry import REGISTRY_FILE, read_local_registry
from spu.schema import DatasetManifest, DatasetTask, Registry, RegistryEntry


@dataclass(frozen=True)
class PackedDataset:
    """What ``spu dataset pack`` wrote."""

    manifest: DatasetManifest
    archive: Path
    entry: RegistryEntry
    registry: Path


def _task_files(task_dir: Path, include_answers: bool) -> list[tuple[str, Path]]:
    """(path in the task's folder, file) of what a task packs, in path order."""
    from spu.tasks.package import PUBLIC_PATHS

    found: list[tuple[str, Path]] = []
    for name in (*PUBLIC_PATHS, REVIEW):
        top = task_dir / name
        if top.is_file():
            found.append((name, top))
        elif top.is_dir():
            for folder, dirs, files in os.walk(top, followlinks=False):
                dirs.sort()
                for file in sorted(files):
                    path = Path(folder) / file
                    found.append((path.relative_to(task_dir).as_posix(), path))
    if include_answers and has_answers(task_dir):
        found.append(("/".join(ANSWERS), task_dir.joinpath(*ANSWERS)))
    return sorted(found)


def sound_task_dirs(task_root: Path) -> list[Path]:
    """The task packages under ``task_root``, by folder name; a broken one stops the pack."""
    from spu.tasks.package import scan_task_root

    scan = scan_task_root(task_root)
    if scan.broken:
        first = scan.broken[0]
        raise DatasetError(f"task {first.name} cannot be packed: {first.reason}")
    if not scan.tasks:
        raise DatasetError(f"no task package (a folder with task.yaml) under {task_root}")
    return [scan.root / name for name in sorted(scan.tasks)]


@dataclass(frozen=True)
class PackedTask:
    """One task as packed: its ``dataset.json`` entry, its folder, its files."""

    entry: DatasetTask
    folder: Path
    files: list[tuple[str, Path]]
    """(path in the archive, file) in path order."""


def packed_tasks(task_dirs: list[Path], withhold: bool) -> list[PackedTask]:
    """Each task folder as it is packed (answers withheld, or included where present).

    Each task goes in the folder of its id, whatever its folder here is named.

    Raises:
        DatasetError: a task with a link or a special file, an invalid ``task.yaml``, or
            one id in two folders.
    """
    out: list[PackedTask] = []
    seen: dict[str, Path] = {}
    for task_dir in task_dirs:
        included = not withhold and has_answers(task_dir)
        entry = task_entry(task_dir, "included" if included else "withheld")
        if entry.id in seen:
            raise DatasetError(f"task {entry.id} is in two folders, {seen[entry.id].name} and "
                               f"{task_dir.name}")
        seen[entry.id] = task_dir
        files = [(f"{TASKS}/{entry.id}/{rel}", path)
                 for rel, path in _task_files(task_dir, included)]
        out.append(PackedTask(entry, task_dir, files))
    return out


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def write_archive(out: Path, manifest: DatasetManifest, files: list[tuple[str, Path]],
                  limits: ArchiveLimits | None = None) -> tuple[str, int]:
    """Write the archive to ``out`` (whole or not at all); its SHA-256 and size.

    Raises:
        DatasetError: the tasks exceed what a pull accepts (:class:`ArchiveLimits`).
    """
    limits = limits or archives.LIMITS
    if len(files) + 1 > limits.members:
        raise DatasetError(f"{len(files) + 1} files, over the cap of {limits.members}")
    total = 0
    mtime = int(datetime.fromisoformat(manifest.created).timestamp())
    partial = out.with_name(f".{out.name}.partial")
    try:
        with open(partial, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                       mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            body = json.dumps(manifest.model_dump(mode="json"), indent=1).encode() + b"\n"
            _add(tar, MANIFEST, body, mtime)
            for name, path in files:
                data = path.read_bytes()
                total += len(data)
                if len(data) > limits.member_bytes or total > limits.total_bytes:
                    raise DatasetError(f"{name} takes the dataset over the caps of a pull "
                                       f"({limits.member_bytes} bytes a file, "
                                       f"{limits.total_bytes} in all)")
                _add(tar, name, data, mtime)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return file_sha256(out), out.stat().st_size


def update_registry(folder: Path, entry: RegistryEntry) -> Path:
    """Add ``entry`` to ``folder/registry.json`` (replacing its name and version's)."""
    from packaging.version import Version

    path = folder / REGISTRY_FILE
    registry = read_local_registry(path) if path.exists() else Registry()
    kept = [e for e in registry.datasets if (e.name, e.version) != (entry.name, entry.version)]
    kept.append(entry)
    kept.sort(key=lambda e: (e.name, Version(e.version)))
    partial = path.with_name(f".{REGISTRY_FILE}.partial")
    partial.write_text(json.dumps(Registry(datasets=kept).model_dump(mode="json"), indent=1)
                       + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path


def pack_archive(tasks: list[PackedTask], ref: DatasetRef, archive: Path,
                 description: str = "") -> tuple[DatasetManifest, RegistryEntry]:
    """Write the archive of ``tasks`` as ``ref``; its manifest and registry entry."""
    import spu

    assert ref.version is not None
    manifest = DatasetManifest(name=ref.name, version=ref.version,
                               created=datetime.now(UTC).isoformat(timespec="seconds"),
                               spu_version=str(spu.__version__), description=description,
                               tasks=[t.entry for t in tasks])
    files = [item for t in tasks for item in t.files]
    sha256, size = write_archive(archive, manifest, files)
    entry = RegistryEntry(name=ref.name, version=ref.version, url=archive.name, sha256=sha256,
                          bytes=size, n_tasks=len(tasks), description=description)
    return manifest, entry


def pack_dataset(task_root: Path, ref: DatasetRef, out: Path, *, withhold_answers: bool = False,
                 description: str = "") -> PackedDataset:
    """Pack every task package under ``task_root`` as ``ref`` into ``out``.

    Raises:
        DatasetError: no version, a broken or unsafe task, a task over the caps, or a
            registry in ``out`` that cannot be read (nothing is written then).
    """
    if ref.version is None:
        raise DatasetError(f"{ref}: give its version, NAME@VERSION (--version)")
    task_root = Path(task_root).expanduser().resolve()
    if (out / REGISTRY_FILE).exists():  # a registry that cannot be read stops the pack early
        read_local_registry(out / REGISTRY_FILE)
    tasks = packed_tasks(sound_task_dirs(task_root), withhold_answers)
    out.mkdir(parents=True, exist_ok=True)
    archive = out / archive_name(ref.name, ref.version)
    manifest, entry = pack_archive(tasks, ref, archive, description)
    return PackedDataset(manifest, archive, entry, update_registry(out, entry))
