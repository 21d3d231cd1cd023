"""``tools.provider=offline``: search and fetch a local JSON Lines corpus (the default).

``search`` ranks the corpus with BM25 (:mod:`spu.tools.corpus`); ``fetch`` of a corpus
URL returns its text with status 200, any other URL status 404 (SPEC section 7). Without
``tools.corpus`` the corpus is empty: every search has no result, every fetch is a 404.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spu.config import ToolsConfig
from spu.tools.corpus import Corpus, CorpusError, load_corpus
from spu.tools.providers import (
    FetchResult,
    Provider,
    ProviderConfigError,
    SearchResult,
)

NOT_IN_CORPUS = "not in the offline corpus"


class OfflineProvider(Provider):
    """The documents of ``tools.corpus``."""

    name = "offline"

    def __init__(self, cfg: ToolsConfig) -> None:
        super().__init__(cfg)
        self._corpus: Corpus | None = None

    @classmethod
    def selfcheck_config(cls, scratch: Path) -> dict[str, Any]:
        """A corpus of two documents (``spu selfcheck tools=offline``)."""
        corpus = scratch / "corpus.jsonl"
        corpus.write_text("".join(json.dumps(d) + "\n" for d in (
            {"url": "https://corpus.example/a", "title": "Amine boranes",
             "text": "Copper-catalysed arylation of amine boranes."},
            {"url": "https://corpus.example/b", "title": "Solid electrolytes",
             "text": "Ionic conductivity of garnets."})), encoding="utf-8")
        return {"corpus": str(corpus)}

    @property
    def corpus(self) -> Corpus:
        """The corpus, read on first use."""
        if self._corpus is None:
            self.check()
        assert self._corpus is not None
        return self._corpus

    def check(self) -> None:
        """The corpus file parses (one line naming the file, line and key otherwise)."""
        if self._corpus is not None:
            return
        if not self.cfg.corpus:
            self._corpus = Corpus([])
            return
        try:
            self._corpus = load_corpus(self.cfg.corpus)
        except CorpusError as exc:
            raise ProviderConfigError(f"tools.corpus: {exc}") from None

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """BM25 over the corpus."""
        return [SearchResult(url=d.url, title=d.title, snippet=d.snippet(),
                             published=d.published)
                for d in self.corpus.search(query, max_results)]

    def fetch(self, url: str) -> FetchResult:
        """The document's text, or status 404."""
        document = self.corpus.get(url)
        if document is None:
            return FetchResult(url=url, status=404, content_type="text/plain",
                               text=f"404: {url} is {NOT_IN_CORPUS}")
        return FetchResult(url=document.url, status=200, content_type="text/plain",
                           text=f"{document.title}\n\n{document.text}")
