r"""The exposure detector: source identifiers in tool outputs (paper 3.7, appendix E.4).

Every tool output of a run (audited search and fetch, shell output, file reads) is
scanned for identifiers of the study the answer key comes from: its DOI, PubMed id
(PMID), PubMed Central id (PMCID), its full title or most of it, and the DOI or title of
a preprint version. A hit shows that a tool *returned* an identifier, not that the agent
used it; a flag never changes the score (paper 3.7).

Every rule reads the text as a reader sees it (:func:`reading`): Unicode compatibility
forms folded (NFKC: fullwidth, mathematical and superscript letters and digits), characters
drawn as nothing dropped (format characters such as the zero-width space and the soft
hyphen, combining and variation marks, Unicode's default-ignorable code points), digits of
every script read as their value, letters of other scripts that look like an ASCII
character read as it (``confusable_homoglyphs``' table of Unicode's ``confusables.txt``:
Cyrillic ``ѕ`` is ``s``), and each run of base64 decoded beside it (:func:`base64_texts`).

The rules, stated:

- **DOI** (and preprint DOI): case-insensitive, after decoding the text the ways a DOI
  hides in tool output: percent-encoding (repeatedly: ``%252F`` is ``%2F`` is ``/``),
  HTML entities, JSON escapes (``\\/``, ``\\u002F``), and a line broken after a DOI
  character in PDF text. ``0`` and ``o``, and ``1``, ``l`` and ``i``, which look alike,
  stand for each other in a DOI. Only the whole DOI counts: it may not be preceded by a DOI
  character, nor followed by one that continues it (``10.1/abc`` is not in
  ``10.1/abcd`` nor in ``10.1/abc-2``), except a version (``v2``, ``/v2``) or a view of
  it in a publisher URL (``.pdf``, ``/full``, ``/abstract``, ``/suppl_file``, the
  supporting-information DOI ``.s001``...). An arXiv DOI (``10.48550/arXiv.ID``) is also
  found as its arXiv id (``arXiv:ID``, ``arxiv.org/abs/ID``, any version).
- **PMID**: a bare number, so only in identifier context: after a ``PMID``/``PubMed``
  label (``PMID: 123``, ``"pmid": "123"``, ``PMIDs: 111, 123``, ``citation_pmid``
  metadata), in a PubMed or Europe PMC URL, or as a ``term=``/``list_uids=`` query value;
  never a number alone (a catalogue number, a value in a table, a row under a ``PMID``
  column header, which is missed).
- **PMCID**: ``PMC`` and the digits as one token (the prefix is its identifier context),
  or the bare digits after a ``PMCID`` label.
- **Title** (and preprint title), with ``rapidfuzz``: text and title are reduced to
  lower-case words without accents or punctuation (markup stripped); the **full title**
  is found when ``fuzz.partial_ratio`` of the title against the text is at least
  :data:`TITLE_SIMILARITY` (95: a few characters of difference, as hyphenation, a typo or
  British and American spelling make); **most of the title** (``partial_title``) is a run
  of consecutive title words covering at least :data:`PARTIAL_TITLE_SHARE` of the title
  (and at least :data:`MIN_PARTIAL_WORDS` words, of which at least
  :data:`MIN_CONTENT_WORDS` are content words, so that "a general strategy for the"
  never counts) found with the same similarity.

Precision and recall on the labelled fixture set (``tests/analysis/exposure_cases.jsonl``)
are printed by ``python -m spu.analysis.exposure tests/analysis/exposure_cases.jsonl``.
"""

from __future__ import annotations

import binascii
import functools
import html
import json
import math
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from spu.gateway.answers import unmarked
from spu.schema import (  # noqa: F401  (exposure_kinds: kept importable from here)
    AuditEntry,
    ExposureHit,
    SourceRecord,
    TrajectoryStep,
    exposure_kinds,
)

TITLE_SIMILARITY = 95.0
"""``rapidfuzz.fuzz.partial_ratio`` (0-100) at or above which a title (or a run of its
words) is found in a text."""

PARTIAL_TITLE_SHARE = 0.6
"""Share of a title's words that a consecutive run must cover to count as most of it."""

MIN_PARTIAL_WORDS = 5
"""A partial title match needs at least this many consecutive words."""

MIN_CONTENT_WORDS = 3
"""... of which at least this many are content words (not in :data:`STOP_WORDS`)."""

MAX_HITS = 200
"""Hits kept per run (the flag itself does not depend on the cap)."""

MAX_SCAN_CHARS = 2_000_000
"""Characters of one output scanned at most (outputs are capped well below in practice)."""

KINDS = ("doi", "pmid", "pmcid", "title", "partial_title", "preprint_doi", "preprint_title")

