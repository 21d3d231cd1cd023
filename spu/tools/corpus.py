"""The offline corpus: a JSON Lines file of documents, ranked with BM25 (``bm25s``).

One document a line, ``{"url", "title", "text"}`` and optionally ``"published"``
(any date text, shown in search results). Traps handled here:

- a corpus is data an experimenter wrote by hand: a line that is not a JSON object, or
  lacks a string ``url``, ``title`` or ``text``, stops loading with one line naming the
  file, the line and the key (nothing is silently dropped);
- two lines with the same URL are an error too: ``fetch(url)`` must return one text;
- a query whose words are all stop words (or unknown) matches nothing: BM25 scores every
  document 0, and documents scoring 0 are not results.

Ranking: BM25 (k1 = 1.5, b = 0.75, the ``bm25s`` defaults) over lower-cased title and text,
English stop words removed, Snowball-stemmed where ``PyStemmer`` is installed.

Examples
--------
>>> corpus = Corpus([Document("https://a.org/1", "Amine boranes", "Copper arylation of amine "
...                           "boranes."), Document("https://b.org/2", "Solid electrolytes",
...                           "Ionic conductivity of garnets.")])
>>> [d.url for d in corpus.search("amine borane arylation", 5)]
['https://a.org/1']
>>> corpus.get("https://b.org/2").title
'Solid electrolytes'
>>> corpus.search("the of and", 5)
[]
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SNIPPET_CHARS = 300
"""Characters of a document's text shown as the snippet of a search result."""


class CorpusError(ValueError):
    """The corpus file cannot be read; the message names the file, the line and the key."""


@dataclass(frozen=True)
class Document:
    """One corpus document."""

    url: str
    title: str
    text: str
    published: str | None = None

    def snippet(self, chars: int = SNIPPET_CHARS) -> str:
        """The start of the text, cut at a word boundary."""
        text = " ".join(self.text.split())
        if len(text) <= chars:
            return text
        cut = text[:chars].rsplit(" ", 1)[0]
        return cut + " ..."


def load_corpus(path: str | Path) -> Corpus:
    """Read a JSON Lines corpus (SPEC section 7).

    Raises:
        CorpusError: a line that is not a JSON object with string ``url``, ``title``
            and ``text`` (and optional string ``published``), or a URL given twice.
    """
    path = Path(path)
    documents: list[Document] = []
    seen: dict[str, int] = {}
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read the corpus ({exc.strerror or exc})") from None
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                document = _document(path, number, line)
                if document.url in seen:
                    raise CorpusError(f"{path}:{number}: key 'url': {document.url!r} is already "
                                      f"the URL of line {seen[document.url]}")
                seen[document.url] = number
                documents.append(document)
        except UnicodeDecodeError as exc:
            raise CorpusError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return Corpus(documents)


def _document(path: Path, number: int, line: str) -> Document:
    try:
        raw: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{path}:{number}: not a JSON object ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise CorpusError(f"{path}:{number}: not a JSON object")
    for key in ("url", "title", "text"):
        if not isinstance(raw.get(key), str):
            raise CorpusError(f"{path}:{number}: key {key!r} must be a string")
    published = raw.get("published")
    if published is not None and not isinstance(published, str):
        raise CorpusError(f"{path}:{number}: key 'published' must be a string")
    if not raw["url"].strip():
        raise CorpusError(f"{path}:{number}: key 'url' is empty")
    return Document(url=raw["url"].strip(), title=raw["title"], text=raw["text"],
                    published=published)


def _stemmer() -> Any:
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        return None
    return Stemmer.Stemmer("english")


class Corpus:
    """Documents by URL, with a BM25 index built on first search."""

    def __init__(self, documents: Iterable[Document]) -> None:
        self.documents = list(documents)
        self._by_url = {d.url: d for d in self.documents}
        self._index: Any = None
        self._stemmer: Any = None

    def __len__(self) -> int:
        return len(self.documents)

    def get(self, url: str) -> Document | None:
        """The document at ``url`` (exactly, or without a trailing slash), or None."""
        url = url.strip()
        return self._by_url.get(url) or self._by_url.get(url.rstrip("/")) or (
            self._by_url.get(url + "/") if not url.endswith("/") else None)

    def _build(self) -> None:
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self._stemmer = _stemmer()
        tokens = bm25s.tokenize([f"{d.title}\n{d.text}".lower() for d in self.documents],
                                stopwords="en", stemmer=self._stemmer, show_progress=False)
        index = bm25s.BM25()
        index.index(tokens, show_progress=False)
        self._index = index

    def search(self, query: str, max_results: int) -> list[Document]:
        """The documents matching ``query``, best first, at most ``max_results``.

        A document scoring 0 (no query word in it) is not a result.
        """
        if not self.documents or max_results < 1:
            return []
        import bm25s

        if self._index is None:
            self._build()
        words = bm25s.tokenize([query.lower()], stopwords="en", stemmer=self._stemmer,
                               return_ids=False, show_progress=False)
        if not words or not words[0]:
            return []
        k = min(max_results, len(self.documents))
        ids, scores = self._index.retrieve(words, k=k, show_progress=False, n_threads=1)
        return [self.documents[int(i)] for i, s in zip(ids[0], scores[0], strict=True)
                if float(s) > 0]
