"""The per-run model gateway (SPEC section 11): the agent's only way to a model.

An HTTP server on the host's loopback, outside the sandbox, one per run. The agent holds
a per-run token, never a provider key; the gateway checks the token, forwards the
request to the configured upstream with the real key, passes the answer through
unbuffered, and writes one line per request to ``<run_dir>/model/requests.jsonl``.
The run's usage, cost, ``refusal`` and ``infra_error`` are read from that record
(:mod:`spu.gateway.verdict`), never from files the agent can write.

Importing this package is cheap: the server (Starlette, uvicorn, httpx) is imported
by :mod:`spu.gateway.server` alone.
"""

from spu.gateway.answers import API_ANTHROPIC, API_CHAT, API_RESPONSES, APIS
from spu.gateway.verdict import (
    GatewaySummary,
    GatewayVerdict,
    gateway_verdict,
    iter_requests,
    read_requests,
)

MODEL_DIR = "model"
"""The gateway's folder under the run folder."""
REQUESTS_FILE = "requests.jsonl"
"""The record, one line per request."""
TOOL_RESULTS_FILE = "tool_results.jsonl"
"""The tool results the model was sent, bounded, for the exposure screen."""

__all__ = [
    "API_ANTHROPIC", "API_CHAT", "API_RESPONSES", "APIS", "MODEL_DIR", "REQUESTS_FILE",
    "TOOL_RESULTS_FILE", "GatewaySummary", "GatewayVerdict", "gateway_verdict",
    "iter_requests", "read_requests",
]