STOP_WORDS = frozenset(
    "a an and are as at by for from in into is its of on or the to with via using under "
    "over between through their this that these those new novel toward towards based".split())

_DOI_END = (r"(?:/?v\d+)?"  # a version (bioRxiv ``v2``, ChemRxiv ``/v2``), then either
             r"(?:[./](?:full|abstract|pdf|epdf|html|meta|figures?|tables?|references|"
             r"suppl\w*|supplementary\w*|si|sd|s\d{3})(?![0-9a-z])"  # a view of it
             r"|(?![0-9a-z])(?![\-._;()/][0-9a-z]))")  # or its end
_ARXIV_DOI = re.compile(r"^10\.48550/arxiv\.(\d{4}\.\d{4,5})$")


def normalize_words(text: str) -> str:
    """Lower-case words without accents or punctuation, single-space separated.

    Examples:
        >>> normalize_words("Cu-Catalysed <i>Allylic</i> Amination&nbsp;of Alkenes")
        'cu catalysed i allylic i amination of alkenes'
    """
    text = unicodedata.normalize("NFKD", unmarked(html.unescape(text)))
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    return " ".join(re.findall(r"[0-9a-z]+", text))


_TAG = re.compile(r"<[^<>]{0,500}>")
"""A markup tag (one ``<`` opens it: a run of ``<`` costs one step each, not 500)."""


def _strip_tags(text: str) -> str:
    return _TAG.sub(" ", text)


IGNORABLE_RANGES = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C),
                    (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F),
                    (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F),
                    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
"""Unicode's ``Default_Ignorable_Code_Point`` (``DerivedCoreProperties.txt``): code points
drawn as nothing (Hangul fillers among them, which are letters)."""

_ASSIGNED_PLANES = ((0x80, 0x40000), (0xE0000, 0xE1000))
"""Where characters of categories Cf, Mn, Me and Nd lie: planes 0 to 3 and 14 (planes 4 to
13 hold no assigned character; 15 and 16 are private use)."""

_ZERO_WIDTH_MARKS = "\u200e\u200f"
"""Direction marks ``confusable_homoglyphs`` writes around right-to-left glyphs."""


@functools.cache
def _fold_table() -> dict[int, str | None]:
    """What :func:`folded` maps each changed code point to (None: dropped).

    Format characters (Cf), combining and enclosing marks (Mn, Me) and the default
    ignorables are dropped; a decimal digit of any script (Nd) is its ASCII digit; a
    character ``confusable_homoglyphs`` finds confusable with one printable ASCII character
    is that character. Built once (about 0.1 s).
    """
    from confusable_homoglyphs.confusables import confusables_data

    table: dict[int, str | None] = {}
    for low, high in _ASSIGNED_PLANES:
        for code in range(low, high):
            category = unicodedata.category(chr(code))
            if category in ("Cf", "Mn", "Me"):
                table[code] = None
            elif category == "Nd":
                table[code] = str(unicodedata.decimal(chr(code)))
    for low, high in IGNORABLE_RANGES:
        table.update(dict.fromkeys(range(low, high + 1)))
    for key, glyphs in confusables_data.items():
        char = key.strip(_ZERO_WIDTH_MARKS)
        if len(char) != 1 or char.isascii() or ord(char) in table:
            continue
        looks = [g["c"].strip(_ZERO_WIDTH_MARKS) for g in glyphs if isinstance(g, dict)]
        ascii_like = [c for c in looks if len(c) == 1 and c.isascii() and c.isprintable()]
        if ascii_like:
            table[ord(char)] = ascii_like[0]
    return table


MAX_EXPANSION = 4
"""Characters NFKC may make of one (``(10)`` of ``⑽``); one that makes more (the Arabic
ligature U+FDFA makes 18, a squared katakana word 5 or 6) is read as a space, so that a
text's reading is at most this many times its length."""


@functools.cache
def _long_expansions() -> re.Pattern[str]:
    """The characters NFKC makes more than :data:`MAX_EXPANSION` of (19 of them)."""
    return re.compile("[" + "".join(
        chr(code) for low, high in _ASSIGNED_PLANES for code in range(low, high)
        if unicodedata.decomposition(chr(code))
        and len(unicodedata.normalize("NFKC", chr(code))) > MAX_EXPANSION) + "]")


def folded(text: str) -> str:
    """``text`` as it looks: NFKC, nothing drawn as nothing, look-alikes read as ASCII.

    Combining marks are dropped before NFKC, not after: Python sorts a run of them by
    insertion, so a crafted run would cost its length squared (:func:`unmarked`). At most
    :data:`MAX_EXPANSION` characters are made of one.

    Examples:
        >>> folded("10.1038/\u0455\u200b41586\u00ad-023")  # Cyrillic dze, ZWSP, soft hyphen
        '10.1038/s41586-023'
        >>> folded("\uff11\uff10.\u0661\u0660\u0663\u0668")  # fullwidth, Arabic-Indic digits
        '10.1038'
    """
    if text.isascii():
        return text
    text = unmarked(text)
    if _long_expansions().search(text):
        text = _long_expansions().sub(" ", text)
    return unicodedata.normalize("NFKC", text).translate(_fold_table())


