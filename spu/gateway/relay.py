"""How the model gateway passes a request on and its answer back.

:class:`Relay` forwards a request that passed admission and answers with a stream fed by
an :class:`AnswerPump`, a task of its own that reads the upstream's answer to its end
(after an agent hangs up too, bounded) and has :meth:`Relay.finish` write its line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

from spu.config import ModelGatewayConfig
from spu.gateway.admission import SpendCap
from spu.gateway.answers import API_ANTHROPIC, api_of_endpoint, loads
from spu.gateway.exchange import Exchange
from spu.gateway.record import GatewayRecord, now_iso
from spu.gateway.verdict import RUN_ENDED, waiting_by_choice

Queue = asyncio.Queue[bytes | BaseException | None]
"""What the pump hands the agent's stream: chunks, then None or the cut that ended it."""

MAX_JSON_BYTES = 32 * 1024 * 1024
"""A non-streamed answer longer than this is passed through but not read."""

REQUEST_HEADERS_KEPT = frozenset({
    "content-type", "accept", "user-agent", "anthropic-version", "anthropic-beta",
    "anthropic-dangerous-direct-browser-access", "x-app", "originator", "session_id",
    "conversation_id", "version", "openai-beta", "idempotency-key"})
"""Request headers passed to the upstream (with those starting ``x-stainless-``, the SDKs'
own); any other (``OpenAI-Organization``, ``OpenAI-Project``, a credential) is dropped."""
BETAS_DROPPED = ("mcp-client-", "web-fetch-", "web-search-", "code-execution-", "files-api-",
                 "skills-", "oauth-")
"""``anthropic-beta`` values not passed on: features by which the provider reaches out
(remote MCP servers, web fetch and search, code execution with files) for the agent, and
OAuth's, which asks the provider to read the key as an OAuth token (a 401 for an API key)."""
DRAIN_AFTER_HANGUP_S = 300.0
"""Seconds an answer is still read for its usage after the agent hung up."""
DRAIN_AFTER_HANGUP_BYTES = 64 * 1024 * 1024
"""Bytes an answer is still read for its usage after the agent hung up."""
RESPONSE_HEADERS_DROPPED = frozenset({
    "content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive",
    "date", "server"})


RELAY_BATCH_BYTES = 1 << 18
"""At most this many bytes already read from the upstream go to the agent in one write."""

UPSTREAM_CONNECTIONS = 64
"""Connections the gateway holds to the upstream at once (a run's concurrent requests)."""

CLIENT_STALL_S = 2.0
"""A wait this long on an agent that stopped reading makes a later upstream cut the
agent's doing (``gateway.client_stalled``): a provider may drop a reader that stalls. A
wait that begins within this long of a stall's end carries it on (the agent still behind)."""


RATE_LIMIT_HEADERS = ("anthropic-ratelimit-input-tokens-limit",)
"""Where providers state their input-tokens-per-minute limit."""
OUTPUT_LIMIT_HEADERS = ("anthropic-ratelimit-output-tokens-limit",)
"""Where providers state their output-tokens-per-minute limit."""
TOTAL_LIMIT_HEADERS = ("x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit")
"""Where providers state a limit of all tokens per minute (OpenAI counts a request at its
``max_tokens`` before it runs)."""


REQUEST_LIMIT_HEADERS = ("anthropic-ratelimit-requests-limit", "x-ratelimit-limit-requests")
"""Where providers state their requests-per-minute limit."""


def stated_rate_limit(headers: Any, names: tuple[str, ...] = RATE_LIMIT_HEADERS) -> int | None:
    """The per-minute limit an answer's headers state under ``names`` (tokens), or None.

    Examples
    --------
    >>> stated_rate_limit({"anthropic-ratelimit-input-tokens-limit": "80000"})
    80000
    >>> stated_rate_limit({"x-ratelimit-limit-tokens": "n/a"}) is None
    True
    """
    for name in names:
        value = headers.get(name)
        if value is not None and str(value).strip().isdigit():
            return int(str(value).strip())
    return None


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """The TLS context of every gateway of the process.

    Loading the CA bundle costs 50 ms, which every run's gateway would pay again.
    """
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


class StreamDropped(Exception):
    """The upstream cut the answer; raised into the server so the agent's stream is cut."""


