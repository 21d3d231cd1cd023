"""The model gateway of one run: Starlette behind uvicorn, httpx streaming to the upstream.

It listens on the host's ``127.0.0.1`` and a free port, in a daemon thread, outside the
sandbox (like the audited tools service); a run's gateway has a process of its own under
the run's service limits (:mod:`spu.gateway.process`), where this class serves.
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
import functools
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from spu.config import ModelGatewayConfig, PriceConfig
from spu.gateway.admission import (  # noqa: F401 - the gateway's names, as before the split
    OUTPUT_BOUNDS,
    OUTPUT_BOUNDS_OF,
    Admission,
    SpendCap,
    asked_output_tokens,
)
from spu.gateway.answers import (
    API_ANTHROPIC,
    APIS,
    GENERATION_ENDPOINTS,
    api_of_endpoint,
    endpoint_of,
    loads_request,
    reader_for,
)
from spu.gateway.exchange import Exchange
from spu.gateway.inputs import InputRecord
from spu.gateway.record import GatewayRecord, cut, now_iso, well_formed
from spu.gateway.relay import (  # noqa: F401 - the gateway's names, as before the split
    UPSTREAM_CONNECTIONS,
    Relay,
    StreamDropped,
    stated_rate_limit,
)
from spu.schema import GatewayRequest
from spu.serving import server_class

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0
"""Seconds :meth:`ModelGateway.stop` waits for answers in flight to end."""
CONCURRENCY = 512
"""Connections and requests a gateway serves at once (uvicorn's ``limit_concurrency``: past
it, a 503 until some end): far above a CLI's fan-out, and under the descriptors its process
may hold (:data:`~spu.gateway.process.OPEN_FILES`)."""



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


@functools.cache
def _server_class() -> Any:
    """The run's server: :func:`spu.serving.server_class`, also served in a main thread.

    A gateway process serves in its main thread (:meth:`ModelGateway.serve`): it says its
    port once it listens (``listening``, called in the server's loop), and is stopped by
    its owner alone (:meth:`ModelGateway.request_stop`).
    """
    class GatewayServer(server_class()):  # type: ignore[misc]
        listening: Callable[[], None] | None = None
        """Called in the server's loop once it listens."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own handlers would raise the signal again once it stopped, before
            # the owner had its last word.
            yield

        async def main_loop(self) -> None:
            if self.listening is not None:
                self.listening()
            await super().main_loop()

    return GatewayServer


class ModelGateway:
    """The gateway of one run: :meth:`start`, give the agent :meth:`url` and :attr:`token`.

    Its parts: :class:`~spu.gateway.admission.Admission` (the token, the body read as a
    provider reads it, the policy) and :class:`~spu.gateway.admission.SpendCap` (the
    bound each generation holds on the spend cap) decide whether a request goes on;
    :class:`~spu.gateway.relay.Relay` forwards it and passes its answer back;
    :class:`~spu.gateway.record.GatewayRecord` writes what happened.

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
            (:data:`~spu.gateway.verdict.REFUSAL_FILES`), so that a refusal after a valid
            file stays known when the agent then removes or spoils the file.
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
        self.max_cost_usd = max_cost_usd
        self.read_submission = read_submission
        self.token = "spu-" + secrets.token_urlsafe(32)
        self.background: set[asyncio.Task[None]] = set()
        """Answers being read (each one's pump) and wake-ups of the cap: the shutdown
        waits for them."""
        self.record = GatewayRecord(self.folder, self.cfg, prices, cache_write_rate,
                                    submission_counts)
        self.admission = Admission(self.token, api_model, self.cfg, self.record)
        self.cap = SpendCap(max_cost_usd, prices, self.record, self.background)
        self.relay = Relay(self.upstream, api, self.cfg, api_key, bool(key_as_bearer),
                           self.record, self.cap, self.admission.answered_ids,
                           self.background)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    @property
    def requests_path(self) -> Path:
        """``<folder>/requests.jsonl``: the record (SPEC 11)."""
        return self.record.requests_path

    @property
    def inputs(self) -> InputRecord:
        """What the model is sent, and its tool calls (the record's part for the screen)."""
        return self.record.inputs

    @property
    def tool_results_path(self) -> Path:
        """``<folder>/tool_results.jsonl``: the texts the model was sent."""
        return self.record.tool_results_path

    @property
    def spent_usd(self) -> float:
        """What the requests recorded so far cost, at list prices."""
        return self.record.spent_usd

    @property
    def stopping(self) -> bool:
        """Set by :meth:`stop`: a request cut from now on was cut by the run's end."""
        return self.relay.stopping

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

    def _lifespan(self, app: Any) -> Any:
        @contextlib.asynccontextmanager
        async def lifespan(_: Any) -> AsyncIterator[None]:
            self.relay.client = Relay.new_client(self.cfg)
            try:
                yield
            finally:
                await self.relay.client.aclose()

        return lifespan(app)

    def _make_server(self, ready: Callable[[], None]) -> Any:
        import uvicorn

        _quiet_dropped_streams()
        # No log configuration of uvicorn's own: it would reset the process's loggers. No
        # proxy headers: an agent's X-Forwarded-For means nothing here (and costs a layer).
        # asyncio's loop, named: "auto" tries to import uvloop at every start.
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=0, log_config=None,
                                log_level=None, access_log=False, lifespan="on",
                                loop="asyncio",
                                http=_protocol_class(self.cfg.request_timeout_s),
                                date_header=False, proxy_headers=False,
                                limit_concurrency=CONCURRENCY)
        server = _server_class()(config)
        server.pumps = self.background
        server.shutdown_timeout_s = SHUTDOWN_TIMEOUT_S

        def listening() -> None:
            self._port = int(server.servers[0].sockets[0].getsockname()[1])
            (self.folder / "gateway.json").write_text(json.dumps(
                {"port": self._port, "pid": os.getpid(), "api": self.api,
                 "upstream": self.upstream, "api_model": self.api_model,
                 "max_cost_usd": self.max_cost_usd}, indent=1))
            log.info("model gateway on 127.0.0.1:%d -> %s", self._port, self.upstream)
            ready()

        server.listening = listening
        return server

    def serve(self, ready: Callable[[], None] = lambda: None) -> None:
        """Serve on ``127.0.0.1`` and a free port in this thread, until :meth:`request_stop`.

        ``ready`` is called (in the server's loop) once it listens: :attr:`port` is known.
        The record is whole when this returns.
        """
        self._server = self._make_server(ready)
        self._server.should_exit = self.relay.stopping  # asked to stop before it served
        self._server.run()

    def start(self) -> ModelGateway:
        """Serve on ``127.0.0.1`` and a free port, in a daemon thread."""
        listening = threading.Event()
        self._thread = threading.Thread(target=self.serve, args=(listening.set,),
                                        name="spu-model-gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not listening.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the model gateway did not start")
        return self

    def request_stop(self) -> None:
        """Have :meth:`serve` stop (from any thread, or a signal handler) and return."""
        self.relay.stopping = True
        if self._server is not None:
            self._server.should_exit = True
            self._server.wake()

    def stop(self) -> None:
        """Stop serving; the record is whole when this returns.

        Requests in flight are recorded as they end, or, still going after
        :data:`SHUTDOWN_TIMEOUT_S`, as cut by the run's end (``gateway.run_ended``).
        """
        if self._server is not None and self._thread is not None:
            self.request_stop()
            # The server's own shutdown waits SHUTDOWN_TIMEOUT_S, then cancels what is left
            # and writes its lines: the record is whole when this returns.
            self._thread.join(timeout=SHUTDOWN_TIMEOUT_S + 10)
            self._thread = None

    def __enter__(self) -> ModelGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ requests

    async def handle(self, request: Any) -> Any:
        """Answer one request: check it, forward it, pass the answer through.

        The token and the path are checked before the body is read, and the body is read
        only up to ``model_gateway.max_request_bytes``.
        """
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        path = raw_path.decode("latin-1")
        endpoint = endpoint_of(request.method, path)
        exchange = Exchange(entry=GatewayRequest(time=now_iso(), endpoint=endpoint, status=0),
                            started=time.monotonic(), reader=reader_for(endpoint))
        refusal = await self._admit(request, path, exchange)
        if refusal is not None:
            return refusal
        # A forwarded request's time is when it goes on, its body whole and past any wait
        # at the spend cap (and, in forward, for a connection of the pool): what the
        # provider's limits see (verdict.request_burst; headers sent early and bodies ended
        # together are one burst), and the latency is the provider's alone (no slow upload,
        # no wait at the cap or the pool).
        exchange.entry.time, exchange.started = now_iso(), time.monotonic()
        try:  # the bound held on the spend cap is given back whatever fails
            if self.read_submission is not None and endpoint in GENERATION_ENDPOINTS:
                exchange.submission = self.read_submission()
            return await self.relay.forward(request, path, exchange)
        except BaseException:
            self.cap.release(exchange)
            raise

    async def _admit(self, request: Any, path: str, exchange: Exchange) -> Any:
        """The gateway's own answer to a request that does not go on, or None (it goes)."""
        endpoint = exchange.entry.endpoint
        api = api_of_endpoint(endpoint)
        refuse = functools.partial(self.record.refuse, exchange, api)
        if self.record.full:
            return refuse(400, "invalid_request_error", "gateway.record_full",
                          f"this run's model record is full (model_gateway.record_mb="
                          f"{self.cfg.record_mb:g}); no further requests")
        if not self.admission.token_ok(request.headers):
            return refuse(401, "authentication_error", "gateway.bad_token",
                          "invalid x-api-key (not this run's model token)")
        if endpoint == "other":
            return refuse(404, "not_found_error", "gateway.not_allowed",
                          f"the model gateway forwards no {request.method} {path[:200]}")
        try:
            async with asyncio.timeout(self.cfg.request_timeout_s):
                raw = await self.admission.read_body(request)
        except TimeoutError:
            return refuse(408, "timeout_error", "gateway.too_slow",
                          f"the request body did not arrive within model_gateway."
                          f"request_timeout_s={self.cfg.request_timeout_s:g}")
        if raw is None:
            return refuse(413, "request_too_large", "gateway.too_large",
                          f"the request body is over model_gateway.max_request_bytes="
                          f"{self.cfg.max_request_bytes}")
        duplicate = self._read_request(raw, exchange)
        unread = self.admission.read_otherwise(request, exchange, duplicate)
        if unread is not None:
            return refuse(400, "invalid_request_error", "gateway.bad_request", unread)
        refusal = (self.admission.policy(endpoint, exchange)
                   or self.admission.billed_output(endpoint, api, exchange)
                   or self.admission.usage_asked(endpoint, api, exchange))
        if refusal is not None:
            return refusal
        try:
            return await self.cap.reserve(endpoint, exchange)
        except asyncio.CancelledError:  # the run ended while it waited at the cap
            self.cap.release(exchange)
            self.relay.run_ended(exchange, "before the request was forwarded (at the spend cap)")
            raise

    @staticmethod
    def _read_request(raw: bytes, exchange: Exchange) -> str | None:
        """Read the body into ``exchange``; a key some object names twice, or None."""
        exchange.raw_request, exchange.entry.bytes_in = raw, len(raw)
        duplicate = None
        if raw:
            exchange.body, duplicate = loads_request(raw)
        body = exchange.body
        if isinstance(body, dict):
            # Compared whole (the policy), written cut (the record).
            exchange.model = (well_formed(str(body["model"]))
                              if body.get("model") is not None else None)
            exchange.entry.model = None if exchange.model is None else cut(exchange.model)
            # Only JSON true streams (a stream that is no boolean is refused below).
            exchange.entry.stream = body.get("stream") is True
            exchange.entry.max_tokens = asked_output_tokens(body, exchange.entry.endpoint)
        return duplicate
