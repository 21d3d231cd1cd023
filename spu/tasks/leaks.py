"""Leak detection: measured values or source identifiers in the files an agent sees.

A public file leaks a comparison group when it carries the group's measured values
(a ``targets.csv`` column whose cells equal them, exactly or after rounding, or a
text that quotes most of them), or when it names the source study (DOI, PMID,
PMCID, title) or the file the values were taken from. The rules trade recall for
few false alarms on real tasks; each is stated where it is defined.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from spu.schema import SourceRecord, TargetRow

NUMBER = re.compile(r"(?<![\w.])[-+]?(\d+)(?:\.(\d+))?([eE][-+]?\d+)?(?![\w.]*\w)")
"""A number standing alone: not part of an identifier such as ``E503`` or ``H2O``."""

COLUMN_MIN_DISTINCT_SHARE = 0.75
"""A rounded column leaks only if it keeps at least this share of the distinct values."""

TEXT_MIN_VALUES = 3
"""A text leaks a group when it quotes at least this many of its distinct values..."""

TEXT_MIN_SHARE = 0.5
"""...and at least this share of them (all of them for groups with fewer values)."""

TEXT_WHOLE_SHARE = 0.75
"""Share of the distinct values needed when some are quoted only as whole numbers."""

SOURCE_KEYS = ("doi", "pmid", "pmcid", "title", "preprint_doi", "preprint_title", "package")
"""Fields of the answer key's ``source`` searched for in public files."""

_TOL = 1e-9


@dataclass(frozen=True)
class Leak:
    """One leak: the public file, what leaks, and how it was found."""

    file: str
    group_id: str | None
    message: str


@dataclass(frozen=True)
class NumberToken:
    """A number as written in a file: its value and its decimals (None: exponent form)."""

    value: float
    decimals: int | None


def number_tokens(text: str) -> list[NumberToken]:
    """Every standalone number in ``text`` with the decimals it is written to.

    Examples
    --------
    >>> [(t.value, t.decimals) for t in number_tokens("E503 at 25 C gave 63.50 % (1e-3)")]
    [(25.0, 0), (63.5, 2), (0.001, None)]
    """
    out = []
    for m in NUMBER.finditer(text):
        try:
            value = float(m.group(0))
        except ValueError:
            continue
        decimals = None if m.group(3) else len(m.group(2) or "")
        out.append(NumberToken(value=value, decimals=decimals))
    return out


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _TOL * max(1.0, abs(a), abs(b))


def matches(token: NumberToken, value: float, allow_integer_rounding: bool) -> bool:
    """True when ``token`` writes ``value`` exactly or rounded to the token's decimals.

    Rounding to a whole number counts only when ``allow_integer_rounding`` (a cell
    of a column); in free text a whole number must equal the value exactly, since
    texts are full of small integers (temperatures, times, counts).
    """
    if not math.isfinite(value):
        return False
    if token.decimals is None:
        return _close(token.value, value)
    if token.decimals == 0 and not allow_integer_rounding:
        return _close(token.value, value)
    scaled = value * 10**token.decimals
    # Both halves of a tie count as a rounding of it (round-half-even or half-up).
    candidates = {math.floor(scaled + 0.5), math.ceil(scaled - 0.5)}
    return any(_close(token.value, c / 10**token.decimals) for c in candidates)


def column_leaks(
    rows: Sequence[TargetRow], groups: Mapping[str, Mapping[str, float]], file: str
) -> list[Leak]:
    """Columns of ``targets.csv`` whose cells equal a group's measured values.

    A column leaks group ``g`` when, for every experiment of ``g``, its cell holds a
    number that writes the experiment's measured value exactly or after rounding,
    and the column keeps at least 75% of the group's distinct values (so that a
    coarse 0/1 column does not match by rounding).
    """
    leaks = []
    columns = sorted({c for r in rows for c in r.settings})
    for gid, measured in groups.items():
        members = [r for r in rows if r.group_id == gid and r.experiment_id in measured]
        distinct_values = {round(v, 12) for v in measured.values()}
        if len(members) < 2 or len(distinct_values) < 2:
            continue
        need_distinct = max(2, math.ceil(COLUMN_MIN_DISTINCT_SHARE * len(distinct_values)))
        for col in columns:
            cells = [r.settings.get(col, "") for r in members]
            hit = all(
                any(matches(t, measured[r.experiment_id], True) for t in number_tokens(cell))
                for r, cell in zip(members, cells, strict=True)
            )
            if not hit:
                continue
            if len(set(cells)) < need_distinct:
                continue
            leaks.append(Leak(file, gid, f"column {col!r} holds the measured values of group "
                                         f"{gid} (equal, or equal after rounding)"))
    return leaks


