"""Claude Code session files -> :class:`~spu.schema.Trajectory`.

Claude Code writes ``$HOME/.claude/projects/<cwd-slug>/<session>.jsonl``, one JSON
object per line, and each sub-agent's conversation to
``<session>/subagents/agent-<id>.jsonl`` (with ``agent-<id>.meta.json`` naming its
type; older versions keep sub-agent lines in the main file, marked ``isSidechain``).

Traps handled here:

- one assistant message is written as several lines, one per content block
  (thinking, text, tool_use), each repeating the message's usage: lines are grouped by
  message id and the usage is counted once, from the final line (the one carrying
  the stop reason; ``output_tokens`` is the largest seen, since a line written at
  ``message_start`` says 1);
- a refusal (``stop_reason: "refusal"``) is written as a synthetic message whose
  ``stop_details.category`` is the provider's label (``bio``), not as the refused
  response;
- API errors are synthetic messages (``isApiErrorMessage``) with ``API Error: ...``
  text and no usage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spu.harness.trajectory import SessionReading, refusal_label, total_usage
from spu.harness.trajectory.jsonl import (
    ReadBudget,
    read_jsonl,
    read_small,
    session_files,
    tool_output_text,
)
from spu.schema import ToolCall, Trajectory, TrajectoryStep, Usage

SYNTHETIC_MODEL = "<synthetic>"
FINAL_STOP_REASONS = frozenset({"end_turn", "refusal", "stop_sequence", "max_tokens"})


def usage_from_claude(usage: dict[str, Any] | None) -> Usage:
    """Four buckets from the Messages API usage (``input_tokens`` is uncached input).

    Examples
    --------
    >>> usage_from_claude({"input_tokens": 5, "cache_read_input_tokens": 7,
    ...                    "cache_creation_input_tokens": 11, "output_tokens": 13,
    ...                    "cache_creation": {"ephemeral_1h_input_tokens": 2}})
    Usage(input=5, cache_read=7, cache_write=11, cache_write_1h=2, output=13)
    """
    usage = usage or {}
    creation = usage.get("cache_creation") or {}
    return Usage(
        input=int(usage.get("input_tokens") or 0),
        cache_read=int(usage.get("cache_read_input_tokens") or 0),
        cache_write=int(usage.get("cache_creation_input_tokens") or 0),
        cache_write_1h=int(creation.get("ephemeral_1h_input_tokens") or 0),
        output=int(usage.get("output_tokens") or 0),
    )


@dataclass
class _Message:
    """One assistant message while its lines are being collected."""

    order: int
    timestamp: str | None
    agent: str | None
    message_id: str
    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    lines: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)
    """(stop reason, usage) of each line, in file order."""
    synthetic: bool = False
    api_error: bool = False

    def final_usage(self) -> Usage | None:
        if self.synthetic or not self.lines:
            return None
        stopped = [usage for reason, usage in self.lines if reason is not None]
        final = usage_from_claude(stopped[-1] if stopped else self.lines[-1][1])
        most_output = max(usage_from_claude(u).output for _, u in self.lines)
        return final.model_copy(update={"output": max(final.output, most_output)})

    def stop_reason(self) -> str | None:
        reasons = [reason for reason, _ in self.lines if reason is not None]
        return reasons[-1] if reasons else None


@dataclass
class _Reader:
    warnings: list[str] = field(default_factory=list)
    messages: dict[tuple[str | None, str], _Message] = field(default_factory=dict)
    steps: list[tuple[int, TrajectoryStep | _Message]] = field(default_factory=list)
    calls_by_id: dict[str, ToolCall] = field(default_factory=dict)
    refusal: str | None = None
    api_errors: list[str] = field(default_factory=list)
    cli_version: str | None = None
    order: int = 0
    budget: ReadBudget = field(default_factory=ReadBudget)
    """The session files' total read cap, shared by all the files of a run."""

    def read_file(self, path: Path, agent: str | None) -> None:
        for _, entry in read_jsonl(path, self.warnings, self.budget):
            self.cli_version = self.cli_version or entry.get("version")
            entry_agent = agent
            if entry_agent is None and entry.get("isSidechain") and entry.get("agentId"):
                entry_agent = str(entry["agentId"])
            if entry.get("type") == "assistant" and isinstance(entry.get("message"), dict):
                self._assistant(entry, entry_agent)
            elif entry.get("type") == "user" and isinstance(entry.get("message"), dict):
                self._user(entry, entry_agent)

    def _next(self) -> int:
        self.order += 1
        return self.order

    def _assistant(self, entry: dict[str, Any], agent: str | None) -> None:
        message = entry["message"]
        message_id = str(message.get("id") or entry.get("uuid") or self.order)
        key = (agent, message_id)
        current = self.messages.get(key)
        if current is None:
            current = _Message(order=self._next(), timestamp=entry.get("timestamp"),
                               agent=agent, message_id=message_id)
            self.messages[key] = current
            self.steps.append((current.order, current))
        current.synthetic = current.synthetic or message.get("model") == SYNTHETIC_MODEL
        reason = message.get("stop_reason")
        current.lines.append((reason, message.get("usage") or {}))
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks or []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and block.get("text") and block["text"] not in current.texts:
                current.texts.append(str(block["text"]))
            elif kind in ("thinking", "redacted_thinking"):
                thought = block.get("thinking") or ("[redacted]" if kind != "thinking" else "")
                if thought and thought not in current.reasoning:
                    current.reasoning.append(str(thought))
            elif (kind in ("tool_use", "server_tool_use")
                  and block.get("id") not in self.calls_by_id):
                call = ToolCall(id=block.get("id"), name=str(block.get("name", "?")),
                                arguments=block.get("input"))
                current.calls.append(call)
                if call.id:
                    self.calls_by_id[call.id] = call
        if reason == "refusal":
            details = message.get("stop_details") or {}
            self.refusal = refusal_label(details.get("category"))
        elif current.synthetic and (entry.get("isApiErrorMessage") or any(
                t.startswith("API Error") for t in current.texts)):
            current.api_error = True
            self.api_errors.append(" ".join(current.texts) or str(entry.get("error")))

    def _user(self, entry: dict[str, Any], agent: str | None) -> None:
        content = entry["message"].get("content")
        if isinstance(content, str):
            self._user_text(entry, agent, content)
            return
        texts = []
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                call = self.calls_by_id.get(str(block.get("tool_use_id")))
                if call is not None:
                    call.output = tool_output_text(block.get("content"))
                    call.is_error = bool(block.get("is_error"))
            elif block.get("type") == "text" and block.get("text"):
                texts.append(str(block["text"]))
        if texts:
            self._user_text(entry, agent, "\n".join(texts))

    def _user_text(self, entry: dict[str, Any], agent: str | None, text: str) -> None:
        step = TrajectoryStep(index=0, timestamp=entry.get("timestamp"), role="user",
                              text=text, agent=agent)
        self.steps.append((self._next(), step))

    def trajectory(self, cli_version: str | None) -> Trajectory:
        built = []
        for _, item in self.steps:
            if isinstance(item, _Message):
                built.append(TrajectoryStep(
                    index=0, timestamp=item.timestamp, role="assistant",
                    message_id=item.message_id, text="\n".join(item.texts) or None,
                    reasoning="\n".join(item.reasoning) or None, tool_calls=item.calls,
                    usage=item.final_usage(), agent=item.agent))
            else:
                built.append(item)
        # Sub-agent files interleave with the main session in time; stable on ties.
        built.sort(key=lambda s: s.timestamp or "")
        steps = [s.model_copy(update={"index": k}) for k, s in enumerate(built)]
        trajectory = Trajectory(harness="claude_code",
                                cli_version=cli_version or self.cli_version, steps=steps)
        return trajectory.model_copy(update={"usage": total_usage(trajectory)})

    def complete(self) -> bool:
        main = [m for m in self.messages.values() if m.agent is None]
        if not main:
            return False
        last = max(main, key=lambda m: m.order)
        return not last.api_error and last.stop_reason() in FINAL_STOP_REASONS