def unescaped(text: str) -> str:
    r"""``text`` with percent-encoding (repeated), HTML entities and JSON escapes undone.

    Examples:
        >>> unescaped("https%253A%252F%252Fdoi.org%252F10.1%252FABC")
        'https://doi.org/10.1/ABC'
        >>> unescaped('{"doi": "10.1\\/abc \\u0031"}')
        '{"doi": "10.1/abc 1"}'
    """
    for _ in range(4):
        step = html.unescape(unquote(text))
        if step == text:
            break
        text = step
    if "\\" in text:
        text = _JSON_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
        text = text.replace("\\/", "/")
    return text


_JSON_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")

BASE64_MIN_CHARS = 12
"""A run of base64 characters this long or longer is decoded (12 hold 9 bytes: the
shortest DOI, ``10.1000/1``)."""

BASE64_ROUNDS = 2
"""Base64 within decoded base64 is decoded again, this many times in all."""

_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_\-\r\n]{" + str(BASE64_MIN_CHARS - 2) + r",}={0,2}")
_URLSAFE = str.maketrans("-_", "+/", "\r\n")
_PRINTABLE = bytes(range(32, 127)) + b"\t\n\r"


def _text_of(data: bytes) -> str | None:
    """``data`` as text when it reads as text (UTF-8, or mostly printable ASCII), else None.

    NUL bytes are dropped first (UTF-16 text of ASCII characters).
    """
    data = data.replace(b"\x00", b"")
    if not data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if len(data.translate(None, _PRINTABLE)) * 4 > len(data):
        return None
    return data.decode("utf-8", "replace")


def base64_texts(text: str, rounds: int = BASE64_ROUNDS) -> list[str]:
    """The texts that the runs of base64 in ``text`` decode to (standard or URL-safe).

    Each run of at least :data:`BASE64_MIN_CHARS` base64 characters (line breaks within
    it ignored, as ``base64`` wraps its lines) is decoded from each of its first four
    characters, so that a run glued to a word is found too; a decoding that is no text
    (:func:`_text_of`) is dropped. Runs in what was decoded are decoded again, up to
    ``rounds`` times. Linear in ``text``: one character class, each run decoded four times.

    Examples:
        >>> base64_texts("doi MTAuMTAzOC9zNDE1ODYtMDIzLTA2NzkyLTA= here")
        ['10.1038/s41586-023-06792-0']
        >>> base64_texts("a plain sentence, no base64 in it")
        []
    """
    found: list[str] = []
    for match in _BASE64_RUN.finditer(text):
        run = match.group().translate(_URLSAFE).rstrip("=")
        for start in range(4):
            body = run[start:]
            if len(body) % 4 == 1:  # no whole byte in the last character: left out
                body = body[:-1]
            if len(body) < BASE64_MIN_CHARS - 3:
                break
            body += "=" * (-len(body) % 4)
            try:
                decoded_text = _text_of(binascii.a2b_base64(body))
            except binascii.Error:
                continue
            if decoded_text is not None:
                found.append(decoded_text)
    if rounds > 1 and found:
        found += [t for f in list(found) for t in base64_texts(f, rounds - 1)]
    return found


def readings(text: str) -> tuple[str, list[str]]:
    """``text`` unescaped and folded, and the texts its base64 decodes to, the same way."""
    first = folded(text)
    text = unescaped(first)
    if text != first:  # an escape may hide what folding drops or reads otherwise
        text = folded(text)
    return text, [folded(unescaped(t)) for t in base64_texts(text)]


def reading(text: str) -> str:
    r"""``text`` as the rules read it: unescaped and folded, its base64 decoded beside it.

    Examples:
        >>> reading("doi%3A 10.1038%2F\u0455\u200b41586 MTAuMTAwMC8xMjM=")
        'doi: 10.1038/s41586 MTAuMTAwMC8xMjM=\n10.1000/123'
    """
    text, extra = readings(text)
    return "\n".join([text, *extra]) if extra else text


def decoded(text: str) -> str:
    r"""``text`` decoded the ways a DOI hides in tool output, lower-cased (:func:`reading`).

    Examples:
        >>> decoded("https%253A%252F%252Fdoi.org%252F10.1%252FABC")
        'https://doi.org/10.1/abc'
        >>> decoded('{"doi": "10.1\\/abc"}')
        '{"doi": "10.1/abc"}'
    """
    return reading(text).lower()