def text_leaks(text: str, groups: Mapping[str, Mapping[str, float]], file: str) -> list[Leak]:
    """Texts quoting most of a group's measured values.

    A value counts as quoted when the text writes it exactly or rounded to one decimal
    or more. A group leaks when at least 3 of its distinct values and at least half of
    them are quoted (all of them when it has fewer than 3). Whole numbers in a text
    are mostly temperatures, times and amounts, so values written only as whole
    numbers count toward a stricter bar: at least 75% of the distinct values, and 4;
    single-digit whole numbers are not counted at all (``targets.csv`` columns are
    still checked cell by cell by :func:`column_leaks`). The message gives the count
    of values quoted, never the values.
    """
    tokens = number_tokens(text)
    decimal_tokens = [t for t in tokens if t.decimals != 0]
    # Single digits are list numbers, counts and hours in any instruction: never evidence.
    whole_tokens = [t for t in tokens if t.decimals == 0 and abs(t.value) >= 10]
    leaks = []
    for gid, measured in groups.items():
        distinct = sorted({round(v, 12) for v in measured.values()})
        if len(distinct) < 2:
            continue
        strong = [v for v in distinct if any(matches(t, v, False) for t in decimal_tokens)]
        weak = [v for v in distinct if v not in strong
                and any(matches(t, v, False) for t in whole_tokens)]
        need = len(distinct) if len(distinct) < TEXT_MIN_VALUES else max(
            TEXT_MIN_VALUES, math.ceil(TEXT_MIN_SHARE * len(distinct)))
        need_with_whole = max(TEXT_MIN_VALUES + 1, math.ceil(TEXT_WHOLE_SHARE * len(distinct)))
        if len(strong) >= need or len(strong) + len(weak) >= need_with_whole:
            # The count, never the values: a validation report may be read by anyone.
            leaks.append(Leak(file, gid, f"quotes {len(strong) + len(weak)} of the "
                                         f"{len(distinct)} measured values of group {gid}"))
    return leaks


def _normalized(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.casefold()).split())


def source_identifiers(source: SourceRecord | None) -> list[tuple[str, str]]:
    """``(field, identifier)`` pairs of the answer key's source that must stay hidden.

    DOIs lose any resolver prefix; a ``file`` contributes its name; extra fields
    whose name ends in ``doi``, ``id`` or ``title`` count too. Identifiers shorter
    than 4 characters are skipped.
    """
    if source is None:
        return []
    data = source.model_dump(exclude_none=True)
    pairs: list[tuple[str, str]] = []
    for key, value in data.items():
        if not isinstance(value, str):
            continue
        wanted = key in SOURCE_KEYS or key.endswith(("doi", "id", "title"))
        if key == "file":
            pairs.append((key, value.rsplit("/", 1)[-1]))
        elif wanted:
            text = re.sub(r"^(https?://)?(dx\.)?doi\.org/", "", value.strip(), flags=re.I)
            pairs.append((key, text))
    return [(k, v) for k, v in pairs if len(v.strip()) >= 4]


def source_leaks(data: bytes, identifiers: Iterable[tuple[str, str]], file: str) -> list[Leak]:
    """Source identifiers found in a public file (text or binary).

    The message names the field found (``doi``, ``title``...), never its value.
    Titles are compared after lower-casing and collapsing punctuation and spaces;
    numeric identifiers (PMID) must stand alone; others are searched as written,
    ignoring case.
    """
    text = data.decode("utf-8", errors="replace")
    folded = text.casefold()
    normalized = _normalized(text)
    leaks = []
    for key, ident in identifiers:
        if key.endswith("title"):
            found = _normalized(ident) in normalized
        elif ident.isdigit():
            found = re.search(rf"(?<!\d){re.escape(ident)}(?!\d)", text) is not None
        else:
            found = ident.casefold() in folded
        if found:
            # The field, never the identifier itself: it is as secret as the values.
            leaks.append(Leak(file, None, f"names the source (its {key})"))
    return leaks
