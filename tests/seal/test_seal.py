"""Seals: every finished run is hashed, signed and chained; ``spu seal verify`` names tampering."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from spu.cli import main as spu_main
from spu.runner import run_one
from spu.schema import LedgerEntry, Outcome, SealManifest
from spu.seal.keys import private_key_path, public_key_path, public_pem, signing_key
from spu.seal.ledger import append_entry, head_hash, ledger_path
from spu.seal.manifest import SEAL_FILE, sealed_files
from spu.seal.verify import verify_root
from tests.seal.conftest import seal_spec as _spec


@pytest.fixture(scope="module")
def sealed_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output root of three finished baseline runs (two tasks' worth of seals)."""
    from tests.conftest import EXAMPLE_TASK

    root = tmp_path_factory.mktemp("sealed") / "outputs"
    for repeat in range(3):
        run_one(_spec(EXAMPLE_TASK, root, repeat=repeat))
    return root


def _copy(root: Path, tmp_path: Path) -> Path:
    import shutil

    dest = tmp_path / "copy"
    shutil.copytree(root, dest, symlinks=True)
    return dest


def _run_dirs(root: Path) -> list[Path]:
    entries = [json.loads(x) for x in ledger_path(root).read_text().splitlines()]
    return [root / "runs" / e["run_key"] for e in entries]


def _verify(root: Path, *extra: str) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = spu_main(["seal", "verify", str(root), *extra])
    return code, err.getvalue() + out.getvalue()


def test_every_finished_run_is_sealed_and_the_root_verifies(sealed_root: Path) -> None:
    """Three runs: three manifests, a three-line chain, the key private, exit 0."""
    lines = ledger_path(sealed_root).read_text().splitlines()
    assert len(lines) == 3
    entries = [LedgerEntry.model_validate_json(x) for x in lines]
    assert [e.seq for e in entries] == [1, 2, 3]
    assert entries[0].prev == "0" * 64
    for run_dir in _run_dirs(sealed_root):
        manifest = SealManifest.model_validate_json((run_dir / SEAL_FILE).read_bytes())
        record = json.loads((run_dir / "run.json").read_text())
        assert manifest.run_key == record["run_key"]
        assert manifest.identity is not None
        assert manifest.identity.model_dump(mode="json") == record["identity"]
        assert "output/rankings.json" in manifest.files
        assert manifest.outcome is Outcome.valid
    key_mode = stat.S_IMODE(private_key_path(sealed_root).stat().st_mode)
    dir_mode = stat.S_IMODE(private_key_path(sealed_root).parent.stat().st_mode)
    assert (key_mode, dir_mode) == (0o600, 0o700)
    code, said = _verify(sealed_root)
    assert code == 0, said
    assert head_hash(sealed_root) in said


def test_a_byte_changed_in_a_sealed_submission_is_named(sealed_root: Path, tmp_path: Path) -> None:
    root = _copy(sealed_root, tmp_path)
    run_dir = _run_dirs(root)[1]
    path = run_dir / "output" / "rankings.json"
    data = bytearray(path.read_bytes())
    data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\t")
    path.write_bytes(bytes(data))
    code, said = _verify(root)
    assert code == 1
    assert f"runs/{run_dir.name}/output/rankings.json: changed after sealing" in said


def test_a_file_planted_after_sealing_is_named(sealed_root: Path, tmp_path: Path) -> None:
    """A run sealed without scripts cannot gain one later (the set of files is sealed)."""
    root = _copy(sealed_root, tmp_path)
    run_dir = _run_dirs(root)[0]
    (run_dir / "output" / "scripts").mkdir(exist_ok=True)
    (run_dir / "output" / "scripts" / "late.py").write_text("print(1)\n")
    code, said = _verify(root)
    assert code == 1 and "output/scripts/late.py: appeared after sealing" in said


def test_an_edited_manifest_is_named(sealed_root: Path, tmp_path: Path) -> None:
    root = _copy(sealed_root, tmp_path)
    run_dir = _run_dirs(root)[2]
    manifest = json.loads((run_dir / SEAL_FILE).read_text())
    manifest["outcome"] = "rejected"
    (run_dir / SEAL_FILE).write_text(json.dumps(manifest))
    code, said = _verify(root)
    assert code == 1
    assert f"runs/{run_dir.name}/seal.json: no manifest matches ledger line 3" in said


def test_a_manifest_resigned_and_rehashed_into_the_ledger_breaks_the_chain(
        sealed_root: Path, tmp_path: Path) -> None:
    """Editing a ledger line to name a new manifest breaks that line's signature."""
    root = _copy(sealed_root, tmp_path)
    lines = ledger_path(root).read_text().splitlines()
    entry = json.loads(lines[1])
    entry["manifest_sha256"] = "f" * 64
    lines[1] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    ledger_path(root).write_text("\n".join(lines) + "\n")
    code, said = _verify(root)
    assert code == 1 and "ledger.jsonl line 2: signature does not hold" in said


