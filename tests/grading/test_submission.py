"""Reading the submitted file out of the agent's output folder, which the agent controls."""

from __future__ import annotations

import os

from spu.grading.rules import MAX_BYTES, grade_submission
from spu.grading.submission import read_submission, read_submission_file
from spu.schema import GradeStatus
from tests.conftest import EXAMPLE_TWO_GROUPS


def test_plain_file_and_missing_file(tmp_path) -> None:
    assert read_submission(tmp_path) is None
    (tmp_path / "rankings.json").write_bytes(b'{"a": 1}')
    assert read_submission(tmp_path) == b'{"a": 1}'


def test_planted_link_is_not_followed(tmp_path) -> None:
    """Invariant: a link to the answer key is never read; it grades as an unparsable file."""
    (tmp_path / "rankings.json").symlink_to(EXAMPLE_TWO_GROUPS / "hidden" / "answers.json")
    assert read_submission(tmp_path) == b""


def test_planted_fifo_does_not_hang_the_grader(tmp_path) -> None:
    """Invariant: a FIFO named rankings.json (no writer) reads as b"" at once, never blocks."""
    os.mkfifo(tmp_path / "rankings.json")
    assert read_submission(tmp_path) == b""


def test_folder_named_like_the_submission(tmp_path) -> None:
    (tmp_path / "rankings.json").mkdir()
    assert read_submission(tmp_path) == b""


def test_oversized_file_is_read_only_past_the_limit(tmp_path, contract, answers) -> None:
    (tmp_path / "rankings.json").write_bytes(b" " * (5 * MAX_BYTES))
    data = read_submission(tmp_path)
    assert len(data) == MAX_BYTES + 1
    g = grade_submission(contract, answers, data)
    assert g.status is GradeStatus.invalid and "over the 1 MiB limit" in g.errors[0]


def test_a_maintainers_link_is_followed_on_request(tmp_path) -> None:
    """``spu grade`` reads a path the maintainer gave, links included; runs never do."""
    real = tmp_path / "real.json"
    real.write_bytes(b"{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert read_submission_file(link, follow_links=True) == b"{}"
    assert read_submission_file(link) == b""
    assert read_submission_file(tmp_path / "absent.json", follow_links=True) is None
