"""Answers in the OpenAI Responses API format (what Codex speaks), streamed as SSE.

Usage follows the API: ``input_tokens`` counts every input token, the cached ones
(``input_tokens_details.cached_tokens``) and the cache writes
(``input_tokens_details.cache_write_tokens``) included; ``output_tokens`` includes
the reasoning tokens (``output_tokens_details.reasoning_tokens``).
"""

from __future__ import annotations

import json
from typing import Any

from spu.schema import Usage
from spu.scripted.anthropic_messages import text_pieces
from spu.scripted.script import ScriptedTurn, not_offered, offered_tool

SHELL_TOOLS = ("exec_command", "shell")
"""Codex's shell tools, newest first: the first one the request offers is used."""

REFUSAL_MESSAGES = {
    "bio": "This request has been flagged for possible biological risk.",
    "cyber": "This request has been flagged for possible cybersecurity risk.",
}

Event = tuple[str, dict[str, Any]]


def shell_tool(body: dict[str, Any]) -> str | None:
    """The shell tool the request offers, or None for a request outside the agent loop."""
    names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    return next((name for name in SHELL_TOOLS if name in names), None)


NAMESPACE_SEPARATOR = "__"
"""Joins a namespace and a tool name in :func:`offered_tools` (``mcp__spu__search``)."""


def offered_tools(body: dict[str, Any]) -> list[str]:
    """Names of the tools the request offers.

    Function tools by name, the tools of a namespace as ``<namespace>__<name>`` (Codex
    offers an MCP server's tools in the namespace ``mcp__<server>``), others by type.
    """
    names = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            names += [f"{tool.get('name')}{NAMESPACE_SEPARATOR}{t.get('name')}"
                      for t in tool.get("tools") or [] if isinstance(t, dict)]
        else:
            names.append(str(tool.get("name") or tool.get("type")))
    return names


def function_call_name(body: dict[str, Any], offered_name: str) -> dict[str, str]:
    """``name`` (and ``namespace``) of a function call item for a tool of :func:`offered_tools`.

    A tool of a namespace is called by its own name with the ``namespace`` field (Codex
    answers a flattened name with ``unsupported call``).
    """
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            prefix = f"{tool.get('name')}{NAMESPACE_SEPARATOR}"
            inner = offered_name.removeprefix(prefix)
            inner_tools = [t for t in tool.get("tools") or [] if isinstance(t, dict)]
            if inner != offered_name and any(t.get("name") == inner for t in inner_tools):
                return {"name": inner, "namespace": str(tool.get("name"))}
    return {"name": offered_name}


def turn_index(body: dict[str, Any]) -> int:
    """How many tool outputs the conversation holds: the script turn to play next."""
    items = body.get("input") or []
    if not isinstance(items, list):
        return 0
    return sum(1 for item in items if isinstance(item, dict)
               and item.get("type") in ("function_call_output", "custom_tool_call_output"))


def usage_object(usage: Usage) -> dict[str, Any]:
    """``usage`` in the API's fields (input and output counts are inclusive)."""
    reasoning = usage.output // 3
    total_input = usage.input + usage.cache_read + usage.cache_write
    return {
        "input_tokens": total_input,
        "input_tokens_details": {"cached_tokens": usage.cache_read,
                                 "cache_write_tokens": usage.cache_write},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total_input + usage.output,
    }