def test_reordered_lines_are_named(sealed_root: Path, tmp_path: Path) -> None:
    root = _copy(sealed_root, tmp_path)
    lines = ledger_path(root).read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    ledger_path(root).write_text("\n".join(lines) + "\n")
    code, said = _verify(root)
    assert code == 1 and "ledger.jsonl line 2: seq 3 where 2 belongs" in said


def test_a_dropped_middle_line_and_a_dropped_last_line_are_named(
        sealed_root: Path, tmp_path: Path) -> None:
    root = _copy(sealed_root, tmp_path)
    lines = ledger_path(root).read_text().splitlines()
    ledger_path(root).write_text("\n".join(lines[:2]) + "\n")
    code, said = _verify(root)
    last = _run_dirs(sealed_root)[2].name
    assert code == 1 and f"runs/{last}/seal.json: not in the ledger" in said
    ledger_path(root).write_text("\n".join([lines[0], lines[2]]) + "\n")
    code, said = _verify(root)
    assert code == 1 and "ledger.jsonl line 2: seq 3 where 2 belongs" in said


def test_another_key_is_named(sealed_root: Path, tmp_path: Path) -> None:
    """The published key pins the signer: a root re-signed under a new key fails against it."""
    other = signing_key(tmp_path / "other")
    pem = tmp_path / "published.pem"
    pem.write_bytes(public_pem(other.public_key()))
    code, said = _verify(sealed_root, "--public-key", str(pem))
    assert code == 1 and "ledger.jsonl line 1: signature does not hold" in said


def test_links_in_the_submission_are_never_followed(tmp_path: Path) -> None:
    """An agent's link to the private key (or anywhere) is named, not hashed or read."""
    root = tmp_path / "outputs"
    signing_key(root)
    run_dir = root / "runs" / "k"
    (run_dir / "output" / "scripts").mkdir(parents=True)
    os.symlink(private_key_path(root), run_dir / "output" / "report.md")
    os.symlink("/etc", run_dir / "output" / "scripts" / "etc")
    (run_dir / "output" / "rankings.json").write_text("{}")
    os.link(run_dir / "output" / "rankings.json", run_dir / "output" / "sources.json")
    found = sealed_files(run_dir)
    assert found.files == {}
    assert found.skipped == {"output/rankings.json": "hard link",
                             "output/report.md": "symbolic link",
                             "output/scripts/etc": "symbolic link",
                             "output/sources.json": "hard link"}


def test_parallel_appends_keep_one_chain(tmp_path: Path) -> None:
    """Eight threads appending 25 entries each leave one unbroken 200-line chain."""
    root = tmp_path / "outputs"
    key = signing_key(root)

    def append(n: int) -> None:
        for i in range(25):
            append_entry(root, key, run_key=f"r{n}-{i}", manifest_sha256="0" * 64, time="t")

    threads = [threading.Thread(target=append, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from spu.seal.keys import load_public_key
    from spu.seal.verify import read_ledger

    entries, faults, head = read_ledger(root, load_public_key(public_key_path(root)))
    assert faults == [] and len(entries) == 200 and head == head_hash(root)


def test_an_empty_root_is_a_fault(tmp_path: Path) -> None:
    signing_key(tmp_path)
    assert verify_root(tmp_path).faults == ["ledger.jsonl: missing"]


def test_a_retried_run_keeps_the_seal_of_its_earlier_attempt(tmp_path: Path) -> None:
    """The first attempt, archived under attempts/1/, still verifies with its ledger line."""
    from tests.conftest import EXAMPLE_TASK

    root = tmp_path / "outputs"
    first = run_one(_spec(EXAMPLE_TASK, root))
    run_one(_spec(EXAMPLE_TASK, root))
    assert (root / "runs" / first.run_key / "attempts" / "1" / SEAL_FILE).is_file()
    result = verify_root(root)
    assert result.ok, result.faults
    assert [r.run_dir.relative_to(root).as_posix() for r in result.runs] == [
        f"runs/{first.run_key}/attempts/1", f"runs/{first.run_key}"]


def test_a_fault_names_the_agents_file_as_text(sealed_root: Path, tmp_path: Path) -> None:
    """Issue 41 (V2): a fault names a run's file, whose name the agent chose; ``spu seal
    verify`` prints it with its control characters escaped."""
    root = _copy(sealed_root, tmp_path)
    run_dir = _run_dirs(root)[0]
    (run_dir / "output" / "scripts").mkdir(exist_ok=True)
    (run_dir / "output" / "scripts" / "x\x1b]0;pwned\x07\x1b[2J.py").write_text("")
    code, said = _verify(root)
    assert code == 1 and "\x1b" not in said and "\x07" not in said
    assert "x\\x1b]0;pwned\\x07\\x1b[2J.py: appeared after sealing" in said
