"""Codex rollout files -> :class:`~spu.schema.Trajectory`.

Codex writes one ``rollout-<time>-<thread>.jsonl`` per thread (sub-agents are threads
of their own) under ``$CODEX_HOME/sessions/YYYY/MM/DD/``. Each line is
``{"timestamp", "type", "payload"}``: ``response_item`` lines hold the model's output
items (messages, reasoning, function calls) and the tool outputs; ``event_msg`` lines
hold events (``token_count``, ``task_complete``, errors); newer versions add one
``token_usage_record`` per model response.

Traps handled here:

- ``token_count`` totals (``total_token_usage``) are cumulative over the thread: the
  usage of one call is the difference between consecutive totals (a repeated total
  adds nothing); where ``token_usage_record`` lines exist they give each response's
  usage directly and are used instead;
- ``input_tokens`` includes the cached tokens (``cached_input_tokens``) and the cache
  writes (``cache_write_input_tokens``): the uncached input is what remains;
- a provider refusal is an error whose ``codex_error_info`` is ``bio_policy`` or
  ``cyber_policy``, not an answer;
- an MCP tool is called by its own name in the namespace of its server
  (``{"name": "search", "namespace": "mcp__spu"}``): the call is named
  ``mcp__spu__search``, as Claude Code names it, so that it reads as what it is;
- tool outputs may be lists of ``input_text`` blocks (an MCP call's output starts with a
  ``Wall time`` block).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spu.gateway.answers import loads
from spu.harness.trajectory import SessionReading, refusal_label, total_usage
from spu.harness.trajectory.jsonl import (
    ReadBudget,
    read_jsonl,
    session_files,
    tool_output_text,
)
from spu.schema import ToolCall, Trajectory, TrajectoryStep, Usage

REFUSAL_ERRORS = {"bio_policy": "bio", "cyber_policy": "cyber"}
"""``codex_error_info`` values that are provider refusals, and their labels."""

CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call",
                        "web_search_call", "tool_search_call"})
OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output",
                          "tool_search_output"})


def usage_from_codex(usage: dict[str, Any] | None) -> Usage:
    """Four buckets from a Codex token usage (``input_tokens`` includes cached input).

    Examples
    --------
    100 input tokens of which 40 read from the cache and 25 written to it leave 35
    uncached:

    >>> usage_from_codex({"input_tokens": 100, "cached_input_tokens": 40,
    ...                   "cache_write_input_tokens": 25, "output_tokens": 30,
    ...                   "reasoning_output_tokens": 10})
    Usage(input=35, cache_read=40, cache_write=25, cache_write_1h=0, output=30)
    """
    usage = usage or {}
    cached = int(usage.get("cached_input_tokens") or 0)
    written = int(usage.get("cache_write_input_tokens") or 0)
    return Usage(
        input=max(int(usage.get("input_tokens") or 0) - cached - written, 0),
        cache_read=cached,
        cache_write=written,
        output=int(usage.get("output_tokens") or 0),
    )


@dataclass
class _Pending:
    """Output items of one model response, until its usage arrives."""

    timestamp: str | None = None
    message_id: str | None = None
    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.texts or self.reasoning or self.calls)


@dataclass
class _ThreadReader:
    """One rollout file."""

    agent: str | None
    warnings: list[str]
    calls_by_id: dict[str, ToolCall]
    steps: list[TrajectoryStep] = field(default_factory=list)
    pending: _Pending = field(default_factory=_Pending)
    last_total: Usage = field(default_factory=Usage)
    cli_version: str | None = None
    complete: bool = False
    refusal: str | None = None
    api_errors: list[str] = field(default_factory=list)

    def read(self, path: Path, budget: ReadBudget | None = None) -> None:
        lines = list(read_jsonl(path, self.warnings, budget))
        per_response = any(entry.get("type") == "token_usage_record" for _, entry in lines)
        for _, entry in lines:
            kind, payload = entry.get("type"), entry.get("payload")
            if not isinstance(payload, dict):
                continue
            stamp = entry.get("timestamp")
            if kind == "session_meta":
                self._meta(payload)
            elif kind == "response_item":
                self._item(payload, stamp)
            elif kind == "token_usage_record" and per_response:
                self._close(stamp, usage_from_codex(payload.get("usage")))
            elif kind == "event_msg":
                self._event(payload, stamp, per_response)
        if not self.pending.empty():
            self._close(None, None)

    def _meta(self, payload: dict[str, Any]) -> None:
        self.cli_version = self.cli_version or payload.get("cli_version")
        if self.agent is None:
            role = payload.get("agent_role") or payload.get("agent_nickname")
            source = payload.get("source")
            if role:
                self.agent = str(role)
            elif isinstance(source, dict) and source:
                self.agent = "subagent:" + str(payload.get("id", "?"))

    def _item(self, item: dict[str, Any], stamp: str | None) -> None:
        kind = item.get("type")
        pending = self.pending
        if kind == "message" and item.get("role") == "user":
            text = "\n".join(str(c.get("text", "")) for c in item.get("content") or []
                             if isinstance(c, dict) and c.get("type") == "input_text")
            if text:
                self.steps.append(TrajectoryStep(index=0, timestamp=stamp, role="user",
                                                 text=text, agent=self.agent))
            return
        if kind in OUTPUT_ITEMS:
            call = self.calls_by_id.get(str(item.get("call_id")))
            if call is not None:
                output = item.get("output")
                if isinstance(output, dict):  # {"content": ..., "success": bool}
                    call.is_error = output.get("success") is False
                    output = output.get("content")
                call.output = tool_output_text(output)
            return
        if kind == "message" and item.get("role") == "assistant":
            pending.message_id = pending.message_id or item.get("id")
            pending.texts += [str(c.get("text", "")) for c in item.get("content") or []
                              if isinstance(c, dict) and c.get("type") == "output_text"]
        elif kind == "reasoning":
            parts = item.get("summary") or []
            parts += [c for c in item.get("content") or [] if isinstance(c, dict)]
            pending.reasoning += [str(p.get("text", "")) for p in parts
                                  if isinstance(p, dict) and p.get("text")]
        elif kind in CALL_ITEMS:
            call = _tool_call(item)
            pending.calls.append(call)
            if call.id:
                self.calls_by_id[call.id] = call
        else:
            return
        pending.timestamp = pending.timestamp or stamp

    def _event(self, payload: dict[str, Any], stamp: str | None, per_response: bool) -> None:
        kind = payload.get("type")
        if kind == "token_count" and not per_response:
            info = payload.get("info") or {}
            total = usage_from_codex(info.get("total_token_usage"))
            delta = total - self.last_total
            if total != self.last_total:
                self.last_total = total
                self._close(stamp, delta)
        elif kind == "task_complete":
            error = payload.get("error")
            if isinstance(error, dict):
                self._error(error.get("codex_error_info"), error.get("message"))
            else:
                self.complete = True
        elif kind == "error":  # ("stream_error" only announces a retry)
            self._error(payload.get("codex_error_info"), payload.get("message"))

    def _error(self, info: Any, message: Any) -> None:
        code = info if isinstance(info, str) else (
            next(iter(info), None) if isinstance(info, dict) else None)
        if code in REFUSAL_ERRORS:
            self.refusal = refusal_label(REFUSAL_ERRORS[code])
            self.complete = True
        elif str(message) not in self.api_errors:
            self.api_errors.append(str(message))

    def _close(self, stamp: str | None, usage: Usage | None) -> None:
        pending, self.pending = self.pending, _Pending()
        if pending.empty() and usage is None:
            return
        self.steps.append(TrajectoryStep(
            index=0, timestamp=pending.timestamp or stamp, role="assistant",
            message_id=pending.message_id, text="\n".join(pending.texts) or None,
            reasoning="\n".join(pending.reasoning) or None, tool_calls=pending.calls,
            usage=usage, agent=self.agent))


def _tool_call(item: dict[str, Any]) -> ToolCall:
    kind = item.get("type")
    if kind == "web_search_call":
        return ToolCall(id=item.get("id"), name="web_search", arguments=item.get("action"))
    if kind == "local_shell_call":
        return ToolCall(id=item.get("call_id") or item.get("id"), name="local_shell",
                        arguments=item.get("action"))
    raw = item.get("arguments", item.get("input"))
    # The session file is the agent's: arguments that are not JSON stay text, and parts
    # nested past 64 levels are read as their text (spu.gateway.answers.loads).
    parsed = loads(raw, deep_as_text=True) if isinstance(raw, str) else None
    arguments = parsed if parsed is not None or raw == "null" else raw
    name = str(item.get("name", "?"))
    namespace = item.get("namespace")
    if isinstance(namespace, str) and namespace:
        name = f"{namespace}__{name}"
    return ToolCall(id=item.get("call_id") or item.get("id"), name=name, arguments=arguments)


def read_codex_sessions(sessions_dir: Path, cli_version: str | None = None) -> SessionReading:
    """Read every rollout under ``sessions_dir`` (``$CODEX_HOME/sessions``).

    The session is complete when the main thread (the first rollout) reached
    ``task_complete`` without an error, or was refused.
    """
    warnings: list[str] = []
    calls_by_id: dict[str, ToolCall] = {}
    files = session_files(sessions_dir, "rollout-*.jsonl", warnings)
    threads = []
    budget = ReadBudget()  # all the rollouts of a run together
    for path in files:
        thread = _ThreadReader(agent=None, warnings=warnings, calls_by_id=calls_by_id)
        thread.read(path, budget)
        threads.append(thread)
    main = [t for t in threads if t.agent is None] or threads[:1]
    steps = sorted((s for t in threads for s in t.steps), key=lambda s: s.timestamp or "")
    trajectory = Trajectory(
        harness="codex",
        cli_version=cli_version or next((t.cli_version for t in threads if t.cli_version), None),
        steps=[s.model_copy(update={"index": k}) for k, s in enumerate(steps)],
    )
    refusal = next((t.refusal for t in threads if t.refusal), None)
    return SessionReading(
        trajectory=trajectory.model_copy(update={"usage": total_usage(trajectory)}),
        complete=bool(main) and all(t.complete for t in main),
        refusal_label=refusal,
        api_errors=tuple(e for t in threads for e in t.api_errors),
        files=tuple(str(p.relative_to(sessions_dir)) for p in files),
        warnings=tuple(warnings),
    )
