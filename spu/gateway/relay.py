"""How the model gateway passes a request on and its answer back."""

from __future__ import annotations

import functools
import ssl
from typing import Any

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
