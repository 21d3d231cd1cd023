"""Hostile inputs, round three (issue 30, item 5): Harbor tasks that import must refuse.

Each through the real command line (``spu task import --from harbor``): a link to a host
file as ``tests/answers.json`` or as all of ``tests/``, ``task.toml`` as ``/dev/zero`` (a
link, a device node) or as a FIFO, a sparse 1.5 GiB file in ``files/``, and a TOML nested
100,000 deep. Each exits 1 with one line naming the path, quickly, and writes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spu.tasks.harbor import PUBLIC_DIR, export_harbor
from tests.conftest import EXAMPLE_TWO_GROUPS, REPO


def _plant(harbor: Path, attack: str, host_file: Path) -> str:
    """Plant one attack in an exported Harbor task; the text the refusal must name."""
    tests = harbor / "tests"
    if attack == "answers-link":
        (tests / "answers.json").unlink()
        (tests / "answers.json").symlink_to(host_file)
        return "tests/answers.json: not a regular file or folder (a link"
    if attack == "tests-link":
        shutil.copytree(tests, host_file.parent / "tests-copy")
        shutil.rmtree(tests)
        tests.symlink_to(host_file.parent / "tests-copy")
        return "tests: not a regular file or folder (a link"
    if attack == "toml-dev-zero":
        (harbor / "task.toml").unlink()
        (harbor / "task.toml").symlink_to("/dev/zero")
        return "task.toml: not a regular file or folder (a link to /dev/zero"
    if attack == "toml-device":
        (harbor / "task.toml").unlink()
        os.mknod(harbor / "task.toml", 0o644 | 0o020000, os.makedev(1, 5))
        return "task.toml: not a regular file or folder (a character device"
    if attack == "toml-fifo":
        (harbor / "task.toml").unlink()
        os.mkfifo(harbor / "task.toml")
        return "task.toml: not a regular file or folder (a FIFO"
    if attack == "sparse-file":
        files = harbor / PUBLIC_DIR / "files"
        files.mkdir(exist_ok=True)
        with open(files / "huge.bin", "wb") as f:
            f.truncate(int(1.5 * (1 << 30)))
        return "huge.bin: 1610612736 bytes, over the limit"
    assert attack == "deep-toml"
    text = (harbor / "task.toml").read_text()
    (harbor / "task.toml").write_text(text + "deep = " + "[" * 100_000 + "]" * 100_000 + "\n")
    return "nested 100000 deep"


ATTACKS = ["answers-link", "tests-link", "toml-dev-zero", "toml-device", "toml-fifo",
           "sparse-file", "deep-toml"]


@pytest.mark.parametrize("attack", ATTACKS)
def test_harbor_import_refuses_what_it_should_not_read(tmp_path: Path, attack: str) -> None:
    if attack == "toml-device" and os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    host_file = tmp_path / "host" / "secret.json"
    host_file.parent.mkdir()
    host_file.write_text('{"secret": "host"}')
    harbor = export_harbor(EXAMPLE_TWO_GROUPS, tmp_path / "harbor").path
    named = _plant(harbor, attack, host_file)
    out = tmp_path / "imported"
    done = subprocess.run([sys.executable, "-m", "spu", "task", "import", str(harbor),
                           "--from", "harbor", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=REPO)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and named in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists() and not list(tmp_path.glob(".imported.*"))
