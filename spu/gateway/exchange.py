"""One request on its way through the model gateway: what its record line will say."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spu.gateway.answers import AnswerReader
from spu.schema import GatewayRequest


@dataclass(eq=False)
class Exchange:
    """One request on its way: what the record line will say."""

    entry: GatewayRequest
    started: float
    reader: AnswerReader
    body: Any = None
    model: str | None = None
    """The model the body names, whole (the record holds it cut)."""
    raw_request: bytes = b""
    answer: bytearray = field(default_factory=bytearray)
    output_multiplier: int = 1
    """Answers the request asks for, each billed (``n`` and the like)."""
    predicted_tokens: int = 0
    """Output tokens a Chat Completions ``prediction`` may add to the bill."""
    reserved_usd: float = 0.0
    """The bound on this generation's cost held against the spend cap while it runs."""
    client_gone: bool = False
    sent: bool = False
    """Its headers went out to the upstream: it holds a connection of the pool."""
    deltas: int = 0
    """Output delta events read (streamed answers)."""
    delta_tokens: int = 0
    """The output tokens those deltas hold, estimated from their bytes."""
    stopped: bool = False
    """The relay ended because the run did (the gateway stopping), not the agent."""
    last_stall_s: float = 0.0
    """The last wait of :data:`CLIENT_STALL_S` or more on the agent's full queue (nothing
    is read from the upstream meanwhile)..."""
    last_stall_end: float = float("-inf")
    """... and when it ended (``time.monotonic``)."""
    submission: bytes | None = None
    """``output/rankings.json`` as it stood when the request arrived (a generation's)."""
