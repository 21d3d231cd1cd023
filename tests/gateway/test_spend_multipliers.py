"""The spend cap holds for every field that multiplies a request's billed output (issue 41, G5).

Red team round four: ``limits.max_cost_usd=0.01``, four parallel Chat Completions requests
with ``n=8``, 0.0601 USD spent: the gateway's bound on each generation counted its
``max_tokens`` once, the provider billed it eight times. Each test here sends what an
agent would, to a stand-in provider that bills every answer it was asked for (a router
that reads the field, where the API itself has none).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from spu.config import PriceConfig
from spu.gateway.answers import fold_key
from spu.gateway.verdict import read_requests
from tests.gateway_doubles import JsonProvider, gateway_before, stand_in

PRICES = PriceConfig(input=1.0, output=5.0)
"""USD per million tokens: 375 output tokens eight times over cost 0.015 USD."""
CAP_USD = 0.01
MAX_TOKENS = 375


def _times(body: dict[str, Any]) -> int:
    """Answers a lenient router generates for ``body``: every multiplier, wherever set."""
    product, objects = 1, [body]
    while objects:
        node = objects.pop()
        for key, value in node.items():
            if isinstance(value, dict) and fold_key(key) in {
                    "generationconfig", "extrabody", "google"}:
                objects.append(value)
            elif value is not None and fold_key(key) in {
                    "n", "bestof", "numreturnsequences", "candidatecount"}:
                product *= int(value)
    return product


class BillsEveryAnswer(JsonProvider):
    """Answers after 0.3 s (so that parallel requests overlap), billing ``max_tokens``
    (plus a prediction's tokens) for each answer asked for."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def reply(self, body: bytes) -> None:  # noqa: D102
        request = json.loads(body)
        self.seen.append(request)
        time.sleep(0.3)
        asked = int(request.get("max_tokens") or request.get("max_output_tokens")
                    or request.get("max_completion_tokens"))
        prediction = request.get("prediction")
        output = (asked + (len(json.dumps(prediction)) if prediction else 0)) * _times(request)
        if self.path.endswith("/chat/completions"):
            self.send_json({"id": "c1", "object": "chat.completion", "choices": [
                {"index": k, "message": {"role": "assistant", "content": "Ranked."},
                 "finish_reason": "stop"} for k in range(_times(request))],
                "usage": {"prompt_tokens": 10, "completion_tokens": output}})
        elif self.path.endswith("/responses"):
            self.send_json({"id": "resp_1", "object": "response", "status": "completed",
                            "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                                        "content": [{"type": "output_text",
                                                     "text": "Ranked."}]}],
                            "usage": {"input_tokens": 10, "output_tokens": output}})
        else:
            self.send_json({"id": "m1", "type": "message", "role": "assistant", "model": "m",
                            "content": [{"type": "text", "text": "Ranked."}],
                            "stop_reason": "end_turn",
                            "usage": {"input_tokens": 10, "output_tokens": output}})


def _body(path: str, extra: dict[str, Any]) -> dict[str, Any]:
    if path == "/v1/responses":
        return {"model": "m", "input": "Rank.", "max_output_tokens": MAX_TOKENS, **extra}
    return {"model": "m", "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": "Rank."}], **extra}


MULTIPLIED = [
    ("/v1/chat/completions", {"n": 8}),  # the red team's request
    ("/v1/chat/completions", {"best_of": 8}),
    ("/v1/chat/completions", {"n": 2, "best_of": 4}),
    ("/v1/chat/completions", {"N": 8}),  # another spelling a Go router matches
    ("/v1/chat/completions", {"num_return_sequences": 8}),
    ("/v1/chat/completions", {"extra_body": {"google": {"candidate_count": 8}}}),
    ("/v1/chat/completions", {"prediction": {"type": "content", "content": "x" * 2800}}),
    ("/v1/messages", {"n": 8}),
    ("/v1/messages", {"candidateCount": 8}),
    ("/v1/responses", {"n": 8}),
    ("/v1/responses", {"generation_config": {"candidate_count": 8}}),
]


