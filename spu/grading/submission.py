"""Read submitted bytes as the grader will see them, safely, from a folder the agent controls."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from spu.grading.rules import MAX_BYTES

SUBMISSION_FILE = "rankings.json"
"""The graded file in the agent's output folder (SPEC section 2)."""


def read_submission_file(path: Path, follow_links: bool = False) -> bytes | None:
    """The bytes of the file at ``path``; ``None`` when there is no such file.

    Unless ``follow_links``, a link is not followed (an agent may plant one pointing at
    an answer key). A link, a folder, a FIFO or any other non-regular file reads as
    ``b""``, which the grader rejects as not JSON; opening never blocks. At most one
    byte more than the 1 MiB limit is read: enough to reject an oversized file
    without holding all of it.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK  # O_NONBLOCK: a FIFO must not hang the grader
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError:
        return b""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return b""
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_BYTES + 1)


def read_submission(output: Path) -> bytes | None:
    """The bytes of ``output/rankings.json``, never following a link (see above)."""
    return read_submission_file(Path(output) / SUBMISSION_FILE)
