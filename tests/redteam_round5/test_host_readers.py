"""Round five: the host's readers of an agent's ``output/rankings.json`` after the run.

``disarm`` leaves links, FIFOs and sockets in an agent's output, on the promise that
readers "open the agent's files without following links or blocking" (and, for the
submission, read at most 1 MiB). The transcript page (``transcript.html``), the MLflow
trace and ``spu compare`` read ``rankings.json`` too; each is run here, in a child
process with a memory and time limit, on what a hostile agent leaves: a FIFO (a reader
that blocks hangs forever), a sparse file of 8 GiB (a reader that reads it whole needs
8 GiB), a link to a file outside the output (a reader that follows it shows a file
that is not the submission) and JSON nested past the parser (``RecursionError``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

READERS = {
    "transcript": ("from spu.tracking.transcript import transcript_context\n"
                   "from spu.schema import RunRecord\n"
                   "r = RunRecord.model_construct(scored=False, score_strict=-1.0, "
                   "score_recovered=-1.0)\n"
                   "print(repr(transcript_context(r, run_dir)['rankings'])[:200])\n"),
    "trace": ("from spu.tracking.traces import submitted_rankings\n"
              "print(repr(submitted_rankings(run_dir, 20000))[:200])\n"),
    "compare": ("from spu.analysis.show import _orders\n"
                "print(repr(_orders(run_dir)))\n"),
}
"""What each reader runs on ``run_dir`` (a child process prints what it read)."""

ELSEWHERE = {"task_id": "t", "rankings": [{"group_id": "SECRET", "order": ["x", "y"]}]}


def _leave(run_dir: Path, kind: str) -> None:
    output = run_dir / "output"
    output.mkdir(parents=True)
    target = output / "rankings.json"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "sparse":
        with open(target, "wb") as f:
            f.truncate(8 << 30)
    elif kind == "deep":
        target.write_bytes(b"[" * 500_000 + b"]" * 500_000)
    elif kind == "link":
        (run_dir / "elsewhere.json").write_text(json.dumps(ELSEWHERE))
        target.symlink_to(run_dir / "elsewhere.json")


@pytest.mark.parametrize("kind", ["fifo", "sparse", "link", "deep"])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_of_an_agents_submission_neither_blocks_nor_swells_nor_follows(
        tmp_path: Path, reader: str, kind: str) -> None:
    run_dir = tmp_path / "run"
    _leave(run_dir, kind)
    code = ("import resource, sys\nfrom pathlib import Path\n"
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
            f"run_dir = Path({str(run_dir)!r})\n" + READERS[reader])
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{reader} blocked on a {kind} left as rankings.json")
    assert done.returncode == 0, done.stderr[-800:]
    assert "SECRET" not in done.stdout, done.stdout  # never the file behind a link


@pytest.mark.parametrize("kind", ["fifo", "sparse", "link"])
def test_the_doi_indicator_reads_only_the_agents_own_report(tmp_path: Path, kind: str) -> None:
    """``spu stats``' report side of Figure 13c (``doi_sides``): a ``report.md`` linked to a
    host file naming the DOI (the task's answer key does) is not a report that records it."""
    run_dir = tmp_path / "runs" / "k1"
    (run_dir / "output").mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    report = run_dir / "output" / "report.md"
    if kind == "fifo":
        os.mkfifo(report)
    elif kind == "sparse":
        with open(report, "wb") as f:
            f.truncate(8 << 30)
    else:
        (tmp_path / "answers.json").write_text('{"source": {"doi": "10.1/SECRET"}}')
        report.symlink_to(tmp_path / "answers.json")
    code = ("import resource\nfrom pathlib import Path\nimport pandas as pd\n"
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
            "from spu.stats.exposure import doi_sides\n"
            "runs = pd.DataFrame([{'task_id': 't', 'run_id': 'k1', 'run_key': 'k1'}])\n"
            f"print(doi_sides(Path({str(tmp_path)!r}), runs, {{'t': '10.1/secret'}}))\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"doi_sides blocked on a {kind} left as report.md")
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.strip() == "{'k1': (False, False)}", done.stdout


def test_agent_text_in_the_transcript_page_is_text(tmp_path: Path) -> None:
    """``transcript.html``: what the agent wrote (its submission, its notes in the record,
    its harness arguments) is escaped, so the page holds no element the agent wrote."""
    from spu.schema import RunRecord
    from spu.testing.corpus import make_corpus
    from spu.tracking.transcript import render_transcript
    from tests.conftest import REPO

    folder = make_corpus(tmp_path / "outputs", 1, task_root=REPO / "tasks", calls=4,
                         seed=5)[0]
    hostile = '</pre><script>alert(1)</script><img src=x onerror=alert(2)>'
    (folder / "output" / "rankings.json").write_text(hostile)
    record = RunRecord.model_validate_json((folder / "run.json").read_text())
    record = record.model_copy(update={"notes": [hostile], "config": hostile})
    page = render_transcript(record, folder)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_hostile_member_file_is_left_out_of_the_consensus() -> None:
    """``harness=consensus`` reads its members' files on the host: a file nested past
    Python's recursion, a torn one, one ranking lists and objects, one naming a group twice
    are left out; the consensus is the good member's order."""
    from spu.harness.consensus import consensus_submission
    from spu.schema import ComparisonGroup, Contract

    contract = Contract(task_id="t", task_version="1", groups=[
        ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["a", "b", "c"])])
    good = b'{"task_id": "t", "rankings": [{"group_id": "G", "order": ["c", "a", "b"]}]}'
    hostile = [b"[" * 500_000 + b"]" * 500_000,
               b'{"task_id": "t", "rankings": ' + b"[" * 200_000,
               b'{"rankings": [{"group_id": "G", "order": [["a"], {"x": 1}, "b", "c"]}]}',
               b'{"rankings": [{"group_id": "G", "order": ["a", "b", "c"]},'
               b' {"group_id": "G", "order": ["b", "a", "c"]}]}',
               b"\xff\xfe", b""]
    combined = consensus_submission(contract, [good, *hostile])
    assert combined["rankings"] == [{"group_id": "G", "order": ["c", "a", "b"]}]
