"""A run's model requests summed: usage, cost and what the provider side says of the run.

Pure functions over the gateway's record (``<run_dir>/model/requests.jsonl``): the
outcome rules take :class:`GatewayVerdict` as the provider's word on ``refusal``,
``infra_error`` and ``cost_limit`` (SPEC 11), whatever the agent's session files say.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spu.config import PriceConfig
from spu.schema import GatewayRequest, ToolCall, TrajectoryStep, Usage

GENERATIONS = frozenset({"messages", "responses", "chat_completions"})

POLICY_ERRORS = frozenset({"gateway.bad_token", "gateway.model_refused", "gateway.cost_limit",
                           "gateway.not_allowed", "gateway.too_large", "gateway.too_slow",
                           "gateway.server_tool_refused"})
"""Answers of the gateway's own policy: the agent's doing, not a provider failure."""

TRANSPORT_ERRORS = frozenset({"gateway.stream_dropped", "gateway.upstream_unreachable",
                              "gateway.upstream_timeout"})
"""The upstream failed on the way: no answer, or part of one."""

PROVIDER_STATUSES = frozenset({401, 429, 529})
"""The 4xx statuses that are the provider's failure, not an answer to the agent's request."""


def read_requests(path: str | Path) -> list[GatewayRequest]:
    """The lines of a gateway record (an absent file: none); a torn last line is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(GatewayRequest.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValueError):
            continue
    return entries


def is_failure(entry: GatewayRequest) -> bool:
    """True when the provider (or the way to it) failed this request.

    An HTTP error of the upstream that the agent's request cannot cause (5xx, 429 and
    529 rate and load limits, 401 for the key the gateway itself puts on), a stream cut
    or an error event mid-answer, an unreachable upstream. Any other 4xx answers the
    agent's own request (a malformed body, a path the provider does not serve) and is
    not a failure, nor are the gateway's policy answers (bad token, another model, the
    spend cap, a body too large) and a client that hung up.

    Examples
    --------
    >>> bad = GatewayRequest(time="t", endpoint="messages", status=400,
    ...                      error_type="invalid_request_error", error="max_tokens: -1")
    >>> is_failure(bad), is_failure(bad.model_copy(update={"status": 529}))
    (False, True)
    """
    if entry.error_type in POLICY_ERRORS or entry.error_type == "gateway.client_disconnected":
        return False
    if entry.endpoint not in GENERATIONS and entry.endpoint != "count_tokens":
        return False
    if entry.error_type in TRANSPORT_ERRORS or entry.status in PROVIDER_STATUSES \
            or entry.status >= 500:
        return True
    if entry.status >= 400:
        return False
    return entry.error_type is not None and not entry.refusal


def is_answer(entry: GatewayRequest) -> bool:
    """True for a generation the provider answered whole (a refusal included)."""
    return (entry.endpoint in GENERATIONS and entry.status < 400 and entry.complete
            and not is_failure(entry))


@dataclass(frozen=True)
class GatewayVerdict:
    """What the provider side of a run says about it."""

    requests: int
    """Lines of the record."""
    generations: int
    """Generation requests (messages, responses, chat completions) forwarded upstream."""
    usage: Usage
    """Sum of the usage the provider reported, bucket by bucket."""
    request_usages: tuple[Usage, ...]
    """Usage of each billed request, in order (long-context pricing is per request)."""
    final_answer: bool
    """The last answered generation was a final answer (no tool call after it)."""
    refusal: bool
    """The last answered generation was a refusal by the provider."""
    refusal_label: str | None
    """The provider's refusal category, ``[bio]``; ``[refusal]`` without one."""
    infra_error: str | None
    """Why the provider side failed with no answer after it; None when it did not."""
    cost_limit: bool
    """The gateway refused a request at ``limits.max_cost_usd``."""
    refused_models: tuple[str, ...] = field(default_factory=tuple)
    """Models asked for that the gateway refused (not the configured one), first seen first."""
    bad_tokens: int = 0
    """Requests with a missing or wrong token."""


