"""Shared pieces of the tools tests: a corpus, a stdlib MCP client, a service."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spu.analysis.exposure import ExposureDetector
from spu.config import ToolsConfig
from spu.schema import SourceRecord
from spu.tools.audit import AuditLog
from spu.tools.service import ToolsService
from spu.tools.session import make_provider

SOURCE = SourceRecord(doi="10.1126/science.aar5169",
                      title="Predicting reaction performance in C-N cross-coupling using "
                            "machine learning")

DOCS = [
    {"url": "https://corpus.test/a", "title": "Buchwald-Hartwig amination overview",
     "text": "Palladium catalysed C-N cross-coupling of aryl halides with amines."},
    {"url": "https://corpus.test/source", "title": "Reading list",
     "text": "See doi:10.1126/science.aar5169 for yields with isoxazole additives."},
    {"url": "https://corpus.test/c", "title": "Cement hydration",
     "text": "Heat evolved during hardening of Portland cement."},
]


def write_corpus(path: Path, docs: list[dict[str, Any]] = DOCS) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def mcp_post(url: str, body: Any, timeout: float = 60) -> tuple[int, Any]:
    """POST one JSON-RPC message with the standard library; (status, parsed body or bytes)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def call_tool(url: str, name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """(is_error, text) of one tools/call."""
    status, body = mcp_post(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": name, "arguments": arguments}})
    assert status == 200, body
    result = body["result"]
    return bool(result.get("isError")), "\n".join(c["text"] for c in result["content"])


def screen_for(source: SourceRecord = SOURCE):
    detector = ExposureDetector.for_source(source)
    return lambda text: [(m.kind, m.matched) for m in detector.scan(text)]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl")


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[Any]:
    """Start a service for a config; stopped at the end of the test."""
    started: list[ToolsService] = []

    def _start(cfg: ToolsConfig, folder: Path | None = None, screen: Any = None) -> ToolsService:
        folder = folder or tmp_path / f"tools{len(started)}"
        service = ToolsService(make_provider(cfg), AuditLog(folder), cfg,
                               screen if screen is not None else screen_for()).start()
        started.append(service)
        return service

    yield _start
    for service in started:
        service.stop()