def output_items(turn: ScriptedTurn, tool: str, ids: dict[str, str],
                 body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The output items of the answer to ``turn``, complete.

    ``tool`` is the shell tool; a ``tool`` turn calls the tool under the name the request
    (``body``) offers it, or runs a shell command saying that it is not offered.
    """
    offered = offered_tools(body or {})
    items: list[dict[str, Any]] = []
    if turn.reasoning:
        items.append({"type": "reasoning", "id": ids["reasoning"],
                      "summary": [{"type": "summary_text", "text": turn.reasoning}],
                      "encrypted_content": None})
    tool_name = offered_tool(offered or [], turn.tool) if turn.tool is not None else None
    if turn.tool is not None and tool_name is None:
        turn = not_offered(turn)
    if turn.text:
        items.append({"type": "message", "id": ids["message"], "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": turn.text,
                                   "annotations": []}]})
    if tool_name is not None:
        items.append({"type": "function_call", "id": ids["call_item"], "status": "completed",
                      "call_id": ids["call"], **function_call_name(body or {}, tool_name),
                      "arguments": json.dumps(turn.arguments or {})})
    if turn.command is not None:
        arguments = ({"cmd": turn.command} if tool == "exec_command"
                     else {"command": ["bash", "-lc", turn.command]})
        items.append({"type": "function_call", "id": ids["call_item"], "status": "completed",
                      "call_id": ids["call"], "name": tool,
                      "arguments": json.dumps(arguments)})
    return items


def response_object(response_id: str, model: str, status: str,
                    output: list[dict[str, Any]], usage: dict[str, Any] | None,
                    error: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``response`` object as the events carry it."""
    return {"id": response_id, "object": "response", "created_at": 0, "status": status,
            "model": model, "output": output, "usage": usage, "error": error}


def stream_events(turn: ScriptedTurn, usage: Usage, *, model: str, tool: str,
                  ids: dict[str, str], body: dict[str, Any] | None = None) -> list[Event]:
    """The answer to ``turn`` as the API's server-sent events.

    ``ids`` names the response (``response``) and its items (``reasoning``,
    ``message``, ``call_item``, ``call``); ``body`` is the request (the tools it offers).
    """
    rid = ids["response"]
    events: list[Event] = [("response.created", {
        "type": "response.created",
        "response": response_object(rid, model, "in_progress", [], None)})]
    if turn.refusal is not None:
        code = f"{turn.refusal}_policy"
        message = REFUSAL_MESSAGES.get(turn.refusal, "This request has been flagged.")
        events.append(("response.failed", {
            "type": "response.failed",
            "response": response_object(rid, model, "failed", [], None,
                                        {"code": code, "message": message})}))
        return events
    items = output_items(turn, tool, ids, body)
    for index, item in enumerate(items):
        events += _item_events(index, item, turn.delta_chars)
    events.append(("response.completed", {
        "type": "response.completed",
        "response": response_object(rid, model, "completed", items, usage_object(usage))}))
    return events


def _item_events(index: int, item: dict[str, Any], delta_chars: int = 0) -> list[Event]:
    kind = item["type"]
    base = {"output_index": index, "item_id": item["id"]}
    if kind == "reasoning":
        text = item["summary"][0]["text"]
        middle: list[Event] = [
            ("response.reasoning_summary_part.added",
             {"type": "response.reasoning_summary_part.added", **base, "summary_index": 0,
              "part": {"type": "summary_text", "text": ""}}),
            ("response.reasoning_summary_text.delta",
             {"type": "response.reasoning_summary_text.delta", **base, "summary_index": 0,
              "delta": text}),
            ("response.reasoning_summary_text.done",
             {"type": "response.reasoning_summary_text.done", **base, "summary_index": 0,
              "text": text}),
            ("response.reasoning_summary_part.done",
             {"type": "response.reasoning_summary_part.done", **base, "summary_index": 0,
              "part": {"type": "summary_text", "text": text}}),
        ]
        added = {**item, "summary": []}
    elif kind == "message":
        text = item["content"][0]["text"]
        middle = [
            ("response.content_part.added",
             {"type": "response.content_part.added", **base, "content_index": 0,
              "part": {"type": "output_text", "text": "", "annotations": []}}),
            *(("response.output_text.delta",
               {"type": "response.output_text.delta", **base, "content_index": 0,
                "delta": piece}) for piece in text_pieces(text, delta_chars)),
            ("response.output_text.done",
             {"type": "response.output_text.done", **base, "content_index": 0, "text": text}),
            ("response.content_part.done",
             {"type": "response.content_part.done", **base, "content_index": 0,
              "part": item["content"][0]}),
        ]
        added = {**item, "status": "in_progress", "content": []}
    else:
        middle = [
            ("response.function_call_arguments.delta",
             {"type": "response.function_call_arguments.delta", **base,
              "delta": item["arguments"]}),
            ("response.function_call_arguments.done",
             {"type": "response.function_call_arguments.done", **base,
              "arguments": item["arguments"]}),
        ]
        added = {**item, "status": "in_progress", "arguments": ""}
    return [
        ("response.output_item.added",
         {"type": "response.output_item.added", "output_index": index, "item": added}),
        *middle,
        ("response.output_item.done",
         {"type": "response.output_item.done", "output_index": index, "item": item}),
    ]


def error_body(status: int) -> dict[str, Any]:
    """The API's error object for HTTP ``status``."""
    message, kind, code = {
        401: ("Incorrect API key provided: scripted***key.", "invalid_request_error",
              "invalid_api_key"),
        429: ("Rate limit reached for requests per min. Please try again later.",
              "requests", "rate_limit_exceeded"),
    }.get(status, (f"scripted HTTP {status}", "invalid_request_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