def _subagent_name(path: Path) -> str:
    agent_id = path.stem.removeprefix("agent-")
    meta = path.with_name(f"{path.stem}.meta.json")
    try:
        agent_type = json.loads(read_small(meta) or b"null").get("agentType")
    except (ValueError, AttributeError, RecursionError):
        agent_type = None
    return f"{agent_type}:{agent_id}" if agent_type else agent_id


def read_claude_code_sessions(projects_dir: Path, cli_version: str | None = None
                              ) -> SessionReading:
    """Read every session file under ``projects_dir`` (``$HOME/.claude/projects``).

    Main sessions are read before sub-agents so that tool results of a sub-agent's
    calls find their calls; steps are then put in time order.
    """
    reader = _Reader()
    files = session_files(projects_dir, "*.jsonl", reader.warnings)
    main = [p for p in files if "subagents" not in p.parts]
    subagents = [p for p in files if "subagents" in p.parts]
    for path in main:
        reader.read_file(path, agent=None)
    for path in subagents:
        reader.read_file(path, agent=_subagent_name(path))
    return SessionReading(
        trajectory=reader.trajectory(cli_version),
        complete=reader.complete(),
        refusal_label=reader.refusal,
        api_errors=tuple(reader.api_errors),
        files=tuple(str(p.relative_to(projects_dir)) for p in files),
        warnings=tuple(reader.warnings),
    )
