"""The model gateway of one run: Starlette behind uvicorn, httpx streaming to the upstream.

It listens on the host's ``127.0.0.1`` and a free port, in a daemon thread of the
process that runs the agent, outside the sandbox (like the audited tools service).
Its root stands for the upstream's base URL: ``POST <gateway>/v1/messages`` goes to
``<upstream>/v1/messages``, so ``ANTHROPIC_BASE_URL=<gateway>`` for an upstream
``https://api.anthropic.com`` and ``base_url=<gateway>`` for Codex with an upstream
``https://api.openai.com/v1``.

Traps handled here:

- the agent holds :attr:`ModelGateway.token`, never the key: a request without it
  (``x-api-key`` or ``Authorization: Bearer``) gets a 401 in the API's own shape and
  is recorded; the real key goes on the upstream request in the header the client used;
- only the configured model is forwarded: a request for another one gets a 403 in the
  API's error shape, recorded, and nothing reaches the upstream;
- only the model endpoints are forwarded (messages, count_tokens, responses, chat
  completions, model lists); any other path is a recorded 404;
- the answer is passed through as it arrives (no buffering, byte for byte, the
  encoding undone: the upstream is asked for ``identity``), read on the way for usage,
  stop reason and refusal, and its record line written when it ends, cut or not; an
  upstream that cuts the stream makes the gateway cut the agent's stream too, so the
  CLI sees what the provider did;
- past ``limits.max_cost_usd`` every generation is answered with a final (non-retried)
  400 and the record names ``gateway.cost_limit``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import secrets
import ssl
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spu.config import ModelGatewayConfig, PriceConfig
from spu.gateway.answers import (
    API_ANTHROPIC,
    APIS,
    AnswerReader,
    api_of_endpoint,
    endpoint_of,
    error_body,
    reader_for,
    tool_results,
)
from spu.schema import GatewayRequest, Usage

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0
"""Seconds :meth:`ModelGateway.stop` waits for answers in flight to end."""
MAX_JSON_BYTES = 32 * 1024 * 1024
"""A non-streamed answer longer than this is passed through but not read."""

DEFAULT_UPSTREAMS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
"""The provider's API base when ``model.base_url`` is null."""

REQUEST_HEADERS_DROPPED = frozenset({
    "host", "content-length", "authorization", "x-api-key", "accept-encoding", "connection",
    "keep-alive", "proxy-authorization", "proxy-connection", "te", "trailer",
    "transfer-encoding", "upgrade"})
RESPONSE_HEADERS_DROPPED = frozenset({
    "content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive",
    "date", "server"})


def now_iso() -> str:
    """The current time, ISO-8601 in UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """The TLS context of every gateway of the process.

    Loading the CA bundle costs 50 ms, which every run's gateway would pay again.
    """
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


class StreamDropped(Exception):
    """The upstream cut the answer; raised into the server so the agent's stream is cut."""