def joined_lines(text: str) -> str:
    r"""``text`` with every line broken after a DOI character joined to the next.

    Examples:
        >>> joined_lines("https://doi.org/10.2/\nx-\n1")
        'https://doi.org/10.2/x-1'
    """
    return re.sub(r"(?<=[\-/._])[ \t]*\r?\n[ \t]*(?=[0-9a-z])", "", text)


_SPACED = re.compile(r"(?<!\S)(?:\S(?:\r\n|\s){1,8}){5,}\S(?!\S)")
"""Six or more single characters, each after whitespace: a word written letter by letter."""
_GAP = re.compile(r"\r\n|\s+")


def despaced(text: str) -> str:
    r"""``text`` with each run of single characters spaced apart (``1 0 . 1``) closed up.

    Within such a run a single whitespace character (one space, one line break) is no
    gap and a longer one is a word's end, so ``P r e d  r e a c`` reads ``Pred reac``.
    Linear: each run is walked once, and a start that fails walks under six characters.

    Examples:
        >>> despaced("doi 1 0 . 1 1 2 6 / a b c  d e f here")
        'doi 10.1126/abc def here'
        >>> despaced("1\n0\n.\n1\n2\n3"), despaced("a b c d e")
        ('10.123', 'a b c d e')
    """
    if not _SPACED.search(text):
        return text
    return _SPACED.sub(lambda m: _GAP.sub(
        lambda g: "" if len(g.group()) == 1 or g.group() == "\r\n" else " ", m.group()), text)


def _rot13(text: str) -> str:
    return text.translate(_ROT13)


_ROT13 = str.maketrans("abcdefghijklmnopqrstuvwxyz", "nopqrstuvwxyzabcdefghijklm")
_HEX_GAP = r"(?:[\s:,\-]{0,2}(?:\\x|0x)?)"
"""What may stand between the bytes of a hex dump: ``31 30``, ``31:30``, ``\x31\x30``,
``0x31, 0x30``."""


def _encoded_doi_pattern(doi: str) -> re.Pattern[str]:
    r"""The DOI written backwards, in hexadecimal, or in ROT13 (lower-case text).

    Examples:
        >>> p = _encoded_doi_pattern("10.1/ab")
        >>> [bool(p.search(t)) for t in ("ba/1.01", "31302e312f6162", "10.1/no",
        ...                              "\\x31\\x30\\x2e\\x31\\x2f\\x61\\x62", "10.1/ab")]
        [True, True, True, True, False]
    """
    bare = bare_doi(doi)
    backwards = re.escape(bare[::-1]).translate(_LOOK_ALIKE)
    hexed = _HEX_GAP.join(f"{b:02x}" for b in bare.encode())
    return re.compile(f"{backwards}|{hexed}|{re.escape(_rot13(bare))}")


def bare_doi(doi: str) -> str:
    """A DOI without its resolver prefix, lower-cased.

    Examples:
        >>> bare_doi("https://doi.org/10.1038/S41586-023-06792-0")
        '10.1038/s41586-023-06792-0'
    """
    doi = doi.strip().lower()
    return re.sub(r"^(?:https?://)?(?:dx\.)?doi\.org/|^doi:\s*", "", doi)


_LOOK_ALIKE = str.maketrans({c: "[0o]" for c in "0o"} | {c: "[1li]" for c in "1li"})
"""ASCII characters that look alike, each read as any of its kind in a DOI."""


def _doi_pattern(doi: str, bounded: bool = True) -> re.Pattern[str]:
    """The DOI as a whole; an arXiv DOI also as its arXiv id (``arXiv:2304.05332v2``).

    ``bounded=False`` drops the rule that no DOI character precedes it, for text decoded
    from base64: a run glued to what comes before it decodes that to bytes of its
    writer's choice, a digit or a letter among them.
    """
    bare = bare_doi(doi)
    pattern = ((r"(?<![0-9a-z.])" if bounded else "")
               + re.escape(bare).translate(_LOOK_ALIKE) + _DOI_END)
    arxiv = _ARXIV_DOI.match(bare)
    if arxiv:
        pattern += (r"|(?:arxiv\s*:\s*|arxiv\.org/(?:abs|pdf|html)/)"
                    + re.escape(arxiv.group(1)) + r"(?:v\d+)?(?![0-9])")
    return re.compile(pattern)


def _digits(value: str) -> str:
    return re.sub(r"\D", "", value)


