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
  is recorded; the real key goes on the upstream request in the header the provider
  takes (``key_as_bearer``), never the one the agent chose;
- only the configured model is forwarded: a request for another one gets a 403 in the
  API's error shape, recorded, and nothing reaches the upstream;
- only an exact list of model endpoint paths is forwarded (messages, count_tokens,
  responses, chat completions, model lists), checked as sent: any other path, or one with
  dot segments, ``%`` escapes or ``//``, is a recorded 404; the token and path are checked
  before the body is read, which is capped (413) and timed (408, and a deadline on the
  request headers); request headers pass by an allowlist; provider-side tools are refused;
- the answer is passed through as it arrives (no buffering, byte for byte, the
  encoding undone: the upstream is asked for ``identity``), read on the way for usage,
  stop reason and refusal, and its record line written when it ends, cut or not; an
  upstream that cuts the stream makes the gateway cut the agent's stream too, so the
  CLI sees what the provider did;
- past ``limits.max_cost_usd`` every generation is answered with a final (non-retried)
  400 and the record names ``gateway.cost_limit``; a generation in flight holds a bound
  on its cost, so that parallel ones cannot overrun the cap;
- the upstream is read by a task of its own, which reads on after an agent hangs up
  (bounded) to the final usage, and writes the record line before the answer ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from spu.config import ModelGatewayConfig, PriceConfig
from spu.gateway.admission import (  # noqa: F401 - as before the move
    OUTPUT_BOUNDS,
    OUTPUT_BOUNDS_OF,
    _json_media_type,
    asked_output_tokens,
)
from spu.gateway.answers import (
    API_ANTHROPIC,
    APIS,
    GENERATION_ENDPOINTS,
    OWN_REFERENCES,
    api_of_endpoint,
    case_variant,
    content_sources,
    endpoint_of,
    error_body,
    loads,
    loads_request,
    reader_for,
    server_tools,
    stored_references,
    tool_results,
)
from spu.gateway.exchange import _Exchange
from spu.gateway.record import now_iso, well_formed
from spu.gateway.relay import (
    BETAS_DROPPED,
    CLIENT_STALL_S,
    DRAIN_AFTER_HANGUP_BYTES,
    DRAIN_AFTER_HANGUP_S,
    MAX_JSON_BYTES,
    OUTPUT_LIMIT_HEADERS,
    RELAY_BATCH_BYTES,
    REQUEST_HEADERS_KEPT,
    REQUEST_LIMIT_HEADERS,
    RESPONSE_HEADERS_DROPPED,
    TOTAL_LIMIT_HEADERS,
    UPSTREAM_CONNECTIONS,
    StreamDropped,
    _tls_context,
    stated_rate_limit,
)
from spu.gateway.verdict import (
    MAX_REFUSAL_FILES,
    REFUSAL_FILES,
    RUN_ENDED,
    waiting_by_choice,
)
from spu.schema import GatewayRequest, Usage
from spu.strict_json import shown

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0
"""Seconds :meth:`ModelGateway.stop` waits for answers in flight to end."""

DEFAULT_UPSTREAMS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
"""The provider's API base when ``model.base_url`` is null."""