class _DroppedStreamFilter(logging.Filter):
    """Keeps uvicorn from logging a traceback for each stream the gateway cut on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StreamDropped)


def _quiet_dropped_streams() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DroppedStreamFilter) for f in logger.filters):
        logger.addFilter(_DroppedStreamFilter())


def _server_class() -> Any:
    """The uvicorn server, woken at once by :meth:`ModelGateway.stop`.

    uvicorn looks at ``should_exit`` every 0.1 s and waits 0.1 s more when it shuts down;
    a run's gateway starts and stops once per run, and those waits were most of its cost
    (0.2 s per run, where a sweep's fast path spends that on a whole run).
    """
    import uvicorn

    class WakeableServer(uvicorn.Server):
        _wake: asyncio.Event | None = None
        _loop: asyncio.AbstractEventLoop | None = None

        async def main_loop(self) -> None:
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            while not self.should_exit:
                await self._wake.wait()

        def wake(self) -> None:
            if self._loop is not None and self._wake is not None:
                self._loop.call_soon_threadsafe(self._wake.set)

        async def shutdown(self, sockets: Any = None) -> None:
            # uvicorn's own waits a fixed 0.1 s, then polls every 0.1 s. Answers still in
            # flight end when their upstream does, and write their record lines then.
            for server in self.servers:
                server.close()
            for connection in list(self.server_state.connections):
                connection.shutdown()
            deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S
            while (self.server_state.connections or self.server_state.tasks) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            await self.lifespan.shutdown()

    return WakeableServer


@dataclass
class _Exchange:
    """One request on its way: what the record line will say."""

    entry: GatewayRequest
    started: float
    reader: AnswerReader
    body: Any = None
    raw_request: bytes = b""
    answer: bytearray = field(default_factory=bytearray)


class ModelGateway:
    """The gateway of one run: :meth:`start`, give the agent :meth:`url` and :attr:`token`.

    Args:
        folder: ``<run_dir>/model``: the record and, with ``log_bodies``, the bodies.
        upstream: the API base the gateway's root stands for.
        api: ``anthropic``, ``openai-responses`` or ``openai-chat`` (``SPU_MODEL_API``).
        api_model: the one model forwarded; None forwards any (the key check of a
            provider with no model configured).
        api_key: the provider key put on upstream requests; None sends none.
        cfg: ``model_gateway`` options.
        prices: the model's list prices, for the spend cap.
        max_cost_usd: the spend cap (``limits.max_cost_usd``); None for none.
        cache_write_rate: the cost rule the cap is counted by.
    """

    def __init__(self, folder: Path, *, upstream: str, api: str = API_ANTHROPIC,
                 api_model: str | None = None, api_key: str | None = None,
                 cfg: ModelGatewayConfig | None = None, prices: PriceConfig | None = None,
                 max_cost_usd: float | None = None,
                 cache_write_rate: str = "five_minute") -> None:
        if api not in APIS:
            raise ValueError(f"model gateway: api {api!r} is not one of {', '.join(APIS)}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.upstream = upstream.rstrip("/")
        self.api = api
        self.api_model = api_model
        self.cfg = cfg or ModelGatewayConfig()
        self.prices = prices
        self.max_cost_usd = max_cost_usd
        self.cache_write_rate = cache_write_rate
        self.token = "spu-" + secrets.token_urlsafe(32)
        self.spent_usd = 0.0
        self.requests_path = self.folder / "requests.jsonl"
        self.tool_results_path = self.folder / "tool_results.jsonl"
        self._api_key = api_key
        self._lock = threading.Lock()
        self._count = 0
        self._seen_results: set[str] = set()
        self._results_bytes = 0
        self._client: Any = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The TCP port on the host's loopback (known once started)."""
        if self._port is None:
            raise RuntimeError("the model gateway has not started")
        return self._port

    def url(self, host: str = "127.0.0.1") -> str:
        """The gateway's root as reached from ``host`` (the sandbox's address of the host)."""
        return f"http://{host}:{self.port}"

    def app(self) -> Any:
        """The ASGI application: every path, answered by :meth:`handle`."""
        from starlette.applications import Starlette
        from starlette.routing import Route

        return Starlette(routes=[Route("/{path:path}", self.handle,
                                       methods=["GET", "POST", "HEAD"])],
                         lifespan=self._lifespan)

    @staticmethod
    def _lifespan_client(cfg: ModelGatewayConfig) -> Any:
        import httpx

        timeout = httpx.Timeout(connect=cfg.connect_timeout_s, read=cfg.read_timeout_s,
                                write=cfg.read_timeout_s, pool=cfg.connect_timeout_s)
        # No environment proxies: the gateway's way to the provider is its own.
        return httpx.AsyncClient(timeout=timeout, trust_env=False, http2=False,
                                 verify=_tls_context(),
                                 limits=httpx.Limits(max_connections=64,
                                                     max_keepalive_connections=16))

    def _lifespan(self, app: Any) -> Any:
        import contextlib

        @contextlib.asynccontextmanager
        async def lifespan(_: Any) -> AsyncIterator[None]:
            self._client = self._lifespan_client(self.cfg)
            try:
                yield
            finally:
                await self._client.aclose()

        return lifespan(app)

    def start(self) -> ModelGateway:
        """Serve on ``127.0.0.1`` and a free port, in a daemon thread."""
        import uvicorn

        _quiet_dropped_streams()
        # No log configuration of uvicorn's own: it would reset the process's loggers.
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=0, log_config=None,
                                log_level=None, access_log=False, lifespan="on", http="h11",
                                date_header=False)
        self._server = _server_class()(config)
        self._thread = threading.Thread(target=self._server.run, name="spu-model-gateway",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the model gateway did not start")
            time.sleep(0.01)
        self._port = int(self._server.servers[0].sockets[0].getsockname()[1])
        (self.folder / "gateway.json").write_text(json.dumps(
            {"port": self._port, "api": self.api, "upstream": self.upstream,
             "api_model": self.api_model, "max_cost_usd": self.max_cost_usd}, indent=1))
        log.info("model gateway on 127.0.0.1:%d -> %s", self._port, self.upstream)
        return self

    def stop(self) -> None:
        """Stop serving (requests in flight are recorded as they end)."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.wake()
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> ModelGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ requests

    def token_ok(self, headers: Any) -> bool:
        """True when ``headers`` carry this run's token."""
        sent = headers.get("x-api-key") or ""
        bearer = headers.get("authorization") or ""
        if bearer[:7].lower() == "bearer ":
            sent = sent or bearer[7:].strip()
        return secrets.compare_digest(sent.encode(), self.token.encode())

    async def handle(self, request: Any) -> Any:
        """Answer one request: check it, forward it, pass the answer through."""
        path = request.url.path
        endpoint = endpoint_of(request.method, path)
        raw = await request.body()
        x = _Exchange(entry=GatewayRequest(time=now_iso(), endpoint=endpoint, status=0,
                                           bytes_in=len(raw)),
                      started=time.monotonic(), reader=reader_for(endpoint), raw_request=raw)
        if raw:
            try:
                x.body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                x.body = None
        if isinstance(x.body, dict):
            x.entry.model = str(x.body["model"]) if x.body.get("model") is not None else None
            x.entry.stream = bool(x.body.get("stream"))
        refusal = self._policy(request, endpoint, x)
        if refusal is not None:
            return refusal
        self._keep_tool_results(endpoint, x.body)
        return await self._forward(request, path, x)

    def _policy(self, request: Any, endpoint: str, x: _Exchange) -> Any:
        """The gateway's own answer to a request it does not forward, or None."""
        api = api_of_endpoint(endpoint)
        if not self.token_ok(request.headers):
            return self._refuse(x, api, 401, "authentication_error", "gateway.bad_token",
                                "invalid x-api-key (not this run's model token)")
        if endpoint == "other":
            return self._refuse(x, api, 404, "not_found_error", "gateway.not_allowed",
                                f"the model gateway forwards no {request.method} "
                                f"{request.url.path}")
        asks = endpoint in ("messages", "count_tokens", "responses", "chat_completions")
        if asks and self.api_model is not None and x.entry.model != self.api_model:
            return self._refuse(x, api, 403, "permission_error", "gateway.model_refused",
                                f"model {x.entry.model!r} is not allowed in this run (only "
                                f"{self.api_model!r})")
        if (asks and endpoint != "count_tokens" and self.max_cost_usd is not None
                and self.spent_usd >= self.max_cost_usd):
            return self._refuse(x, api, 400, "invalid_request_error", "gateway.cost_limit",
                                f"this run's spend cap limits.max_cost_usd="
                                f"{self.max_cost_usd:g} USD is reached "
                                f"({self.spent_usd:.4f} USD spent); no further requests")
        return None

    def _refuse(self, x: _Exchange, api: str, status: int, kind: str, error_type: str,
                message: str) -> Any:
        from starlette.responses import JSONResponse

        body = error_body(api, status, kind, message)
        data = json.dumps(body).encode()
        x.entry.status, x.entry.error_type, x.entry.error = status, error_type, message
        x.entry.bytes_out = len(data)
        x.answer += data
        self._write(x)
        return JSONResponse(body, status_code=status)

    async def _forward(self, request: Any, path: str, x: _Exchange) -> Any:
        import httpx
        from starlette.responses import StreamingResponse

        api = api_of_endpoint(x.entry.endpoint)
        url = self.upstream + path + (f"?{request.url.query}" if request.url.query else "")
        upstream = self._client.build_request(request.method, url,
                                              headers=self._upstream_headers(request.headers,
                                                                             api),
                                              content=x.raw_request)
        try:
            response = await self._client.send(upstream, stream=True)
        except httpx.TimeoutException as exc:
            return self._refuse(x, api, 504, "timeout_error", "gateway.upstream_timeout",
                                f"the upstream did not answer: {type(exc).__name__}")
        except httpx.HTTPError as exc:
            return self._refuse(x, api, 502, "api_error", "gateway.upstream_unreachable",
                                f"the upstream could not be reached: {exc!s}"[:500])
        x.entry.status = response.status_code
        x.entry.request_id = (response.headers.get("request-id")
                              or response.headers.get("x-request-id"))
        x.entry.stream = response.headers.get("content-type", "").startswith(
            "text/event-stream")
        headers = {k: v for k, v in response.headers.items()
                   if k.lower() not in RESPONSE_HEADERS_DROPPED}
        return StreamingResponse(self._relay(response, x), status_code=response.status_code,
                                 headers=headers)

    def _upstream_headers(self, headers: Any, api: str) -> dict[str, str]:
        out = {k: v for k, v in headers.items() if k.lower() not in REQUEST_HEADERS_DROPPED}
        out["accept-encoding"] = "identity"
        if self._api_key:
            bearer = "authorization" in headers and "x-api-key" not in headers
            if api == API_ANTHROPIC and not bearer:
                out["x-api-key"] = self._api_key
            else:
                out["authorization"] = f"Bearer {self._api_key}"
        return out

    async def _relay(self, response: Any, x: _Exchange) -> AsyncIterator[bytes]:
        """Pass the answer's chunks through as they come, reading them on the way."""
        import httpx

        keep = self.cfg.log_bodies
        outcome = "cut"
        try:
            async for chunk in response.aiter_bytes():
                if x.entry.ttfb_s is None:
                    x.entry.ttfb_s = round(time.monotonic() - x.started, 6)
                x.entry.bytes_out += len(chunk)
                if x.entry.stream:
                    x.reader.feed(chunk)
                if keep or (not x.entry.stream and len(x.answer) < MAX_JSON_BYTES):
                    x.answer += chunk
                yield chunk
            outcome = "ended"
        except httpx.HTTPError as exc:
            x.entry.error_type = "gateway.stream_dropped"
            x.entry.error = f"the upstream cut the answer: {type(exc).__name__}: {exc!s}"[:500]
            raise StreamDropped(x.entry.error) from None
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "client"
            raise
        finally:
            try:
                await response.aclose()
            finally:
                self._finish(x, outcome)

    def _finish(self, x: _Exchange, outcome: str) -> None:
        """Read what arrived, count its cost, write the record line."""
        r = x.reader
        if outcome == "ended":
            if x.entry.stream:
                r.finish()
            elif x.answer:
                try:
                    r.read_body(json.loads(bytes(x.answer)))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    pass
        reading = r.reading
        e = x.entry
        e.usage, e.stop_reason = reading.usage, reading.stop_reason
        e.refusal, e.refusal_label = reading.refusal, reading.refusal_label
        e.complete = reading.complete and outcome == "ended"
        e.final = reading.final and e.complete and e.status < 400
        if e.error_type is None and reading.error_type is not None:
            e.error_type, e.error = reading.error_type, reading.error
        if outcome == "client" and e.error_type is None:
            e.error_type = "gateway.client_disconnected"
            e.error = "the agent closed the connection before the answer ended"
        elif outcome == "ended" and x.entry.stream and not e.complete and e.error_type is None \
                and e.status < 400 and e.endpoint != "models":
            e.error_type = "gateway.stream_dropped"
            e.error = "the answer's stream ended before its final event"
        e.request_id = e.request_id or reading.response_id
        self._write(x)

    # ------------------------------------------------------------------ the record

    def _write(self, x: _Exchange) -> None:
        e = x.entry
        e.latency_s = round(time.monotonic() - x.started, 6)
        with self._lock:
            self._count += 1
            n = self._count
            if self.prices is not None and e.usage != Usage():
                from spu.cost.prices import request_cost

                self.spent_usd += request_cost(self.prices, e.usage,
                                               cache_write_rate=self.cache_write_rate).total
            if self.cfg.log_bodies:
                e.body_file = self._write_bodies(n, x)
            with open(self.requests_path, "a", encoding="utf-8") as f:
                f.write(e.model_dump_json() + "\n")

    def _write_bodies(self, n: int, x: _Exchange) -> str:
        name = f"bodies/{n:05d}.json"
        path = self.folder / name
        path.parent.mkdir(exist_ok=True)
        answer = bytes(x.answer).decode("utf-8", "replace")
        path.write_text(json.dumps({"request": x.body if x.body is not None
                                    else x.raw_request.decode("utf-8", "replace"),
                                    "answer": answer}, ensure_ascii=False))
        return name

    def _keep_tool_results(self, endpoint: str, body: Any) -> None:
        """Append the tool results the model is sent for the first time, bounded."""
        cap = self.cfg.tool_result_chars
        limit = int(self.cfg.tool_results_mb * 1024 * 1024)
        lines = []
        with self._lock:
            for call_id, text in tool_results(endpoint, body):
                key = call_id + ":" + hashlib.sha256(text.encode()).hexdigest()[:16]
                if key in self._seen_results:
                    continue
                self._seen_results.add(key)
                line = json.dumps({"time": now_iso(), "call_id": call_id, "chars": len(text),
                                   "truncated": len(text) > cap, "text": text[:cap]},
                                  ensure_ascii=False) + "\n"
                if self._results_bytes + len(line) > limit:
                    break
                self._results_bytes += len(line)
                lines.append(line)
            if lines:
                with open(self.tool_results_path, "a", encoding="utf-8") as f:
                    f.writelines(lines)
