"""The gateway's record is bounded whatever the agent sends (issue 41, H1).

Red team round four: a refused request's model name (8 MiB) was written twice into
``model/requests.jsonl`` (its ``model`` field and the 403's message); 40 such requests
wrote 671 MB, and ``read_requests`` read the whole file into memory (the runner reached
1.46 GB against the agent's 1 GiB).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import httpx
import pytest

from spu.config import ModelGatewayConfig
from spu.gateway import record as gateway_record
from spu.gateway.verdict import gateway_verdict, key_rejected, read_requests
from spu.schema import GatewayRequest
from tests.gateway_doubles import ANSWER, JsonProvider, gateway_before, stand_in

EIGHT_MIB = 8 * 1024 * 1024


def test_forty_requests_naming_an_8_mib_model_write_a_few_kilobytes(tmp_path: Path) -> None:
    """Agent: 40 requests, each naming a model of 8 MiB (refused: not the run's model).

    Holds: every text the agent chose is cut before it is written (the model field to
    256 characters, the 403's message naming it too); the record stays kilobytes, not
    the 671 MB of before, and still names the refused model (cut) in its verdict.
    """
    name = "m" * EIGHT_MIB
    with stand_in(JsonProvider) as upstream, gateway_before(tmp_path / "model", upstream) as gw, \
            httpx.Client(timeout=60, trust_env=False) as client:
        for _ in range(40):
            answer = client.post(gw.url() + "/v1/messages", headers={"x-api-key": gw.token},
                                 json={"model": name, "max_tokens": 16, "messages": []})
            assert answer.status_code == 403
            assert len(answer.content) < 2048
    size = gw.requests_path.stat().st_size
    entries = read_requests(gw.requests_path)
    assert len(entries) == 40 and size < 40 * 2048, size
    assert all(len(e.model or "") == gateway_record.FIELD_CHARS for e in entries)
    assert all(len(e.error or "") <= gateway_record.ERROR_CHARS for e in entries)
    (refused,) = gateway_verdict(entries).refused_models
    assert refused.startswith("mmm") and refused.endswith("...")


def test_a_tool_call_id_of_8_mib_is_cut_in_the_tool_results(tmp_path: Path) -> None:
    """Agent: a tool result whose ``tool_use_id`` is 8 MiB. Holds: written cut."""
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t" * EIGHT_MIB, "content": "ok"}]}]}
    with stand_in(JsonProvider) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        httpx.post(gw.url() + "/v1/messages", headers={"x-api-key": gw.token}, json=body,
                   timeout=60, trust_env=False)
    (kept,) = [json.loads(line) for line in gw.tool_results_path.read_text().splitlines()]
    assert len(kept["call_id"]) == gateway_record.FIELD_CHARS and kept["text"] == "ok"


def test_past_the_record_cap_every_request_is_a_recorded_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent: floods the gateway with requests until its record is full, then more.

    Holds: past ``model_gateway.record_mb`` every request is refused (a final 400,
    ``gateway.record_full``, never forwarded); the first refusals are written, those
    past the headroom counted, so the file stays bounded; the verdict says so (a note in
    the run record) and counts none of it as a provider failure.
    """
    monkeypatch.setattr(gateway_record, "RECORD_HEADROOM_BYTES", 4096)
    cfg = ModelGatewayConfig(record_mb=16 / 1024)  # 16 KiB
    forwarded = 0

    class Counts(JsonProvider):
        def reply(self, body: bytes) -> None:
            nonlocal forwarded
            forwarded += 1
            self.send_json(ANSWER)

    with stand_in(Counts) as upstream, \
            gateway_before(tmp_path / "model", upstream, cfg=cfg) as gw, \
            httpx.Client(timeout=30, trust_env=False) as client:
        statuses = [client.post(gw.url() + "/v1/messages", headers={"x-api-key": gw.token},
                                json={"model": "m", "max_tokens": 16, "messages": []}
                                ).status_code for _ in range(200)]
        notes = gw.record.notes()
    size = gw.requests_path.stat().st_size
    entries = read_requests(gw.requests_path)
    full = [e for e in entries if e.error_type == "gateway.record_full"]
    assert 0 < statuses.count(200) == forwarded < 200 and statuses[-1] == 400, statuses
    assert full and all(e.status == 400 for e in full)
    assert size <= 16 * 1024 + 4096 + 2048, size
    assert gw.record.unwritten == 200 - len(entries) > 0
    assert notes and "record_mb" in notes[0]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None
    assert any("record_mb" in said for said in verdict.agent_caused)


def test_a_record_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """A record holding a 64 MiB line (no gateway writes one; a file from elsewhere) among
    good ones: read without holding the file, the long line skipped, the rest read."""
    good = GatewayRequest(time="t", endpoint="messages", status=401,
                          error_type="authentication_error", error="invalid x-api-key")
    path = tmp_path / "requests.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        f.write(good.model_dump_json() + "\n")
        f.write('{"time": "' + "x" * (64 * 1024 * 1024) + '"}\n')
        f.write(good.model_dump_json() + "\n")
    tracemalloc.start()
    try:
        entries = read_requests(path)
        rejected = key_rejected(read_requests(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert entries == [good, good] and rejected is not None
    assert peak < 8 * 1024 * 1024, peak
