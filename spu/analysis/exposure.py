"""The exposure detector: source identifiers in tool outputs (paper 3.7, appendix E.9).

Every tool output of a trajectory is scanned for identifiers of the study the
answer key comes from: its DOI, PubMed id (PMID), PubMed Central id (PMCID), its
full title or most of it, and the DOI or title of a preprint version. A hit shows
that a tool *returned* an identifier, not that the agent used it; a flag never
changes the score (paper 3.7).

Matching is deliberately literal and explainable:

- DOIs are matched case-insensitively after URL- and HTML-unescaping the output, and
  only as a whole DOI (``10.1/abc`` does not match inside ``10.1/abcd``); a version
  suffix such as ``/v2`` still matches.
- A PMID is a bare number, so it only counts next to ``pmid`` or ``pubmed`` (``PMID:
  12345``, ``pubmed.ncbi.nlm.nih.gov/12345``, ``"pmid": "12345"``); a PMCID counts as
  ``PMC12345`` anywhere.
- Titles are compared on normalized words (accents, case and punctuation removed):
  the full title anywhere, or ``partial_title`` when a run of consecutive title words
  covering at least :data:`PARTIAL_TITLE_SHARE` of the title (and at least
  :data:`MIN_PARTIAL_WORDS` words) appears, as in truncated search results.
"""

from __future__ import annotations

import html
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote

from spu.schema import ExposureHit, SourceRecord, TrajectoryStep

PARTIAL_TITLE_SHARE = 0.6
"""Share of a title's words that a consecutive run must cover to count as most of it."""

MIN_PARTIAL_WORDS = 5
"""A partial title match needs at least this many consecutive words."""

MAX_HITS = 200
"""Hits kept per run (the flag itself does not depend on the cap)."""


