"""The pulled datasets: ``$SPU_DATA_DIR/datasets/NAME/VERSION/`` (default ``~/.cache/spu``).

A pull (:func:`pull`) reads the registry, fetches the archive into a private folder
beside the datasets (``.partial-NAME@VERSION-*``), checks its SHA-256 against the
registry, extracts it as hostile (:func:`~spu.datasets.archive.extract_archive`), holds
the tree to its ``dataset.json`` (:func:`~spu.datasets.manifest.check_tree`), writes
``pull.json`` (:class:`~spu.schema.DatasetPull`) and only then renames the folder to
its final name. Any fault removes the private folder, so nothing half-written is ever
visible and the next pull starts clean; one lock per dataset version keeps two pulls
apart. A version already pulled is not fetched again.

The built-in dataset ``examples`` (the two example tasks) ships inside the package;
it is installed the same way, from an archive packed from the package's own copy, and
its version is the package's.

``dataset=NAME[@VERSION]`` on the command line (:func:`dataset_task_root`) makes the
pulled dataset the task root.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from spu.datasets import DatasetError, DatasetRef, parse_ref
from spu.datasets import archive as archives
from spu.datasets.archive import MANIFEST, TASKS, extract_archive, file_digests
from spu.datasets.manifest import check_tree, read_manifest
from spu.schema import DatasetManifest, DatasetPull, RegistryEntry

DATA_DIR_ENV = "SPU_DATA_DIR"
"""Where pulled datasets live (``<it>/datasets/``); default ``~/.cache/spu``."""
PULL_RECORD = "pull.json"
BUILTIN = "examples"
"""The built-in dataset: the example tasks shipped in the package."""
BUILTIN_FOLDER = Path(__file__).resolve().parent / "examples"
"""The package's copy of the example tasks (in a checkout, links to ``tasks/example-*``)."""
PARTIAL = ".partial-"
LOCKS = ".locks"


def data_dir() -> Path:
    """``$SPU_DATA_DIR``, else ``~/.cache/spu``."""
    return Path(os.environ.get(DATA_DIR_ENV) or "~/.cache/spu").expanduser()


def datasets_dir() -> Path:
    """The folder of the pulled datasets."""
    return data_dir() / "datasets"


def dataset_dir(name: str, version: str) -> Path:
    """Where ``name@version`` is once pulled."""
    return datasets_dir() / name / version


@dataclass(frozen=True)
class PulledDataset:
    """A dataset on this machine."""

    name: str
    version: str
    path: Path
    """Its folder (``dataset.json``, ``tasks/``, ``pull.json``)."""
    fetched: bool = False
    """True when this call fetched it (False: it was there already)."""

    @property
    def ref(self) -> str:
        """``NAME@VERSION``."""
        return f"{self.name}@{self.version}"

    @property
    def tasks(self) -> Path:
        """Its task root."""
        return self.path / TASKS


def is_pulled(name: str, version: str) -> bool:
    """True when ``name@version`` is complete on this machine."""
    folder = dataset_dir(name, version)
    return (folder / MANIFEST).is_file() and (folder / PULL_RECORD).is_file()


def pulled_versions(name: str) -> list[str]:
    """The versions of ``name`` on this machine, lowest first."""
    from packaging.version import InvalidVersion, Version

    folder = datasets_dir() / name
    found = []
    for entry in sorted(os.listdir(folder)) if folder.is_dir() else []:
        try:
            Version(entry)
        except InvalidVersion:
            continue
        if is_pulled(name, entry):
            found.append(entry)
    return sorted(found, key=Version)


def local_datasets() -> list[PulledDataset]:
    """Every dataset on this machine, the built-in one first (listed even before its use)."""
    out = [PulledDataset(BUILTIN, builtin_version(), dataset_dir(BUILTIN, builtin_version()))]
    root = datasets_dir()
    for name in sorted(os.listdir(root)) if root.is_dir() else []:
        if name.startswith("."):
            continue
        out += [PulledDataset(name, v, dataset_dir(name, v)) for v in pulled_versions(name)
                if (name, v) != (BUILTIN, builtin_version())]
    return out


@contextmanager
def _locked(name: str, version: str) -> Iterator[None]:
    from filelock import FileLock

    locks = datasets_dir() / LOCKS
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(str(locks / f"{name}@{version}.lock")):
        yield


def _clear_partials(name: str, version: str) -> None:
    """Remove what a pull of ``name@version`` killed midway left (the lock is held)."""
    for entry in datasets_dir().glob(f"{PARTIAL}{name}@{version}-*"):
        shutil.rmtree(entry, ignore_errors=True)


