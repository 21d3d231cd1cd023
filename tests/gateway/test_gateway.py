"""The model gateway against the scripted model server: passthrough, record, policy, faults."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from spu.config import ModelGatewayConfig
from spu.gateway import read_requests
from spu.gateway.server import ModelGateway
from spu.gateway.verdict import gateway_verdict, summarize
from spu.schema import Usage
from spu.scripted import Script, ScriptedModelServer, ScriptedTurn, default_script, reported_usage
from spu.scripted.script import refusal_script
from tests.gateway.conftest import SCRIPTED_PRICES, anthropic_body, responses_body


def _post(gateway: ModelGateway, path: str, body: dict[str, Any], *,
          bearer: bool = False, token: str | None = None) -> httpx.Response:
    token = gateway.token if token is None else token
    headers = {"authorization": f"Bearer {token}"} if bearer else {"x-api-key": token}
    return httpx.post(gateway.url() + path, json=body, headers=headers, timeout=30)


def _server_log(server: ScriptedModelServer) -> list[dict[str, Any]]:
    assert server.log_path is not None
    return [json.loads(line) for line in server.log_path.read_text().splitlines()]


@pytest.mark.parametrize(("api", "path", "make_body"), [
    ("anthropic", "/v1/messages", anthropic_body),
    ("openai-responses", "/responses", responses_body),
])
def test_streaming_passthrough_is_byte_identical(tmp_path: Path, api: str, path: str,
                                                 make_body: Any) -> None:
    """The agent gets, byte for byte, what the provider streamed (headers aside)."""
    script = Script(name="long", turns=(
        ScriptedTurn(text="word " * 4000, delta_chars=7, command="ls"),))
    body = make_body(0)
    with ScriptedModelServer(script) as direct:
        upstream_path = path if api == "anthropic" else "/v1" + path
        straight = httpx.post(direct.url + upstream_path, json=body, timeout=30)
    with ScriptedModelServer(script) as server, ModelGateway(
            tmp_path / "model", api=api, api_model="spu_agent",
            upstream=server.url if api == "anthropic" else server.url + "/v1") as gateway:
        through = _post(gateway, path, body, bearer=api != "anthropic")
    assert through.status_code == straight.status_code == 200
    assert through.headers["content-type"] == straight.headers["content-type"]
    assert len(straight.content) > 20_000
    assert through.content == straight.content
    (entry,) = read_requests(tmp_path / "model" / "requests.jsonl")
    assert entry.bytes_out == len(straight.content)
    assert entry.stream and entry.complete and not entry.final
    assert entry.ttfb_s is not None and entry.ttfb_s <= entry.latency_s


@pytest.mark.parametrize(("api", "path", "make_body"), [
    ("anthropic", "/v1/messages", anthropic_body),
    ("openai-responses", "/responses", responses_body),
])
def test_an_answer_streamed_as_generated_passes_whole(tmp_path: Path, api: str, path: str,
                                                      make_body: Any) -> None:
    """A provider's chunked stream, sent as it is produced and paced, reaches the agent
    byte for byte as the same answer rendered first, and is recorded the same."""
    text, body = "word " * 20_000, make_body(0)
    upstream_path = path if api == "anthropic" else "/v1" + path
    rendered = Script(name="r", turns=(ScriptedTurn(text=text, delta_chars=7),))
    with ScriptedModelServer(rendered) as direct:
        whole = httpx.post(direct.url + upstream_path, json=body, timeout=30)
    paced = Script(name="g", turns=(ScriptedTurn(text=text, delta_chars=7, as_generated=True,
                                                 bytes_per_s=4e6),))
    with ScriptedModelServer(paced) as direct:
        straight = httpx.post(direct.url + upstream_path, json=body, timeout=30)
    with ScriptedModelServer(paced, log_path=tmp_path / "served.jsonl") as server, ModelGateway(
            tmp_path / "model", api=api, api_model="spu_agent",
            upstream=server.url if api == "anthropic" else server.url + "/v1") as gateway:
        through = _post(gateway, path, body, bearer=api != "anthropic")
    assert straight.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in straight.headers and "content-length" in whole.headers
    assert len(whole.content) > 100_000
    assert straight.content == through.content == whole.content
    (entry,) = read_requests(tmp_path / "model" / "requests.jsonl")
    assert entry.stream and entry.complete and entry.bytes_out == len(whole.content)
    assert entry.usage == Usage(**_server_log(server)[0]["usage"])


def test_json_answer_and_count_tokens_pass_through(behind_gateway: Any) -> None:
    """A non-streamed answer is read from its JSON body; ``count_tokens`` bills nothing."""
    server, gateway = behind_gateway(default_script())
    answer = _post(gateway, "/v1/messages", anthropic_body(3, stream=False))
    counted = _post(gateway, "/v1/messages/count_tokens", anthropic_body(1, stream=False))
    assert answer.status_code == counted.status_code == 200
    assert answer.json()["stop_reason"] == "end_turn"
    entries = read_requests(gateway.requests_path)
    assert [e.endpoint for e in entries] == ["messages", "count_tokens"]
    assert entries[0].final and entries[0].stop_reason == "end_turn"
    assert entries[0].usage == Usage(**_server_log(server)[0]["usage"])
    assert entries[1].usage == Usage() and entries[1].status == 200


@pytest.mark.parametrize("api", ["anthropic", "openai-responses"])
def test_record_usage_equals_the_servers_log_bucket_by_bucket(behind_gateway: Any,
                                                              api: str) -> None:
    """Each request's usage in the record is what the provider reported for it."""
    server, gateway = behind_gateway(default_script(), api=api)
    for turn in range(4):
        if api == "anthropic":
            assert _post(gateway, "/v1/messages", anthropic_body(turn)).status_code == 200
        else:
            assert _post(gateway, "/responses", responses_body(turn),
                         bearer=True).status_code == 200
    entries = read_requests(gateway.requests_path)
    served = [Usage(**line["usage"]) for line in _server_log(server)]
    assert [e.usage for e in entries] == served
    assert served[0] != served[1]  # every turn reports a distinct usage
    verdict = gateway_verdict(entries)
    assert verdict.usage == reported_usage(server.log_path)  # type: ignore[arg-type]
    assert verdict.final_answer and verdict.infra_error is None and not verdict.refusal
    summary = summarize(entries, SCRIPTED_PRICES)
    assert summary.cost_usd > 0
    assert [e.final for e in entries] == [False, False, False, True]