class _DroppedStreamFilter(logging.Filter):
    """Keeps uvicorn from logging a traceback for each stream the gateway cut on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StreamDropped)


def _quiet_dropped_streams() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DroppedStreamFilter) for f in logger.filters):
        logger.addFilter(_DroppedStreamFilter())


def _protocol_class(timeout_s: float) -> Any:
    """The h11 protocol of uvicorn with a deadline on a request's line and headers.

    uvicorn's own keep-alive timeout runs only between requests: a connection that sends
    half a request line would be held for ever, a file descriptor of the run's host
    process each. Here a connection whose next request's headers have not all arrived
    ``timeout_s`` after it opened (or after the last answer ended) is closed.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeadlineH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            self._arm()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(timeout_s, self._expire)

        def _expire(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return DeadlineH11Protocol


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
        pumps: set[asyncio.Task[None]] = set()  # noqa: RUF012 (set per instance)

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
            while (self.server_state.connections or self.server_state.tasks or self.pumps) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            # Requests still waiting for their answer, and answers still being read (after a
            # hang-up, or to an agent the run's end stopped), are cut here: each writes its
            # line (ModelGateway.stop set ``stopping``) before the upstream client closes.
            waiting = [t for t in self.server_state.tasks if not t.done()]
            for task in [*waiting, *self.pumps]:
                task.cancel()
            if waiting or self.pumps:
                await asyncio.wait([*waiting, *self.pumps], timeout=1.0)
            await self.lifespan.shutdown()

    return WakeableServer



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
        read_submission: reads the run's ``rankings.json`` as the grader reads it; called
            as each generation arrives, its bytes are kept with an answer that refuses
            (:data:`REFUSAL_FILES`), so that a refusal after a valid file stays known
            when the agent then removes or spoils the file.
        submission_counts: whether a file counts (valid or recoverable, judged by the
            contract alone): only files that count are kept, so that files that do not
            cannot push a kept one out.
    """

    def __init__(self, folder: Path, *, upstream: str, api: str = API_ANTHROPIC,
                 api_model: str | None = None, api_key: str | None = None,
                 key_as_bearer: bool | None = None,
                 cfg: ModelGatewayConfig | None = None, prices: PriceConfig | None = None,
                 max_cost_usd: float | None = None,
                 cache_write_rate: str = "five_minute",
                 read_submission: Callable[[], bytes | None] | None = None,
                 submission_counts: Callable[[bytes], bool] | None = None) -> None:
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
        self.read_submission = read_submission
        self.submission_counts = submission_counts
        self._kept_at_refusals: set[str] = set()
        self.token = "spu-" + secrets.token_urlsafe(32)
        self.spent_usd = 0.0
        self.requests_path = self.folder / "requests.jsonl"
        self.tool_results_path = self.folder / "tool_results.jsonl"
        self._api_key = api_key
        self._key_as_bearer = bool(key_as_bearer)
        self._lock = threading.Lock()
        self._count = 0
        self._seen_results: set[str] = set()
        self._idempotency_prefix = f"spu-{secrets.token_hex(8)}-"
        """Put before the agent's ``Idempotency-Key``: keys are this run's alone."""
        self._answered_ids: set[str] = set()
        """Ids of this run's Responses answers and their output items (OWN_REFERENCES)."""
        self._reserved_usd = 0.0
        self._spend = asyncio.Condition()
        self._pumps: set[asyncio.Task[None]] = set()
        self._answering = 0
        """Answers being read from the upstream now, each holding a pool connection."""
        self._waiting: set[_Exchange] = set()
        """Requests forwarded and waiting for their answer's headers."""
        self.stopping = False
        """Set by :meth:`stop`: a request cut from now on was cut by the run's end."""
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
                                 limits=httpx.Limits(max_connections=UPSTREAM_CONNECTIONS,
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
        # No log configuration of uvicorn's own: it would reset the process's loggers. No
        # proxy headers: an agent's X-Forwarded-For means nothing here (and costs a layer).
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=0, log_config=None,
                                log_level=None, access_log=False, lifespan="on",
                                http=_protocol_class(self.cfg.request_timeout_s),
                                date_header=False, proxy_headers=False)
        self._server = _server_class()(config)
        self._server.pumps = self._pumps
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
        """Stop serving; the record is whole when this returns.

        Requests in flight are recorded as they end, or, still going after
        :data:`SHUTDOWN_TIMEOUT_S`, as cut by the run's end (``gateway.run_ended``).
        """
        if self._server is not None and self._thread is not None:
            self.stopping = True
            self._server.should_exit = True
            self._server.wake()
            # The server's own shutdown waits SHUTDOWN_TIMEOUT_S, then cancels what is left
            # and writes its lines: the record is whole when this returns.
            self._thread.join(timeout=SHUTDOWN_TIMEOUT_S + 10)
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
        """Answer one request: check it, forward it, pass the answer through.

        The token and the path are checked before the body is read, and the body is read
        only up to ``model_gateway.max_request_bytes``.
        """
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        path = raw_path.decode("latin-1")
        endpoint = endpoint_of(request.method, path)
        api = api_of_endpoint(endpoint)
        x = _Exchange(entry=GatewayRequest(time=now_iso(), endpoint=endpoint, status=0),
                      started=time.monotonic(), reader=reader_for(endpoint))
        if not self.token_ok(request.headers):
            return self._refuse(x, api, 401, "authentication_error", "gateway.bad_token",
                                "invalid x-api-key (not this run's model token)")
        if endpoint == "other":
            return self._refuse(x, api, 404, "not_found_error", "gateway.not_allowed",
                                f"the model gateway forwards no {request.method} "
                                f"{path[:200]}")
        try:
            async with asyncio.timeout(self.cfg.request_timeout_s):
                raw = await self._read_body(request)
        except TimeoutError:
            return self._refuse(x, api, 408, "timeout_error", "gateway.too_slow",
                                f"the request body did not arrive within "
                                f"model_gateway.request_timeout_s="
                                f"{self.cfg.request_timeout_s:g}")
        if raw is None:
            return self._refuse(x, api, 413, "request_too_large", "gateway.too_large",
                                f"the request body is over model_gateway.max_request_bytes="
                                f"{self.cfg.max_request_bytes}")
        x.raw_request, x.entry.bytes_in = raw, len(raw)
        duplicate = None
        if raw:
            x.body, duplicate = loads_request(raw)
        if isinstance(x.body, dict):
            x.entry.model = (well_formed(str(x.body["model"]))
                             if x.body.get("model") is not None else None)
            # Only JSON true streams (a stream that is no boolean is refused below).
            x.entry.stream = x.body.get("stream") is True
            x.entry.max_tokens = asked_output_tokens(x.body, endpoint)
        unread = self._read_otherwise(request, x, duplicate)
        if unread is not None:
            return self._refuse(x, api, 400, "invalid_request_error", "gateway.bad_request",
                                unread)
        refusal = self._policy(endpoint, x) or self._usage_asked(endpoint, api, x)
        if refusal is None:
            try:
                refusal = await self._reserve(endpoint, x)
            except asyncio.CancelledError:  # the run ended while it waited at the cap
                self._release(x)
                self._run_ended(x, "before the request was forwarded (at the spend cap)")
                raise
        if refusal is not None:
            return refusal
        # A forwarded request's time is when it goes on, its body whole and past any wait
        # at the spend cap (and, in _forward, for a connection of the pool): what the
        # provider's limits see (verdict.request_burst; headers sent early and bodies ended
        # together are one burst), and the latency is the provider's alone (no slow upload,
        # no wait at the cap or the pool).
        x.entry.time, x.started = now_iso(), time.monotonic()
        try:  # the bound held on the spend cap is given back whatever fails
            self._keep_tool_results(endpoint, x.body)
            if self.read_submission is not None and endpoint in GENERATION_ENDPOINTS:
                x.submission = self.read_submission()
            return await self._forward(request, path, x)
        except BaseException:
            self._release(x)
            raise

    @staticmethod
    def _read_otherwise(request: Any, x: _Exchange, duplicate: str | None) -> str | None:
        """Why a provider's parser may read the body otherwise than the gateway, or None.

        A body the gateway reads as one thing (its record, its policy, its spend cap) goes
        on only where every parser reads it so:

        - a POST's ``content-type`` is one ``application/json`` (with ``charset=utf-8`` at
          most): a provider that decodes by the charset (Node's ``body-parser`` takes
          ``utf-7``) would read other JSON from the same bytes;
        - no object names a key twice (a parser may keep the first value, Python keeps
          the last);
        - no field the gateway reads is named in other letters (:func:`case_variant`: Go
          matches ``"Tools"`` to ``tools``);
        - ``stream`` is a JSON boolean (or null): a lax provider streams on ``1`` or
          ``"true"``, which the gateway takes for no stream (and then asks no usage of a
          chat stream);
        - ``extra_body`` holds ``google`` at most (Gemini's OpenAI-compatible API reads
          it): a proxy that passes ``extra_body`` to an SDK sends its fields as the
          body's own, which the policy would not have read.
        """
        if x.entry.endpoint != "models":
            types = request.headers.getlist("content-type")
            if len(types) != 1 or not _json_media_type(types[0]):
                return (f"the request's content-type must be application/json (charset utf-8 "
                        f"at most), once; it is {shown([well_formed(t) for t in types])}")
        if duplicate is not None:
            return (f"the request body names {shown(well_formed(duplicate))} twice in one "
                    f"object; send each key once")
        variant = case_variant(x.body)
        if variant is not None:
            return (f"the request body names {shown(well_formed(variant[0]))} for the field "
                    f"{variant[1]!r}; send the field by its own name")
        stream = x.body.get("stream") if isinstance(x.body, dict) else None
        if not (stream is None or isinstance(stream, bool)):
            return f"the request's stream must be true or false, not {shown(stream)}"
        extra = x.body.get("extra_body") if isinstance(x.body, dict) else None
        if extra is not None and not (isinstance(extra, dict) and set(extra) <= {"google"}):
            # a proxy sends extra_body's fields as the body's own: unread by the policy
            return (f"the request's extra_body may hold only 'google', not "
                    f"{shown(sorted(extra) if isinstance(extra, dict) else extra)}; send "
                    f"the fields as the body's own")
        return None

    async def _read_body(self, request: Any) -> bytes | None:
        """The request body, or None when it is longer than ``max_request_bytes``."""
        cap = self.cfg.max_request_bytes
        try:
            declared = int(request.headers.get("content-length") or 0)
        except ValueError:
            declared = 0
        if declared > cap:
            return None
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def _policy(self, endpoint: str, x: _Exchange) -> Any:
        """The gateway's own answer to a request it does not forward, or None."""
        api = api_of_endpoint(endpoint)
        asks = endpoint in ("messages", "count_tokens", "responses", "chat_completions")
        if asks and self.api_model is not None and x.entry.model != self.api_model:
            return self._refuse(x, api, 403, "permission_error", "gateway.model_refused",
                                f"model {x.entry.model!r} is not allowed in this run (only "
                                f"{self.api_model!r})")
        fallbacks = x.body.get("models") if asks and isinstance(x.body, dict) else None
        if fallbacks is not None and self.api_model is not None and (
                not isinstance(fallbacks, list) or any(m != self.api_model for m in fallbacks)):
            # a router's fallback list (OpenRouter): the answer could come from any of them
            return self._refuse(x, api, 403, "permission_error", "gateway.model_refused",
                                f"models {str(fallbacks)[:200]} are not allowed in this run "
                                f"(only {self.api_model!r})")
        if endpoint == "responses" and isinstance(x.body, dict) and \
                x.body.get("background") not in (None, False):
            # the answer would be fetched later (GET responses/<id>, not forwarded): its
            # usage would never reach the record or the spend cap
            return self._refuse(x, api, 400, "invalid_request_error", "gateway.not_allowed",
                                "background responses are not allowed in this run (their "
                                "usage would never reach the run's record)")
        offered = server_tools(x.body) if asks else []
        if offered:
            return self._refuse(x, api, 403, "permission_error", "gateway.server_tool_refused",
                                f"provider-side tools are not allowed in this run "
                                f"({', '.join(offered)}); use the run's own tools")
        fetched, files = content_sources(x.body) if asks else ([], [])
        if fetched:
            return self._refuse(x, api, 403, "permission_error", "gateway.url_source_refused",
                                f"content the provider would fetch from a URL is not allowed "
                                f"in this run ({', '.join(fetched)}); fetch it with the run's "
                                f"own tools and send it inline")
        stored = [f"file_id {f!r}" for f in files] + [
            f"{kind} {ref!r}" for kind, ref in (stored_references(x.body) if asks else [])
            if not (kind in OWN_REFERENCES and ref in self._answered_ids)]
        if stored:
            return self._refuse(x, api, 403, "permission_error",
                                "gateway.stored_content_refused",
                                f"content stored at the provider that this run's answers "
                                f"did not make is not allowed ({', '.join(stored[:3])}); "
                                f"send it inline")
        return None

    def _usage_asked(self, endpoint: str, api: str, x: _Exchange) -> Any:
        """A streamed Chat Completions request made to report its usage, or refused.

        Chat Completions streams carry no usage unless ``stream_options.include_usage`` is
        true: without it the record would count nothing the provider bills. The body is
        forwarded with it set (the same JSON otherwise); one that cannot be read whole is
        refused (a recorded 400, the agent's).
        """
        chat_stream = endpoint == "chat_completions" and x.entry.stream
        if not chat_stream or not isinstance(x.body, dict):
            return None
        options = x.body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            return None
        try:
            whole = json.loads(x.raw_request)
        except (RecursionError, ValueError):
            whole = None
        if not isinstance(whole, dict):
            return self._refuse(x, api, 400, "invalid_request_error", "gateway.bad_request",
                                "a streamed chat request must be plain JSON for the gateway "
                                "to ask its usage (stream_options.include_usage)")
        kept = whole.get("stream_options")
        whole["stream_options"] = {**(kept if isinstance(kept, dict) else {}),
                                   "include_usage": True}
        x.raw_request = json.dumps(whole).encode()
        return None

    async def _reserve(self, endpoint: str, x: _Exchange) -> Any:
        """Hold a bound on a generation's cost under the spend cap, or refuse it.

        A generation starts only while the spend so far plus the bounds held by those in
        flight leave room for its own bound (:meth:`_cost_bound`); otherwise it waits for
        them to end. Past the cap it is refused (a final 400, ``gateway.cost_limit``). A
        generation that starts alone always starts, so the cap is passed by at most one
        request's cost, as when requests come one at a time.
        """
        if endpoint not in GENERATION_ENDPOINTS or self.max_cost_usd is None:
            return None
        cap = self.max_cost_usd
        bound = self._cost_bound(x)
        async with self._spend:
            while True:
                if self.spent_usd >= cap:
                    api = api_of_endpoint(endpoint)
                    return self._refuse(x, api, 400, "invalid_request_error",
                                        "gateway.cost_limit",
                                        f"this run's spend cap limits.max_cost_usd={cap:g} "
                                        f"USD is reached ({self.spent_usd:.4f} USD spent); "
                                        f"no further requests")
                if self._reserved_usd <= 0 or self.spent_usd + self._reserved_usd + bound <= cap:
                    x.reserved_usd = max(bound, 1e-12)
                    self._reserved_usd += x.reserved_usd
                    return None
                await self._spend.wait()

    def _cost_bound(self, x: _Exchange) -> float:
        """At most what a generation can cost, for the spend cap.

        Every body byte counted an input token (at the cache-write price), the output at
        its ``max_tokens`` (:func:`asked_output_tokens`); without one, the whole cap (it
        then runs alone).
        """
        if self.prices is None or self.max_cost_usd is None:
            return 0.0
        limit = x.entry.max_tokens  # asked_output_tokens: the endpoint's largest bound
        if limit is None or not 0 < limit < 2**63:
            return self.max_cost_usd
        from spu.cost.prices import request_cost

        usage = Usage(cache_write=len(x.raw_request), output=limit)
        try:
            return request_cost(self.prices, usage, cache_write_rate="five_minute").total
        except OverflowError:
            return self.max_cost_usd

    def _release(self, x: _Exchange) -> None:
        """Give back a generation's bound on the spend cap (once its cost is counted)."""
        if x.reserved_usd <= 0:
            return
        self._reserved_usd = max(0.0, self._reserved_usd - x.reserved_usd)
        x.reserved_usd = 0.0
        spend = self._spend

        async def wake() -> None:
            async with spend:
                spend.notify_all()

        task = asyncio.get_running_loop().create_task(wake())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)

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

        # A model list belongs to no one API: it is asked in the run's own API style.
        api = self.api if x.entry.endpoint == "models" else api_of_endpoint(x.entry.endpoint)
        query = request.scope.get("query_string") or b""
        url = self.upstream + path + (f"?{query.decode('latin-1')}" if query else "")
        # Header values go on as the bytes that came (a byte past ASCII is the agent's to
        # send; httpx would not encode it as text).
        sent = [(k.encode("latin-1"), v.encode("latin-1"))
                for k, v in self._upstream_headers(request.headers, api).items()]
        async def went_on(event: str, info: Any) -> None:
            # When its headers go out: a request that waited for a connection of the pool
            # (held by answers the agent leaves unread) went on then, with those sent
            # meanwhile, and the provider's latency starts then.
            if event == "http11.send_request_headers.started":
                x.entry.time, x.started, x.sent = now_iso(), time.monotonic(), True

        try:
            upstream = self._client.build_request(request.method, url, headers=sent,
                                                  content=x.raw_request,
                                                  extensions={"trace": went_on})
        except (httpx.InvalidURL, ValueError) as exc:
            self._release(x)
            return self._refuse(x, api, 400, "invalid_request_error", "gateway.bad_request",
                                f"the request cannot be forwarded: {exc}"[:500])
        self._waiting.add(x)
        try:
            response = await self._client.send(upstream, stream=True)
        except asyncio.CancelledError:  # the run ended meanwhile (the server's shutdown)
            self._release(x)
            self._run_ended(x, "before the upstream answered")
            raise
        except httpx.HTTPError as exc:
            self._release(x)
            if self.stopping:  # the upstream client closed by the run's end, not a failure
                return self._run_ended(x, "before the upstream answered", api)
            return self._upstream_failed(x, api, exc)
        except RuntimeError:  # httpx's "the client has been closed"
            if not self.stopping:
                raise
            self._release(x)
            return self._run_ended(x, "before the upstream answered", api)
        finally:
            self._waiting.discard(x)
        x.entry.status = response.status_code
        x.entry.request_id = (response.headers.get("request-id")
                              or response.headers.get("x-request-id"))
        # The limits the answer states; where it states none, the configured ones.
        said, cfg = response.headers, self.cfg
        x.entry.rate_limit_tokens = stated_rate_limit(said) or cfg.rate_limit_input_tokens
        x.entry.rate_limit_output_tokens = (stated_rate_limit(said, OUTPUT_LIMIT_HEADERS)
                                            or cfg.rate_limit_output_tokens)
        x.entry.rate_limit_total_tokens = (stated_rate_limit(said, TOTAL_LIMIT_HEADERS)
                                           or cfg.rate_limit_tokens)
        x.entry.rate_limit_requests = (stated_rate_limit(said, REQUEST_LIMIT_HEADERS)
                                       or cfg.rate_limit_requests)
        x.entry.stream = response.headers.get("content-type", "").startswith(
            "text/event-stream")
        headers = {k: v for k, v in response.headers.items()
                   if k.lower() not in RESPONSE_HEADERS_DROPPED}
        # The upstream is read by a task of its own, started here so that it runs (and
        # writes the record line, and gives back the spend-cap bound) even when the agent
        # is gone before the answer's first byte.
        queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=64)
        self._answering += 1  # until the pump ends (its finally)
        pump = asyncio.get_running_loop().create_task(self._pump(response, x, queue))
        self._pumps.add(pump)
        pump.add_done_callback(self._pumps.discard)
        return StreamingResponse(self._relay(queue, x), status_code=response.status_code,
                                 headers=headers)

    def _upstream_failed(self, x: _Exchange, api: str, exc: Exception) -> Any:
        """The answer to a request the upstream failed before its answer's headers."""
        import httpx

        if isinstance(exc, httpx.ReadTimeout):
            # Silent past the read window after taking the request: for an unstreamed
            # generation, the time it takes is the agent's choice (verdict.is_failure).
            return self._refuse(x, api, 504, "timeout_error", "gateway.upstream_timeout",
                                f"the upstream did not answer: {type(exc).__name__}")
        if isinstance(exc, httpx.TimeoutException):  # no connection, or the request not taken
            own = self._answering + self._slow_by_choice(x)
            if isinstance(exc, httpx.PoolTimeout) and own >= UPSTREAM_CONNECTIONS:
                # Every connection carries an answer the agent asked for and reads (or hung
                # up on), or an unstreamed generation as long as it chose to ask for: the
                # wait is its own concurrency's doing (verdict.POLICY_ERRORS).
                return self._refuse(x, api, 429, "rate_limit_error", "gateway.too_busy",
                                    f"this run has {own} requests in flight (answers being "
                                    f"read, prompts being read and unstreamed generations it "
                                    f"asked to be long), the model gateway's most "
                                    f"({UPSTREAM_CONNECTIONS})")
            return self._refuse(x, api, 504, "timeout_error", "gateway.upstream_unreachable",
                                f"the upstream could not be reached in time: "
                                f"{type(exc).__name__}")
        return self._refuse(x, api, 502, "api_error", "gateway.upstream_unreachable",
                            f"the upstream could not be reached: {exc!s}"[:500])

    def _slow_by_choice(self, asking: _Exchange) -> int:
        """Requests holding a connection, waiting for their headers as long as chosen.

        Each has been sent (its headers went out on a connection of the pool) with no
        byte back yet, as long as its prompt takes to read or, an unstreamed generation,
        the output it asked for takes to write
        (:func:`~spu.gateway.verdict.waiting_by_choice`): the agent's choice, like an
        answer it reads. Requests still queued for a connection hold none; short ones
        waiting longer found a slow provider.
        """
        now = time.monotonic()
        return sum(1 for w in self._waiting
                   if w is not asking and w.sent and waiting_by_choice(w.entry, now - w.started))

    def _run_ended(self, x: _Exchange, when: str, api: str | None = None) -> Any:
        """Record a request cut by the run's end (the gateway's stop): ``gateway.run_ended``.

        No provider failure, however long the upstream had been silent: a silence the
        agent asked for (a long generation, a long reasoning, streamed or not) cannot be
        told here from a provider that hung, which the gateway's own read timeout
        (``model_gateway.read_timeout_s``) finds while the run goes on. With ``api``, also
        the answer the agent (gone, as a rule) gets; without, the request was cancelled
        and only its line is written.
        """
        message = f"the run ended (the model gateway stopped) {when}"
        if api is not None:
            return self._refuse(x, api, 502, "api_error", RUN_ENDED, message)
        x.entry.status = x.entry.status or 499
        x.entry.error_type, x.entry.error = RUN_ENDED, message
        self._write(x)
        return None

    def _upstream_headers(self, headers: Any, api: str) -> dict[str, str]:
        out = {k: v for k, v in headers.items()
               if k.lower() in REQUEST_HEADERS_KEPT or k.lower().startswith("x-stainless-")}
        for key in [k for k in out if k.lower() == "idempotency-key"]:
            # the run's own: a provider replaying the answer it gave to a key never
            # replays another run's (a key seen in a log, a run of long ago)
            out[key] = self._idempotency_prefix + out[key]
        beta = next((k for k in out if k.lower() == "anthropic-beta"), None)
        if beta is not None:
            kept = [b.strip() for b in out.pop(beta).split(",")
                    if b.strip() and not b.strip().lower().startswith(BETAS_DROPPED)]
            if kept:
                out["anthropic-beta"] = ",".join(kept)
        out["accept-encoding"] = "identity"
        if self._api_key:
            # In the provider's header, whichever the agent used for the run's token.
            if api != API_ANTHROPIC or self._key_as_bearer:
                out["authorization"] = f"Bearer {self._api_key}"
            else:
                out["x-api-key"] = self._api_key
        return out

    async def _relay(self, queue: asyncio.Queue[bytes | BaseException | None],
                     x: _Exchange) -> AsyncIterator[bytes]:
        """Pass the answer's chunks through as :meth:`_pump` reads them.

        An agent that hangs up before the answer ends leaves it read on (for at most
        :data:`DRAIN_AFTER_HANGUP_S` and :data:`DRAIN_AFTER_HANGUP_BYTES`) to its final
        usage, which the provider bills.
        """
        pending: bytes | BaseException | None = b""
        try:
            while True:
                item = await queue.get() if pending == b"" else pending
                pending = b""
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                # Chunks the pump has already read go out as one write: the agent gets
                # the same bytes, in order, with one send of the HTTP stack per batch
                # rather than per chunk (nothing is held back to make a batch).
                parts = [item]
                size = len(item)
                while size < RELAY_BATCH_BYTES:
                    try:
                        more = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        break
                    if not isinstance(more, bytes):
                        pending = more
                        break
                    parts.append(more)
                    size += len(more)
                yield parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            # Ended by the gateway's stop (its shutdown cancels the request tasks before
            # the pumps), not by an agent that hung up: the answer is cut by the run's end.
            x.stopped = x.stopped or (self.stopping and not x.client_gone)
            x.client_gone = True
            while not queue.empty():
                queue.get_nowait()

    async def _pump(self, response: Any, x: _Exchange,
                    queue: asyncio.Queue[bytes | BaseException | None]) -> None:
        """Read the upstream's answer to its end, feeding the reader and the relay."""
        import httpx

        keep = self.cfg.log_bodies
        outcome = "cut"
        hung_up_at: float | None = None
        drained = 0
        last: StreamDropped | None = None
        try:
            async for chunk in response.aiter_bytes():
                if x.entry.ttfb_s is None:
                    x.entry.ttfb_s = round(time.monotonic() - x.started, 6)
                x.entry.bytes_out += len(chunk)
                if x.entry.stream:
                    x.reader.feed(chunk)
                    deltas, tokens = x.reader.deltas_in(chunk)
                    x.deltas += deltas
                    x.delta_tokens += tokens
                if keep or (not x.entry.stream and len(x.answer) < MAX_JSON_BYTES):
                    x.answer += chunk
                if not x.client_gone:
                    try:  # the common case, with room in the queue: no timer per chunk
                        queue.put_nowait(chunk)
                        continue
                    except asyncio.QueueFull:
                        pass
                    waited = time.monotonic()
                    try:
                        async with asyncio.timeout(self.cfg.read_timeout_s):
                            await queue.put(chunk)
                        continue
                    except TimeoutError:  # never read: the agent is gone
                        x.client_gone = True
                    finally:
                        # Meanwhile nothing is read from the upstream, which may give up.
                        now = time.monotonic()
                        if now - waited >= CLIENT_STALL_S:
                            x.last_stall_s, x.last_stall_end = now - waited, now
                        elif waited - x.last_stall_end <= CLIENT_STALL_S:
                            # Still behind after a stall: the answer it held up (megabytes
                            # in the buffers on the way) is still passing, the cut not
                            # yet found. The stall lasts until the agent keeps up.
                            x.last_stall_end = now
                if hung_up_at is None:
                    hung_up_at = time.monotonic()
                drained += len(chunk)
                if drained > DRAIN_AFTER_HANGUP_BYTES \
                        or time.monotonic() - hung_up_at > DRAIN_AFTER_HANGUP_S:
                    outcome = "client"  # hung up, and drained as long as allowed
                    break
            else:
                # Read to its end: the provider's answer is whole, whenever the agent
                # hung up (after its last byte, or mid-answer and drained: said below).
                outcome = "ended"
                if hung_up_at is not None:
                    x.entry.error_type = x.entry.error_type or "gateway.client_disconnected"
                    x.entry.error = x.entry.error or (
                        "the agent closed the connection before the answer ended")
        except httpx.HTTPError as exc:
            cut = f"{type(exc).__name__}: {exc!s}"
            if isinstance(exc, httpx.ReadTimeout) and not x.entry.stream:
                # An unstreamed answer whose headers came first: silent past the window
                # all the same, the time the agent chose (verdict.unstreamed_timeout).
                x.entry.error_type = "gateway.upstream_timeout"
                x.entry.error = f"the upstream did not finish its answer: {cut}"[:500]
            elif time.monotonic() - x.last_stall_end <= CLIENT_STALL_S:
                # Found as the agent read again after leaving the answer unread: a cut it
                # chose (verdict.POLICY_ERRORS). A cut long after such a wait is the
                # provider's.
                x.entry.error_type = "gateway.client_stalled"
                x.entry.error = (f"the upstream cut the answer after the agent left it "
                                 f"unread for {x.last_stall_s:.1f} s: {cut}")[:500]
            else:
                x.entry.error_type = "gateway.stream_dropped"
                x.entry.error = f"the upstream cut the answer: {cut}"[:500]
            last = StreamDropped(x.entry.error)
        except asyncio.CancelledError:
            outcome = "client" if x.client_gone and not x.stopped else "cut"
            if outcome == "cut" and self.stopping and x.entry.error_type is None:
                x.entry.error_type = RUN_ENDED
                x.entry.error = "the run ended (the model gateway stopped) mid-answer"
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(StreamDropped("the model gateway stopped"))
            raise
        finally:
            self._answering -= 1
            try:
                await response.aclose()
            finally:
                # The line is written before the agent sees the answer end: a run that
                # ends with this answer finds it in the record.
                self._finish(x, outcome)
                self._release(x)
        if not x.client_gone:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.read_timeout_s):
                    await queue.put(last)

    def _finish(self, x: _Exchange, outcome: str) -> None:
        """Read what arrived, count its cost, write the record line."""
        r = x.reader
        if outcome in ("ended", "client"):
            if x.entry.stream:
                r.finish()
            elif x.answer:
                body = loads(bytes(x.answer))
                if body is not None:
                    r.read_body(body)
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
        if e.stream and not reading.complete and x.delta_tokens > e.usage.output:
            # Cut before its final usage (hung up on and drained to the bound, dropped, cut
            # by the run's end): the provider bills what it generated; the record, the run's
            # cost and the spend cap count it as estimated from the deltas read.
            e.usage = e.usage.model_copy(update={"output": x.delta_tokens})
            counted = (f"output estimated from the {x.deltas} deltas read, {x.delta_tokens} "
                       f"tokens (about 4 bytes a token past each event's envelope; no final "
                       f"usage came)")
            e.error = f"{e.error}; {counted}" if e.error else counted
        e.request_id = e.request_id or reading.response_id
        if e.endpoint == "responses" and e.status < 400:
            # what a later request of this run may name (OWN_REFERENCES)
            self._answered_ids.update(i for i in (reading.response_id, *reading.item_ids)
                                      if isinstance(i, str) and i)
        if e.refusal and x.submission:
            self._keep_at_refusal(x.submission)
        self._write(x)

    def _keep_at_refusal(self, submission: bytes) -> None:
        """Keep the file a refused request arrived with (distinct ones, the latest few)."""
        if self.submission_counts is not None and not self.submission_counts(submission):
            return  # nothing to grade in it: it must not push a kept file out
        digest = hashlib.sha256(submission).hexdigest()
        with self._lock:
            if digest in self._kept_at_refusals:
                return
            self._kept_at_refusals.add(digest)
            n = len(self._kept_at_refusals)
        folder = self.folder / REFUSAL_FILES
        folder.mkdir(exist_ok=True)
        (folder / f"{n:06d}.json").write_bytes(submission)
        (folder / f"{n - MAX_REFUSAL_FILES:06d}.json").unlink(missing_ok=True)

    # ------------------------------------------------------------------ the record

    def _write(self, x: _Exchange) -> None:
        e = x.entry
        e.latency_s = round(time.monotonic() - x.started, 6)
        # Every text the provider or the agent sent (an error message echoing the agent's
        # bytes, a label, an id) is written well formed: a lone surrogate, which JSON
        # allows and UTF-8 does not, would cost the request its line.
        for name, value in e:
            if isinstance(value, str):
                setattr(e, name, well_formed(value))
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
                                    "answer": answer}, ensure_ascii=False),
                        encoding="utf-8", errors="replace")
        return name

    def _keep_tool_results(self, endpoint: str, body: Any) -> None:
        """Append the tool results the model is sent for the first time, bounded."""
        cap = self.cfg.tool_result_chars
        limit = int(self.cfg.tool_results_mb * 1024 * 1024)
        lines = []
        with self._lock:
            for call_id, text in tool_results(endpoint, body):
                call_id, text = well_formed(call_id), well_formed(text)
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
