"""The offline corpus: strict loading with one-line errors, BM25 ranking, fetch by URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spu.config import ToolsConfig
from spu.tools.corpus import CorpusError, load_corpus
from spu.tools.providers import ProviderConfigError
from spu.tools.session import make_provider
from tests.conftest import REPO
from tests.tools.conftest import write_corpus


def test_search_ranks_by_bm25_and_drops_documents_without_a_query_word(corpus: Path) -> None:
    found = load_corpus(corpus).search("amine cross coupling", 10)
    assert [d.url for d in found][0] == "https://corpus.test/a"
    assert "https://corpus.test/c" not in [d.url for d in found]


def test_stemming_matches_plural_and_singular(corpus: Path) -> None:
    assert [d.url for d in load_corpus(corpus).search("aminations", 3)] == [
        "https://corpus.test/a"]


def test_max_results_caps_the_list(tmp_path: Path) -> None:
    docs = [{"url": f"https://x.test/{k}", "title": f"doc {k}", "text": "amine " * (k + 1)}
            for k in range(20)]
    corpus = load_corpus(write_corpus(tmp_path / "c.jsonl", docs))
    found = corpus.search("amine", 7)
    assert len(found) == 7
    # BM25 with term saturation still ranks more occurrences first among equal lengths.
    assert found[0].url != "https://x.test/0"


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "c.jsonl:2: not a JSON object"),
    ("[1, 2]", "c.jsonl:2: not a JSON object"),
    ('{"url": "u2", "title": 3, "text": "t"}', "c.jsonl:2: key 'title' must be a string"),
    ('{"url": "u2", "title": "t"}', "c.jsonl:2: key 'text' must be a string"),
    ('{"url": "u1", "title": "t", "text": "t"}', "c.jsonl:2: key 'url': 'u1' is already"),
    ('{"url": "u2", "title": "t", "text": "t", "published": 2020}',
     "c.jsonl:2: key 'published' must be a string"),
])
def test_a_bad_line_is_named_with_its_file_line_and_key(tmp_path: Path, line: str,
                                                         message: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"url": "u1", "title": "t", "text": "t"}) + "\n" + line + "\n")
    with pytest.raises(CorpusError, match=message.replace("[", r"\[").replace("'", "'")):
        load_corpus(path)


def test_a_bad_corpus_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"url": "u", "title": "\xff", "text": "t"}\n')
    with pytest.raises(ProviderConfigError, match=r"^tools.corpus: .*c.jsonl: not UTF-8"):
        make_provider(ToolsConfig(corpus=str(path)))
    with pytest.raises(ProviderConfigError, match="cannot read the corpus"):
        make_provider(ToolsConfig(corpus=str(tmp_path / "missing.jsonl")))


def test_fetch_returns_the_text_or_404(corpus: Path) -> None:
    provider = make_provider(ToolsConfig(corpus=str(corpus)))
    page = provider.fetch("https://corpus.test/a/")
    assert (page.status, page.url) == (200, "https://corpus.test/a")
    assert "Palladium catalysed" in page.text
    assert provider.fetch("https://elsewhere.test/").status == 404


def test_no_corpus_is_an_empty_corpus() -> None:
    provider = make_provider(ToolsConfig())
    assert provider.search("anything", 5) == []
    assert provider.fetch("https://corpus.test/a").status == 404


def test_the_shipped_example_corpus_loads() -> None:
    corpus = load_corpus(REPO / "examples" / "tools_corpus.jsonl")
    assert len(corpus) >= 5