def _pmid_pattern(pmid: str) -> re.Pattern[str]:
    d = _digits(pmid)
    label = (r"(?:\b(?:pmids?|pubmed(?:\s*ids?)?)\b|citation_pmid\"?\s*content\s*=)"
             r"[^0-9a-z]{0,6}(?:\d{1,9}[^0-9a-z]{1,4}){0,20}")
    urls = (r"pubmed\.ncbi\.nlm\.nih\.gov/|ncbi\.nlm\.nih\.gov/pubmed/|"
            r"europepmc\.org/(?:abstract|article|api/fulltextrepo\?pprid=)?/?med/|"
            r"[?&](?:term|list_uids|pmid|ext_id)=")
    return re.compile(r"(?:" + label + r"|" + urls + r")(?<!\d)" + d + r"(?!\d)")


def _pmcid_pattern(pmcid: str) -> re.Pattern[str]:
    d = _digits(pmcid)
    return re.compile(r"(?<![0-9a-z])pmc\s?" + d + r"(?![0-9a-z])"
                      r"|\bpmcids?\b[^0-9a-z]{0,6}(?<!\d)" + d + r"(?!\d)")


@dataclass(frozen=True)
class Match:
    """One source identifier found in a text."""

    kind: str
    identifier: str
    """The identifier as the answer key gives it."""
    matched: str
    """The text that matched (decoded; normalized words for titles)."""


@dataclass(frozen=True)
class _Title:
    kind: str
    identifier: str
    full: str
    windows: tuple[str, ...]


def _content_words(words: Sequence[str]) -> int:
    return sum(1 for w in words if w not in STOP_WORDS and not w.isdigit())


def _title(kind: str, title: str) -> _Title | None:
    words = normalize_words(title).split()
    if not words:
        return None
    size = max(math.ceil(PARTIAL_TITLE_SHARE * len(words)), MIN_PARTIAL_WORDS)
    windows: list[str] = []
    if size < len(words):
        for i in range(len(words) - size + 1):
            window = words[i:i + size]
            if _content_words(window) >= MIN_CONTENT_WORDS:
                windows.append(" ".join(window))
    return _Title(kind=kind, identifier=title, full=" ".join(words),
                  windows=tuple(dict.fromkeys(windows)))


