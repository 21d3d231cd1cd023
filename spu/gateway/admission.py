"""What the model gateway lets through: the token, the policy, the spend cap."""

from __future__ import annotations

from typing import Any

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
