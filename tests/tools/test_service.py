"""The audited tools service through a client with nothing but the standard library."""

from __future__ import annotations

import hashlib
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spu.config import ToolsConfig
from spu.tools.audit import AUDIT_FILE, read_audit
from tests.tools.conftest import call_tool, mcp_post, write_corpus

SPEC_AUDIT_KEYS = {"time", "tool", "args", "status", "latency_s", "text_sha256", "chars"}


def test_search_fetch_and_policy_stop_answer_and_are_audited_as_they_happen(
        start_service, corpus: Path, tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    service = start_service(ToolsConfig(corpus=str(corpus)), folder)
    url = service.url()

    error, text = call_tool(url, "search", {"query": "amine cross-coupling", "max_results": 2})
    assert not error
    results = json.loads(text)
    assert results and set(results[0]) == {"url", "title", "snippet"}
    assert results[0]["url"] == "https://corpus.test/a" and len(results) <= 2
    # The line is on disk before the next call (a killed run keeps it).
    lines = (folder / AUDIT_FILE).read_text().splitlines()
    assert len(lines) == 1 and SPEC_AUDIT_KEYS <= set(json.loads(lines[0]))

    error, text = call_tool(url, "fetch", {"url": "https://corpus.test/c"})
    page = json.loads(text)
    assert not error and page["status"] == 200 and "Portland cement" in page["text"]
    assert set(page) >= {"url", "status", "content_type", "text"}
    error, text = call_tool(url, "fetch", {"url": "https://nowhere.test/"})
    assert not error and json.loads(text)["status"] == 404

    error, text = call_tool(url, "policy_stop", {"step": 4, "reason": "saw the source"})
    assert not error and "Policy stop recorded" in text

    entries = list(read_audit(folder / AUDIT_FILE))
    assert [(e.call, e.tool, e.status) for e in entries] == [
        (0, "search", "ok"), (1, "fetch", "ok"), (2, "fetch", "ok"), (3, "policy_stop", "ok")]
    assert entries[2].http_status == 404
    for entry in entries:  # the full text is stored, and hashed
        data = (folder / str(entry.text_file)).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry.text_sha256
        assert len(data.decode()) == entry.chars
    stop = service.policy.first
    assert stop is not None and (stop.by, stop.step, stop.call) == ("agent", "4", 3)


def test_calls_the_sdk_rejects_are_audited_too(start_service, corpus: Path,
                                               tmp_path: Path) -> None:
    """Every call is in the audit log, also one that never reached a tool."""
    service = start_service(ToolsConfig(corpus=str(corpus)), tmp_path / "tools")
    assert call_tool(service.url(), "search", {})[0]
    assert call_tool(service.url(), "download", {"url": "x"})[0]
    entries = list(read_audit(tmp_path / "tools" / AUDIT_FILE))
    assert [(e.tool, e.status) for e in entries] == [("search", "error"), ("download", "error")]
    assert "query" in str(entries[0].error) and "download" in str(entries[1].error)


def test_only_the_secret_path_answers(start_service, corpus: Path) -> None:
    service = start_service(ToolsConfig(corpus=str(corpus)))
    base = f"http://127.0.0.1:{service.port}"
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    status, body = mcp_post(service.url(), listing)
    assert status == 200
    assert sorted(t["name"] for t in body["result"]["tools"]) == [
        "fetch", "policy_stop", "search"]
    for path in ("/mcp", "/", "/spu/mcp", f"/{service.secret[:-1]}/mcp", "/docs",
                 f"/{service.secret}", "/../mcp"):
        assert mcp_post(base + path, listing)[0] == 404, path


def test_one_run_cannot_call_or_read_another_runs_service(start_service, corpus: Path,
                                                          tmp_path: Path) -> None:
    a = start_service(ToolsConfig(corpus=str(corpus)), tmp_path / "a")
    b = start_service(ToolsConfig(corpus=str(corpus)), tmp_path / "b")
    assert a.secret != b.secret and a.port != b.port
    call_tool(a.url(), "search", {"query": "amine"})
    # B's secret does not open A's port, nor A's path B's port.
    wrong = f"http://127.0.0.1:{a.port}{b.path}"
    assert mcp_post(wrong, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})[0] == 404
    assert not (tmp_path / "b" / AUDIT_FILE).exists()
    assert len(list(read_audit(tmp_path / "a" / AUDIT_FILE))) == 1