def install(entry: RegistryEntry, fetch: Callable[[Path], str], registry: str | None,
            source: str, replace: bool = False) -> PulledDataset:
    """Fetch, check and install the archive of ``entry``; the dataset it became.

    ``fetch(path)`` writes the archive to ``path`` and returns its SHA-256. With
    ``replace``, a copy already there is replaced (the built-in dataset only).

    Raises:
        DatasetError: the first fault, without the dataset's name (the caller adds it);
            nothing of this pull is left.
    """
    final = dataset_dir(entry.name, entry.version)
    with _locked(entry.name, entry.version):
        if is_pulled(entry.name, entry.version) and not replace:
            return PulledDataset(entry.name, entry.version, final)
        _clear_partials(entry.name, entry.version)
        work = Path(tempfile.mkdtemp(prefix=f"{PARTIAL}{entry.name}@{entry.version}-",
                                     dir=datasets_dir()))
        try:
            tree = _checked_tree(entry, fetch, work, registry, source)
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():  # replace: the old copy goes aside, then away
                os.rename(final, work / "old")
            os.rename(tree, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return PulledDataset(entry.name, entry.version, final, fetched=True)


def _checked_tree(entry: RegistryEntry, fetch: Callable[[Path], str], work: Path,
                  registry: str | None, source: str) -> Path:
    """The archive fetched into ``work``, checked, extracted and checked again."""
    archive = work / "archive.tar.gz"
    sha256 = fetch(archive)
    if sha256 != entry.sha256:
        raise DatasetError(f"the archive's SHA-256 {sha256[:16]}... is not the registry's "
                           f"{entry.sha256[:16]}...")
    tree = work / "tree"
    tree.mkdir()
    files = extract_archive(archive, tree)
    manifest = read_manifest(tree)
    if (manifest.name, manifest.version) != (entry.name, entry.version):
        raise DatasetError(f"the archive holds {manifest.name}@{manifest.version}")
    if len(manifest.tasks) != entry.n_tasks:
        raise DatasetError(f"the archive holds {len(manifest.tasks)} tasks, the registry "
                           f"states {entry.n_tasks}")
    check_tree(tree, manifest)
    record = DatasetPull(dataset=f"{entry.name}@{entry.version}", registry=registry,
                         source=source, archive_sha256=sha256,
                         pulled_at=datetime.now(UTC).isoformat(timespec="seconds"),
                         files=files)
    (tree / PULL_RECORD).write_text(record.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return tree


def pull(ref: DatasetRef, registry: str | None = None) -> PulledDataset:
    """Pull ``ref`` from the registry (``--registry``, else ``$SPU_REGISTRY``).

    The built-in ``examples`` needs none. A version already pulled is not fetched again
    (nor is the registry read); without a version, the registry's highest is pulled.

    Raises:
        DatasetError: one line naming the dataset and the fault; nothing was written.
    """
    from spu.datasets.registry import (
        archive_source,
        fetch_archive,
        find_entry,
        locate,
        read_registry,
    )

    if ref.name == BUILTIN:
        return builtin_dataset(ref)
    if ref.version is not None and is_pulled(ref.name, ref.version):
        return PulledDataset(ref.name, ref.version, dataset_dir(ref.name, ref.version))
    try:
        location = locate(registry)
        entry = find_entry(read_registry(location), ref.name, ref.version, location)
    except DatasetError as exc:
        raise DatasetError(f"{ref}: {exc}") from None
    try:
        cap = archives.LIMITS.archive_bytes
        if entry.bytes > cap:
            raise DatasetError(f"the registry states {entry.bytes} bytes, over the cap of {cap}")
        source = archive_source(entry, location)
        return install(entry, lambda path: fetch_archive(source, path, entry.bytes),
                       str(location), str(source))
    except DatasetError as exc:
        raise DatasetError(f"{entry.name}@{entry.version}: {exc}") from None


def find_pulled(ref: DatasetRef) -> PulledDataset:
    """The pulled copy of ``ref`` (no version: the highest pulled).

    Raises:
        DatasetError: it is not pulled (the message says how to pull it).
    """
    if ref.name == BUILTIN and ref.version in (None, builtin_version()):
        return builtin_dataset(ref)
    version = ref.version
    if version is None:
        versions = pulled_versions(ref.name)
        version = versions[-1] if versions else None
    if version is None or not is_pulled(ref.name, version):
        raise DatasetError(f"{ref} is not pulled: spu dataset pull {ref.name}@VERSION "
                           f"--registry REG (spu dataset list shows what is here)")
    return PulledDataset(ref.name, version, dataset_dir(ref.name, version))


def verify(ref: DatasetRef) -> tuple[PulledDataset, DatasetManifest]:
    """Check a pulled copy again: its tasks, then every file against ``pull.json``.

    The tree is held to ``dataset.json`` (:func:`~spu.datasets.manifest.check_tree`), and
    each file's SHA-256 to the one recorded when it was pulled.

    Raises:
        DatasetError: not pulled, or the first difference.
    """
    from pydantic import ValidationError

    found = find_pulled(ref)
    try:
        manifest = read_manifest(found.path)
        check_tree(found.path, manifest, extra=(PULL_RECORD,))
        try:
            record = DatasetPull.model_validate_json(
                (found.path / PULL_RECORD).read_text(encoding="utf-8"))
        except (ValidationError, OSError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{PULL_RECORD} cannot be read ({str(exc)[:200]})") from None
        now = {k: v for k, v in file_digests(found.path).items() if k != PULL_RECORD}
        changed = sorted(k for k in set(now) | set(record.files)
                         if now.get(k) != record.files.get(k))
        if changed:
            raise DatasetError(f"{changed[0]} differs from the file pulled ({len(changed)} "
                               f"file(s) differ)")
    except DatasetError as exc:
        raise DatasetError(f"{found.ref}: {exc} ({found.path})") from None
    return found, manifest


def builtin_version() -> str:
    """The built-in dataset's version: the package's."""
    import spu

    return str(spu.__version__)


def builtin_dataset(ref: DatasetRef | None = None) -> PulledDataset:
    """The built-in dataset ``examples``, installed (again, when the package's copy changed).

    Raises:
        DatasetError: a version other than the package's was asked for.
    """
    from spu.datasets.archive import file_sha256
    from spu.datasets.pack import pack_archive, packed_tasks

    version = builtin_version()
    if ref is not None and ref.version not in (None, version):
        raise DatasetError(f"{ref}: the built-in dataset of this spu is {BUILTIN}@{version}")
    task_dirs = sorted(p.resolve() for p in BUILTIN_FOLDER.iterdir()
                       if (p / "task.yaml").is_file())
    tasks = packed_tasks(task_dirs, withhold=False)
    wanted = {rel: file_sha256(path) for t in tasks for rel, path in t.files}
    current = _pulled_files(BUILTIN, version)
    if current is not None and {k: v for k, v in current.items() if k != MANIFEST} == wanted:
        return PulledDataset(BUILTIN, version, dataset_dir(BUILTIN, version))
    with tempfile.TemporaryDirectory(prefix=".pack-", dir=_made(datasets_dir())) as tmp:
        archive = Path(tmp) / f"{BUILTIN}.tar.gz"
        ref = DatasetRef(BUILTIN, version)
        _, entry = pack_archive(tasks, ref, archive, "The example tasks shipped with spu")
        try:
            return install(entry, lambda path: _copy(archive, path), None,
                           f"the spu package ({BUILTIN_FOLDER})", replace=True)
        except DatasetError as exc:
            raise DatasetError(f"{ref}: {exc}") from None


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _copy(archive: Path, dest: Path) -> str:
    from spu.datasets.archive import file_sha256

    shutil.copyfile(archive, dest)
    return file_sha256(dest)


def _pulled_files(name: str, version: str) -> dict[str, str] | None:
    """The files ``pull.json`` of a pulled copy records, or None."""
    path = dataset_dir(name, version) / PULL_RECORD
    if not is_pulled(name, version):
        return None
    try:
        return DatasetPull.model_validate_json(path.read_text(encoding="utf-8")).files
    except (ValueError, OSError):
        return None


def dataset_task_root(text: str) -> tuple[str, Path]:
    """``dataset=NAME[@VERSION]`` of the command line: ``NAME@VERSION`` and its task root.

    Raises:
        DatasetError: not a dataset reference, or not pulled.
    """
    found = find_pulled(parse_ref(text))
    return found.ref, found.tasks


def dataset_problem(dataset: str | None, task_root: str | Path) -> str | None:
    """Why a run's ``dataset`` does not name its task root, or None.

    ``dataset`` is set on the command line only, where it sets the task root too; set
    in a config file, it would name a dataset the tasks do not come from.
    """
    if dataset is None:
        return None
    try:
        ref = parse_ref(dataset)
    except DatasetError as exc:
        return str(exc)
    expected = (dataset_dir(ref.name, ref.version or "") / TASKS).resolve()
    if ref.version is None or Path(task_root).expanduser().resolve() != expected:
        return (f"dataset={dataset}: a dataset is chosen on the command line "
                f"(spu run dataset=NAME@VERSION ...), where it sets the task root; not in a "
                f"config file")
    return None


def with_dataset(args: list[str]) -> list[str]:
    """A command line where ``dataset=NAME[@VERSION]`` is the pulled dataset's task root.

    ``dataset=`` becomes ``dataset=NAME@VERSION`` (what ``run.json`` records) and
    ``task_root=<its tasks/>``; a command line without it is returned as it is.

    Raises:
        DatasetError: with ``task_root=`` too, a sweep of datasets, or not pulled.
    """
    given = [a for a in args if not a.startswith("-") and a.lstrip("+").startswith("dataset=")]
    if not given:
        return list(args)
    if any(not a.startswith("-") and a.lstrip("+").startswith("task_root=") for a in args):
        raise DatasetError("dataset= sets the task root: give dataset= or task_root=, not both")
    value = given[-1].partition("=")[2].strip("'\"")
    if any(c in value for c in ",()[]"):
        raise DatasetError(f"dataset={value}: one dataset per command (sweep its tasks with "
                           f"-m task='glob(*)')")
    ref, root = dataset_task_root(value)
    if any(c in str(root) for c in "'\",()[]{}=\\"):  # not a plain Hydra value
        raise DatasetError(f"dataset={ref}: its folder {root} holds a character a command "
                           f"line cannot pass to Hydra; set {DATA_DIR_ENV} to a plainer path")
    return [*(a for a in args if a not in given), f"dataset={ref}", f"task_root={root}"]
