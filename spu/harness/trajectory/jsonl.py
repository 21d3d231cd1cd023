"""Reading a CLI's JSONL session file line by line, keeping what can be read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: Path, warnings: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each JSON object line of ``path``.

    A line that is not a JSON object (a session cut off mid-write leaves a partial
    last line) is skipped with a warning naming the file and the line, so the rest
    of the session is not lost.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                warnings.append(f"{path.name}:{number}: not JSON ({exc.msg}), skipped")
                continue
            if not isinstance(entry, dict):
                warnings.append(f"{path.name}:{number}: not a JSON object, skipped")
                continue
            yield number, entry


TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})
"""Content block types that hold text (Messages API; Responses API input and output)."""


def tool_output_text(content: Any) -> str | None:
    r"""A tool result's content as text (a string, or a list of text blocks).

    Examples
    --------
    >>> tool_output_text([{"type": "input_text", "text": "Wall time: 0.1 seconds"},
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