def test_another_model_is_refused_in_the_providers_shape_and_recorded(
        behind_gateway: Any) -> None:
    """Only ``model.api_model`` reaches the upstream; another model gets a 403, recorded."""
    server, gateway = behind_gateway()
    refused = _post(gateway, "/v1/messages", anthropic_body(0, model="claude-opus-4-1"))
    assert refused.status_code == 403
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "permission_error"
    openai = _post(gateway, "/responses", responses_body(0, model="gpt-5"), bearer=True)
    assert openai.status_code == 403 and "error" in openai.json()
    assert server.responses == []  # nothing reached the provider
    entries = read_requests(gateway.requests_path)
    assert [(e.model, e.error_type) for e in entries] == [
        ("claude-opus-4-1", "gateway.model_refused"), ("gpt-5", "gateway.model_refused")]
    verdict = gateway_verdict(entries)
    assert verdict.refused_models == ("claude-opus-4-1", "gpt-5")
    assert verdict.infra_error is None  # the agent's doing, not the provider's


@pytest.mark.parametrize("bearer", [False, True])
def test_a_wrong_or_missing_token_is_refused(behind_gateway: Any, bearer: bool) -> None:
    """Without this run's token nothing is forwarded; the attempt is recorded."""
    server, gateway = behind_gateway()
    assert _post(gateway, "/v1/messages", anthropic_body(0), bearer=bearer,
                 token="sk-ant-guess").status_code == 401
    assert httpx.post(gateway.url() + "/v1/messages", json=anthropic_body(0)).status_code == 401
    other = _post(gateway, "/v1/messages", anthropic_body(0), bearer=bearer,
                  token=ModelGateway(gateway.folder, upstream="http://x").token)
    assert other.status_code == 401  # another run's gateway token is no good here
    assert server.responses == []
    assert gateway_verdict(read_requests(gateway.requests_path)).bad_tokens == 3
    assert _post(gateway, "/v1/messages", anthropic_body(0), bearer=bearer).status_code == 200