def gateway_verdict(entries: Sequence[GatewayRequest]) -> GatewayVerdict:
    """Sum a gateway record into usage and the provider side's verdict on the run.

    ``infra_error`` holds when some request failed (:func:`is_failure`) and no
    generation was answered after the last failure: the CLIs' own retries that then
    succeeded leave no infra error. ``refusal`` holds when the last answered
    generation is a provider refusal.

    Examples
    --------
    >>> ok = GatewayRequest(time="t", endpoint="messages", status=200, complete=True,
    ...                     final=True, stop_reason="end_turn", usage=Usage(input=3))
    >>> busy = GatewayRequest(time="t", endpoint="messages", status=529,
    ...                       error_type="overloaded_error", error="Overloaded")
    >>> gateway_verdict([busy, ok]).infra_error is None
    True
    >>> gateway_verdict([ok, busy]).infra_error
    'API error: HTTP 529 overloaded_error: Overloaded (1 failed request, no answer after it)'
    """
    usages = tuple(e.usage for e in entries if e.usage != Usage())
    total = Usage()
    for usage in usages:
        total = total + usage
    answers = [k for k, e in enumerate(entries) if is_answer(e)]
    failures = [k for k, e in enumerate(entries) if is_failure(e)]
    last = entries[answers[-1]] if answers else None
    infra = None
    if failures and (not answers or answers[-1] < failures[-1]):
        after = failures if not answers else [k for k in failures if k > answers[-1]]
        worst = entries[failures[-1]]
        what = worst.error_type or "error"
        n = len(after)
        if worst.status in (401, 403):
            head = f"API error: the provider rejected the API key (HTTP {worst.status}): {what}"
        else:
            head = f"API error: HTTP {worst.status} {what}"
        infra = (f"{head}: {worst.error or ''}".rstrip(": ")
                 + f" ({n} failed request{'s' if n != 1 else ''}, no answer after it)")
    refusal = last is not None and last.refusal
    refused: list[str] = []
    for e in entries:
        if e.error_type == "gateway.model_refused" and str(e.model) not in refused:
            refused.append(str(e.model))
    return GatewayVerdict(
        requests=len(entries),
        generations=sum(1 for e in entries if e.endpoint in GENERATIONS
                        and e.error_type not in POLICY_ERRORS),
        usage=total, request_usages=usages,
        final_answer=last is not None and last.final,
        refusal=refusal,
        refusal_label=(f"[{last.refusal_label}]" if last is not None and last.refusal_label
                       else "[refusal]") if refusal else None,
        infra_error=infra,
        cost_limit=any(e.error_type == "gateway.cost_limit" for e in entries),
        refused_models=tuple(refused),
        bad_tokens=sum(1 for e in entries if e.error_type == "gateway.bad_token"),
    )


def key_rejected(entries: Sequence[GatewayRequest]) -> str | None:
    """The provider's words when its last answer to a generation refused the key, or None.

    What the monitor asks before it stops an agent whose output shows a rejected key:
    the record holds what the provider answered, the agent's output only what it says.

    Examples
    --------
    >>> denied = GatewayRequest(time="t", endpoint="messages", status=401,
    ...                         error_type="authentication_error", error="invalid x-api-key")
    >>> key_rejected([denied])
    'the provider rejected the API key (HTTP 401): authentication_error: invalid x-api-key'
    >>> key_rejected([]) is None
    True
    """
    answered = [e for e in entries if e.endpoint in GENERATIONS
                and e.error_type not in POLICY_ERRORS and e.status > 0]
    if not answered or answered[-1].status not in (401, 403):
        return None
    last = answered[-1]
    return (f"the provider rejected the API key (HTTP {last.status}): {last.error_type}: "
            f"{last.error}")


@dataclass(frozen=True)
class GatewaySummary:
    """A run's gateway record summed: the verdict and the cost at list prices."""

    verdict: GatewayVerdict
    cost_usd: float
    """Cost at list prices, cache writes billed by ``cache_write_rate``."""
    cost_full_input_usd: float
    """The same usage with every prompt token at the input price (paper 3.5)."""
    cost_by_cache_write_rate: dict[str, float]
    """The cost under each cache-write rule."""
    long_context_requests: int
    """Requests billed at the long-context rates."""


def summarize(entries: Sequence[GatewayRequest], prices: PriceConfig,
              cache_write_rate: str = "five_minute") -> GatewaySummary:
    """The verdict of ``entries`` and their cost at ``prices``, request by request.

    Examples
    --------
    >>> e = GatewayRequest(time="t", endpoint="messages", status=200, complete=True,
    ...                    usage=Usage(input=10**6, output=10**6))
    >>> summarize([e, e], PriceConfig(input=1.0, output=5.0)).cost_usd
    12.0
    """
    from spu.cost.prices import run_cost

    verdict = gateway_verdict(entries)
    cost = run_cost(prices, verdict.usage, list(verdict.request_usages),
                    cache_write_rate=cache_write_rate)
    return GatewaySummary(verdict=verdict, cost_usd=cost.estimate.total,
                          cost_full_input_usd=cost.full_input_price.total,
                          cost_by_cache_write_rate=dict(cost.by_cache_write_rate),
                          long_context_requests=cost.estimate.long_context_requests)


GATEWAY_TOOL = "model_input"
"""The tool name of the steps :func:`model_input_steps` builds (hits found there name it)."""


def model_input_steps(folder: str | Path) -> list[TrajectoryStep]:
    """The tool results the model was sent, as trajectory steps, for the exposure screen.

    Read from ``<run_dir>/model/tool_results.jsonl``, which the gateway writes outside
    the agent's reach: one step per tool result, its text as the call's output.
    """
    path = Path(folder) / "tool_results.jsonl"
    if not path.is_file():
        return []
    steps: list[TrajectoryStep] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            kept = json.loads(line)
        except json.JSONDecodeError:
            continue
        call = ToolCall(id=str(kept.get("call_id")), name=GATEWAY_TOOL,
                        output=str(kept.get("text") or ""))
        steps.append(TrajectoryStep(index=len(steps), timestamp=kept.get("time"),
                                    role="assistant", tool_calls=[call]))
    return steps
