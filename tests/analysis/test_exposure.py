"""The exposure detector on hand-written tool outputs (paper 3.7, E.9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spu.analysis.exposure import (
    detect_exposure,
    evaluate,
    exposure_kinds,
    format_evaluation,
    read_cases,
)
from spu.schema import SourceRecord, ToolCall, TrajectoryStep
from tests.conftest import run_module

SOURCE = SourceRecord(
    doi="10.1038/s41586-023-06792-0",
    pmid="38012345",
    pmcid="PMC10712345",
    title="Autonomous chemical research with large language models",
    preprint_doi="10.26434/chemrxiv-2023-abcde",
    preprint_title="Emergent autonomous scientific research capabilities of large language "
                   "models",
)


def _steps(*outputs: str, tool: str = "WebFetch") -> list[TrajectoryStep]:
    return [TrajectoryStep(index=i, tool_calls=[ToolCall(name=tool, output=o)])
            for i, o in enumerate(outputs)]


def _kinds(*outputs: str) -> list[str]:
    return exposure_kinds(detect_exposure(SOURCE, _steps(*outputs)))


@pytest.mark.parametrize("text", [
    "DOI: 10.1038/s41586-023-06792-0.",
    "https://doi.org/10.1038/S41586-023-06792-0",
    "url=https%3A%2F%2Fdoi.org%2F10.1038%2Fs41586-023-06792-0&x=1",
    '<a href="https://www.nature.com/articles/10.1038/s41586-023-06792-0">',
])
def test_doi_found_in_its_common_spellings(text: str) -> None:
    assert _kinds(text) == ["doi"]


@pytest.mark.parametrize("text", [
    "10.1038/s41586-023-06792-01",     # a longer DOI
    "10.1038/s41586-023-06792-0a",
    "10.1038/s41586-023-06792",        # a shorter one
])
def test_doi_prefix_or_extension_is_not_the_doi(text: str) -> None:
    assert _kinds(text) == []


def test_preprint_doi_with_version_suffix() -> None:
    assert _kinds("chemrxiv.org/engage/api/10.26434/chemrxiv-2023-abcde/v2") == ["preprint_doi"]


@pytest.mark.parametrize(("text", "kinds"), [
    ("PMID: 38012345", ["pmid"]),
    ("https://pubmed.ncbi.nlm.nih.gov/38012345/", ["pmid"]),
    ('{"pmid": "38012345", "pmcid": "PMC10712345"}', ["pmcid", "pmid"]),
    ("PubMed ID 38012345", ["pmid"]),
    ("europepmc.org/article/PMC/PMC10712345", ["pmcid"]),
    ("order number 38012345 shipped", []),       # a bare number is not a PMID
    ("PMID: 380123456", []),                    # nor is a longer one
    ("PMC107123456", []),
])
def test_pubmed_identifiers_need_their_context(text: str, kinds: list[str]) -> None:
    assert _kinds(text) == kinds


def test_full_title_across_case_punctuation_markup_and_accents() -> None:
    text = ("<h1>Autonomous   Chemical Research with\nLarge-Language <i>Models</i></h1>"
            .replace("Large-Language", "Large Language"))
    assert _kinds(text) == ["title"]
    assert _kinds("AUTONOMOUS CHÉMICAL RESEARCH WITH LARGE LANGUAGE MODELS") == ["title"]


def test_most_of_the_title_counts_as_a_partial_title() -> None:
    # 7 title words; 60% is 5 consecutive words (the minimum): a truncated search result.
    assert _kinds("1. Autonomous chemical research with large ... - Nature") == [
        "partial_title"]
    # 4 consecutive words are not most of the title.
    assert _kinds("Autonomous chemical research with robots") == []


def test_preprint_title_and_hits_per_step() -> None:
    hits = detect_exposure(SOURCE, _steps(
        "nothing here",
        "Emergent autonomous scientific research capabilities of large language models",
        "see doi 10.1038/s41586-023-06792-0 and doi 10.1038/s41586-023-06792-0 again",
    ))
    assert [(h.kind, h.step, h.tool) for h in hits] == [
        ("preprint_title", 1, "WebFetch"), ("doi", 2, "WebFetch")]


def test_only_tool_outputs_are_scanned() -> None:
    """The model writing the DOI itself is not exposure; a tool returning it is."""
    own_text = TrajectoryStep(index=0, text="I recall 10.1038/s41586-023-06792-0",
                              tool_calls=[ToolCall(name="Bash", arguments={
                                  "command": "curl https://doi.org/10.1038/s41586-023-06792-0"})])
    tool_step = TrajectoryStep(index=1, role="tool", text="10.1038/s41586-023-06792-0")
    hits = detect_exposure(SOURCE, [own_text, tool_step])
    assert [(h.kind, h.step) for h in hits] == [("doi", 1)]


def test_no_source_or_empty_source_flags_nothing() -> None:
    steps = _steps("10.1038/s41586-023-06792-0")
    assert detect_exposure(None, steps) == []
    assert detect_exposure(SourceRecord(), steps) == []


def test_steps_are_consumed_as_a_stream() -> None:
    def generate():
        for i in range(3):
            yield TrajectoryStep(index=i, tool_calls=[ToolCall(name="Read", output=f"p{i}")])
        yield TrajectoryStep(index=3, tool_calls=[ToolCall(name="Read", output="PMID 38012345")])

    assert [(h.kind, h.step) for h in detect_exposure(SOURCE, generate())] == [("pmid", 3)]


CASES = Path(__file__).parent / "exposure_cases.jsonl"


def test_precision_and_recall_on_the_labelled_fixture_set() -> None:
    """Paper E.4's detector on 80 labelled tool outputs: HTML pages, search-API JSON, PDF
    text, URL-encoded links, near misses with shared DOI prefixes, PMID-like numbers in
    tables. Precision must be 1 (a flag is a serious claim); the one known miss is a PMID
    under a table's column header, far from its label."""
    cases = read_cases(CASES)
    assert len(cases) >= 60
    assert {c["format"] for c in cases} == {"html", "json", "pdf", "url", "near_miss", "table"}
    result = evaluate(cases)
    print(format_evaluation(result))
    assert result.overall.precision == 1.0
    assert result.overall.recall >= 0.98
    assert result.errors == ("table-03: expected ['pmid'] found []",)
    by_kind = {s.kind: s for s in result.kinds}
    assert all(by_kind[k].true_positives > 0 for k in
               ("doi", "pmid", "pmcid", "title", "partial_title", "preprint_doi",
                "preprint_title"))


