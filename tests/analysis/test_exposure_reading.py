"""The screen reads a text as its reader sees it (issue 41, E1-E3).

A DOI hidden by characters drawn as nothing (zero-width spaces, soft hyphens, variation
selectors), by letters of other scripts that look like ASCII ones, by compatibility forms,
by base64 (plain, wrapped, URL-safe, glued to a word, of UTF-16 text, twice over), or split
across two texts sent one after the other passed the screen before; the DOI in plain text
(the control) was flagged then and is now. Near misses stay unflagged.
"""

from __future__ import annotations

import base64

import pytest

from spu.analysis.exposure import (
    JOIN_CHARS,
    ExposureDetector,
    base64_texts,
    detect_in_sequence,
    folded,
    reading,
)
from spu.schema import SourceRecord

DOI = "10.1126/science.aar5169"
TITLE = "Predicting reaction performance in C-N cross-coupling using machine learning"
SOURCE = SourceRecord(doi=DOI, title=TITLE)
DETECTOR = ExposureDetector.for_source(SOURCE)


def _b64(text: str, encoding: str = "utf-8") -> str:
    return base64.b64encode(text.encode(encoding)).decode()


def _kinds(text: str) -> set[str]:
    return {m.kind for m in DETECTOR.scan(text)}


DISGUISED = {
    "control": f"see https://doi.org/{DOI} for the yields",
    "zero-width spaces": "doi " + "\u200b".join(DOI),
    "soft hyphens": "doi " + "\u00ad".join(DOI),
    "word joiners and variation selectors": "doi 10.1126/\u2060sci\ufe0fence.aar\u180e5169",
    "Cyrillic and Greek look-alikes": "doi 10.1126/\u0455\u0441i\u0435n\u0441\u0435."
                                      "\u0430\u03b1r5169",
    "fullwidth and mathematical digits": "doi \uff11\uff10.\U0001d7cf\U0001d7cf\U0001d7d0\U0001d7d4"
                                         "/science.aar5169",
    "Arabic-Indic digits": "doi \u0661\u0660.\u0661\u0661\u0662\u0666/science.aar5169",
    "ASCII look-alikes": "doi l0.ll26/sc1ence.aar5l69",
    "combining marks": "doi 1\u03010.1126/science.aar5169",
    "percent-encoded zero-width space": "doi 10.1126%E2%80%8B/science.aar5169",
    "JSON-escaped zero-width space": "{\"doi\": \"10.1126\\u200b/science.aar5169\"}",
    "base64": "payload " + _b64(f"the source is {DOI}"),
    "base64 glued to a word": "payloadX" + _b64(DOI),
    "base64 wrapped at 76 columns": "\n".join(
        (lambda s: [s[i:i + 76] for i in range(0, len(s), 76)])(
            _b64("x" * 50 + f" doi {DOI} " + "y" * 50))),
    "base64 URL-safe": base64.urlsafe_b64encode(f"???>>>{DOI}".encode()).decode(),
    "base64 of UTF-16": "data " + _b64(DOI, "utf-16-le"),
    "base64 twice": "data " + _b64(_b64(f"doi:{DOI}")),
    "title with homoglyphs": TITLE.replace("o", "\u043e").replace("a", "\u0430"),
    "title with zero-width spaces": "\u200b".join(TITLE),
}


@pytest.mark.parametrize("name", list(DISGUISED))
def test_a_disguised_source_is_flagged(name: str) -> None:
    """Each disguise of the DOI (or the title) is read through; the control too."""
    expected = "title" if name.startswith("title") else "doi"
    assert expected in _kinds(DISGUISED[name]), (name, reading(DISGUISED[name])[:300])


@pytest.mark.parametrize("text", [
    "doi 10.1126/science.aar51690",  # a longer DOI
    "doi 10.1126/science.aar5169-2",
    "doi " + _b64("10.1126/science.aar51690"),
    "doi 10.1126/sci\u200bence.aar5168",
    "a Cyrillic sentence: \u0441\u043e\u0441\u0438\u0430\u043b\u044c\u043d\u044b\u0439",
    "random base64 " + base64.b64encode(bytes(range(256)) * 4).decode(),
])
def test_near_misses_stay_unflagged(text: str) -> None:
    assert "doi" not in _kinds(text)


def test_folding_keeps_ascii_and_what_is_seen() -> None:
    """ASCII text is left as it is; what is drawn as nothing goes; accents stay."""
    assert folded("plain ASCII 10.1/abc") == "plain ASCII 10.1/abc"
    assert folded("caf\u00e9 \u200bx\u00ady") == "caf\u00e9 xy"


def test_base64_of_binary_is_not_text() -> None:
    assert base64_texts(base64.b64encode(bytes(range(200))).decode()) == []


@pytest.mark.parametrize("cut", [5, 11, len(DOI) - 1])
def test_a_doi_split_over_two_texts_is_flagged(cut: int) -> None:
    """Two halves sent as consecutive tool results (E2): the boundary is screened."""
    texts = [("tool_result", "a" * 5000 + " doi " + DOI[:cut], False),
             ("tool_result", DOI[cut:] + " " + "b" * 5000, False)]
    assert [h.kind for h in detect_in_sequence(SOURCE, texts)] == ["doi"]
    # each half alone is nothing
    assert detect_in_sequence(SOURCE, texts[:1]) == []
    assert detect_in_sequence(SOURCE, texts[1:]) == []


def test_a_doi_split_over_many_short_texts_is_flagged() -> None:
    texts = [("tool_result", DOI[k:k + 3], False) for k in range(0, len(DOI), 3)]
    assert [h.kind for h in detect_in_sequence(SOURCE, texts)] == ["doi"]


def test_base64_halves_in_two_texts_are_flagged() -> None:
    encoded = _b64(f"the doi is {DOI}")
    texts = [("tool_result", "x " + encoded[:20], False),
             ("user", encoded[20:] + " y", False)]
    hits = detect_in_sequence(SOURCE, texts)
    assert [(h.kind, h.tool) for h in hits] == [("doi", "model_input:user")]


def test_a_tail_after_its_head_is_not_joined_to_it() -> None:
    """A kept tail is not adjacent to its head: nothing is read across that gap."""
    texts = [("tool_result", "x" * JOIN_CHARS + DOI[:10], False),
             ("tool_result", DOI[10:], True)]
    assert detect_in_sequence(SOURCE, texts) == []


def test_crafted_base64_and_escapes_are_read_whole() -> None:
    """Runs of base64 characters, escapes and look-alikes at sizes a superlinear reader
    would not finish (no timing asserted)."""
    for text in ("A" * 2_000_000, "%25" * 300_000, "\\u00" * 300_000,
                 ("MTAu\n" * 400_000), "\u0455\u200b" * 500_000, "-_" * 1_000_000):
        DETECTOR.scan(text)
