r"""The exposure detector: source identifiers in tool outputs (paper 3.7, appendix E.4).

Every tool output of a run (audited search and fetch, shell output, file reads) is
scanned for identifiers of the study the answer key comes from: its DOI, PubMed id
(PMID), PubMed Central id (PMCID), its full title or most of it, and the DOI or title of
a preprint version. A hit shows that a tool *returned* an identifier, not that the agent
used it; a flag never changes the score (paper 3.7).

The rules, stated:

- **DOI** (and preprint DOI): case-insensitive, after decoding the text the ways a DOI
  hides in tool output: percent-encoding (repeatedly: ``%252F`` is ``%2F`` is ``/``),
  HTML entities, JSON escapes (``\\/``, ``\\u002F``), and a line broken after a DOI
  character in PDF text. Only the whole DOI counts: it may not be preceded by a DOI
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
    text = html.unescape(text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    return " ".join(re.findall(r"[0-9a-z]+", text))


def _strip_tags(text: str) -> str:
    return re.sub(r"<[^>]{0,500}>", " ", text)


def decoded(text: str) -> str:
    r"""``text`` decoded the ways a DOI hides in tool output, lower-cased.

    Percent-encoding (repeated), HTML entities and JSON escapes are undone.

    Examples:
        >>> decoded("https%253A%252F%252Fdoi.org%252F10.1%252FABC")
        'https://doi.org/10.1/abc'
        >>> decoded('{"doi": "10.1\\/abc"}')
        '{"doi": "10.1/abc"}'
    """
    for _ in range(4):
        step = html.unescape(unquote(text))
        if step == text:
            break
        text = step
    text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
    return text.replace("\\/", "/").lower()


def joined_lines(text: str) -> str:
    r"""``text`` with every line broken after a DOI character joined to the next.

    Examples:
        >>> joined_lines("https://doi.org/10.2/\nx-\n1")
        'https://doi.org/10.2/x-1'
    """
    return re.sub(r"(?<=[\-/._])[ \t]*\r?\n[ \t]*(?=[0-9a-z])", "", text)


def bare_doi(doi: str) -> str:
    """A DOI without its resolver prefix, lower-cased.

    Examples:
        >>> bare_doi("https://doi.org/10.1038/S41586-023-06792-0")
        '10.1038/s41586-023-06792-0'
    """
    doi = doi.strip().lower()
    return re.sub(r"^(?:https?://)?(?:dx\.)?doi\.org/|^doi:\s*", "", doi)


def _doi_pattern(doi: str) -> re.Pattern[str]:
    """The DOI as a whole; an arXiv DOI also as its arXiv id (``arXiv:2304.05332v2``)."""
    bare = bare_doi(doi)
    pattern = r"(?<![0-9a-z.])" + re.escape(bare) + _DOI_END
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

    @classmethod
    def for_source(cls, source: SourceRecord) -> ExposureDetector:
        """Rules for every identifier ``source`` gives."""
        patterns: list[tuple[str, str, re.Pattern[str]]] = []
        for kind, value in (("doi", source.doi), ("preprint_doi", source.preprint_doi)):
            if value and bare_doi(value):
                patterns.append((kind, value, _doi_pattern(value)))
        if source.pmid and _digits(source.pmid):
            patterns.append(("pmid", source.pmid, _pmid_pattern(source.pmid)))
        if source.pmcid and _digits(source.pmcid):
            patterns.append(("pmcid", source.pmcid, _pmcid_pattern(source.pmcid)))
        titles = [t for t in (_title("title", source.title or ""),
                              _title("preprint_title", source.preprint_title or ""))
                  if t is not None]
        return cls(patterns=tuple(patterns), titles=tuple(titles))

    @property
    def empty(self) -> bool:
        """True when the source gives nothing to look for."""
        return not self.patterns and not self.titles

    def scan(self, text: str) -> list[Match]:
        """Every source identifier found in ``text`` (one match per kind)."""
        from rapidfuzz import fuzz

        text = text[:MAX_SCAN_CHARS]
        found: list[Match] = []
        if self.patterns:
            raw = decoded(text)
            # PDF text breaks lines inside DOIs; joining them could also glue a DOI that
            # ends a sentence to the next line's number: both readings are searched.
            joined = joined_lines(raw)
            readings = (raw,) if joined == raw else (raw, joined)
            for kind, identifier, pattern in self.patterns:
                hit = next((h for h in map(pattern.search, readings) if h), None)
                if hit:
                    found.append(Match(kind, identifier, hit.group(0).strip()))
        if self.titles:
            words = normalize_words(_strip_tags(html.unescape(unquote(text))))
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
