"""From the console to a run (issue 40, items 3 and 7): the run folder holds the run's
``transcript.html``, whose audit table says when a fetch did not get its page."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlflow.tracking import MlflowClient

from spu.tracking.store import log_run
from spu.tracking.transcript import render_transcript
from tests.tracking.test_traces import _corpus, _record


def test_the_transcript_is_also_written_in_the_run_folder(tmp_path, target) -> None:
    """Before, ``transcript.html`` existed only under ``mlartifacts/<experiment>/<run id>/``.
    A link planted at its place in the folder is replaced, never followed."""
    folder = _corpus(tmp_path)[0]
    outside = tmp_path / "outside.txt"
    outside.write_text("not the agent's to overwrite")
    os.symlink(outside, folder / "transcript.html")
    run_id = log_run(_record(folder), folder, target)
    local = MlflowClient(tracking_uri=target.uri).download_artifacts(
        run_id, "transcript.html", str(tmp_path / "dl"))
    beside = folder / "transcript.html"
    assert not beside.is_symlink() and beside.read_text() == Path(local).read_text()
    assert outside.read_text() == "not the agent's to overwrite"
    assert not list(folder.glob(".transcript.html.*"))


def test_a_fetch_of_a_missing_page_is_not_shown_ok(tmp_path) -> None:
    """The tools service answers a fetch of a URL outside the corpus with status ``ok`` and
    the page's 404; the audit table showed "ok"."""
    folder = _corpus(tmp_path)[0]
    audit = folder / "tools" / "audit.jsonl"
    audit.parent.mkdir(exist_ok=True)
    entries = [{"call": 0, "time": "2026-01-01T00:00:00+00:00", "tool": "fetch",
                "args": {"url": "https://example.org/missing"}, "status": "ok",
                "http_status": 404, "latency_s": 0.1, "chars": 9},
               {"call": 1, "time": "2026-01-01T00:00:01+00:00", "tool": "fetch",
                "args": {"url": "https://example.org/there"}, "status": "ok",
                "http_status": 200, "latency_s": 0.1, "chars": 9}]
    audit.write_text("".join(json.dumps(e) + "\n" for e in entries))
    page = render_transcript(_record(folder), folder)
    rows = [row for row in page.split("<tr>") if "example.org" in row]
    assert len(rows) == 2
    assert "<td>HTTP 404 Not Found</td>" in rows[0] and "<td>ok</td>" not in rows[0]
    assert "<td>ok</td>" in rows[1]
