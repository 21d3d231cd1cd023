"""Issue 41, item 8: the suite leaves nothing a later session's clean-up cannot remove.

pytest keeps the temporary roots of the last three sessions and removes older ones at the
end of a session, with ``shutil.rmtree``: a folder 1,500 levels deep (what a red-team
agent leaves in its output) made that clean-up die with RecursionError in a later
session, leaving ``garbage-*`` folders behind and a traceback on every session after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

INNER_CONFTEST = """\
from tests.conftest import _leave_no_tree_too_deep  # noqa: F401 (the suite's own fixture)
"""

INNER_TESTS = """\
import os


def test_leaves_a_deep_tree(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.close(fd)


def test_nothing(tmp_path):
    assert tmp_path.is_dir()
"""


def _session(folder: Path, temproot: Path, test: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTEST_DEBUG_TEMPROOT": str(temproot),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "--rootdir", str(folder), "-c", os.devnull, *extra,
                           f"{folder / 'test_inner.py'}::{test}"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_later_sessions_still_end_with_status_0_after_a_deep_tree(tmp_path) -> None:
    """Invariant: after a session whose test left a tree 1,500 folders deep (run on two
    xdist workers, as ``make test`` runs), the next three sessions on the same machine,
    the last of which removes the first one's root, exit 0 with no RecursionError, and no
    folder is left that pytest could not remove."""
    folder, temproot = tmp_path / "suite", tmp_path / "temproot"
    folder.mkdir()
    temproot.mkdir()
    (folder / "conftest.py").write_text(INNER_CONFTEST)
    (folder / "test_inner.py").write_text(INNER_TESTS)
    first = _session(folder, temproot, "test_leaves_a_deep_tree", "-n", "2")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    for _ in range(3):
        later = _session(folder, temproot, "test_nothing", "-n", "0")
        assert later.returncode == 0, later.stdout[-2000:] + later.stderr[-2000:]
        assert "RecursionError" not in later.stdout + later.stderr
    (user,) = temproot.iterdir()
    left = sorted(p.name for p in user.iterdir())
    assert not [n for n in left if n.startswith("garbage-")], left
    assert "pytest-0" not in left, left  # the first session's root: removed
