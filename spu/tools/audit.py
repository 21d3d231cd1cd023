"""The audit log of the tools service: ``<run_dir>/tools/audit.jsonl`` (SPEC section 7).

One line a call, ``{"time", "tool", "args", "status", "latency_s", "text_sha256",
"chars", ...}`` (:class:`~spu.schema.AuditEntry`), and the full text of each answer in
``<run_dir>/tools/calls/<call>-<tool>.txt``. Traps handled here:

- a run can be killed at any moment: each line is written with one ``write`` on a file
  opened for appending, as the call is answered, so a killed run keeps every call it
  answered and never a half line; the text file is written before its line;
- calls arrive concurrently (an agent may search twice at once): call numbers come from
  one lock, so two calls never share a number or a text file;
- a reader of a log cut mid-write skips a partial last line instead of failing.

Examples
--------
>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> log = AuditLog(folder)
>>> n = log.next_call()
>>> entry = log.write(n, "search", {"query": "amine"}, "ok", 0.01, '[{"url": "u"}]')
>>> entry.chars, entry.text_file
(14, 'calls/00000-search.txt')
>>> [e.tool for e in read_audit(folder / AUDIT_FILE)]
['search']
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spu.schema import AuditEntry

TOOLS_DIR = "tools"
"""Folder of the run holding the audit log and the full texts."""
AUDIT_FILE = "audit.jsonl"
CALLS_DIR = "calls"


def now_iso() -> str:
    """The current time, ISO-8601 UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class AuditLog:
    """Appends one line per call to ``<folder>/audit.jsonl``, texts beside it."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        (self.folder / CALLS_DIR).mkdir(parents=True, exist_ok=True)
        self.path = self.folder / AUDIT_FILE
        self._lock = threading.Lock()
        self._calls = 0
        self.entries: list[AuditEntry] = []

    def next_call(self) -> int:
        """A new call number (0, 1, ...)."""
        with self._lock:
            number = self._calls
            self._calls += 1
            return number

    def write(self, call: int, tool: str, args: dict[str, Any], status: str, latency_s: float,
              text: str, *, started: str | None = None, **extra: Any) -> AuditEntry:
        """Store the full text of call ``call`` and append its line; returns the entry."""
        data = text.encode("utf-8", errors="replace")
        name = f"{CALLS_DIR}/{call:05d}-{tool}.txt"
        (self.folder / name).write_bytes(data)
        entry = AuditEntry(time=started or now_iso(), tool=tool, args=args, status=status,
                           latency_s=round(latency_s, 4),
                           text_sha256=hashlib.sha256(data).hexdigest(), chars=len(text),
                           call=call, text_file=name, **extra)
        line = (entry.model_dump_json(exclude_none=True) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
            self.entries.append(entry)
        return entry


def read_audit(path: Path) -> Iterator[AuditEntry]:
    """The entries of an audit log, in file order; a line that does not parse is skipped."""
    if not Path(path).is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                yield AuditEntry.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError):
                continue


def call_text(folder: Path, entry: AuditEntry) -> str:
    """The full text of an audited call (empty when its file is gone)."""
    if not entry.text_file:
        return ""
    path = Path(folder) / entry.text_file
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
