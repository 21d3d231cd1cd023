"""Round four: two different task packages with one ``task_digest`` (so one run key)."""

from __future__ import annotations

import os
from pathlib import Path

from spu.tasks.digest import task_digest


def test_a_link_target_with_a_newline_cannot_stand_for_another_file(tmp_path: Path) -> None:
    content = b"a,b\n1,2\n"
    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        (folder / "files").mkdir(parents=True)
        (folder / "task.yaml").write_text("id: x\n")
    # one: the link's target carries what two holds in a folder name.
    os.symlink("t\nfiles/b", one / "files" / "a")
    (one / "files" / "c").write_bytes(content)
    # two: files/a -> "t", then a file whose name holds the rest of the stream.
    os.symlink("t", two / "files" / "a")
    (two / "files" / "b\nfiles").mkdir()
    (two / "files" / "b\nfiles" / "c").write_bytes(content)
    # Both streams: ... files/a NUL link:t LF files/b LF files/c NUL <sha> LF
    assert task_digest(one) != task_digest(two)
