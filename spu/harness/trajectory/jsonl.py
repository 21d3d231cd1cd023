"""Reading a CLI's JSONL session files line by line, keeping what can be read.

The files are the agent's: it writes its home folder, so a "session file" may be a
link to a host file (the framework reads as root), a FIFO that never ends, ``/dev/zero``
behind a link, or one line of gigabytes. They are opened without following a link or
blocking, read only when regular, and read within bounds (:data:`MAX_LINE_BYTES`,
:data:`MAX_FILE_BYTES`); the folders holding them are listed without following links.
A value nested past :data:`spu.gateway.answers.MAX_DEPTH` levels is read as its JSON
text (:func:`spu.gateway.answers.loads`): the trajectory is written and read back as
JSON whose readers stop far above that, and a tool input nested 300 deep must not cost
the run its record.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spu.gateway.answers import loads

MAX_LINE_BYTES = 64 << 20
"""A longer line is skipped (with a warning), not held in memory."""
MAX_FILE_BYTES = 2 << 30
"""What is read of one session file at most."""
MAX_FILES = 10_000
"""Session files listed under one folder at most."""
MAX_TOTAL_BYTES = 256 << 20
"""What is read of all the session files of one run together (:class:`ReadBudget`): the
agent writes them, and a planted gigabyte would cost the host its memory after the run."""
MAX_TOOL_OUTPUT_CHARS = 1 << 20
"""Characters of one tool result kept in the trajectory; the rest is named, not kept."""


class ReadBudget:
    """Bytes left to read of one run's session files (:data:`MAX_TOTAL_BYTES`)."""

    def __init__(self, total: int = MAX_TOTAL_BYTES) -> None:
        self.total = total
        self.left = total


def session_files(root: Path, pattern: str, warnings: list[str] | None = None) -> list[Path]:
    """Regular files under ``root`` whose name matches ``pattern``, sorted; links unfollowed.

    A ``root`` reached through a link (the agent replaced its CLI's folder by one to a
    host folder) is not read: it yields nothing and a warning.
    """
    if not root.is_dir():
        return []
    if os.path.realpath(root) != os.path.abspath(root):
        if warnings is not None:
            warnings.append(f"{root.name}: reached through a link, not read")
        return []
    found: list[Path] = []
    pending = [root]
    while pending and len(found) < MAX_FILES:
        try:
            with os.scandir(pending.pop()) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False) and fnmatch.fnmatch(entry.name, pattern):
                found.append(Path(entry.path))
    return sorted(found[:MAX_FILES])


def read_small(path: Path, limit: int = 1 << 20) -> bytes | None:
    """The first ``limit`` bytes of a regular file; None for a link, a FIFO, no file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _lines(path: Path, warnings: list[str],
           budget: ReadBudget | None = None) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of a regular file, within the bounds, never following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        warnings.append(f"{path.name}: not read ({exc.strerror})")
        return
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            warnings.append(f"{path.name}: not a regular file, not read")
            return
        number = read = 0
        while read < MAX_FILE_BYTES:
            if budget is not None and budget.left <= 0:
                warnings.append(f"{path.name}: the session files' total of {budget.total} "
                                f"bytes was read; line {number + 1} on not read")
                return
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            number += 1
            read += len(line)
            if budget is not None:
                budget.left -= len(line)
            if len(line) > MAX_LINE_BYTES:
                warnings.append(f"{path.name}:{number}: longer than {MAX_LINE_BYTES} bytes, "
                                f"skipped")
                while line and not line.endswith(b"\n") and read < MAX_FILE_BYTES:
                    line = f.readline(MAX_LINE_BYTES)
                    read += len(line)
                continue
            yield number, line
        warnings.append(f"{path.name}: read up to {MAX_FILE_BYTES} bytes, the rest skipped")


def read_jsonl(path: Path, warnings: list[str],
               budget: ReadBudget | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each JSON object line of ``path``.

    A line that is not a JSON object (a session cut off mid-write leaves a partial
    last line) is skipped with a warning naming the file and the line, so the rest
    of the session is not lost. A link, a FIFO or another special file is not read.
    Values nested past 64 levels are read as their JSON text.
    """
    for number, raw in _lines(path, warnings, budget):
        line = raw.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        entry = loads(line, deep_as_text=True)
        if entry is None:
            warnings.append(f"{path.name}:{number}: not JSON ({_why_not_json(line)}), skipped")
            continue
        if not isinstance(entry, dict):
            warnings.append(f"{path.name}:{number}: not a JSON object, skipped")
            continue
        yield number, entry


def _why_not_json(line: str) -> str:
    """Why :func:`~spu.gateway.answers.loads` read nothing of ``line``, in a few words."""
    try:
        json.loads(line)
    except json.JSONDecodeError as exc:
        return exc.msg
    except RecursionError:
        pass
    return "nested too deep"


TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})
"""Content block types that hold text (Messages API; Responses API input and output)."""


def _tool_output_text(content: Any) -> str | None:
    r"""A tool result's content as text (a string, or a list of text blocks), whole.

    Examples
    --------
    >>> _tool_output_text([{"type": "input_text", "text": "Wall time: 0.1 seconds"},
    ...                   {"type": "input_text", "text": "[]"}, {"type": "image"}])
    'Wall time: 0.1 seconds\n[]\n[image]'
    """
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") in TEXT_BLOCKS:
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'block')}]")
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return json.dumps(content)


def tool_output_text(content: Any) -> str | None:
    r"""A tool result's content as text, at most :data:`MAX_TOOL_OUTPUT_CHARS` characters.

    Examples
    --------
    >>> tool_output_text("x" * (MAX_TOOL_OUTPUT_CHARS + 5))[-31:]
    'xx\n[5 more characters not kept]'
    """
    text = _tool_output_text(content)
    if text is None or len(text) <= MAX_TOOL_OUTPUT_CHARS:
        return text
    return (text[:MAX_TOOL_OUTPUT_CHARS]
            + f"\n[{len(text) - MAX_TOOL_OUTPUT_CHARS} more characters not kept]")
