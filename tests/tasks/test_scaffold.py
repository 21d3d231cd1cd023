"""``spu task new``: a scaffold that validates, and the checkout's tasks validate strictly."""

from __future__ import annotations

from pathlib import Path

import pytest

from spu.cli import main
from spu.tasks.validate import validate_task
from tests.conftest import TASKS


def test_a_clean_checkout_validates_strictly_with_the_shell_glob(capsys) -> None:
    """Issue 14 item 2: ``spu task validate --strict tasks/*/`` exits 0 on a clean checkout.

    The glob reaches ``tasks/sources/`` (build specs, not a package): it is skipped with a
    note, and the shipped examples raise no warning about their presented order.
    """
    folders = sorted(p for p in TASKS.glob("*/") if p.is_dir())
    assert TASKS / "sources" in folders
    code = main(["task", "validate", "--strict", *map(str, folders)])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert "sources: skipped (not a task package" in captured.err
    assert "warning" not in captured.out.replace("0 warning(s)", "")


def test_only_folders_that_are_not_packages_fail(tmp_path, capsys) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a task")
    assert main(["task", "validate", str(tmp_path / "notes")]) == 1
    assert "no task package among the folders given" in capsys.readouterr().err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "task.yaml").write_text("id: broken\n")
    assert main(["task", "validate", str(broken)]) == 1  # a package missing files still fails


@pytest.mark.slow
def test_task_new_writes_a_spec_a_table_and_a_package_that_validates(tmp_path, capsys) -> None:
    root, sources = tmp_path / "tasks", tmp_path / "specs"
    assert main(["task", "new", "my-task", "--task-root", str(root),
                 "--sources", str(sources)]) == 0
    assert (sources / "my-task.yaml").is_file() and (sources / "my-task.csv").is_file()
    report = validate_task(root / "my-task", strict=True)
    # Strictly clean but for the review before freezing, which a new task is still due.
    assert [f.code for f in report.findings] == ["review-missing"], \
        [str(f) for f in report.findings]
    # The spec rebuilds the same package (seeded), as the guide tells.
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert main(["task", "build", str(sources / "my-task.yaml"), "--out",
                 str(root / "my-task"), "--force"]) == 0
    after = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before
    # Existing files are kept unless --force; a bad id is refused; both exit 2.
    capsys.readouterr()
    assert main(["task", "new", "my-task", "--task-root", str(root),
                 "--sources", str(sources)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert main(["task", "new", "Bad Id", "--task-root", str(root)]) == 2
    assert not Path(root / "Bad Id").exists()
