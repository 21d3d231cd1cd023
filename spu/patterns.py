r"""Patterns searched in time linear in an agent's text.

A backtracking search retries a pattern at every start. Where each retry walks a run to
its end (``lib\w*`` over ``libcudlibcud...``, ``open\([^)]*`` over ``open(open(...``),
an agent's crafted text costs time quadratic in its length. :class:`Swallowing` searches
such a pattern so that a start that fails consumes the run it walked: every later start
inside that run has a subset of its choices and would fail too, so nothing is lost.

Examples
--------
>>> opens = Swallowing(r"open\((?:[^)]*['\"][wa]['\"]|(?P<skip>[^)]*+))")
>>> bool(opens.search("open(open(open(x")), bool(opens.search("f = open('o', 'w')"))
(False, True)
>>> writes = AnyOf(re.compile(r"\.write\("), opens)
>>> writes.search("f.write(x)").group()
'.write('
"""

from __future__ import annotations

import re
from typing import Protocol


class Searcher(Protocol):
    """What the labeller asks of a pattern: ``search`` (a match or None)."""

    def search(self, text: str) -> re.Match[str] | None:
        """The first match in ``text``, or None."""
        ...


class Swallowing:
    r"""A pattern searched so that a start that fails swallows the run it walked.

    Its last alternative, the group ``skip``, consumes that run (written possessive:
    ``(?P<skip>\w*+)``).
    """

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = re.compile(pattern, flags)
        if "skip" not in self.pattern.groupindex:
            raise ValueError(f"pattern has no group 'skip': {pattern}")

    def search(self, text: str) -> re.Match[str] | None:
        """The first match in ``text`` that is not a skip, or None."""
        for found in self.pattern.finditer(text):
            if found.group("skip") is None:
                return found
        return None


class AnyOf:
    """Several patterns asked as one alternation, for a yes or no.

    :meth:`search` returns the match of the first that finds one (not the leftmost).
    """

    def __init__(self, *patterns: Searcher) -> None:
        self.patterns = patterns

    def search(self, text: str) -> re.Match[str] | None:
        """The match of the first pattern that finds one in ``text``, or None."""
        for pattern in self.patterns:
            if (found := pattern.search(text)) is not None:
                return found
        return None