def test_only_model_endpoints_are_forwarded(behind_gateway: Any) -> None:
    """Any other path is a recorded 404 that never reaches the upstream."""
    server, gateway = behind_gateway()
    answer = _post(gateway, "/v1/files", {"model": "spu_agent"})
    assert answer.status_code == 404
    assert server.responses == []
    (entry,) = read_requests(gateway.requests_path)
    assert entry.error_type == "gateway.not_allowed"


class _KeyEcho(BaseHTTPRequestHandler):
    """An upstream that answers with the credentials it was sent."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        data = json.dumps({"x-api-key": self.headers.get("x-api-key"),
                           "authorization": self.headers.get("authorization")}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_the_real_key_goes_upstream_in_the_providers_header_whatever_the_client_used(
        tmp_path: Path) -> None:
    """The agent's token is swapped for the provider key, in the header the provider takes
    (the model's configuration says which), never the one the agent chose: Anthropic
    answers 401 to its API key sent as a bearer token, and two such answers ended the run
    as a rejected key (an ``infra_error``, retried free). The token never goes upstream."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _KeyEcho)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    seen = {}
    try:
        upstream = f"http://127.0.0.1:{httpd.server_address[1]}"
        for provider_bearer in (False, True):
            with ModelGateway(tmp_path / f"model-{provider_bearer}", upstream=upstream,
                              api_model="spu_agent", api_key="sk-real-key",
                              key_as_bearer=provider_bearer) as gateway:
                seen[provider_bearer] = [
                    _post(gateway, "/v1/messages", anthropic_body(0)).json(),
                    _post(gateway, "/v1/messages", anthropic_body(0), bearer=True).json(),
                    _post(gateway, "/responses", responses_body(0), bearer=True).json()]
    finally:
        httpd.shutdown()
        httpd.server_close()
    as_api_key = {"x-api-key": "sk-real-key", "authorization": None}
    as_bearer = {"x-api-key": None, "authorization": "Bearer sk-real-key"}
    assert seen[False] == [as_api_key, as_api_key, as_bearer]  # Anthropic's Messages API
    assert seen[True] == [as_bearer, as_bearer, as_bearer]  # a provider's compatible endpoint


# ---------------------------------------------------------------------- faults


def _turns(*turns: ScriptedTurn) -> Script:
    return Script(name="faults", turns=turns)


def test_a_burst_of_529s_then_an_answer_is_no_infra_error(behind_gateway: Any) -> None:
    """Overloaded answers that the CLI's retries got past leave the run's verdict clean."""
    script = _turns(ScriptedTurn(text="Done.", http_error=529, fault_times=2))
    server, gateway = behind_gateway(script)
    statuses = [_post(gateway, "/v1/messages", anthropic_body(0)).status_code
                for _ in range(3)]
    assert statuses == [529, 529, 200]
    entries = read_requests(gateway.requests_path)
    assert [e.error_type for e in entries] == ["overloaded_error", "overloaded_error", None]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is None and verdict.final_answer


@pytest.mark.parametrize(("status", "kind"), [(500, "api_error"), (529, "overloaded_error")])
def test_errors_with_no_answer_after_them_are_an_infra_error(behind_gateway: Any, status: int,
                                                             kind: str) -> None:
    """5xx and 529 that no later answer followed: ``infra_error``, named by the record."""
    script = _turns(ScriptedTurn(text="Listing.", command="ls"), ScriptedTurn(http_error=status))
    _, gateway = behind_gateway(script)
    assert _post(gateway, "/v1/messages", anthropic_body(0)).status_code == 200
    for _ in range(2):
        assert _post(gateway, "/v1/messages", anthropic_body(1)).status_code == status
    verdict = gateway_verdict(read_requests(gateway.requests_path))
    assert verdict.infra_error is not None
    assert verdict.infra_error.startswith(f"API error: HTTP {status} {kind}")
    assert "2 failed requests" in verdict.infra_error
    assert not verdict.final_answer


@pytest.mark.parametrize("api", ["anthropic", "openai-responses"])
def test_a_stream_cut_mid_answer_is_cut_for_the_agent_and_recorded(behind_gateway: Any,
                                                                   api: str) -> None:
    """The agent's stream breaks where the provider's did; the record says so."""
    script = _turns(ScriptedTurn(text="A long answer " * 50, command="ls", cut_after_events=3,
                                 fault_times=1))
    server, gateway = behind_gateway(script, api=api)
    path, body = (("/v1/messages", anthropic_body(0)) if api == "anthropic"
                  else ("/responses", responses_body(0)))
    with pytest.raises(httpx.RemoteProtocolError):
        _post(gateway, path, body, bearer=api != "anthropic")
    entries = read_requests(gateway.requests_path)
    assert entries[0].error_type == "gateway.stream_dropped"
    assert not entries[0].complete and entries[0].status == 200
    # The input as the server billed it; the output no final usage gave: at least the
    # server's count, estimated from the deltas read (the line says so).
    logged = Usage(**_server_log(server)[0]["usage"])
    assert entries[0].usage.model_copy(update={"output": logged.output}) == logged
    assert entries[0].usage.output >= logged.output
    if entries[0].usage.output > logged.output:
        assert "estimated from the" in (entries[0].error or ""), entries[0]
    verdict = gateway_verdict(entries)
    assert verdict.infra_error is not None and "stream_dropped" in verdict.infra_error
    # The CLI's retry gets the whole answer: the run is clean again.
    assert _post(gateway, path, body, bearer=api != "anthropic").status_code == 200
    verdict = gateway_verdict(read_requests(gateway.requests_path))
    assert verdict.infra_error is None
    reported = reported_usage(server.log_path)  # type: ignore[arg-type]
    estimated = entries[0].usage.output - logged.output
    assert verdict.usage == reported.model_copy(update={"output": reported.output + estimated})


def test_a_slow_first_byte_is_waited_for_and_timed(behind_gateway: Any) -> None:
    """A provider slow to start answering is no error; ``ttfb_s`` records the wait."""
    _, gateway = behind_gateway(_turns(ScriptedTurn(text="Done.", first_byte_delay_s=0.4)))
    assert _post(gateway, "/v1/messages", anthropic_body(0)).status_code == 200
    (entry,) = read_requests(gateway.requests_path)
    assert entry.ttfb_s is not None and entry.ttfb_s >= 0.4
    assert entry.complete and entry.final and entry.error_type is None


def test_an_unreachable_upstream_is_an_infra_error(tmp_path: Path) -> None:
    """No provider to talk to: a 502 in the API's shape, and an infra error."""
    with ModelGateway(tmp_path / "model", upstream="http://127.0.0.1:9",
                      api_model="spu_agent") as gateway:
        answer = _post(gateway, "/v1/messages", anthropic_body(0))
    assert answer.status_code == 502 and answer.json()["error"]["type"] == "api_error"
    verdict = gateway_verdict(read_requests(gateway.requests_path))
    assert verdict.infra_error is not None and "upstream_unreachable" in verdict.infra_error


@pytest.mark.parametrize("api", ["anthropic", "openai-responses"])
def test_a_provider_refusal_is_the_verdict(behind_gateway: Any, api: str) -> None:
    """The provider's refusal as the final answer makes the verdict a refusal, labelled."""
    _, gateway = behind_gateway(refusal_script("bio"), api=api)
    for turn in (0, 1):
        if api == "anthropic":
            _post(gateway, "/v1/messages", anthropic_body(turn))
        else:
            _post(gateway, "/responses", responses_body(turn), bearer=True)
    verdict = gateway_verdict(read_requests(gateway.requests_path))
    assert verdict.refusal and verdict.refusal_label == "[bio]"
    assert verdict.infra_error is None and verdict.final_answer


def test_the_spend_cap_ends_with_a_final_error(behind_gateway: Any) -> None:
    """Past ``limits.max_cost_usd`` every generation is refused: verdict ``cost_limit``."""
    _, gateway = behind_gateway(default_script(), max_cost_usd=0.0005)
    assert _post(gateway, "/v1/messages", anthropic_body(0)).status_code == 200
    capped = _post(gateway, "/v1/messages", anthropic_body(1))
    assert capped.status_code == 400
    assert "max_cost_usd" in capped.json()["error"]["message"]
    entries = read_requests(gateway.requests_path)
    assert entries[-1].error_type == "gateway.cost_limit"
    verdict = gateway_verdict(entries)
    assert verdict.cost_limit and verdict.infra_error is None
    assert summarize(entries, SCRIPTED_PRICES).cost_usd >= 0.0005


def test_bodies_only_with_log_bodies_but_tool_results_always(behind_gateway: Any,
                                                             tmp_path: Path) -> None:
    """Tool results the model saw are kept bounded for the screen; bodies on request only."""
    cfg = ModelGatewayConfig(tool_result_chars=5)
    _, plain = behind_gateway(default_script(), cfg=cfg, name="plain")
    for turn in range(3):
        _post(plain, "/v1/messages", anthropic_body(turn))
    assert not (plain.folder / "bodies").exists()
    assert all(e.body_file is None for e in read_requests(plain.requests_path))
    kept = [json.loads(line) for line in plain.tool_results_path.read_text().splitlines()]
    # Each result once, though every request repeats the conversation; a long one as its
    # head and its tail.
    assert [(k["call_id"], k["text"], k.get("tail"), k["truncated"]) for k in kept
            if k["kind"] == "tool_result"] == [("toolu_0", "outpu", "all 0", True),
                                               ("toolu_1", "outpu", "all 1", True)]
    _, logged = behind_gateway(default_script(), cfg=ModelGatewayConfig(log_bodies=True),
                               name="logged")
    _post(logged, "/v1/messages", anthropic_body(1))
    (entry,) = read_requests(logged.requests_path)
    assert entry.body_file is not None
    saved = json.loads((logged.folder / entry.body_file).read_text())
    assert saved["request"] == anthropic_body(1)
    assert "message_stop" in saved["answer"]


def test_answering_tries_no_import(behind_gateway: Any) -> None:
    """No module is looked for while the gateway answers: a failed import per request
    (httpcore's ``import sniffio``, when sniffio is missing) cost 0.4 ms of its first byte."""
    import importlib.abc
    import sys

    _, gateway = behind_gateway(default_script())

    class Looked(importlib.abc.MetaPathFinder):
        def __init__(self) -> None:
            self.names: list[str] = []

        def find_spec(self, name: str, path: object = None, target: object = None) -> None:
            self.names.append(name)

    _post(gateway, "/v1/messages", anthropic_body(0, stream=True))  # imports done once
    finder = Looked()
    sys.meta_path.insert(0, finder)
    try:
        for turn in range(1, 4):
            assert _post(gateway, "/v1/messages", anthropic_body(turn)).status_code == 200
    finally:
        sys.meta_path.remove(finder)
    assert finder.names == []