def normalize_words(text: str) -> str:
    """Lower-case words without accents or punctuation, single-space separated.

    Examples:
        >>> normalize_words("Cu-Catalysed <i>Allylic</i> Amination&nbsp;of Alkenes")
        'cu catalysed i allylic i amination of alkenes'
    """
    text = html.unescape(text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    return " ".join(re.findall(r"[0-9a-z]+", text))


def _strip_tags(text: str) -> str:
    return re.sub(r"<[^>]{0,200}>", " ", text)


def _doi_pattern(doi: str) -> re.Pattern[str]:
    doi = doi.strip().lower()
    doi = re.sub(r"^(?:https?://)?(?:dx\.)?doi\.org/|^doi:\s*", "", doi)
    # Whole DOI only: no further DOI character may follow, except a version suffix.
    return re.compile(re.escape(doi) + r"(?=/v\d|[^0-9a-z\-._/;()]|[\-._/;()](?![0-9a-z])|$)")


def _pmid_pattern(pmid: str) -> re.Pattern[str]:
    digits = re.sub(r"\D", "", pmid)
    return re.compile(r"(?:pmid|pubmed(?:\s?id)?)[^0-9a-z]{0,40}?(?:[a-z.]{0,30}/)?(?<!\d)"
                      + digits + r"(?!\d)")


def _pmcid_pattern(pmcid: str) -> re.Pattern[str]:
    digits = re.sub(r"\D", "", pmcid)
    return re.compile(r"(?<![0-9a-z])pmc\s?" + digits + r"(?!\d)")


@dataclass(frozen=True)
class _Title:
    """A title as the windows of consecutive words that count as most of it."""

    kind: str
    identifier: str
    full: str
    windows: tuple[str, ...]


def _title(kind: str, title: str) -> _Title | None:
    words = normalize_words(title).split()
    if not words:
        return None
    size = max(math.ceil(PARTIAL_TITLE_SHARE * len(words)), MIN_PARTIAL_WORDS)
    windows: tuple[str, ...] = ()
    if size < len(words):
        windows = tuple(" ".join(words[i:i + size]) for i in range(len(words) - size + 1))
    return _Title(kind=kind, identifier=title, full=" ".join(words), windows=windows)


@dataclass(frozen=True)
class ExposureDetector:
    """Compiled patterns for one source record; call :meth:`scan` per tool output."""

    patterns: tuple[tuple[str, str, re.Pattern[str]], ...]
    titles: tuple[_Title, ...]

    @classmethod
    def for_source(cls, source: SourceRecord) -> ExposureDetector:
        """Patterns for every identifier ``source`` gives."""
        patterns: list[tuple[str, str, re.Pattern[str]]] = []
        for kind, value in (("doi", source.doi), ("preprint_doi", source.preprint_doi)):
            if value and value.strip():
                patterns.append((kind, value, _doi_pattern(value)))
        if source.pmid and re.sub(r"\D", "", source.pmid):
            patterns.append(("pmid", source.pmid, _pmid_pattern(source.pmid)))
        if source.pmcid and re.sub(r"\D", "", source.pmcid):
            patterns.append(("pmcid", source.pmcid, _pmcid_pattern(source.pmcid)))
        titles = [
            t for t in (_title("title", source.title or ""),
                        _title("preprint_title", source.preprint_title or ""))
            if t is not None
        ]
        return cls(patterns=tuple(patterns), titles=tuple(titles))

    @property
    def empty(self) -> bool:
        """True when the source gives nothing to look for."""
        return not self.patterns and not self.titles

    def scan(self, text: str) -> list[tuple[str, str]]:
        """``(kind, identifier)`` of every source identifier found in ``text``."""
        found: list[tuple[str, str]] = []
        if self.patterns:
            raw = html.unescape(unquote(text)).lower()
            for kind, identifier, pattern in self.patterns:
                if pattern.search(raw):
                    found.append((kind, identifier))
        if self.titles:
            words = f" {normalize_words(_strip_tags(text))} "
            for title in self.titles:
                if f" {title.full} " in words:
                    found.append((title.kind, title.identifier))
                elif any(f" {w} " in words for w in title.windows):
                    kind = "partial_title" if title.kind == "title" else title.kind
                    found.append((kind, title.identifier))
        return found


def tool_outputs(steps: Iterable[TrajectoryStep]) -> Iterator[tuple[int, str | None, str]]:
    """``(step index, tool name, output)`` of every tool output of a trajectory.

    Tool calls carry their outputs; a harness that records outputs as separate
    ``tool`` steps has their text scanned too.
    """
    for step in steps:
        for call in step.tool_calls:
            if call.output:
                yield step.index, call.name, call.output
        if step.role == "tool" and step.text:
            yield step.index, None, step.text


def detect_exposure(source: SourceRecord | None,
                    steps: Iterable[TrajectoryStep]) -> list[ExposureHit]:
    """Where the tool outputs of ``steps`` contain identifiers of ``source``.

    Args:
        source: the answer key's source record (None: nothing to detect).
        steps: the trajectory's steps, possibly streamed from its file.

    Returns:
        One hit per identifier kind and step, in trajectory order, at most
        :data:`MAX_HITS`; an empty list when nothing was found.

    Examples:
        >>> from spu.schema import ToolCall
        >>> src = SourceRecord(doi="10.1038/s41586-023-06792-0")
        >>> step = TrajectoryStep(index=3, tool_calls=[ToolCall(
        ...     name="WebFetch", output="see https://doi.org/10.1038%2Fs41586-023-06792-0.")])
        >>> [(h.kind, h.step, h.tool) for h in detect_exposure(src, [step])]
        [('doi', 3, 'WebFetch')]
    """
    if source is None:
        return []
    detector = ExposureDetector.for_source(source)
    if detector.empty:
        return []
    hits: list[ExposureHit] = []
    seen: set[tuple[str, int]] = set()
    for index, tool, text in tool_outputs(steps):
        for kind, identifier in detector.scan(text):
            if (kind, index) in seen:
                continue
            seen.add((kind, index))
            hits.append(ExposureHit(kind=kind, identifier=identifier, step=index, tool=tool))
            if len(hits) >= MAX_HITS:
                return hits
    return hits


def exposure_kinds(hits: Iterable[ExposureHit]) -> list[str]:
    """The distinct identifier kinds among ``hits``, sorted."""
    return sorted({h.kind for h in hits})
