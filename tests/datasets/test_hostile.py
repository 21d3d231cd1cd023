"""Hostile archives and registries: each refused in one line, with nothing left behind.

Every archive here is listed in a registry with its true SHA-256 and size (an attacker
who publishes a registry controls both), so each fault is found by the checks after
the checksum: the member headers, the caps, ``dataset.json`` and the task digests.
After each refusal nothing of the dataset is under the data folder, and a good pull of
the same name and version then works (the next pull starts clean).
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from spu.datasets import archive as archives
from tests.datasets.conftest import Served, left_behind, run_cli

NAME, VERSION = "lab-set", "1.0"
REF = f"{NAME}@{VERSION}"
TASK = "example-coupling-conditions"


@dataclass
class Member:
    """One member to write: a header and its bytes."""

    info: tarfile.TarInfo
    data: bytes = b""


def good_members(task_root: Path, name: str = NAME, version: str = VERSION) -> list[Member]:
    """The members of a sound archive of ``task_root`` (as ``spu dataset pack`` writes them)."""
    from spu.datasets.pack import packed_tasks, sound_task_dirs
    from spu.schema import DatasetManifest

    tasks = packed_tasks(sound_task_dirs(task_root), withhold=False)
    manifest = DatasetManifest(name=name, version=version, created="2026-01-01T00:00:00+00:00",
                               spu_version="0", tasks=[t.entry for t in tasks])
    members = [file_member("dataset.json", manifest.model_dump_json().encode())]
    members += [file_member(rel, path.read_bytes()) for t in tasks for rel, path in t.files]
    return members


def file_member(name: str, data: bytes) -> Member:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return Member(info, data)


def special(name: str, kind: bytes, link: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return Member(info)


def write_archive(path: Path, members: list[Member], raw: bytes | None = None) -> None:
    if raw is not None:
        path.write_bytes(raw)
        return
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            tar.addfile(m.info, io.BytesIO(m.data) if m.info.isreg() else None)
    path.write_bytes(gzip.compress(buffer.getvalue()))


def publish(folder: Path, archive: Path, n_tasks: int = 2, **entry: object) -> Path:
    """A registry beside ``archive`` listing it with its true checksum and size."""
    data = archive.read_bytes()
    fields = {"name": NAME, "version": VERSION, "url": archive.name,
              "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
              "n_tasks": n_tasks, "description": "", **entry}
    path = folder / "registry.json"
    path.write_text(json.dumps({"datasets": [fields]}))
    return path


def refused(capsys: pytest.CaptureFixture[str], data_dir: Path, registry: str,
            said: str, task_root: Path | None = None) -> str:
    """Pull and expect one line naming the dataset and ``said``, exit 2, nothing left."""
    code, out, err = run_cli(capsys, "dataset", "pull", REF, "--registry", registry)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1, err
    assert err.startswith(f"spu dataset: {REF}: "), err
    assert said in err, err
    assert left_behind(data_dir, NAME) == []
    if task_root is not None:  # the next pull starts clean
        good = task_root.parent / "good"
        good.mkdir(exist_ok=True)
        write_archive(good / "lab-set-1.0.tar.gz", good_members(task_root))
        code, _, err = run_cli(capsys, "dataset", "pull", REF, "--registry",
                               str(publish(good, good / "lab-set-1.0.tar.gz")))
        assert code == 0, err
    return err


def hostile(tmp_path: Path, task_root: Path, change: Callable[[list[Member]], list[Member]],
            **entry: object) -> str:
    folder = tmp_path / "reg"
    folder.mkdir()
    write_archive(folder / "lab-set-1.0.tar.gz", change(good_members(task_root)))
    return str(publish(folder, folder / "lab-set-1.0.tar.gz", **entry))


def test_the_good_archive_of_these_tests_pulls(tmp_path: Path, task_root: Path, data_dir: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: m)
    assert run_cli(capsys, "dataset", "pull", REF, "--registry", registry)[0] == 0


def test_a_link_member(tmp_path: Path, task_root: Path, data_dir: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, special(f"tasks/{TASK}/files/key", tarfile.SYMTYPE, "/etc/passwd")])
    refused(capsys, data_dir, registry, "is a link (to '/etc/passwd')", task_root)


def test_a_hard_link_member(tmp_path: Path, task_root: Path, data_dir: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, special(f"tasks/{TASK}/files/key", tarfile.LNKTYPE, "dataset.json")])
    refused(capsys, data_dir, registry, "is a hard link", task_root)


def test_a_device_member(tmp_path: Path, task_root: Path, data_dir: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, special(f"tasks/{TASK}/files/mem", tarfile.CHRTYPE)])
    refused(capsys, data_dir, registry, "is a device", task_root)


def test_a_fifo_member(tmp_path: Path, task_root: Path, data_dir: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, special(f"tasks/{TASK}/files/pipe", tarfile.FIFOTYPE)])
    refused(capsys, data_dir, registry, "is a FIFO", task_root)


def test_an_absolute_path(tmp_path: Path, task_root: Path, data_dir: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "planted"
    registry = hostile(tmp_path, task_root, lambda m: [*m, file_member(str(target), b"x")])
    refused(capsys, data_dir, registry, "is an absolute path", task_root)
    assert not target.exists()


def test_a_path_that_climbs_out(tmp_path: Path, task_root: Path, data_dir: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, file_member("tasks/../../../planted", b"x")])
    refused(capsys, data_dir, registry, "climbs out with '..'", task_root)
    assert not list(tmp_path.rglob("planted"))


def test_a_member_outside_the_dataset_layout(tmp_path: Path, task_root: Path, data_dir: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: [*m, file_member("run.sh", b"rm -rf ~")])
    refused(capsys, data_dir, registry, "is outside dataset.json and tasks/", task_root)


def test_a_member_over_the_size_cap(tmp_path: Path, task_root: Path, data_dir: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A header stating 2 GiB is refused before a byte of it is read (none follow here)."""
    def huge(members: list[Member]) -> list[Member]:
        big = tarfile.TarInfo(f"tasks/{TASK}/files/huge.bin")
        big.size = 2 << 30
        return [*members, Member(big)]

    folder = tmp_path / "reg"
    folder.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in huge(good_members(task_root)):
            if m.info.size > len(m.data):  # the header alone: the data would be 2 GiB
                buffer.write(m.info.tobuf(tarfile.PAX_FORMAT))
                break
            tar.addfile(m.info, io.BytesIO(m.data))
    (folder / "lab-set-1.0.tar.gz").write_bytes(gzip.compress(buffer.getvalue()))
    registry = str(publish(folder, folder / "lab-set-1.0.tar.gz"))
    refused(capsys, data_dir, registry, "over the cap of 1073741824", task_root)