def test_stop_refuses_every_call_after_the_first_flag_and_record_does_not(
        start_service, corpus: Path, tmp_path: Path) -> None:
    """A corpus document carrying the task's DOI flags the call that returned it."""
    for policy in ("stop", "record"):
        service = start_service(ToolsConfig(corpus=str(corpus), policy=policy),
                                tmp_path / policy)
        error, text = call_tool(service.url(), "fetch", {"url": "https://corpus.test/source"})
        assert not error and "10.1126/science.aar5169" in text  # the flagged call answers
        error, text = call_tool(service.url(), "search", {"query": "amine"})
        if policy == "stop":
            assert error and "refused under the information policy" in text
            assert "Submit what you have" in text
        else:
            assert not error and "corpus.test/a" in text
        # policy_stop is always accepted.
        assert not call_tool(service.url(), "policy_stop", {"step": "1", "reason": "doi"})[0]
        entries = list(read_audit(tmp_path / policy / AUDIT_FILE))
        assert entries[0].exposure == ["doi"]
        assert entries[1].status == ("refused" if policy == "stop" else "ok")
        stops = service.policy.stops
        if policy == "stop":
            assert [s.by for s in stops] == ["service", "agent"]
            assert stops[0].call == 0 and "doi" in stops[0].reason
        else:
            assert [s.by for s in stops] == ["agent"]


def test_concurrent_calls_get_distinct_numbers_and_files(start_service, corpus: Path,
                                                         tmp_path: Path) -> None:
    service = start_service(ToolsConfig(corpus=str(corpus)), tmp_path / "tools")
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda k: call_tool(service.url(), "search",
                                                    {"query": f"amine {k}"}), range(16)))
    assert not any(error for error, _ in answers)
    entries = list(read_audit(tmp_path / "tools" / AUDIT_FILE))
    assert sorted(e.call for e in entries) == list(range(16))
    assert len({e.text_file for e in entries}) == 16


def test_a_long_text_is_cut_for_the_agent_and_kept_whole_in_the_audit(
        start_service, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", [
        {"url": "https://big.test/", "title": "Big", "text": "word " * 50_000}])
    service = start_service(ToolsConfig(corpus=str(corpus), max_text_chars=1000),
                            tmp_path / "tools")
    error, text = call_tool(service.url(), "fetch", {"url": "https://big.test/"})
    page = json.loads(text)
    assert not error and len(page["text"]) < 1200 and "[cut: the first 1000 of" in page["text"]
    (entry,) = read_audit(tmp_path / "tools" / AUDIT_FILE)
    assert entry.chars > 250_000


def _declared_post(port: int, path: str, size: int) -> bytes:
    """A POST declaring ``size`` bytes of body, of which only the start is sent: the
    status line of the answer (the server answers before it reads the body)."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"accept: application/json, text/event-stream\r\ncontent-length: {size}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(head.encode() + b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", ')
        return conn.recv(65536).split(b"\r\n", 1)[0]


def test_a_call_too_large_for_the_sdk_is_audited_unread(start_service, corpus: Path,
                                                        tmp_path: Path) -> None:
    """Agent: a ``tools/call`` of 5 MiB, which the SDK answers 413 before any message is
    read. It is in the audit log too (tool ``unknown``, the size it declared), between the
    calls before and after it; only POSTs to the endpoint are audited."""
    from spu.tools.service import MAX_REQUEST_BYTES

    service = start_service(ToolsConfig(corpus=str(corpus)), tmp_path / "tools")
    assert not call_tool(service.url(), "search", {"query": "amine"})[0]
    assert b" 413 " in _declared_post(service.port, service.path, 5 << 20)
    assert b" 404 " in _declared_post(service.port, "/mcp", 5 << 20)
    assert not call_tool(service.url(), "search", {"query": "cement"})[0]
    entries = list(read_audit(tmp_path / "tools" / AUDIT_FILE))
    assert [(e.call, e.tool, e.status) for e in entries] == [
        (0, "search", "ok"), (1, "unknown", "error"), (2, "search", "ok")]
    assert entries[1].args == {"bytes": str(5 << 20)}
    assert "413" in str(entries[1].error) and str(MAX_REQUEST_BYTES) in str(entries[1].error)


def test_the_service_starts_and_stops_without_waiting_for_a_clock(
        start_service, corpus: Path, monkeypatch) -> None:
    """Invariant: a run's tools service starts and stops on events, not on clocks.

    ``start`` returns once the server listens and ``stop`` once its thread has ended (the
    join's deadline is a dozen seconds away), and no sleep of 10 ms or more ran meanwhile:
    uvicorn's own server looks at ``should_exit`` every 0.1 s and waits 0.1 s more as it
    shuts down, and a start that polls ``started`` sleeps on its own clock; a run paid
    about 0.2 s for these.
    """
    from tests.clocks import clock_waits, record_sleeps

    slept = record_sleeps(monkeypatch)
    service = start_service(ToolsConfig(corpus=str(corpus)))
    error, _ = call_tool(service.url(), "search", {"query": "cement"})
    assert not error
    thread = service._thread
    assert thread is not None and thread.is_alive()
    service.stop()
    assert not thread.is_alive()
    assert clock_waits(slept) == [], slept
