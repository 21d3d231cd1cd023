r"""Shell here-documents in an agent's command, found in time linear in its length.

The labeller's rule for a here-document was once one regular expression::

    <<-?\s*(['"]?)(\w+)\1[^\n]*\n(.*?)\n\s*\2\s*(?:\n|$)      (DOTALL)

An agent writes the command, and that pattern takes time quadratic in it: every ``<<``
that no line closes, and every shorter prefix of its word, searched the rest of the
text (a 36 KB command took 36 s). :func:`heredocs` finds exactly the matches
``finditer`` found, quirks kept (the word backs off to a shorter prefix a later line
closes: ``<<EOFX`` is closed by ``EOF``; ``<<EOF\nEOF`` has no body line and is no
match), by indexing once where a word closes a body and looking each word up.
:func:`cat_to_file` does the same for ``cat > FILE <<WORD`` and ``tee``.

Examples
--------
>>> [(h.word, h.body) for h in heredocs("python3 - <<'PY'\nimport numpy\nPY\necho done")]
[('PY', 'import numpy')]
>>> without_heredocs("python3 - <<'PY'\nimport numpy\nPY\necho done")
'python3 - \necho done'
>>> [(h.file, h.body) for h in cat_to_file("cat > run.py <<EOF\nprint(1)\nEOF\n")]
[('run.py', 'print(1)')]
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

_NEWLINE = re.compile("\n")
_WHITESPACE = re.compile(r"\s+")
_TOKEN = re.compile(r"\S+")
_WORD = re.compile(r"\w+")
# ``cat``/``tee`` up to the ``<<`` of its here-document. Every way the pattern can reach a
# ``<<`` reaches the first ``<`` after the command name (no part before it can hold one), so
# the possessive runs lose no match and the file name is the one the full pattern captured.
_CAT_HEAD = re.compile(r"\b(?:cat|tee)\s*+(?:-a\s++)?>?\s*+>?\s*+['\"]?([^\s'\"<>|;&]++)"
                       r"['\"]?\s*+(?=<<)")


@dataclass(frozen=True)
class Heredoc:
    """One here-document: ``text[start:end]`` from its ``<<`` through its closing line."""

    start: int
    end: int
    word: str
    body: str
    file: str = ""
    """The file a ``cat``/``tee`` wrote it to (:func:`cat_to_file` only)."""


class _Closings:
    """Where each word closes a body, for one text.

    A word closes a body at a line (after blank lines, indented or not) that holds just
    the word, then a newline or the end of the text.
    """

    def __init__(self, text: str) -> None:
        self.newlines = [m.start() for m in _NEWLINE.finditer(text)]
        # word -> (first newline, last newline, match end) of each run before it, in order
        self.by_word: dict[str, list[tuple[int, int, int]]] = {}
        runs = list(_WHITESPACE.finditer(text))
        for k, run in enumerate(runs):
            first = text.find("\n", run.start(), run.end())
            if first < 0 or run.end() == len(text):
                continue
            token = _TOKEN.match(text, run.end())
            assert token is not None
            after = runs[k + 1] if k + 1 < len(runs) else None
            if token.end() == len(text) or (after is not None and after.end() == len(text)):
                end = len(text)
            elif after is not None and after.start() == token.end() and "\n" in after.group():
                end = text.rfind("\n", after.start(), after.end()) + 1
            else:
                continue
            last = text.rfind("\n", run.start(), run.end())
            self.by_word.setdefault(token.group(), []).append((first, last, end))
        self.longest_first = sorted({len(word) for word in self.by_word}, reverse=True)

    def close(self, word: str, body_start: int) -> tuple[int, int] | None:
        """The first ``(newline, end)`` at or after ``body_start`` where ``word`` closes."""
        places = self.by_word.get(word)
        if not places:
            return None
        k = bisect.bisect_left(places, body_start, key=lambda p: p[1])
        if k == len(places):
            return None
        first, _, end = places[k]
        newline = self.newlines[bisect.bisect_left(self.newlines, max(first, body_start))]
        return newline, end


@functools.lru_cache(maxsize=8)
def _closings(text: str) -> _Closings:
    # the labeller asks for a command's here-documents and its ``cat`` ones in turn
    return _Closings(text)


def _at(text: str, at: int, closings: _Closings) -> tuple[int, str, int, int] | None:
    """The here-document whose ``<<`` is at ``at``: ``(end, word, body start, body end)``."""
    p = at + 2
    if text.startswith("-", p):
        p += 1
    space = _WHITESPACE.match(text, p)
    p = space.end() if space else p
    quote = text[p] if p < len(text) and text[p] in "'\"" else ""
    word = _WORD.match(text, p + len(quote))
    if word is None:
        return None
    if quote and not text.startswith(quote, word.end()):
        return None
    newline = text.find("\n", word.end())
    if newline < 0:
        return None
    body_start = newline + 1
    # unquoted, the pattern backs off to shorter prefixes of the word, longest first
    lengths = ([len(word.group())] if quote else
               [n for n in closings.longest_first if n <= len(word.group())])
    for n in lengths:
        closed = closings.close(word.group()[:n], body_start)
        if closed is not None:
            return closed[1], word.group()[:n], body_start, closed[0]
    return None


def heredocs(text: str) -> Iterator[Heredoc]:
    """The here-documents of ``text``, left to right, as the pattern's ``finditer``."""
    if "<<" not in text:
        return
    closings = _closings(text)
    at = text.find("<<")
    while at >= 0:
        found = _at(text, at, closings)
        if found is None:
            at = text.find("<<", at + 1)
            continue
        end, word, body_start, body_end = found
        yield Heredoc(at, end, word, text[body_start:body_end])
        at = text.find("<<", end)


def without_heredocs(text: str) -> str:
    """``text`` with each here-document (``<<`` through its closing line) one newline."""
    parts: list[str] = []
    last = 0
    for doc in heredocs(text):
        parts += [text[last:doc.start], "\n"]
        last = doc.end
    return "".join(parts) + text[last:] if parts else text


def cat_to_file(text: str) -> Iterator[Heredoc]:
    """The here-documents a ``cat``/``tee`` wrote to a file, with the file's name."""
    if "<<" not in text:
        return
    closings = _closings(text)
    head = _CAT_HEAD.search(text)
    while head is not None:
        found = _at(text, head.end(), closings)
        if found is None:
            head = _CAT_HEAD.search(text, head.start() + 1)
            continue
        end, word, body_start, body_end = found
        yield Heredoc(head.start(), end, word, text[body_start:body_end], file=head.group(1))
        head = _CAT_HEAD.search(text, end)