@dataclass(frozen=True)
class ExposureDetector:
    """Compiled rules for one source record; call :meth:`scan` per tool output.

    Examples
    --------
    >>> d = ExposureDetector.for_source(SourceRecord(doi="10.1/abc", title=(
    ...     "Copper catalysed deaminative arylation of amine boranes")))
    >>> [(m.kind, m.matched) for m in d.scan("see https://doi.org/10.1%2FABC.pdf")]
    [('doi', '10.1/abc.pdf')]
    >>> [m.kind for m in d.scan("Copper-catalyzed deaminative arylation of amine-boranes")]
    ['title']
    >>> d.scan("copper catalysed arylation of amines")
    []
    """

    patterns: tuple[tuple[str, str, re.Pattern[str]], ...]
    titles: tuple[_Title, ...]
    decoded_patterns: tuple[re.Pattern[str], ...] = ()
    """The patterns searched in text decoded from base64 (a DOI's without its left edge)."""
    encoded_patterns: tuple[re.Pattern[str] | None, ...] = ()
    """Beside each pattern, the DOI written backwards, in hex or in ROT13 (None: none)."""

    @classmethod
    def for_source(cls, source: SourceRecord) -> ExposureDetector:
        """Rules for every identifier ``source`` gives."""
        patterns: list[tuple[str, str, re.Pattern[str]]] = []
        decoded_patterns: list[re.Pattern[str]] = []
        encoded: list[re.Pattern[str] | None] = []
        for kind, value in (("doi", source.doi), ("preprint_doi", source.preprint_doi)):
            if value and bare_doi(value):
                patterns.append((kind, value, _doi_pattern(value)))
                decoded_patterns.append(_doi_pattern(value, bounded=False))
                encoded.append(_encoded_doi_pattern(value))
        if source.pmid and _digits(source.pmid):
            patterns.append(("pmid", source.pmid, _pmid_pattern(source.pmid)))
            decoded_patterns.append(patterns[-1][2])
            encoded.append(None)
        if source.pmcid and _digits(source.pmcid):
            patterns.append(("pmcid", source.pmcid, _pmcid_pattern(source.pmcid)))
            decoded_patterns.append(patterns[-1][2])
            encoded.append(None)
        titles = [t for t in (_title("title", source.title or ""),
                              _title("preprint_title", source.preprint_title or ""))
                  if t is not None]
        return cls(patterns=tuple(patterns), titles=tuple(titles),
                   decoded_patterns=tuple(decoded_patterns), encoded_patterns=tuple(encoded))

    @property
    def empty(self) -> bool:
        """True when the source gives nothing to look for."""
        return not self.patterns and not self.titles

    def scan(self, text: str) -> list[Match]:
        """Every source identifier found in ``text`` (one match per kind).

        Beside the text's reading (:func:`readings`), its letters spaced apart closed up
        (:func:`despaced`) and, for identifiers, its markup taken out without a space
        (``10.1126/<em>science</em>.aar5169``, as a search engine highlights a match).
        """
        main, extra = readings(text[:MAX_SCAN_CHARS])
        spaced = despaced(main)
        more = [spaced] if spaced != main else []
        found = self._identifiers(main.lower(), [m.lower() for m in more],
                                  "\n".join(extra).lower())
        if self.titles:
            found += self._titles(normalize_words(_strip_tags("\n".join([main, *more,
                                                                          *extra]))))
        return found

    def _identifiers(self, raw: str, more: list[str], decoded_text: str) -> list[Match]:
        """The DOIs, PMID and PMCID in a text's readings and in what its base64 decodes to."""
        found: list[Match] = []
        # PDF text breaks lines inside DOIs; joining them could also glue a DOI that
        # ends a sentence to the next line's number: both readings are searched.
        texts = [raw, *more]
        for text in (joined_lines(raw), _TAG.sub("", raw) if "<" in raw else raw):
            if text not in texts:
                texts.append(text)
        loose = self.decoded_patterns or tuple(p for _, _, p in self.patterns)
        encoded = self.encoded_patterns or (None,) * len(self.patterns)
        for (kind, identifier, pattern), decoded_pattern, backwards in zip(
                self.patterns, loose, encoded, strict=True):
            hit = next((h for h in map(pattern.search, texts) if h), None)
            if hit is None and decoded_text:
                hit = decoded_pattern.search(decoded_text)
            if hit is None and backwards is not None:
                hit = backwards.search(raw)
            if hit:
                found.append(Match(kind, identifier, hit.group(0).strip()))
        return found

    def _titles(self, words: str) -> list[Match]:
        """The titles, whole or most of them, in a text's normalized words."""
        from rapidfuzz import fuzz

        found: list[Match] = []
        for title in self.titles:
            # partial_ratio aligns the shorter string inside the longer one: a text
            # shorter than what is sought would be found inside the title instead.
            aligned = (fuzz.partial_ratio_alignment(title.full, words,
                                                    score_cutoff=TITLE_SIMILARITY)
                       if len(words) >= len(title.full) else None)
            if aligned is not None:
                found.append(Match(title.kind, title.identifier,
                                   words[aligned.dest_start:aligned.dest_end]))
                continue
            for window in title.windows:
                if len(words) < len(window):
                    continue
                aligned = fuzz.partial_ratio_alignment(window, words,
                                                       score_cutoff=TITLE_SIMILARITY)
                if aligned is not None:
                    kind = "partial_title" if title.kind == "title" else title.kind
                    found.append(Match(kind, title.identifier,
                                       words[aligned.dest_start:aligned.dest_end]))
                    break
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
        >>> [(h.kind, h.step, h.tool, h.matched) for h in detect_exposure(src, [step])]
        [('doi', 3, 'WebFetch', '10.1038/s41586-023-06792-0')]
    """
    return _scan(source, tool_outputs(steps))


def detect_recall(source: SourceRecord | None,
                  steps: Iterable[TrajectoryStep]) -> list[ExposureHit]:
    """Where the model's own text (assistant steps) names ``source``: a recalled source.

    A recall probe (``harness=recall``) asks the model which study a task comes from; its
    answer, not a tool output, is what is screened. Hits have ``tool`` ``model_answer``.

    Examples:
        >>> src = SourceRecord(doi="10.1038/s41586-023-06792-0")
        >>> step = TrajectoryStep(index=1, text="I recall doi:10.1038/S41586-023-06792-0.")
        >>> [(h.kind, h.step, h.tool) for h in detect_recall(src, [step])]
        [('doi', 1, 'model_answer')]
    """
    return _scan(source, ((step.index, "model_answer", step.text) for step in steps
                          if step.role == "assistant" and step.text))


def _scan(source: SourceRecord | None,
          texts: Iterable[tuple[int, str | None, str]]) -> list[ExposureHit]:
    """The first hit of each kind per step in ``(step, tool, text)``, at most MAX_HITS."""
    if source is None:
        return []
    detector = ExposureDetector.for_source(source)
    if detector.empty:
        return []
    hits: list[ExposureHit] = []
    seen: set[tuple[str, int]] = set()
    for index, tool, text in texts:
        for match in detector.scan(text):
            if (match.kind, index) in seen:
                continue
            seen.add((match.kind, index))
            hits.append(ExposureHit(kind=match.kind, identifier=match.identifier, step=index,
                                    tool=tool, matched=match.matched[:300]))
            if len(hits) >= MAX_HITS:
                return hits
    return hits


JOIN_CHARS = 1024
"""Characters each side of the boundary between two texts sent one after the other that
are screened together (:func:`detect_in_sequence`)."""

CONTEXT = "context"
"""The kind of a text that stood beside another in the model's context but not in the
gateway's record (:data:`spu.gateway.inputs.KIND_CONTEXT`): joined across that boundary
only, never screened alone (its own text was, where the record kept it)."""

SENT_TOOL = "model_input"
"""The ``tool`` of hits in what the model was sent (``model_input:<kind>`` for a text
other than a tool result: ``user``, ``system``, ``document``, ``definition``)."""


def detect_in_sequence(source: SourceRecord | None,
                       texts: Iterable[tuple[str, str, bool]]) -> list[ExposureHit]:
    """Where the texts the model was sent, one after another, name ``source``.

    Each text is screened, and so is each boundary between consecutive texts (the last
    :data:`JOIN_CHARS` characters before it, across as many short texts as they span,
    joined to the first ones after it): an identifier split over two tool results, or
    over several short ones, is found. A text marked as not adjacent to the one before
    (a kept tail after its head) starts afresh. A ``context`` text (:data:`CONTEXT`)
    holds what stood beside a text in the model's context where the record parts them:
    after a gap, what stood before the next text; else what followed the last one. It is
    joined across that boundary only. One hit per kind, ``step`` -1; every
    text is read to the end (its reader's notes come from the whole record), but none is
    screened once every identifier has been found.

    Args:
        source: the answer key's source record (None: nothing to detect).
        texts: ``(kind, text, after_gap)`` in the order the model was sent them.

    Examples:
        >>> src = SourceRecord(doi="10.1038/s41586-023-06792-0")
        >>> halves = [("tool_result", "see 10.1038/s4158", False),
        ...           ("tool_result", "6-023-06792-0 there", False)]
        >>> [(h.kind, h.tool, h.matched) for h in detect_in_sequence(src, halves)]
        [('doi', 'model_input', '10.1038/s41586-023-06792-0')]
        >>> detect_in_sequence(src, [halves[0], (*halves[1][:2], True)])
        []
    """
    detector = ExposureDetector.for_source(source) if source is not None else None
    if detector is None or detector.empty:
        for _ in texts:  # read through, for the reader's notes
            pass
        return []
    wanted = {kind for kind, _, _ in detector.patterns} | {t.kind for t in detector.titles}
    found: dict[str, ExposureHit] = {}
    carry = ""
    for kind, text, after_gap in texts:
        if after_gap:
            carry = ""
        if kind == CONTEXT and after_gap:  # what stood before the next text
            carry = text[-JOIN_CHARS:]
            continue
        if wanted - {_base_kind(k) for k in found}:
            tool = SENT_TOOL if kind in ("tool_result", CONTEXT) else f"{SENT_TOOL}:{kind}"
            pieces = [carry + text[:JOIN_CHARS]] if kind == CONTEXT else (
                [text, carry + text[:JOIN_CHARS]] if carry else [text])
            for piece in pieces:
                for match in detector.scan(piece):
                    found.setdefault(match.kind, ExposureHit(
                        kind=match.kind, identifier=match.identifier, step=-1, tool=tool,
                        matched=match.matched[:300]))
        carry = text[-JOIN_CHARS:] if len(text) >= JOIN_CHARS else (carry + text)[-JOIN_CHARS:]
    return list(found.values())


def _base_kind(kind: str) -> str:
    """The kind a hit of ``kind`` answers for (``partial_title`` for ``title``)."""
    return "title" if kind == "partial_title" else kind


def _audited_steps(steps: Iterable[TrajectoryStep]) -> dict[str, list[int]]:
    """Trajectory steps of the audited tools' calls, in order, by bare tool name."""
    found: dict[str, list[int]] = {}
    for step in steps:
        for call in step.tool_calls:
            name = call.name
            if name.startswith("mcp__spu__"):
                found.setdefault(name.removeprefix("mcp__spu__"), []).append(step.index)
    return found


def detect_exposure_in_audit(source: SourceRecord | None, folder: Path,
                             entries: Iterable[AuditEntry], steps: Iterable[TrajectoryStep],
                             known: Sequence[ExposureHit] = ()) -> list[ExposureHit]:
    """Hits in the full answers of the audited calls that the trajectory does not show.

    A CLI may shorten a long tool output in its own record; the audit log keeps the whole
    answer. Each audited call is placed at the trajectory step of the same tool's call of
    the same rank (-1 when the trajectory has no such call); a hit already found at that
    step with the same kind is not repeated.
    """
    if source is None:
        return []
    detector = ExposureDetector.for_source(source)
    if detector.empty:
        return []
    from spu.tools.audit import call_text

    places = _audited_steps(steps)
    rank: dict[str, int] = {}
    seen = {(h.kind, h.step) for h in known}
    hits: list[ExposureHit] = []
    for entry in entries:
        k = rank.get(entry.tool, 0)
        rank[entry.tool] = k + 1
        if entry.status != "ok" or entry.tool == "policy_stop":
            continue
        candidates = places.get(entry.tool, [])
        step = candidates[k] if k < len(candidates) else -1
        for match in detector.scan(call_text(folder, entry)):
            if (match.kind, step) in seen:
                continue
            seen.add((match.kind, step))
            hits.append(ExposureHit(kind=match.kind, identifier=match.identifier, step=step,
                                    tool=f"mcp__spu__{entry.tool}", matched=match.matched[:300],
                                    audit_call=entry.call))
            if len(known) + len(hits) >= MAX_HITS:
                return hits
    return hits


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class KindScore:
    """Precision and recall of one identifier kind on a labelled set."""

    kind: str
    true_positives: int
    false_positives: int
    false_negatives: int

    @property
    def precision(self) -> float:
        """TP / (TP + FP); 1 when nothing was flagged."""
        flagged = self.true_positives + self.false_positives
        return self.true_positives / flagged if flagged else 1.0

    @property
    def recall(self) -> float:
        """TP / (TP + FN); 1 when nothing was to be found."""
        present = self.true_positives + self.false_negatives
        return self.true_positives / present if present else 1.0


@dataclass(frozen=True)
class Evaluation:
    """Precision and recall of the detector on labelled cases, by kind and overall."""

    cases: int
    kinds: tuple[KindScore, ...]
    overall: KindScore
    errors: tuple[str, ...]
    """The cases the detector got wrong: ``id: expected [...] found [...]``."""


def evaluate(cases: Iterable[dict[str, Any]]) -> Evaluation:
    """Score the detector on labelled cases ``{"id", "source", "text", "expected": [kinds]}``.

    A case counts one true positive per expected kind found, one false positive per kind
    found but not expected, one false negative per expected kind not found.

    Examples
    --------
    >>> result = evaluate([
    ...     {"id": "a", "source": {"doi": "10.1/abc"}, "text": "10.1/abc", "expected": ["doi"]},
    ...     {"id": "b", "source": {"doi": "10.1/abc"}, "text": "10.1/abcd", "expected": []}])
    >>> result.overall.precision, result.overall.recall
    (1.0, 1.0)
    """
    counts: dict[str, list[int]] = {k: [0, 0, 0] for k in KINDS}
    errors: list[str] = []
    n = 0
    for case in cases:
        n += 1
        detector = ExposureDetector.for_source(SourceRecord.model_validate(case["source"]))
        found = {m.kind for m in detector.scan(str(case["text"]))}
        expected = set(case.get("expected") or [])
        for kind in found | expected:
            row = counts.setdefault(kind, [0, 0, 0])
            if kind in found and kind in expected:
                row[0] += 1
            elif kind in found:
                row[1] += 1
            else:
                row[2] += 1
        if found != expected:
            errors.append(f"{case.get('id')}: expected {sorted(expected)} found {sorted(found)}")
    scores = tuple(KindScore(k, *v) for k, v in counts.items())
    total = KindScore("all", *(sum(s[i] for s in counts.values()) for i in range(3)))
    return Evaluation(cases=n, kinds=scores, overall=total, errors=tuple(errors))


def read_cases(path: Path) -> list[dict[str, Any]]:
    """Labelled cases from a JSON Lines file; ``text_file`` (relative to it) may hold the text."""
    cases = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        case = json.loads(line)
        if "text_file" in case:
            case["text"] = (Path(path).parent / case["text_file"]).read_text(encoding="utf-8")
        if not isinstance(case.get("text"), str) or not isinstance(case.get("source"), dict):
            raise ValueError(f"{path}:{number}: a case needs 'text' and 'source'")
        cases.append(case)
    return cases


def format_evaluation(result: Evaluation) -> str:
    """A plain table of precision and recall by kind."""
    lines = [f"{result.cases} labelled cases",
             f"{'kind':<15}{'TP':>5}{'FP':>5}{'FN':>5}{'precision':>11}{'recall':>8}"]
    for s in (*result.kinds, result.overall):
        if s.true_positives + s.false_positives + s.false_negatives == 0:
            continue
        lines.append(f"{s.kind:<15}{s.true_positives:>5}{s.false_positives:>5}"
                     f"{s.false_negatives:>5}{s.precision:>11.3f}{s.recall:>8.3f}")
    lines += [f"miss: {e}" for e in result.errors]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spu.analysis.exposure CASES.jsonl``: print precision and recall."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m spu.analysis.exposure CASES.jsonl", file=sys.stderr)
        return 2
    try:
        cases = read_cases(Path(args[0]))
    except OSError as exc:
        print(f"spu: {args[0]}: cannot read the cases ({exc.strerror or exc})", file=sys.stderr)
        return 2
    print(format_evaluation(evaluate(cases)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
