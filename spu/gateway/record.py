"""The model gateway's record: one line per request, the tool results, the files kept."""

from __future__ import annotations

from datetime import UTC, datetime


def well_formed(text: str) -> str:
    r"""``text`` with each lone UTF-16 surrogate (which JSON allows) replaced by U+FFFD.

    Examples
    --------
    >>> well_formed("cut mid-emoji: \ud83d") == "cut mid-emoji: \ufffd"
    True
    """
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def now_iso() -> str:
    """The current time, ISO-8601 in UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")
