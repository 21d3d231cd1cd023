"""The scripted model server: a local stand-in for a model provider, for offline runs.

It listens on 127.0.0.1 (a free port by default) and speaks the two APIs the agent
CLIs use: the Anthropic Messages API (``POST /v1/messages``, SSE or not, and
``/v1/messages/count_tokens``) for Claude Code and the OpenAI Responses API
(``POST /v1/responses``, SSE) for Codex. Requests of the agent loop get the next turn
of the :class:`~spu.scripted.script.Script`; other requests (titles, summaries) get a
short text. Every answer reports a known usage, and every request is logged as one
JSON line (with what was answered and the usage reported), so a test can compare the
usage a harness parsed with what the server actually sent, bucket by bucket.

What the pinned CLIs ask, found by logging every request: Claude Code 2.1.197 (``-p``,
non-essential traffic off) sends one streaming ``POST /v1/messages?beta=true`` per
turn, sub-agents included, and nothing else; Codex 0.171.0 sends one streaming
``POST /v1/responses`` per turn. Token counting, non-streaming messages and ``GET``
(model lists) are answered too, for versions that ask.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from spu.schema import Usage
from spu.scripted import anthropic_messages, openai_responses
from spu.scripted.script import SIDE_USAGE, Script, ScriptedTurn, default_script, scripted_usage

SSE_CHUNK_BYTES = 16 * 1024
"""An answer sent as generated goes out in chunks of about this many bytes."""
LOGGED_HEADERS = ("user-agent", "anthropic-beta", "anthropic-version", "originator")
"""Request headers kept in the log; credentials never are."""


@dataclass(frozen=True)
class ServedResponse:
    """What the server answered to one request."""

    api: str
    """``anthropic``, ``openai`` or ``other``."""
    path: str
    """Request path."""
    kind: str
    """``script`` (a turn of the agent loop), ``side`` (any other generation),
    ``count_tokens``, ``error`` (a scripted HTTP error), ``cut`` (a turn's stream cut
    mid-answer) or ``other``."""
    status: int
    """HTTP status of the answer."""
    turn: int | None = None
    """Script turn played (``script`` and ``error`` answers)."""
    model: str | None = None
    """Model the request named."""
    usage: Usage | None = None
    """Usage reported in the answer."""
    response_id: str | None = None
    """Message or response id of the answer."""

    def to_json(self) -> dict[str, Any]:
        """The log line of this answer."""
        return {
            "api": self.api, "path": self.path, "kind": self.kind, "status": self.status,
            "turn": self.turn, "model": self.model, "response_id": self.response_id,
            "usage": self.usage.model_dump() if self.usage is not None else None,
        }


def usage_told(events: list[tuple[str, dict[str, Any]]]) -> Usage:
    """The usage a client was told by the first ``events`` of an answer (a cut stream).

    Anthropic's ``message_start`` tells the input buckets and one output token; the
    Responses API tells usage only in its final event.
    """
    told = Usage()
    for name, payload in events:
        if name == "message_start":
            raw = payload["message"]["usage"]
            told = Usage(input=raw["input_tokens"], cache_read=raw["cache_read_input_tokens"],
                         cache_write=raw["cache_creation_input_tokens"],
                         cache_write_1h=raw["cache_creation"]["ephemeral_1h_input_tokens"],
                         output=raw["output_tokens"])
        elif name == "response.completed" and payload["response"].get("usage"):
            raw = payload["response"]["usage"]
            cached = raw["input_tokens_details"]["cached_tokens"]
            writes = raw["input_tokens_details"]["cache_write_tokens"]
            told = Usage(input=raw["input_tokens"] - cached - writes, cache_read=cached,
                         cache_write=writes, output=raw["output_tokens"])
    return told


def reported_usage(log_path: str | Path,
                   kinds: tuple[str, ...] = ("script", "side", "cut")) -> Usage:
    """Total usage the server reported, read back from its log file.

    Cut answers count with what their first events told.
    """
    total = Usage()
    for line in Path(log_path).read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("kind") in kinds and entry.get("usage"):
            total = total + Usage(**entry["usage"])
    return total


class ScriptedModelServer:
    """Serve ``script`` on 127.0.0.1 in a background thread.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    ``log_path`` receives one JSON line per request; ``log_bodies`` adds the request
    bodies (large: every request carries the system prompt and the tool list).

    Examples
    --------
    >>> import json, urllib.request
    >>> with ScriptedModelServer() as server:
    ...     body = json.dumps({"model": "scripted", "stream": False, "max_tokens": 10,
    ...                        "messages": [{"role": "user", "content": "hi"}],
    ...                        "tools": [{"name": "Bash", "input_schema": {}}]}).encode()
    ...     request = urllib.request.Request(server.url + "/v1/messages", data=body,
    ...                                      headers={"content-type": "application/json"})
    ...     answer = json.load(urllib.request.urlopen(request))
    >>> answer["stop_reason"], answer["usage"]["input_tokens"]
    ('tool_use', 101)
    """

    def __init__(self, script: Script | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, log_path: str | Path | None = None,
                 log_bodies: bool = False) -> None:
        self.script = script or default_script()
        self.log_path = Path(log_path) if log_path is not None else None
        self.log_bodies = log_bodies
        self.responses: list[ServedResponse] = []
        self._lock = threading.Lock()
        self._counter = 0
        self._attempts: dict[tuple[str, bool, int], int] = {}
        self._httpd = ThreadingHTTPServer((host, port), _handler_class(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The TCP port it listens on."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123`` (Codex needs ``url + "/v1"``)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ScriptedModelServer:
        """Start serving in a daemon thread."""
        if self._thread is None:
            # A short poll: stop() waits for the loop to notice (0.5 s by default).
            self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                            name="spu-scripted-model", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (``spu scripted-server``)."""
        try:
            self._httpd.serve_forever()
        finally:
            self._httpd.server_close()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals

    def next_id(self) -> int:
        """A number unique within this server, for message, response and call ids."""
        with self._lock:
            self._counter += 1
            return self._counter

    def fault(self, api: str, play: _Play, subagent: bool) -> bool:
        """True when this request of ``play``'s turn gets the turn's fault.

        A turn's HTTP error or stream cut hits its first ``fault_times`` requests (every
        one when None): a burst of 529s, then the answer, as a CLI's retries see it.
        """
        if play.index is None:
            return False
        with self._lock:
            key = (api, subagent, play.index)
            self._attempts[key] = self._attempts.get(key, 0) + 1
            attempt = self._attempts[key]
        limit = play.turn.fault_times
        return limit is None or attempt <= limit

    def record(self, served: ServedResponse, request: dict[str, Any]) -> None:
        """Keep ``served`` and append it, with a summary of the request, to the log."""
        with self._lock:
            self.responses.append(served)
            if self.log_path is None:
                return
            line = {"time": round(time.time(), 3), **served.to_json(), "request": request}
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")