@pytest.mark.parametrize(("path", "extra"), MULTIPLIED,
                         ids=[f"{p.rsplit('/', 1)[1]}-{'-'.join(e)}" for p, e in MULTIPLIED])
def test_parallel_multiplied_requests_do_not_overrun_the_spend_cap(
        tmp_path: Path, path: str, extra: dict[str, Any]) -> None:
    """Agent: four requests at once, each asking for its output eight times over.

    Holds: each generation holds its output bound times every answer it asks for, so
    the first (0.015 USD, past the 0.01 USD cap alone) runs alone and the other three are
    refused at the cap: the cap is passed by at most one request's cost, as when
    requests come one at a time. (Before: each held one answer's bound, all four ran.)
    """
    BillsEveryAnswer.seen = []
    with stand_in(BillsEveryAnswer, backlog=16) as upstream, \
            gateway_before(tmp_path / "model", upstream, prices=PRICES,
                           max_cost_usd=CAP_USD) as gw:

        def ask(_: int) -> int:
            with httpx.Client(timeout=30, trust_env=False) as client:
                return client.post(gw.url() + path, json=_body(path, extra),
                                   headers={"x-api-key": gw.token}).status_code

        with ThreadPoolExecutor(4) as pool:
            statuses = sorted(pool.map(ask, range(4)))
        spent = gw.spent_usd
    entries = read_requests(gw.requests_path)
    billed = [e.usage.output for e in entries if e.status == 200]
    one_request = max(billed) * PRICES.output / 1e6 + 1e-4
    assert statuses == [200, 400, 400, 400], (statuses, entries)
    assert spent <= CAP_USD + one_request, (spent, entries)
    assert [e.error_type for e in entries if e.status == 400] == ["gateway.cost_limit"] * 3
    assert len(BillsEveryAnswer.seen) == 1


UNBOUNDED = [{"n": 0}, {"n": 1000}, {"n": "eight"}, {"n": True}, {"best_of": [8]},
             {"n": 16, "best_of": 16}, {"extra_body": {"google": {"candidateCount": -1}}}]


@pytest.mark.parametrize("extra", UNBOUNDED, ids=[json.dumps(e) for e in UNBOUNDED])
def test_a_multiplier_the_cap_cannot_bound_is_a_recorded_400(
        tmp_path: Path, extra: dict[str, Any]) -> None:
    """Agent: a multiplier no provider reads as one to 128 answers (zero, past 128, not a
    whole number, or 256 answers in all). Holds: a recorded 400 (``gateway.bad_request``,
    the agent's), nothing forwarded, whatever a lenient router would make of it."""
    BillsEveryAnswer.seen = []
    with stand_in(BillsEveryAnswer) as upstream, \
            gateway_before(tmp_path / "model", upstream, prices=PRICES,
                           max_cost_usd=CAP_USD) as gw:
        answer = httpx.post(gw.url() + "/v1/chat/completions", timeout=30, trust_env=False,
                            json=_body("/v1/chat/completions", extra),
                            headers={"x-api-key": gw.token})
    (entry,) = read_requests(gw.requests_path)
    assert answer.status_code == 400 and "answers" in answer.json()["error"]["message"]
    assert (entry.status, entry.error_type) == (400, "gateway.bad_request"), entry
    assert BillsEveryAnswer.seen == []


def test_one_answer_asked_as_n_1_goes_on_unchanged(tmp_path: Path) -> None:
    """Honest: ``n: 1`` (what SDKs may send) and ``n: null`` go on, held at one answer."""
    BillsEveryAnswer.seen = []
    with stand_in(BillsEveryAnswer) as upstream, \
            gateway_before(tmp_path / "model", upstream, prices=PRICES,
                           max_cost_usd=CAP_USD) as gw:
        for n in (1, None):
            answer = httpx.post(gw.url() + "/v1/chat/completions", timeout=30,
                                trust_env=False, headers={"x-api-key": gw.token},
                                json=_body("/v1/chat/completions", {"n": n}))
            assert answer.status_code == 200, answer.text
    assert [r["n"] for r in BillsEveryAnswer.seen] == [1, None]
