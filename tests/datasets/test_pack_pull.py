"""``spu dataset pack | list | pull | verify`` and ``dataset=`` (SPEC section 16)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from spu.datasets import DatasetError, DatasetRef
from spu.datasets.store import dataset_dir, with_dataset
from spu.schema import DatasetManifest, Registry
from spu.tasks.digest import task_digest
from tests.datasets.conftest import Served, left_behind, run_cli

NAME = "lab-set"


def pack(capsys: pytest.CaptureFixture[str], root: Path, out: Path, version: str = "1.0",
         *extra: str) -> tuple[int, str, str]:
    return run_cli(capsys, "dataset", "pack", str(root), "--name", NAME, "--version", version,
                   "--out", str(out), *extra)


def test_pack_writes_an_archive_and_its_registry_entry(tmp_path: Path, task_root: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The archive holds dataset.json and tasks/<id>/ only, each task as dataset.json lists it."""
    code, out, err = pack(capsys, task_root, tmp_path / "reg")
    assert code == 0, err
    assert "packed lab-set@1.0: 2 tasks" in out
    registry = Registry.model_validate_json((tmp_path / "reg" / "registry.json").read_text())
    (entry,) = registry.datasets
    archive = tmp_path / "reg" / "lab-set-1.0.tar.gz"
    assert (entry.name, entry.version, entry.url, entry.n_tasks) == (NAME, "1.0", archive.name, 2)
    assert entry.bytes == archive.stat().st_size
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = DatasetManifest.model_validate_json(tar.extractfile("dataset.json").read())
    assert all(n == "dataset.json" or n.startswith("tasks/") for n in names)
    assert "tasks/example-coupling-conditions/hidden/answers.json" in names
    for listed in manifest.tasks:
        assert listed.task_digest == task_digest(task_root / listed.id)
        assert listed.answers == "included"


