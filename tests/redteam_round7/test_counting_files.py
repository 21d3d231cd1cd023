"""Round seven: the refusal-file check runs on the gateway's event loop, on agent bytes.

Round six keeps a file at a refusal only when it counts (``counts_without_key``: the
grader's own rules against a placeholder key), and calls it in the gateway's event loop
as the refused answer ends, on whatever ``output/rankings.json`` held. A file built to
crash the grader (deep nesting, huge numbers, broken UTF-8, a recoverable file at the
1 MiB limit) would, if it raised, lose the refusal's record line; if slow, stall every
other answer of the run. These check it returns a plain answer, never hanging, and that the
real gateway still records the refusal.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from spu.gateway import read_requests
from spu.grading.outcome import counts_without_key
from spu.grading.rules import MAX_BYTES
from spu.schema import Contract
from tests.conftest import EXAMPLE_TASK
from tests.gateway_doubles import JsonProvider, gateway_before, stand_in

CONTRACT = Contract.model_validate_json((EXAMPLE_TASK / "contract.json").read_text())
GROUP = CONTRACT.groups[0]
HEAD = json.dumps({"task_id": CONTRACT.task_id, "task_version": CONTRACT.task_version})[:-1]

HOSTILE = {
    "deep lists": b"[" * (MAX_BYTES - 1),
    "deep objects": b'{"a":' * (MAX_BYTES // 6),
    "huge integer": HEAD.encode() + b', "rankings": ' + b"9" * (MAX_BYTES // 2) + b"}",
    "broken utf-8": b'{"rankings": "\xff\xfe' + b"\xc3" * 1000 + b'"}',
    "nan": HEAD.encode() + b', "rankings": [{"group_id": NaN, "order": Infinity}]}',
    "one group a million times": (HEAD + ', "rankings": [' + ", ".join(
        [json.dumps({"group_id": GROUP.group_id, "order": GROUP.items})] * 20_000)
        )[:MAX_BYTES].encode(),
    "an item repeated": (HEAD + ', "rankings": [{"group_id": "' + GROUP.group_id
                         + '", "order": [' + ", ".join(['"' + GROUP.items[0] + '"'] * 200_000)
                         )[:MAX_BYTES].encode(),
    "fenced markdown": b"```json\n" + b"{" * (MAX_BYTES // 2) + b"\n```",
}


def test_hostile_files_are_judged_without_raising_or_hanging() -> None:
    """Each is judged in some tens of milliseconds on a quiet machine (the slowest, one
    group 20,000 times, 23 ms); the bound only catches a hang or a blow-up (a timed bound
    of 1 s failed once in CI on a starved machine: 2.3 s)."""
    for name, data in HOSTILE.items():
        started = time.monotonic()
        counts = counts_without_key(CONTRACT, data)
        assert isinstance(counts, bool), name
        assert time.monotonic() - started < 30, name  # no hang of the gateway's loop


class _Refuses(JsonProvider):
    answer = {"id": "m1", "type": "message", "role": "assistant", "model": "m",
              "content": [], "stop_reason": "refusal",
              "stop_details": {"type": "refusal", "category": "bio"},
              "usage": {"input_tokens": 3, "output_tokens": 0}}


def test_the_gateway_records_every_refusal_whatever_file_it_found(tmp_path: Path) -> None:
    files = list(HOSTILE.values())
    with stand_in(_Refuses) as upstream, gateway_before(
            tmp_path / "model", upstream, read_submission=lambda: files[0],
            submission_counts=lambda data: counts_without_key(CONTRACT, data)) as gateway, \
            httpx.Client(trust_env=False, timeout=20) as client:
        while files:
            said = client.post(gateway.url() + "/v1/messages",
                               headers={"x-api-key": gateway.token},
                               json={"model": "m", "max_tokens": 10,
                                     "messages": [{"role": "user", "content": "x"}]})
            assert said.status_code == 200
            files.pop(0)
    entries = read_requests(gateway.requests_path)
    assert len(entries) == len(HOSTILE) and all(e.refusal for e in entries)
    assert not (tmp_path / "model" / "refusal_files").exists()  # none of them counts