def _request_summary(server: ScriptedModelServer, handler: BaseHTTPRequestHandler,
                     body: Any) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "method": handler.command,
        "headers": {k: v for k, v in handler.headers.items() if k.lower() in LOGGED_HEADERS},
    }
    if isinstance(body, dict):
        summary["stream"] = body.get("stream")
        summary["tools"] = [t.get("name") or t.get("type") for t in body.get("tools") or []
                            if isinstance(t, dict)]
        conversation = body.get("messages", body.get("input"))
        summary["items"] = len(conversation) if isinstance(conversation, list) else None
        for key in ("output_config", "reasoning", "thinking"):
            if key in body:
                summary[key] = body[key]
        if server.log_bodies:
            summary["body"] = body
    return summary


@dataclass(frozen=True)
class _Play:
    """What to answer to one generation request."""

    kind: str
    turn: ScriptedTurn
    usage: Usage
    index: int | None = None


def request_text(value: Any) -> str:
    """Every string of a request body, joined: where a scripted ``if_asked`` is looked for."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(request_text(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(request_text(v) for v in value)
    return ""


def _play(server: ScriptedModelServer, index: int | None, subagent: bool = False,
          body: Any = None) -> _Play:
    """Turn ``index`` of the script, or a side answer when the request is outside the loop.

    A side answer is the script's :meth:`~spu.scripted.script.Script.answer` to the
    request's text where it has one, else a short text.
    """
    if index is None:
        answer = server.script.answer(request_text(body)) if server.script.answers else None
        return _Play("side", ScriptedTurn(text=answer or "Scripted."), SIDE_USAGE)
    turn = server.script.turn(index, subagent=subagent)
    # A refusal before any output is not billed (the provider reports no tokens).
    usage = Usage() if turn.refusal is not None else scripted_usage(index, subagent=subagent)
    return _Play("script", turn, usage, index)


def _handler_class(server: ScriptedModelServer) -> type[BaseHTTPRequestHandler]:
    """The request handler class of ``server``."""
    return type("ScriptedHandler", (_Handler,), {"model_server": server})


class _Handler(BaseHTTPRequestHandler):
    """Answers one request of the scripted model server (``model_server``)."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm the body waits for
    # the client's delayed ACK of the headers (40 ms on Linux), as no real API makes it.
    disable_nagle_algorithm = True
    model_server: ScriptedModelServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # the JSON log replaces the access log

    def _rejected(self, path: str, summary: dict[str, Any]) -> bool:
        """Answer 401 when the script rejects every key."""
        if not self.model_server.script.reject_key:
            return False
        sent = {k.lower() for k in self.headers}
        api = "anthropic" if "x-api-key" in sent or path.endswith("/messages") else "openai"
        body = (openai_responses.error_body(401) if api == "openai"
                else anthropic_messages.error_body(401))
        self.model_server.record(ServedResponse(api=api, path=path, kind="error", status=401),
                                 summary)
        self._send_json(401, body)
        return True

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        summary = _request_summary(self.model_server, self, None)
        if self._rejected(self.path, summary):
            return
        body = {"data": [{"id": "scripted", "type": "model", "object": "model"}]}
        self.model_server.record(ServedResponse(api="other", path=self.path, kind="other",
                                                status=200), summary)
        self._send_json(200, body)

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = None
        summary = _request_summary(self.model_server, self, body)
        path = self.path.split("?", 1)[0]
        if self._rejected(path, summary):
            return
        if not isinstance(body, dict):
            self._other(path, 400, summary, anthropic_messages.error_body(400))
        elif path.endswith("/messages/count_tokens"):
            self._count_tokens(path, body, summary)
        elif path.endswith("/messages"):
            self._anthropic(path, body, summary)
        elif path.endswith("/responses"):
            self._openai(path, body, summary)
        else:
            self._other(path, 404, summary, {"error": {"message": f"no route {path}"}})

    def _other(self, path: str, status: int, summary: dict[str, Any],
               body: dict[str, Any]) -> None:
        self.model_server.record(ServedResponse(api="other", path=path, kind="other",
                                                status=status), summary)
        self._send_json(status, body)

    # ------------------------------------------------------------------ the two APIs
    # Each answer is recorded before it is sent: a client that exits on the last
    # answer, and a harness that then stops the server, must find it in the log.

    def _count_tokens(self, path: str, body: dict[str, Any], summary: dict[str, Any]) -> None:
        tokens = scripted_usage(anthropic_messages.turn_index(body)).input
        self.model_server.record(ServedResponse(api="anthropic", path=path,
                                                kind="count_tokens", status=200,
                                                model=body.get("model")), summary)
        self._send_json(200, {"input_tokens": tokens})

    def _anthropic(self, path: str, body: dict[str, Any], summary: dict[str, Any]) -> None:
        server = self.model_server
        model = str(body.get("model") or "scripted")
        n = server.next_id()
        ids = {"message_id": f"msg_scripted_{n:04d}", "tool_use_id": f"toolu_scripted_{n:04d}"}
        subagent = anthropic_messages.is_subagent_request(body)
        play = _play(server, anthropic_messages.turn_index(body)
                     if anthropic_messages.is_agent_request(body) else None, subagent=subagent,
                     body=body)
        fault = server.fault("anthropic", play, subagent)
        if self._scripted_error("anthropic", path, play, fault, model, summary,
                                anthropic_messages.error_body):
            return
        offered = anthropic_messages.offered_tools(body)
        served = ServedResponse(api="anthropic", path=path, kind=play.kind, status=200,
                                turn=play.index, model=model, usage=play.usage,
                                response_id=ids["message_id"])
        if body.get("stream"):
            events = anthropic_messages.stream_events(play.turn, play.usage, model=model,
                                                      offered=offered, **ids)
            self._stream(served, summary, events, play.turn, fault)
        else:
            server.record(served, summary)
            self._send_json(200, anthropic_messages.message(
                play.turn, play.usage, model=model, offered=offered, **ids))

    def _openai(self, path: str, body: dict[str, Any], summary: dict[str, Any]) -> None:
        server = self.model_server
        model = str(body.get("model") or "scripted")
        n = server.next_id()
        ids = {"response": f"resp_scripted_{n:04d}", "reasoning": f"rs_scripted_{n:04d}",
               "message": f"msg_scripted_{n:04d}", "call_item": f"fc_scripted_{n:04d}",
               "call": f"call_scripted_{n:04d}"}
        tool = openai_responses.shell_tool(body)
        play = _play(server, openai_responses.turn_index(body) if tool else None, body=body)
        fault = server.fault("openai", play, False)
        if self._scripted_error("openai", path, play, fault, model, summary,
                                openai_responses.error_body):
            return
        # The Responses API has no 1-hour cache writes: none are reported.
        usage = play.usage.model_copy(update={"cache_write_1h": 0})
        served = ServedResponse(api="openai", path=path, kind=play.kind, status=200,
                                turn=play.index, model=model, usage=usage,
                                response_id=ids["response"])
        events = openai_responses.stream_events(play.turn, usage, model=model,
                                                tool=tool or "exec_command", ids=ids, body=body)
        self._stream(served, summary, events, play.turn, fault)

    def _scripted_error(self, api: str, path: str, play: _Play, fault: bool, model: str,
                        summary: dict[str, Any],
                        error_body: Callable[[int], dict[str, Any]]) -> bool:
        """Answer the turn's scripted HTTP error, if it has one and this attempt gets it."""
        status = play.turn.http_error
        if status is None or not fault:
            return False
        time.sleep(play.turn.first_byte_delay_s)
        self.model_server.record(ServedResponse(api=api, path=path, kind="error",
                                                status=status, turn=play.index, model=model),
                                 summary)
        self._send_json(status, error_body(status))
        return True

    def _stream(self, served: ServedResponse, summary: dict[str, Any],
                events: list[tuple[str, dict[str, Any]]], turn: ScriptedTurn,
                fault: bool) -> None:
        """Record and send ``events``; cut after ``cut_after_events`` on a faulty attempt."""
        cut = turn.cut_after_events if fault else None
        if cut is not None:
            served = replace(served, kind="cut", usage=usage_told(events[:cut]))
        self.model_server.record(served, summary)
        if turn.as_generated and cut is None:
            self._send_sse_as_generated(events, delay_s=turn.first_byte_delay_s,
                                        bytes_per_s=turn.bytes_per_s)
        else:
            self._send_sse(events, cut=cut, delay_s=turn.first_byte_delay_s)

    # ------------------------------------------------------------------ transport

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_sse_as_generated(self, events: list[tuple[str, dict[str, Any]]], *,
                               delay_s: float = 0.0, bytes_per_s: float = 0.0) -> None:
        """Send ``events`` in chunks as they are encoded, the way a provider streams.

        With ``bytes_per_s``, each chunk waits until the answer so far is not ahead of that
        pace.
        """
        time.sleep(delay_s)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        pending: list[bytes] = []
        size = sent = 0
        started = time.monotonic()
        for name, payload in events:
            block = f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
            pending.append(block)
            size += len(block)
            if size >= SSE_CHUNK_BYTES:
                if bytes_per_s:
                    sent += size
                    time.sleep(max(0.0, started + sent / bytes_per_s - time.monotonic()))
                self.wfile.write(b"%x\r\n%s\r\n" % (size, b"".join(pending)))
                pending, size = [], 0
        if pending:
            self.wfile.write(b"%x\r\n%s\r\n" % (size, b"".join(pending)))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_sse(self, events: list[tuple[str, dict[str, Any]]], *, cut: int | None = None,
                  delay_s: float = 0.0) -> None:
        blocks = [f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
                  for name, payload in events]
        data = b"".join(blocks)
        time.sleep(delay_s)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if cut is None:
            self.wfile.write(data)
            return
        # A stream cut mid-answer: fewer bytes than announced, then the connection closes.
        self.wfile.write(b"".join(blocks[:cut]))
        self.wfile.flush()
        self.close_connection = True