class Relay:
    """Forward requests to the upstream, and their answers back, for one run.

    Args:
        upstream: the API base the gateway's root stands for.
        api: the run's API style (model lists are asked in it).
        cfg: ``model_gateway`` options.
        api_key: the provider key put on upstream requests; None sends none.
        key_as_bearer: send the key as ``Authorization: Bearer`` (else ``x-api-key`` to an
            Anthropic API).
        record: the run's record.
        cap: the spend cap, given back each generation's bound once its cost is counted.
        answered_ids: where the ids of the run's own Responses answers are kept.
        background: the gateway's background tasks (each answer's pump among them).
    """

    def __init__(self, upstream: str, api: str, cfg: ModelGatewayConfig, api_key: str | None,
                 key_as_bearer: bool, record: GatewayRecord, cap: SpendCap,
                 answered_ids: set[str], background: set[asyncio.Task[None]]) -> None:
        self.upstream = upstream
        self.api = api
        self.cfg = cfg
        self.record = record
        self.cap = cap
        self.answered_ids = answered_ids
        self.background = background
        self.client: Any = None
        """The upstream's ``httpx.AsyncClient``, open while the server runs."""
        self.answering = 0
        """Answers being read from the upstream now, each holding a pool connection."""
        self.waiting: set[Exchange] = set()
        """Requests forwarded and waiting for their answer's headers."""
        self.stopping = False
        """Set when the gateway stops: a request cut from now on was cut by the run's end."""
        self._api_key = api_key
        self._key_as_bearer = key_as_bearer
        self._idempotency_prefix = f"spu-{secrets.token_hex(8)}-"
        """Put before the agent's ``Idempotency-Key``: keys are this run's alone."""

    @staticmethod
    def new_client(cfg: ModelGatewayConfig) -> Any:
        """The upstream client of a gateway (no environment proxies: its way is its own)."""
        import httpx

        timeout = httpx.Timeout(connect=cfg.connect_timeout_s, read=cfg.read_timeout_s,
                                write=cfg.read_timeout_s, pool=cfg.connect_timeout_s)
        return httpx.AsyncClient(timeout=timeout, trust_env=False, http2=False,
                                 verify=_tls_context(),
                                 limits=httpx.Limits(max_connections=UPSTREAM_CONNECTIONS,
                                                     max_keepalive_connections=16))

    def upstream_headers(self, headers: Any, api: str) -> dict[str, str]:
        """The agent's headers as they go on: the allowlist, the run's key and prefixes."""
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

    async def forward(self, request: Any, path: str, exchange: Exchange) -> Any:
        """Send the request upstream; the answer as a stream fed by its pump."""
        import httpx
        from starlette.responses import StreamingResponse

        # A model list belongs to no one API: it is asked in the run's own API style.
        api = (self.api if exchange.entry.endpoint == "models"
               else api_of_endpoint(exchange.entry.endpoint))
        query = request.scope.get("query_string") or b""
        url = self.upstream + path + (f"?{query.decode('latin-1')}" if query else "")
        # Header values go on as the bytes that came (a byte past ASCII is the agent's to
        # send; httpx would not encode it as text).
        sent = [(k.encode("latin-1"), v.encode("latin-1"))
                for k, v in self.upstream_headers(request.headers, api).items()]

        async def went_on(event: str, info: Any) -> None:
            # When its headers go out: a request that waited for a connection of the pool
            # (held by answers the agent leaves unread) went on then, with those sent
            # meanwhile, and the provider's latency starts then.
            if event == "http11.send_request_headers.started":
                exchange.entry.time, exchange.started = now_iso(), time.monotonic()
                exchange.sent = True

        try:
            upstream = self.client.build_request(request.method, url, headers=sent,
                                                 content=exchange.raw_request,
                                                 extensions={"trace": went_on})
        except (httpx.InvalidURL, ValueError) as exc:
            self.cap.release(exchange)
            return self.record.refuse(exchange, api, 400, "invalid_request_error",
                                      "gateway.bad_request",
                                      f"the request cannot be forwarded: {exc}"[:500])
        self.waiting.add(exchange)
        try:
            response = await self.client.send(upstream, stream=True)
        except asyncio.CancelledError:  # the run ended meanwhile (the server's shutdown)
            self.cap.release(exchange)
            self.run_ended(exchange, "before the upstream answered")
            raise
        except httpx.HTTPError as exc:
            self.cap.release(exchange)
            if self.stopping:  # the upstream client closed by the run's end, not a failure
                return self.run_ended(exchange, "before the upstream answered", api)
            return self.upstream_failed(exchange, api, exc)
        except RuntimeError:  # httpx's "the client has been closed"
            if not self.stopping:
                raise
            self.cap.release(exchange)
            return self.run_ended(exchange, "before the upstream answered", api)
        finally:
            self.waiting.discard(exchange)
        headers = self._answer_began(exchange, response)
        # The upstream is read by a task of its own, started here so that it runs (and
        # writes the record line, and gives back the spend-cap bound) even when the agent
        # is gone before the answer's first byte.
        queue: Queue = asyncio.Queue(maxsize=64)
        self.answering += 1  # until the pump ends (its finally)
        pump = asyncio.get_running_loop().create_task(
            AnswerPump(self, response, exchange, queue).run())
        self.background.add(pump)
        pump.add_done_callback(self.background.discard)
        return StreamingResponse(self.answer_stream(queue, exchange),
                                 status_code=response.status_code, headers=headers)

    def _answer_began(self, exchange: Exchange, response: Any) -> dict[str, str]:
        """Note what the answer's headers say; the headers passed on to the agent."""
        entry, said, cfg = exchange.entry, response.headers, self.cfg
        entry.status = response.status_code
        entry.request_id = said.get("request-id") or said.get("x-request-id")
        # The limits the answer states; where it states none, the configured ones.
        entry.rate_limit_tokens = stated_rate_limit(said) or cfg.rate_limit_input_tokens
        entry.rate_limit_output_tokens = (stated_rate_limit(said, OUTPUT_LIMIT_HEADERS)
                                          or cfg.rate_limit_output_tokens)
        entry.rate_limit_total_tokens = (stated_rate_limit(said, TOTAL_LIMIT_HEADERS)
                                         or cfg.rate_limit_tokens)
        entry.rate_limit_requests = (stated_rate_limit(said, REQUEST_LIMIT_HEADERS)
                                     or cfg.rate_limit_requests)
        entry.stream = said.get("content-type", "").startswith("text/event-stream")
        return {k: v for k, v in said.items() if k.lower() not in RESPONSE_HEADERS_DROPPED}

    def upstream_failed(self, exchange: Exchange, api: str, exc: Exception) -> Any:
        """The answer to a request the upstream failed before its answer's headers."""
        import httpx

        refuse = functools.partial(self.record.refuse, exchange, api)
        if isinstance(exc, httpx.ReadTimeout):
            # Silent past the read window after taking the request: for an unstreamed
            # generation, the time it takes is the agent's choice (verdict.is_failure).
            return refuse(504, "timeout_error", "gateway.upstream_timeout",
                          f"the upstream did not answer: {type(exc).__name__}")
        if isinstance(exc, httpx.TimeoutException):  # no connection, or the request not taken
            own = self.answering + self.slow_by_choice(exchange)
            if isinstance(exc, httpx.PoolTimeout) and own >= UPSTREAM_CONNECTIONS:
                # Every connection carries an answer the agent asked for and reads (or hung
                # up on), or an unstreamed generation as long as it chose to ask for: the
                # wait is its own concurrency's doing (verdict.POLICY_ERRORS).
                return refuse(429, "rate_limit_error", "gateway.too_busy",
                              f"this run has {own} requests in flight (answers being read, "
                              f"prompts being read and unstreamed generations it asked to "
                              f"be long), the model gateway's most ({UPSTREAM_CONNECTIONS})")
            return refuse(504, "timeout_error", "gateway.upstream_unreachable",
                          f"the upstream could not be reached in time: {type(exc).__name__}")
        return refuse(502, "api_error", "gateway.upstream_unreachable",
                      f"the upstream could not be reached: {exc!s}"[:500])

    def slow_by_choice(self, asking: Exchange) -> int:
        """Requests holding a connection, waiting for their headers as long as chosen.

        Each has been sent (its headers went out on a connection of the pool) with no
        byte back yet, as long as its prompt takes to read or, an unstreamed generation,
        the output it asked for takes to write
        (:func:`~spu.gateway.verdict.waiting_by_choice`): the agent's choice, like an
        answer it reads. Requests still queued for a connection hold none; short ones
        waiting longer found a slow provider.
        """
        now = time.monotonic()
        return sum(1 for w in self.waiting
                   if w is not asking and w.sent and waiting_by_choice(w.entry, now - w.started))

    def run_ended(self, exchange: Exchange, when: str, api: str | None = None) -> Any:
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
            return self.record.refuse(exchange, api, 502, "api_error", RUN_ENDED, message)
        exchange.entry.status = exchange.entry.status or 499
        exchange.entry.error_type, exchange.entry.error = RUN_ENDED, message
        self.record.write(exchange)
        return None

    async def answer_stream(self, queue: Queue, exchange: Exchange) -> AsyncIterator[bytes]:
        """Pass the answer's chunks through as its :class:`AnswerPump` reads them.

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
            exchange.stopped = exchange.stopped or (self.stopping and not exchange.client_gone)
            exchange.client_gone = True
            while not queue.empty():
                queue.get_nowait()

    def finish(self, exchange: Exchange, outcome: str) -> None:
        """Read what arrived, count its cost, write the record line."""
        r = exchange.reader
        e = exchange.entry
        if outcome in ("ended", "client"):
            if e.stream:
                r.finish()
            elif exchange.answer:
                body = loads(bytes(exchange.answer))
                if body is not None:
                    r.read_body(body)
        reading = r.reading
        e.usage, e.stop_reason = reading.usage, reading.stop_reason
        e.refusal, e.refusal_label = reading.refusal, reading.refusal_label
        e.complete = reading.complete and outcome == "ended"
        e.final = reading.final and e.complete and e.status < 400
        if e.error_type is None and reading.error_type is not None:
            e.error_type, e.error = reading.error_type, reading.error
        if outcome == "client" and e.error_type is None:
            e.error_type = "gateway.client_disconnected"
            e.error = "the agent closed the connection before the answer ended"
        elif outcome == "ended" and e.stream and not e.complete and e.error_type is None \
                and e.status < 400 and e.endpoint != "models":
            e.error_type = "gateway.stream_dropped"
            e.error = "the answer's stream ended before its final event"
        if e.stream and not reading.complete and exchange.delta_tokens > e.usage.output:
            # Cut before its final usage (hung up on and drained to the bound, dropped, cut
            # by the run's end): the provider bills what it generated; the record, the run's
            # cost and the spend cap count it as estimated from the deltas read.
            e.usage = e.usage.model_copy(update={"output": exchange.delta_tokens})
            counted = (f"output estimated from the {exchange.deltas} deltas read, "
                       f"{exchange.delta_tokens} tokens (about 4 bytes a token past each "
                       f"event's envelope; no final usage came)")
            e.error = f"{e.error}; {counted}" if e.error else counted
        e.request_id = e.request_id or reading.response_id
        if e.endpoint == "responses" and e.status < 400:
            # what a later request of this run may name (OWN_REFERENCES)
            self.answered_ids.update(i for i in (reading.response_id, *reading.item_ids)
                                     if isinstance(i, str) and i)
        if e.refusal and exchange.submission:
            self.record.keep_at_refusal(exchange.submission)
        self.record.write(exchange)
        # What the model was sent is kept only once its answer arrived (a refused request
        # reached no model), for the exposure screen; and the answer's tool calls.
        self.record.inputs.answered(e.endpoint, reading, exchange.body, e.status)


class AnswerPump:
    """Reads one answer from the upstream to its end: for its reader, the record, the agent.

    The agent's stream gets each chunk through ``queue``; an agent that stopped reading
    holds the pump (and the upstream) back, for at most ``read_timeout_s`` a chunk; one
    that hung up leaves the answer read on, bounded, to its final usage. When the answer
    ends (whole, cut, or by the run's end) its line is written before the agent's stream
    ends, and the cap's bound given back.
    """

    def __init__(self, relay: Relay, response: Any, exchange: Exchange, queue: Queue) -> None:
        self.relay = relay
        self.response = response
        self.exchange = exchange
        self.queue = queue
        self.outcome = "cut"
        """``ended`` (read to its end), ``client`` (hung up, drained as long as allowed)
        or ``cut``."""
        self.hung_up_at: float | None = None
        self.drained = 0
        """Bytes read since the agent hung up."""

    async def run(self) -> None:
        """Read the upstream's answer to its end, feeding the reader and the agent."""
        import httpx

        exchange = self.exchange
        last: StreamDropped | None = None
        try:
            async for chunk in self.response.aiter_bytes():
                self._read(chunk)
                if not exchange.client_gone and await self._hand_on(chunk):
                    continue
                if self._drained_enough(len(chunk)):
                    self.outcome = "client"  # hung up, and drained as long as allowed
                    break
            else:
                self._read_to_end()
        except httpx.HTTPError as exc:
            last = StreamDropped(self._cut_by(exc))
        except asyncio.CancelledError:
            self._cancelled()
            raise
        finally:
            self.relay.answering -= 1
            try:
                await self.response.aclose()
            finally:
                # The line is written before the agent sees the answer end: a run that
                # ends with this answer finds it in the record.
                self.relay.finish(exchange, self.outcome)
                self.relay.cap.release(exchange)
        if not exchange.client_gone:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.relay.cfg.read_timeout_s):
                    await self.queue.put(last)

    def _read(self, chunk: bytes) -> None:
        """Take in a chunk: the first byte's time, the bytes, the deltas, the body kept."""
        exchange, entry = self.exchange, self.exchange.entry
        if entry.ttfb_s is None:
            entry.ttfb_s = round(time.monotonic() - exchange.started, 6)
        entry.bytes_out += len(chunk)
        if entry.stream:
            exchange.reader.feed(chunk)
            deltas, tokens = exchange.reader.deltas_in(chunk)
            exchange.deltas += deltas
            exchange.delta_tokens += tokens
        if self.relay.cfg.log_bodies or (not entry.stream
                                         and len(exchange.answer) < MAX_JSON_BYTES):
            exchange.answer += chunk

    async def _hand_on(self, chunk: bytes) -> bool:
        """Give a chunk to the agent's stream; False when the agent is gone."""
        exchange = self.exchange
        try:  # the common case, with room in the queue: no timer per chunk
            self.queue.put_nowait(chunk)
            return True
        except asyncio.QueueFull:
            pass
        waited = time.monotonic()
        try:
            async with asyncio.timeout(self.relay.cfg.read_timeout_s):
                await self.queue.put(chunk)
            return True
        except TimeoutError:  # never read: the agent is gone
            exchange.client_gone = True
            return False
        finally:
            # Meanwhile nothing is read from the upstream, which may give up.
            now = time.monotonic()
            if now - waited >= CLIENT_STALL_S:
                exchange.last_stall_s, exchange.last_stall_end = now - waited, now
            elif waited - exchange.last_stall_end <= CLIENT_STALL_S:
                # Still behind after a stall: the answer it held up (megabytes in the
                # buffers on the way) is still passing, the cut not yet found. The stall
                # lasts until the agent keeps up.
                exchange.last_stall_end = now

    def _drained_enough(self, size: int) -> bool:
        """Count a chunk read after the hang-up; True past the drain's bounds."""
        if self.hung_up_at is None:
            self.hung_up_at = time.monotonic()
        self.drained += size
        return self.drained > DRAIN_AFTER_HANGUP_BYTES \
            or time.monotonic() - self.hung_up_at > DRAIN_AFTER_HANGUP_S

    def _read_to_end(self) -> None:
        """The provider's answer is whole, whenever the agent hung up (said here)."""
        self.outcome = "ended"
        entry = self.exchange.entry
        if self.hung_up_at is not None:  # mid-answer, and drained to the end
            entry.error_type = entry.error_type or "gateway.client_disconnected"
            entry.error = entry.error or (
                "the agent closed the connection before the answer ended")

    def _cut_by(self, exc: Exception) -> str:
        """Record the upstream's cut of the answer; its words for the agent's stream."""
        import httpx

        exchange, entry = self.exchange, self.exchange.entry
        cut = f"{type(exc).__name__}: {exc!s}"
        if isinstance(exc, httpx.ReadTimeout) and not entry.stream:
            # An unstreamed answer whose headers came first: silent past the window
            # all the same, the time the agent chose (verdict.unstreamed_timeout).
            entry.error_type = "gateway.upstream_timeout"
            entry.error = f"the upstream did not finish its answer: {cut}"[:500]
        elif time.monotonic() - exchange.last_stall_end <= CLIENT_STALL_S:
            # Found as the agent read again after leaving the answer unread: a cut it
            # chose (verdict.POLICY_ERRORS). A cut long after such a wait is the
            # provider's.
            entry.error_type = "gateway.client_stalled"
            entry.error = (f"the upstream cut the answer after the agent left it unread "
                           f"for {exchange.last_stall_s:.1f} s: {cut}")[:500]
        else:
            entry.error_type = "gateway.stream_dropped"
            entry.error = f"the upstream cut the answer: {cut}"[:500]
        return entry.error

    def _cancelled(self) -> None:
        """The pump cancelled: by the agent's hang-up drained away, or by the run's end."""
        exchange, entry = self.exchange, self.exchange.entry
        self.outcome = "client" if exchange.client_gone and not exchange.stopped else "cut"
        if self.outcome == "cut" and self.relay.stopping and entry.error_type is None:
            entry.error_type = RUN_ENDED
            entry.error = "the run ended (the model gateway stopped) mid-answer"
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(StreamDropped("the model gateway stopped"))