def test_withheld_answers_travel_nowhere(tmp_path: Path, task_root: Path, data_dir: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """--withhold-answers: no answer key in the archive, dataset.json says withheld."""
    code, _, err = pack(capsys, task_root, tmp_path / "reg", "1.0", "--withhold-answers")
    assert code == 0, err
    with tarfile.open(tmp_path / "reg" / "lab-set-1.0.tar.gz") as tar:
        assert not [n for n in tar.getnames() if "/hidden" in n]
    code, _, err = run_cli(capsys, "dataset", "pull", f"{NAME}@1.0", "--registry",
                           str(tmp_path / "reg"))
    assert code == 0, err
    pulled = dataset_dir(NAME, "1.0")
    manifest = DatasetManifest.model_validate_json((pulled / "dataset.json").read_text())
    assert {t.answers for t in manifest.tasks} == {"withheld"}
    assert not list(pulled.rglob("answers.json"))


def test_pack_replaces_its_own_entry_and_keeps_the_others(
        tmp_path: Path, task_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "reg"
    assert pack(capsys, task_root, out, "1.0")[0] == 0
    assert pack(capsys, task_root, out, "1.1")[0] == 0
    assert pack(capsys, task_root, out, "1.0")[0] == 0
    registry = Registry.model_validate_json((out / "registry.json").read_text())
    assert [(e.name, e.version) for e in registry.datasets] == [(NAME, "1.0"), (NAME, "1.1")]


@pytest.mark.parametrize(("change", "said"), [
    ("link", "is a link"),
    ("twice", "is in two folders"),
    ("broken", "cannot be packed"),
])
def test_pack_refuses_a_task_it_cannot_carry_whole(tmp_path: Path, task_root: Path, change: str,
                                                   said: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A link, one task in two folders, a broken task: one line, nothing written."""
    task = task_root / "example-coupling-conditions"
    if change == "link":
        (task / "files").mkdir()
        (task / "files" / "structure.pdb").symlink_to("/etc/passwd")
    elif change == "twice":
        shutil.copytree(task, task_root / "a-copy")
    else:
        (task / "task.yaml").write_text("id: [unclosed\n")
    code, out, err = pack(capsys, task_root, tmp_path / "reg")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("spu dataset: lab-set@1.0: ") and said in err
    assert not (tmp_path / "reg").exists() or not list((tmp_path / "reg").iterdir())


@pytest.mark.parametrize(("name", "version", "said"), [
    ("../evil", "1.0", "is not a dataset name"),
    ("Lab", "1.0", "is not a dataset name"),
    ("lab", "v1", "not a version in normal form"),
    ("lab", "one", "is not a version"),
])
def test_pack_refuses_a_bad_name_or_version(tmp_path: Path, task_root: Path, name: str,
                                            version: str, said: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "dataset", "pack", str(task_root), "--name", name,
                           "--version", version, "--out", str(tmp_path / "reg"))
    assert code == 2 and said in err and err.count("\n") == 1
    assert not (tmp_path / "reg").exists()


def test_pull_from_a_local_registry_then_verify_and_list(
        tmp_path: Path, task_root: Path, data_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert pack(capsys, task_root, tmp_path / "reg")[0] == 0
    code, out, err = run_cli(capsys, "dataset", "pull", f"{NAME}@1.0", "--registry",
                             str(tmp_path / "reg" / "registry.json"))
    assert code == 0, err
    pulled = data_dir / "datasets" / NAME / "1.0"
    assert f"{NAME}@1.0 pulled: {pulled}" in out
    assert sorted(p.name for p in (pulled / "tasks").iterdir()) == sorted(
        p.name for p in task_root.iterdir())
    for task in (pulled / "tasks").iterdir():
        assert task_digest(task) == task_digest(task_root / task.name)
    code, out, _ = run_cli(capsys, "dataset", "verify", f"{NAME}@1.0")
    assert code == 0 and "2 tasks verified" in out
    code, out, _ = run_cli(capsys, "dataset", "list", "--json")
    rows = json.loads(out)
    assert f"{NAME}@1.0" in {r["dataset"] for r in rows}
    assert [r["dataset"].split("@")[0] for r in rows if r["built_in"]] == ["examples"]
    code, out, _ = run_cli(capsys, "dataset", "list", "--registry", str(tmp_path / "reg"),
                           "--json")
    assert json.loads(out)[0] | {"bytes": 0} == {"dataset": f"{NAME}@1.0", "tasks": 2,
                                                 "bytes": 0, "pulled": True, "description": ""}


def test_pull_over_http_fetches_once(tmp_path: Path, task_root: Path, data_dir: Path,
                                     http_folder: Served,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A version already pulled is not fetched again: neither the registry nor the archive."""
    assert pack(capsys, task_root, http_folder.folder, "1.0")[0] == 0
    assert pack(capsys, task_root, http_folder.folder, "2.0")[0] == 0
    registry = f"{http_folder.url}/registry.json"
    code, out, err = run_cli(capsys, "dataset", "pull", NAME, "--registry", registry)
    assert code == 0, err
    assert f"{NAME}@2.0 pulled" in out  # no version: the registry's highest
    assert http_folder.hits == {"/registry.json": 1, "/lab-set-2.0.tar.gz": 1}
    code, out, err = run_cli(capsys, "dataset", "pull", f"{NAME}@2.0", "--registry", registry)
    assert code == 0 and f"{NAME}@2.0 already pulled" in out
    assert http_folder.hits == {"/registry.json": 1, "/lab-set-2.0.tar.gz": 1}


def test_registry_from_the_environment(tmp_path: Path, task_root: Path, data_dir: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert pack(capsys, task_root, tmp_path / "reg")[0] == 0
    code, _, err = run_cli(capsys, "dataset", "pull", f"{NAME}@1.0")
    assert code == 2 and "no registry: pass --registry REG" in err
    monkeypatch.setenv("SPU_REGISTRY", str(tmp_path / "reg"))
    assert run_cli(capsys, "dataset", "pull", f"{NAME}@1.0")[0] == 0


@pytest.mark.parametrize("edit", ["answers", "public"])
def test_verify_finds_a_file_changed_after_the_pull(tmp_path: Path, task_root: Path,
                                                    data_dir: Path, edit: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An answer key (outside task_digest) or a public file edited in the pulled copy: exit 1."""
    assert pack(capsys, task_root, tmp_path / "reg")[0] == 0
    assert run_cli(capsys, "dataset", "pull", f"{NAME}@1.0", "--registry",
                   str(tmp_path / "reg"))[0] == 0
    task = dataset_dir(NAME, "1.0") / "tasks" / "example-coupling-conditions"
    target = task / ("hidden/answers.json" if edit == "answers" else "instruction.md")
    target.write_text(target.read_text().replace("1", "2", 1))
    code, out, err = run_cli(capsys, "dataset", "verify", f"{NAME}@1.0")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith(f"spu dataset: {NAME}@1.0: ")
    assert ("answers.json differs" in err) if edit == "answers" else ("digest" in err)


def test_verify_and_use_of_a_dataset_not_pulled(data_dir: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "dataset", "verify", f"{NAME}@1.0")
    assert code == 2 and f"{NAME}@1.0 is not pulled: spu dataset pull" in err
    with pytest.raises(DatasetError, match="is not pulled"):
        with_dataset(["model=random", f"dataset={NAME}@1.0"])


def test_a_pull_killed_midway_leaves_nothing_the_next_one_sees(
        tmp_path: Path, task_root: Path, data_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The private folder of an interrupted pull is removed by the next pull of that version."""
    assert pack(capsys, task_root, tmp_path / "reg")[0] == 0
    stale = data_dir / "datasets" / f".partial-{NAME}@1.0-killed" / "tree"
    stale.mkdir(parents=True)
    (stale / "dataset.json").write_text("{}")
    assert run_cli(capsys, "dataset", "pull", f"{NAME}@1.0", "--registry",
                   str(tmp_path / "reg"))[0] == 0
    assert left_behind(data_dir, NAME) == [NAME]


def test_the_builtin_dataset_needs_no_registry(data_dir: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``examples`` comes from the package: the two example tasks, answers included."""
    import spu

    code, out, err = run_cli(capsys, "dataset", "pull", "examples")
    assert code == 0, err
    version = spu.__version__
    assert f"examples@{version} pulled" in out
    tasks = dataset_dir("examples", version) / "tasks"
    assert sorted(p.name for p in tasks.iterdir()) == ["example-coupling-conditions",
                                                      "example-electrolytes-and-films"]
    assert run_cli(capsys, "dataset", "verify", "examples")[0] == 0
    args = with_dataset(["-m", "dataset=examples", "model=random"])
    assert args == ["-m", "model=random", f"dataset=examples@{version}", f"task_root={tasks}"]


def test_the_builtin_dataset_follows_the_package(tmp_path: Path, data_dir: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed again when the package's copy changed (a checkout's tasks/example-*)."""
    from spu.datasets import store
    from tests.conftest import EXAMPLE_TASK

    folder = tmp_path / "package-copy"
    shutil.copytree(EXAMPLE_TASK, folder / EXAMPLE_TASK.name)
    monkeypatch.setattr(store, "BUILTIN_FOLDER", folder)
    first = store.builtin_dataset()
    assert first.fetched and not store.builtin_dataset().fetched
    (folder / EXAMPLE_TASK.name / "experiment.md").write_text("changed\n")
    again = store.builtin_dataset()
    assert again.fetched
    assert (again.tasks / EXAMPLE_TASK.name / "experiment.md").read_text() == "changed\n"
    assert left_behind(data_dir, "examples") == ["examples"]


@pytest.mark.parametrize(("args", "said"), [
    (["dataset=examples", "task_root=/tmp"], "not both"),
    (["-m", "dataset=examples,other@1.0"], "one dataset per command"),
    (["dataset=../x"], "is not a dataset name"),
])
def test_dataset_on_the_command_line_refused(data_dir: Path, args: list[str],
                                             said: str) -> None:
    with pytest.raises(DatasetError, match=said):
        with_dataset(args)


def test_a_dataset_named_in_a_config_file_is_refused(data_dir: Path) -> None:
    """run.json names the dataset the tasks came from: set elsewhere, it is refused."""
    from spu.datasets.store import dataset_problem

    assert dataset_problem(None, "tasks") is None
    assert "chosen on the command line" in dataset_problem("examples@0.1.0", "tasks")
    root = dataset_dir("examples", "0.1.0") / "tasks"
    assert dataset_problem("examples@0.1.0", root) is None


def test_old_run_records_load_without_a_dataset() -> None:
    """Every golden run.json loads; those written before datasets have ``dataset`` None."""
    from spu.schema import RunRecord

    golden = sorted(Path(__file__).resolve().parents[1].joinpath("golden").rglob("run.json"))
    assert golden
    for path in golden:
        assert RunRecord.model_validate_json(path.read_text()).dataset is None


def test_archives_are_reproducible(tmp_path: Path, task_root: Path) -> None:
    """The same tasks and manifest give the same bytes (members ordered, times fixed)."""
    from spu.datasets.pack import packed_tasks, sound_task_dirs, write_archive

    tasks = packed_tasks(sound_task_dirs(task_root), withhold=False)
    manifest = DatasetManifest(name=NAME, version="1.0", created="2026-01-01T00:00:00+00:00",
                               spu_version="0", tasks=[t.entry for t in tasks])
    files = [f for t in tasks for f in t.files]
    first = write_archive(tmp_path / "a.tar.gz", manifest, files)
    for _, path in files:
        os.utime(path, (0, 0))
    assert write_archive(tmp_path / "b.tar.gz", manifest, files) == first
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()


def test_ref_without_a_version_packs_nothing(tmp_path: Path, task_root: Path) -> None:
    from spu.datasets.pack import pack_dataset

    with pytest.raises(DatasetError, match="give its version"):
        pack_dataset(task_root, DatasetRef(NAME), tmp_path / "reg")


def test_a_task_travels_in_the_folder_of_its_id(tmp_path: Path, task_root: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A task root's folder names are its own: the archive names each task by its id."""
    (task_root / "example-coupling-conditions").rename(task_root / "local-name")
    assert pack(capsys, task_root, tmp_path / "reg")[0] == 0
    with tarfile.open(tmp_path / "reg" / "lab-set-1.0.tar.gz") as tar:
        folders = {n.split("/")[1] for n in tar.getnames() if n.startswith("tasks/")}
    assert folders == {"example-coupling-conditions", "example-electrolytes-and-films"}
