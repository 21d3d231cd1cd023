"""Answers in the Anthropic Messages API format (what Claude Code speaks), streamed as SSE.

The stream follows the API: ``message_start`` carries the input usage with
``output_tokens: 1``, each content block (thinking, text, tool_use) is started,
filled by deltas and stopped, and ``message_delta`` carries the stop reason and the
final usage. Claude Code writes one session entry per content block, each repeating
the usage of ``message_start``: the parsers must de-duplicate by message id.
"""

from __future__ import annotations

import json
from typing import Any

from spu.schema import Usage
from spu.scripted.script import SUBAGENT_MARKER, ScriptedTurn, not_offered, offered_tool

SHELL_TOOL = "Bash"
AGENT_TOOL = "Agent"

Event = tuple[str, dict[str, Any]]


def is_agent_request(body: dict[str, Any]) -> bool:
    """True for a request of the agent loop (it offers the shell tool)."""
    return any(t.get("name") == SHELL_TOOL for t in body.get("tools") or [])


def is_subagent_request(body: dict[str, Any]) -> bool:
    """True when the conversation was started by a scripted ``agent_prompt``."""
    for message in body.get("messages") or []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [content] if isinstance(content, str) else content or []
        return any(SUBAGENT_MARKER in (b if isinstance(b, str) else str(b.get("text", "")))
                   for b in blocks if isinstance(b, (str, dict)))
    return False


def offered_tools(body: dict[str, Any]) -> list[str]:
    """Names of the tools the request offers."""
    return [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]


def turn_index(body: dict[str, Any]) -> int:
    """How many tool results the conversation holds: the script turn to play next."""
    count = 0
    for message in body.get("messages") or []:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            count += sum(1 for block in content
                         if isinstance(block, dict) and block.get("type") == "tool_result")
    return count


def usage_object(usage: Usage, output_tokens: int) -> dict[str, Any]:
    """``usage`` in the API's fields (``input_tokens`` counts uncached input only)."""
    return {
        "input_tokens": usage.input,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.cache_write - usage.cache_write_1h,
            "ephemeral_1h_input_tokens": usage.cache_write_1h,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def content_blocks(turn: ScriptedTurn, tool_use_id: str,
                   offered: list[str] | None = None) -> list[dict[str, Any]]:
    """The content of the answer to ``turn``, as complete blocks.

    A ``tool`` turn calls the tool under the name the request offers it (``offered``);
    when the request offers no such tool, the turn runs a shell command that says so
    instead, so that the script goes on (:func:`~spu.scripted.script.not_offered`).
    """
    if turn.refusal is not None:
        return []
    blocks: list[dict[str, Any]] = []
    if turn.reasoning:
        blocks.append({"type": "thinking", "thinking": turn.reasoning,
                       "signature": "c2NyaXB0ZWQ="})
    tool_name = offered_tool(offered or [], turn.tool) if turn.tool is not None else None
    if turn.tool is not None and tool_name is None:
        turn = not_offered(turn)
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    if tool_name is not None:
        blocks.append({"type": "tool_use", "id": tool_use_id, "name": tool_name,
                       "input": dict(turn.arguments or {})})
        return blocks
    if turn.command is not None:
        blocks.append({"type": "tool_use", "id": tool_use_id, "name": SHELL_TOOL,
                       "input": {"command": turn.command,
                                 "description": "Scripted command"}})
    elif turn.agent_prompt is not None:
        blocks.append({"type": "tool_use", "id": tool_use_id, "name": AGENT_TOOL,
                       "input": {"description": "Scripted sub-agent",
                                 "prompt": turn.agent_prompt,
                                 "subagent_type": "general-purpose"}})
    return blocks


def stop(turn: ScriptedTurn, blocks: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """Stop reason and stop details of the answer to ``turn`` made of ``blocks``."""
    if turn.refusal is not None:
        return "refusal", {"type": "refusal", "category": turn.refusal,
                           "explanation": "Scripted refusal."}
    calls = any(b["type"] == "tool_use" for b in blocks)
    return ("tool_use" if calls else "end_turn"), None


def message(turn: ScriptedTurn, usage: Usage, *, model: str, message_id: str,
            tool_use_id: str, offered: list[str] | None = None) -> dict[str, Any]:
    """The whole answer as one message (for requests with ``stream: false``)."""
    blocks = content_blocks(turn, tool_use_id, offered)
    reason, details = stop(turn, blocks)
    return {
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": blocks,
        "stop_reason": reason, "stop_sequence": None, "stop_details": details,
        "usage": usage_object(usage, usage.output),
    }


def stream_events(turn: ScriptedTurn, usage: Usage, *, model: str, message_id: str,
                  tool_use_id: str, offered: list[str] | None = None) -> list[Event]:
    """The answer to ``turn`` as the API's server-sent events."""
    blocks = content_blocks(turn, tool_use_id, offered)
    reason, details = stop(turn, blocks)
    events: list[Event] = [("message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": usage_object(usage, 1),
    }})]
    for index, block in enumerate(blocks):
        events += _block_events(index, block, turn.delta_chars)
    final_usage = usage_object(usage, usage.output)
    final_usage.pop("service_tier")
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": None, "stop_details": details},
        "usage": final_usage,
    }))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def text_pieces(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters (one piece when ``size`` is 0).

    Examples
    --------
    >>> text_pieces("abcde", 2), text_pieces("abc", 0)
    (['ab', 'cd', 'e'], ['abc'])
    """
    if size <= 0 or len(text) <= size:
        return [text]
    return [text[k:k + size] for k in range(0, len(text), size)]


def _block_events(index: int, block: dict[str, Any], delta_chars: int = 0) -> list[Event]:
    kind = block["type"]
    start: dict[str, Any]
    if kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                  {"type": "signature_delta", "signature": block["signature"]}]
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece}
                  for piece in text_pieces(block["text"], delta_chars)]
    else:
        start = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    return [
        ("content_block_start", {"type": "content_block_start", "index": index,
                                 "content_block": start}),
        *(("content_block_delta", {"type": "content_block_delta", "index": index,
                                   "delta": d}) for d in deltas),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def error_body(status: int) -> dict[str, Any]:
    """The API's error object for HTTP ``status``."""
    kind, message = {
        400: ("invalid_request_error", "scripted HTTP 400"),
        401: ("authentication_error", "invalid x-api-key"),
        403: ("permission_error", "Your API key does not have permission to use the "
                                  "specified resource."),
        429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute "
                                  "rate limit"),
        529: ("overloaded_error", "Overloaded"),
    }.get(status, ("api_error", f"scripted HTTP {status}"))
    return {"type": "error", "error": {"type": kind, "message": message}}
