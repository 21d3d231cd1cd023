"""``tools.provider=example``: a tools provider kept outside spu, searching a folder of notes.

Its corpus is a folder (``tools.corpus=FOLDER``): each ``*.txt`` or ``*.md`` file under it
is one document, its first line the title, its path the address
(``https://notes.example/<path>``). Search ranks them with spu's BM25 corpus
(:class:`spu.tools.corpus.Corpus`); fetch of a document's address returns its text, any
other address status 404 (SPEC section 7). Its options model has ``corpus``, so it gets
``tools.corpus``; the run identity holds a digest of the folder's contents, so editing a
note runs again. ``tools.options.snippet_chars`` sets the length of search snippets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spu.tools.corpus import Corpus, Document
from spu.tools.providers import (
    FetchResult,
    Provider,
    ProviderConfigError,
    ProviderOptions,
    SearchResult,
)

BASE_URL = "https://notes.example/"
"""Address of the folder's root: a note's address is this and its relative path."""


class NotesOptions(ProviderOptions):
    """``tools.options`` of ``tools.provider=example``."""

    corpus: str | None = None
    """The folder of notes (``tools.corpus``); None: no notes, every search empty."""
    snippet_chars: int = 200
    """Characters of a note shown in a search result."""


class NotesProvider(Provider):
    """Search and fetch over a folder of text notes."""

    name = "example"
    options_model = NotesOptions

    _corpus: Corpus | None = None

    @classmethod
    def selfcheck_config(cls, scratch: Path) -> dict[str, Any]:
        """Two notes to check the provider with (``spu selfcheck tools=example``)."""
        notes = scratch / "notes"
        (notes / "chemistry").mkdir(parents=True, exist_ok=True)
        (notes / "chemistry" / "boranes.md").write_text(
            "Amine boranes\nCopper-catalysed arylation of amine boranes.\n")
        (notes / "garnets.txt").write_text("Solid electrolytes\nIonic conductivity.\n")
        return {"corpus": str(notes)}

    def check(self) -> None:
        """The folder exists (one line naming the key otherwise); its notes are read."""
        folder = self.options["corpus"]
        if folder is None:
            self._corpus = Corpus([])
            return
        root = Path(folder).expanduser()
        if not root.is_dir():
            raise ProviderConfigError(f"tools.corpus: {root} is not a folder of notes")
        self._corpus = Corpus([self._note(root, path) for path in sorted(root.rglob("*"))
                               if path.suffix in (".txt", ".md") and path.is_file()
                               and not path.is_symlink()])

    @staticmethod
    def _note(root: Path, path: Path) -> Document:
        text = path.read_text(encoding="utf-8", errors="replace")
        title = text.strip().splitlines()[0] if text.strip() else path.stem
        return Document(BASE_URL + path.relative_to(root).as_posix(), title, text)

    @property
    def corpus(self) -> Corpus:
        """The notes, read on first use."""
        if self._corpus is None:
            self.check()
        assert self._corpus is not None
        return self._corpus

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """BM25 over the notes."""
        chars = int(self.options["snippet_chars"])
        return [SearchResult(url=d.url, title=d.title, snippet=d.snippet(chars))
                for d in self.corpus.search(query, max_results)]

    def fetch(self, url: str) -> FetchResult:
        """A note's text, or status 404."""
        note = self.corpus.get(url)
        if note is None:
            return FetchResult(url=url, status=404, content_type="text/plain",
                               text=f"404: {url} is not a note of this folder")
        return FetchResult(url=url, status=200, content_type="text/plain", text=note.text)
