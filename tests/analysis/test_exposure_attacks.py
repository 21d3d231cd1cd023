"""The screen's readings added against a red team, and the honest texts they must pass.

Spaced letters (``1 0 . 1 1 2 6``), markup inside a DOI, a DOI backwards, in hex or in
ROT13 passed the screen before (``tests/gateway/test_exposure_attacks.py`` replays them
through the gateway); a text's reading could grow eighteenfold (``U+FDFA``) and a run of
combining marks cost its length squared. Near misses stay unflagged.
"""

from __future__ import annotations

import pytest

from spu.analysis.exposure import (
    MAX_EXPANSION,
    ExposureDetector,
    despaced,
    detect_in_sequence,
    folded,
    normalize_words,
)
from spu.gateway.answers import unmarked
from spu.schema import SourceRecord

DOI = "10.1126/science.aar5169"
TITLE = "Predicting reaction performance in C-N cross-coupling using machine learning"
DETECTOR = ExposureDetector.for_source(SourceRecord(doi=DOI, title=TITLE, pmid="29449509"))


def _kinds(text: str) -> set[str]:
    return {m.kind for m in DETECTOR.scan(text)}


NEAR_MISSES = {
    "a table of single digits": "PMID 1 2 3 4 5 6 7 8\n1 0 1 1 2 6 1 7\n",
    "another DOI spaced out": " ".join("10.1126/science.aar5160"),
    "a longer DOI spaced out": " ".join(DOI + "0"),
    "another DOI in hex": b"10.1126/science.aar5160".hex(),
    "another DOI backwards": "10.1126/science.aar5160"[::-1],
    "another DOI split by markup": "10.1126/<em>science</em>.aar5160",
    "a DOI whose prefix is ours, with markup before more digits": f"<b>{DOI}0</b>",
    "letters spaced in a word of a sentence": "T h e yields of C - N couplings rose",
}


@pytest.mark.parametrize("name", list(NEAR_MISSES))
def test_near_misses_of_the_new_readings_stay_unflagged(name: str) -> None:
    """The readings added close no gap a reader would not see: no other DOI, no table."""
    assert _kinds(NEAR_MISSES[name]) == set(), name


def test_spaced_letters_close_up_and_word_gaps_stay() -> None:
    assert despaced("s e e  1 0 . 1 / a b c  n o w") == "see 10.1/abc now"
    assert despaced("one b c d e f g") == "one bcdefg"  # the word before is no part of it
    assert despaced("a b c d e") == "a b c d e"  # five: not enough to be read as a word
    assert _kinds("  ".join(" ".join(w) for w in TITLE.split())) == {"title"}


def test_a_reading_grows_at_most_fourfold() -> None:
    """U+FDFA is 18 characters in NFKC: a megabyte of it was read as 18, with 1.2 GB of
    the host's memory; a character that makes more than four is read as a space now."""
    assert len(folded("\ufdfa" * 1000)) == 1000
    assert len(folded("\u2468\u247d" * 1000)) <= MAX_EXPANSION * 2000
    assert folded("\u247d") == "(10)"  # what a DOI's digits may hide in is still read


def test_marks_are_dropped_before_any_normalisation() -> None:
    """Nothing is left for Python's insertion sort of combining marks (quadratic)."""
    crafted = "a" + "\u0301\u0f73\uff9e" * 3 + "\u0316" * 3 + "b"
    assert unmarked(crafted) == "ab"
    assert folded(crafted) == "ab" and normalize_words(crafted) == "ab"
    assert folded("caf\u00e9") == "caf\u00e9"  # a composed letter is a letter


def test_context_texts_join_only_across_their_boundary() -> None:
    """A ``context`` text is joined to its neighbour, never screened alone."""
    source = SourceRecord(doi=DOI)
    before = [("context", f"see {DOI}", True), ("tool_result", "unrelated", False)]
    assert detect_in_sequence(source, before) == []
    parted = [("tool_result", "doi 10.1126/scie", False), ("user", "x" * 2000, False),
              ("context", "doi 10.1126/scie", True), ("tool_result", "nce.aar5169", False)]
    assert [h.kind for h in detect_in_sequence(source, parted)] == ["doi"]
    after = [("tool_result", "doi 10.1126/scie", False), ("context", "nce.aar5169", False)]
    assert [h.kind for h in detect_in_sequence(source, after)] == ["doi"]