def test_the_evaluation_command_prints_the_table() -> None:
    proc = run_module(["spu.analysis.exposure", str(CASES)])
    assert proc.returncode == 0, proc.stderr
    assert "80 labelled cases" in proc.stdout
    assert proc.stdout.splitlines()[-2].split()[:4] == ["all", "50", "0", "1"]


def test_matched_text_and_audit_only_hits() -> None:
    """A hit says what matched; the audit log's full answer is screened where the CLI's
    record shows less, at the step of the same tool's call of the same rank."""
    import tempfile

    from spu.analysis.exposure import detect_exposure_in_audit
    from spu.schema import AuditEntry

    folder = Path(tempfile.mkdtemp())
    (folder / "calls").mkdir()
    (folder / "calls" / "00000-fetch.txt").write_text("... 10.1038/S41586-023-06792-0 ...")
    entry = AuditEntry(time="t", tool="fetch", args={"url": "u"}, status="ok", latency_s=0,
                       text_sha256="x", chars=1, call=0, text_file="calls/00000-fetch.txt")
    shortened = [TrajectoryStep(index=5, tool_calls=[ToolCall(name="mcp__spu__fetch",
                                                              output="[cut]")])]
    hits = detect_exposure_in_audit(SOURCE, folder, [entry], shortened)
    assert [(h.kind, h.step, h.tool, h.matched, h.audit_call) for h in hits] == [
        ("doi", 5, "mcp__spu__fetch", "10.1038/s41586-023-06792-0", 0)]
    # Found in the trajectory already: not repeated.
    assert detect_exposure_in_audit(SOURCE, folder, [entry], shortened, hits) == []
