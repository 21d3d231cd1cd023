"""What the model gateway lets through: the token, the policy, the spend cap."""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
from collections.abc import Callable
from typing import Any

from spu.config import ModelGatewayConfig, PriceConfig
from spu.gateway.answers import (
    GENERATION_ENDPOINTS,
    OWN_REFERENCES,
    api_of_endpoint,
    case_variant,
    content_sources,
    fold_key,
    server_tools,
    stored_references,
)
from spu.gateway.exchange import Exchange
from spu.gateway.record import GatewayRecord, well_formed
from spu.schema import Usage
from spu.strict_json import shown

OUTPUT_BOUNDS = ("max_tokens", "max_output_tokens", "max_completion_tokens")
"""Where a request asks its most output tokens: Messages, Responses, Chat Completions."""
OUTPUT_BOUNDS_OF = {"messages": ("max_tokens",), "count_tokens": ("max_tokens",),
                    "responses": ("max_output_tokens",),
                    "chat_completions": ("max_tokens", "max_completion_tokens")}
"""The bounds each endpoint's API reads (Chat Completions: both, a provider may read
either: vLLM takes ``max_completion_tokens`` where set)."""


def _output_bound(value: Any) -> int | None:
    """One bound field's value as the integer a lax provider reads, or None."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        # 32000.0 and "32000" are the integer a lax provider reads: counted so, not as
        # no bound (a strict one answers 400, and the count only weighs the run more).
        return int(value)
    if isinstance(value, str) and value.strip().isdigit() and len(value) < 20:
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        # Past 2**63 no provider reads a bound (and the arithmetic on it would overflow).
        return value if abs(value) < 2**63 else None
    return None


def asked_output_tokens(body: dict[str, Any], endpoint: str | None = None) -> int | None:
    """The most output tokens a request body asks for, or None where it sets no bound.

    Only the fields ``endpoint``'s API reads count (:data:`OUTPUT_BOUNDS_OF`; every one of
    :data:`OUTPUT_BOUNDS` for another endpoint), the largest where it reads two: a body
    asking ``max_tokens`` 16 and ``max_completion_tokens`` 100,000 can run to 100,000.

    Examples
    --------
    >>> asked_output_tokens({"max_tokens": 100}), asked_output_tokens({"input": "x"})
    (100, None)
    >>> asked_output_tokens({"max_tokens": 32000.0}), asked_output_tokens({"max_tokens": "64"})
    (32000, 64)
    >>> asked_output_tokens({"max_tokens": 1.5}), asked_output_tokens({"max_tokens": True})
    (None, None)
    >>> asked_output_tokens({"max_tokens": 10**400}) is None
    True
    >>> both = {"max_tokens": 16, "max_completion_tokens": 100_000}
    >>> asked_output_tokens(both, "chat_completions"), asked_output_tokens(both, "responses")
    (100000, None)
    """
    bounds = [b for name in OUTPUT_BOUNDS_OF.get(endpoint or "", OUTPUT_BOUNDS)
              if (b := _output_bound(body.get(name))) is not None]
    return max(bounds) if bounds else None


OUTPUT_MULTIPLIERS = ("n", "best_of", "num_return_sequences", "candidate_count")
"""Fields by which a provider bills a request's output several times over: Chat
Completions' ``n`` choices (OpenAI; Gemini's OpenAI-compatible API maps it to its
``candidateCount``), ``best_of`` sequences generated to return ``n`` (vLLM, TGI),
Hugging Face's ``num_return_sequences`` and Gemini's ``candidate_count`` (which a router
may take). Neither Anthropic's Messages nor OpenAI's Responses has one; a router in
front of either may still read them, so they count wherever they stand."""
MULTIPLIER_PLACES = ("generation_config", "extra_body", "google")
"""Objects of a body whose fields a provider reads as the request's own settings, where
a multiplier is looked for too (Gemini's ``generation_config``, ``extra_body.google``)."""
MAX_OUTPUT_MULTIPLIER = 128
"""The most answers one request may ask for (OpenAI's largest ``n``); past it, a 400."""
PREDICTION = "prediction"
"""Chat Completions' predicted output: the tokens of it the answer rejects are billed as
output (``rejected_prediction_tokens``), as many as the prediction has at most."""

_MULTIPLIERS = frozenset(fold_key(name) for name in OUTPUT_MULTIPLIERS)
_PLACES = frozenset(fold_key(name) for name in MULTIPLIER_PLACES)


def _settings(body: dict[str, Any], depth: int = 0) -> list[dict[str, Any]]:
    """``body`` and the objects in it read as its settings (:data:`MULTIPLIER_PLACES`)."""
    found = [body]
    if depth < 3:
        for key, value in body.items():
            if isinstance(value, dict) and fold_key(key) in _PLACES:
                found += _settings(value, depth + 1)
    return found


def output_multiplier(body: Any) -> tuple[int, str | None]:
    """How many times over a provider may bill a request's output, or why it cannot say.

    The product of every multiplier (:data:`OUTPUT_MULTIPLIERS`, in any spelling a
    lenient parser matches, :func:`fold_key`) the body or its settings set; a value
    that is no whole number from 1 to :data:`MAX_OUTPUT_MULTIPLIER` (read as a lax
    provider reads it) is named instead, for a 400.

    Examples
    --------
    >>> output_multiplier({"n": 8}), output_multiplier({"n": 2, "best_of": "4"})
    ((8, None), (8, None))
    >>> output_multiplier({"extra_body": {"google": {"candidateCount": 3}}})
    (3, None)
    >>> output_multiplier({"n": 0})[1], output_multiplier({"N": "8.5"})[1]
    ("'n': 0", "'N': '8.5'")
    >>> output_multiplier({"n": 16, "best_of": 16})[1]
    '256 answers in all'
    >>> output_multiplier({"messages": [{"n": 50}]}), output_multiplier({"n": None})
    ((1, None), (1, None))
    """
    if not isinstance(body, dict):
        return 1, None
    product = 1
    for settings in _settings(body):
        for key, value in settings.items():
            if fold_key(key) not in _MULTIPLIERS or value is None:
                continue
            times = _output_bound(value)
            if times is None or not 1 <= times <= MAX_OUTPUT_MULTIPLIER:
                return 1, f"{shown(well_formed(key))}: {shown(value)}"
            product *= times
    if product > MAX_OUTPUT_MULTIPLIER:
        return 1, f"{product} answers in all"
    return product, None


def predicted_tokens(body: Any) -> int:
    """The most output tokens a Chat Completions ``prediction`` may add to the bill.

    At most a token a byte of the prediction as sent (no tokenizer makes more tokens
    than bytes of JSON text).

    Examples
    --------
    >>> predicted_tokens({"prediction": {"type": "content", "content": "abc"}})
    37
    >>> predicted_tokens({"messages": []})
    0
    """
    if not isinstance(body, dict):
        return 0
    return sum(len(json.dumps(value)) for key, value in body.items()
               if fold_key(key) == PREDICTION and value is not None)


def _json_media_type(value: str) -> bool:
    """Whether a ``content-type`` value is ``application/json``, its charset UTF-8 if any.

    Examples
    --------
    >>> _json_media_type("application/json"), _json_media_type("Application/JSON; charset=UTF-8")
    (True, True)
    >>> _json_media_type("application/json; charset=utf-7"), _json_media_type("text/plain")
    (False, False)
    """
    media, *params = value.split(";")
    return media.strip().lower() == "application/json" and all(
        p.strip().lower().replace('"', "") in ("", "charset=utf-8") for p in params)


class Admission:
    """Whether a request goes on: its token, its body read as a provider reads it, the policy.

    Each check that fails answers the request itself, through :meth:`GatewayRecord.refuse`
    (a recorded answer in the API's error shape); a request that passes them all goes on
    to the spend cap (:class:`SpendCap`).

    Args:
        token: this run's token (what the agent holds in place of a key).
        api_model: the one model forwarded; None forwards any.
        cfg: ``model_gateway`` options (``max_request_bytes``).
        record: the run's record, which writes each refusal.
    """

    def __init__(self, token: str, api_model: str | None, cfg: ModelGatewayConfig,
                 record: GatewayRecord) -> None:
        self.token = token
        self.api_model = api_model
        self.cfg = cfg
        self.record = record
        self.answered_ids: set[str] = set()
        """Ids of this run's Responses answers and their output items (OWN_REFERENCES)."""

    def token_ok(self, headers: Any) -> bool:
        """True when ``headers`` carry this run's token."""
        sent = headers.get("x-api-key") or ""
        bearer = headers.get("authorization") or ""
        if bearer[:7].lower() == "bearer ":
            sent = sent or bearer[7:].strip()
        return secrets.compare_digest(sent.encode(), self.token.encode())

    @staticmethod
    def read_otherwise(request: Any, exchange: Exchange, duplicate: str | None) -> str | None:
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
        if exchange.entry.endpoint != "models":
            types = request.headers.getlist("content-type")
            if len(types) != 1 or not _json_media_type(types[0]):
                return (f"the request's content-type must be application/json (charset utf-8 "
                        f"at most), once; it is {shown([well_formed(t) for t in types])}")
        if duplicate is not None:
            return (f"the request body names {shown(well_formed(duplicate))} twice in one "
                    f"object; send each key once")
        body = exchange.body
        variant = case_variant(body)
        if variant is not None:
            return (f"the request body names {shown(well_formed(variant[0]))} for the field "
                    f"{variant[1]!r}; send the field by its own name")
        stream = body.get("stream") if isinstance(body, dict) else None
        if not (stream is None or isinstance(stream, bool)):
            return f"the request's stream must be true or false, not {shown(stream)}"
        extra = body.get("extra_body") if isinstance(body, dict) else None
        if extra is not None and not (isinstance(extra, dict) and set(extra) <= {"google"}):
            # a proxy sends extra_body's fields as the body's own: unread by the policy
            return (f"the request's extra_body may hold only 'google', not "
                    f"{shown(sorted(extra) if isinstance(extra, dict) else extra)}; send "
                    f"the fields as the body's own")
        return None

    async def read_body(self, request: Any) -> bytes | None:
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

    def policy(self, endpoint: str, exchange: Exchange) -> Any:
        """The gateway's own answer to a request it does not forward, or None."""
        api = api_of_endpoint(endpoint)
        refuse = functools.partial(self.record.refuse, exchange, api)
        body = exchange.body
        asks = endpoint in ("messages", "count_tokens", "responses", "chat_completions")
        if asks and self.api_model is not None and exchange.model != self.api_model:
            return refuse(403, "permission_error", "gateway.model_refused",
                          f"model {shown(exchange.model)} is not allowed in this run (only "
                          f"{self.api_model!r})")
        fallbacks = body.get("models") if asks and isinstance(body, dict) else None
        if fallbacks is not None and self.api_model is not None and (
                not isinstance(fallbacks, list) or any(m != self.api_model for m in fallbacks)):
            # a router's fallback list (OpenRouter): the answer could come from any of them
            return refuse(403, "permission_error", "gateway.model_refused",
                          f"models {shown(fallbacks)} are not allowed in this run "
                          f"(only {self.api_model!r})")
        if endpoint == "responses" and isinstance(body, dict) and \
                body.get("background") not in (None, False):
            # the answer would be fetched later (GET responses/<id>, not forwarded): its
            # usage would never reach the record or the spend cap
            return refuse(400, "invalid_request_error", "gateway.not_allowed",
                          "background responses are not allowed in this run (their "
                          "usage would never reach the run's record)")
        return self._provider_side(exchange, refuse) if asks else None

    def _provider_side(self, exchange: Exchange, refuse: Callable[..., Any]) -> Any:
        """A refusal of what the provider would do or read for the agent, or None."""
        body = exchange.body
        offered = server_tools(body)
        if offered:
            return refuse(403, "permission_error", "gateway.server_tool_refused",
                          f"provider-side tools are not allowed in this run "
                          f"({', '.join(offered)}); use the run's own tools")
        fetched, files = content_sources(body)
        if fetched:
            return refuse(403, "permission_error", "gateway.url_source_refused",
                          f"content the provider would fetch from a URL is not allowed "
                          f"in this run ({', '.join(fetched)}); fetch it with the run's "
                          f"own tools and send it inline")
        stored = [f"file_id {f!r}" for f in files] + [
            f"{kind} {ref!r}" for kind, ref in stored_references(body)
            if not (kind in OWN_REFERENCES and ref in self.answered_ids)]
        if stored:
            return refuse(403, "permission_error", "gateway.stored_content_refused",
                          f"content stored at the provider that this run's answers "
                          f"did not make is not allowed ({', '.join(stored[:3])}); "
                          f"send it inline")
        return None

    def billed_output(self, endpoint: str, api: str, exchange: Exchange) -> Any:
        """Read how many times over the answer's output is billed, or refuse the request.

        Sets :attr:`Exchange.output_multiplier` and :attr:`Exchange.predicted_tokens`
        for the spend cap's bound (:meth:`SpendCap.cost_bound`); a multiplier it cannot
        bound is a recorded 400 (the agent's).
        """
        if endpoint not in GENERATION_ENDPOINTS:
            return None
        times, unread = output_multiplier(exchange.body)
        if unread is not None:
            return self.record.refuse(
                exchange, api, 400, "invalid_request_error", "gateway.bad_request",
                f"the request asks for {unread}; a request may ask for 1 to "
                f"{MAX_OUTPUT_MULTIPLIER} answers in all (n, best_of and the like), each "
                f"billed and bounded by the run's spend cap")
        exchange.output_multiplier = times
        exchange.predicted_tokens = predicted_tokens(exchange.body)
        return None

    def usage_asked(self, endpoint: str, api: str, exchange: Exchange) -> Any:
        """A streamed Chat Completions request made to report its usage, or refused.

        Chat Completions streams carry no usage unless ``stream_options.include_usage`` is
        true: without it the record would count nothing the provider bills. The body is
        forwarded with it set (the same JSON otherwise); one that cannot be read whole is
        refused (a recorded 400, the agent's).
        """
        chat_stream = endpoint == "chat_completions" and exchange.entry.stream
        if not chat_stream or not isinstance(exchange.body, dict):
            return None
        options = exchange.body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            return None
        try:
            whole = json.loads(exchange.raw_request)
        except (RecursionError, ValueError):
            whole = None
        if not isinstance(whole, dict):
            return self.record.refuse(
                exchange, api, 400, "invalid_request_error", "gateway.bad_request",
                "a streamed chat request must be plain JSON for the gateway to ask its usage "
                "(stream_options.include_usage)")
        kept = whole.get("stream_options")
        whole["stream_options"] = {**(kept if isinstance(kept, dict) else {}),
                                   "include_usage": True}
        exchange.raw_request = json.dumps(whole).encode()
        return None


class SpendCap:
    """``limits.max_cost_usd`` held while generations run: a bound on each one's cost.

    A generation starts only while the spend so far (:attr:`GatewayRecord.spent_usd`)
    plus the bounds held by those in flight leave room for its own bound
    (:meth:`cost_bound`); otherwise it waits for them to end. Past the cap it is refused
    (a final 400, ``gateway.cost_limit``). A generation that starts alone always starts,
    so the cap is passed by at most one request's cost, as when requests come one at a
    time.

    Args:
        max_cost_usd: the cap; None for none.
        prices: the model's list prices (None: no bound is known, nothing is held).
        record: the run's record (what has been spent; it writes each refusal).
        background: the gateway's background tasks, which its shutdown waits for.
    """

    def __init__(self, max_cost_usd: float | None, prices: PriceConfig | None,
                 record: GatewayRecord, background: set[asyncio.Task[None]]) -> None:
        self.max_cost_usd = max_cost_usd
        self.prices = prices
        self.record = record
        self.background = background
        self._reserved_usd = 0.0
        self._spend = asyncio.Condition()

    async def reserve(self, endpoint: str, exchange: Exchange) -> Any:
        """Hold a bound on a generation's cost under the cap (None), or refuse it."""
        if endpoint not in GENERATION_ENDPOINTS or self.max_cost_usd is None:
            return None
        cap = self.max_cost_usd
        bound = self.cost_bound(exchange)
        async with self._spend:
            while True:
                spent = self.record.spent_usd
                if spent >= cap:
                    return self.record.refuse(
                        exchange, api_of_endpoint(endpoint), 400, "invalid_request_error",
                        "gateway.cost_limit",
                        f"this run's spend cap limits.max_cost_usd={cap:g} USD is reached "
                        f"({spent:.4f} USD spent); no further requests")
                if self._reserved_usd <= 0 or spent + self._reserved_usd + bound <= cap:
                    exchange.reserved_usd = max(bound, 1e-12)
                    self._reserved_usd += exchange.reserved_usd
                    return None
                await self._spend.wait()

    def cost_bound(self, exchange: Exchange) -> float:
        """At most what a generation can cost, for the spend cap.

        Every body byte counted an input token (at the cache-write price), the output at
        its ``max_tokens`` (:func:`asked_output_tokens`) and the tokens a prediction may
        add (:func:`predicted_tokens`), times every answer it asks for
        (:func:`output_multiplier`: ``n`` choices are each billed); without a
        ``max_tokens``, the whole cap (it then runs alone).
        """
        if self.prices is None or self.max_cost_usd is None:
            return 0.0
        limit = exchange.entry.max_tokens  # asked_output_tokens: the endpoint's largest bound
        if limit is None or not 0 < limit < 2**63:
            return self.max_cost_usd
        from spu.cost.prices import request_cost

        output = (limit + exchange.predicted_tokens) * exchange.output_multiplier
        usage = Usage(cache_write=len(exchange.raw_request), output=output)
        try:
            return request_cost(self.prices, usage, cache_write_rate="five_minute").total
        except OverflowError:
            return self.max_cost_usd

    def release(self, exchange: Exchange) -> None:
        """Give back a generation's bound on the cap (once its cost is counted)."""
        if exchange.reserved_usd <= 0:
            return
        self._reserved_usd = max(0.0, self._reserved_usd - exchange.reserved_usd)
        exchange.reserved_usd = 0.0
        spend = self._spend

        async def wake() -> None:
            async with spend:
                spend.notify_all()

        task = asyncio.get_running_loop().create_task(wake())
        self.background.add(task)
        task.add_done_callback(self.background.discard)