def test_a_gzip_bomb(tmp_path: Path, task_root: Path, data_dir: Path,
                     monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    """Members under the member cap that together pass the dataset cap (zeros, 1000:1)."""
    monkeypatch.setattr(archives, "LIMITS", archives.ArchiveLimits(
        member_bytes=8 << 20, total_bytes=16 << 20))
    zeros = bytes(6 << 20)
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, *(file_member(f"tasks/{TASK}/files/z{i}", zeros) for i in range(4))])
    assert (tmp_path / "reg" / "lab-set-1.0.tar.gz").stat().st_size < 200_000
    refused(capsys, data_dir, registry, "hold more than 16777216 bytes", task_root)


def test_too_many_members(tmp_path: Path, task_root: Path, data_dir: Path,
                          monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(archives, "LIMITS", archives.ArchiveLimits(members=40))
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, *(file_member(f"tasks/{TASK}/files/f{i}", b"") for i in range(40))])
    refused(capsys, data_dir, registry, "more than 40 members", task_root)


def test_a_long_name_header_bomb(tmp_path: Path, task_root: Path, data_dir: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A GNU long-name header stating 64 MiB is refused before it is read into memory."""
    folder = tmp_path / "reg"
    folder.mkdir()
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = tarfile.GNUTYPE_LONGNAME, 64 << 20
    buffer = io.BytesIO()
    buffer.write(header.tobuf(tarfile.GNU_FORMAT))
    buffer.write(bytes(1 << 20))
    (folder / "lab-set-1.0.tar.gz").write_bytes(gzip.compress(buffer.getvalue()))
    registry = str(publish(folder, folder / "lab-set-1.0.tar.gz"))
    refused(capsys, data_dir, registry, "bytes at once", task_root)


def test_a_member_twice(tmp_path: Path, task_root: Path, data_dir: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    """The second copy of a file would replace the first, checked one: refused."""
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, file_member(f"tasks/{TASK}/hidden/answers.json", b"{}")])
    refused(capsys, data_dir, registry, "appears twice", task_root)


def test_not_a_gzipped_tar(tmp_path: Path, task_root: Path, data_dir: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "reg"
    folder.mkdir()
    (folder / "lab-set-1.0.tar.gz").write_bytes(b"PK\x03\x04 not a tar at all" * 100)
    refused(capsys, data_dir, str(publish(folder, folder / "lab-set-1.0.tar.gz")),
            "cannot be read as a gzipped tar", task_root)


def test_a_truncated_archive(tmp_path: Path, task_root: Path, data_dir: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "reg"
    folder.mkdir()
    write_archive(folder / "full.tar.gz", good_members(task_root))
    (folder / "lab-set-1.0.tar.gz").write_bytes((folder / "full.tar.gz").read_bytes()[:600])
    refused(capsys, data_dir, str(publish(folder, folder / "lab-set-1.0.tar.gz")),
            "cannot be read as a gzipped tar", task_root)


def test_a_checksum_other_than_the_registry_states(tmp_path: Path, task_root: Path,
                                                   data_dir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: m, sha256="0" * 64)
    refused(capsys, data_dir, registry, "is not the registry's", task_root)


def test_an_archive_larger_than_the_registry_states(tmp_path: Path, task_root: Path,
                                                    data_dir: Path, http_folder: Served,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The fetch stops at the stated size, wherever the server would stop."""
    write_archive(http_folder.folder / "lab-set-1.0.tar.gz", good_members(task_root))
    publish(http_folder.folder, http_folder.folder / "lab-set-1.0.tar.gz", bytes=100)
    refused(capsys, data_dir, f"{http_folder.url}/registry.json",
            "larger than the 100 bytes the registry states", task_root)


def test_a_task_whose_files_are_not_the_ones_listed(tmp_path: Path, task_root: Path,
                                                    data_dir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A public file changed after dataset.json was written: the task digest differs."""
    def swap(members: list[Member]) -> list[Member]:
        return [file_member(m.info.name, m.data.replace(b"yield", b"yeild"))
                if m.info.name == f"tasks/{TASK}/instruction.md" else m for m in members]

    refused(capsys, data_dir, hostile(tmp_path, task_root, swap), "digest", task_root)


def test_a_manifest_of_another_dataset(tmp_path: Path, task_root: Path, data_dir: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root,
                       lambda m: good_members(task_root, name="other-set"))
    refused(capsys, data_dir, registry, "the archive holds other-set@1.0", task_root)


def test_a_task_not_listed(tmp_path: Path, task_root: Path, data_dir: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, file_member("tasks/smuggled/task.yaml", b"id: smuggled\n")])
    refused(capsys, data_dir, registry, "tasks/smuggled is not listed in dataset.json",
            task_root)


def test_an_answer_key_where_dataset_json_says_withheld(
        tmp_path: Path, task_root: Path, data_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    def withheld_but_present(members: list[Member]) -> list[Member]:
        manifest = json.loads(members[0].data)
        manifest["tasks"][0]["answers"] = "withheld"
        return [file_member("dataset.json", json.dumps(manifest).encode()), *members[1:]]

    registry = hostile(tmp_path, task_root, withheld_but_present)
    refused(capsys, data_dir, registry, "holds an answer key", task_root)


def test_a_stray_file_in_a_task(tmp_path: Path, task_root: Path, data_dir: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: [
        *m, file_member(f"tasks/{TASK}/hidden/notes.txt", b"the answer is...")])
    refused(capsys, data_dir, registry, "'hidden/notes.txt' is not part of a task package",
            task_root)


def test_an_unknown_dataset_or_version(tmp_path: Path, task_root: Path, data_dir: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    registry = hostile(tmp_path, task_root, lambda m: m, version="2.0")
    refused(capsys, data_dir, registry, "lists no version 1.0 of lab-set (versions: 2.0)")
    registry = str(publish(tmp_path / "reg", tmp_path / "reg" / "lab-set-1.0.tar.gz",
                           name="other-set"))
    refused(capsys, data_dir, registry, "lists no dataset 'lab-set' (it lists: other-set)")


def test_an_unreachable_registry(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused(capsys, data_dir, f"http://127.0.0.1:{port}/registry.json", "is unreachable")


@pytest.mark.parametrize(("body", "said"), [
    (b"<html>not found</html>", "is not JSON"),
    (b"[" * 100_000, "is not JSON"),
    (b'{"datasets": [], "datasets": []}', "is not JSON"),
    (b'{"datasets": [{"name": "../../etc", "version": "1.0"}]}', "datasets.0.name"),
    (b'{"datasets": {"lab-set": 1}}', "datasets"),
])
def test_a_registry_that_is_not_one(data_dir: Path, http_folder: Served, body: bytes,
                                    said: str, capsys: pytest.CaptureFixture[str]) -> None:
    (http_folder.folder / "registry.json").write_bytes(body)
    refused(capsys, data_dir, f"{http_folder.url}/registry.json", said)


def test_an_endless_registry(data_dir: Path, http_folder: Served,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """A registry that never ends is read up to its cap, then refused."""
    def endless(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.end_headers()
        try:
            handler.wfile.write(b'{"datasets": [')
            while True:
                handler.wfile.write(b'{"name": "x", "version": "1.0"}, ' * 4096)
        except OSError:
            pass

    http_folder.routes["/registry.json"] = endless
    refused(capsys, data_dir, f"{http_folder.url}/registry.json", "larger than 16777216 bytes")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x.tar.gz"])
def test_an_archive_url_of_another_scheme(tmp_path: Path, task_root: Path, data_dir: Path,
                                          http_folder: Served, url: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    write_archive(http_folder.folder / "lab-set-1.0.tar.gz", good_members(task_root))
    publish(http_folder.folder, http_folder.folder / "lab-set-1.0.tar.gz", url=url)
    refused(capsys, data_dir, f"{http_folder.url}/registry.json", "is not http(s)")
    local = hostile(tmp_path, task_root, lambda m: m, url=url)
    refused(capsys, data_dir, local, "is neither http(s) nor a path")
