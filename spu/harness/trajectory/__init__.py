"""Agent CLI session files, read back into the one trajectory schema (``spu.schema``).

Each CLI keeps its own record of a run: Claude Code one JSONL file per session under
``$HOME/.claude/projects/<cwd-slug>/`` (sub-agents under ``<session>/subagents/``),
Codex one ``rollout-*.jsonl`` per thread under ``$CODEX_HOME/sessions/``. The readers
here turn them into a :class:`~spu.schema.Trajectory` (steps, tool calls with their
outputs, reasoning, per-call usage in four buckets) and a :class:`SessionReading`
saying how the session ended: complete, refused (with the provider's label) or broken
by an API error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spu.schema import ToolCall, Trajectory, Usage

WEB_TOOLS = frozenset({"WebFetch", "WebSearch", "web_search", "web_fetch"})
"""Tool names of the CLIs' own web search and fetch tools."""


@dataclass(frozen=True)
class SessionReading:
    """What a CLI's session files say about a run."""

    trajectory: Trajectory
    """The normalized trajectory, with total usage."""
    complete: bool
    """True when the session reached a final answer (or a refusal), not cut short."""
    refusal_label: str | None = None
    """The provider's refusal label (``[bio]``), or ``[refusal]`` without a category."""
    api_errors: tuple[str, ...] = ()
    """API errors the CLI recorded, human readable."""
    files: tuple[str, ...] = field(default_factory=tuple)
    """Session files read (relative to the folder searched)."""
    warnings: tuple[str, ...] = ()
    """Lines that could not be read, naming the file and the line."""

    @property
    def refused(self) -> bool:
        """True when the model or the provider refused."""
        return self.refusal_label is not None


def refusal_label(category: str | None) -> str:
    """``[bio]`` for category ``bio``; ``[refusal]`` when the provider gives none."""
    return f"[{category}]" if category else "[refusal]"


def is_web_fetch(call: ToolCall) -> bool:
    """True for a web search or fetch: a CLI web tool or an MCP tool named for one."""
    if call.name in WEB_TOOLS:
        return True
    name = call.name.lower()
    return name.startswith("mcp__") and ("search" in name or "fetch" in name)


def count_tool_calls(trajectory: Trajectory) -> int:
    """Tool calls over all steps, sub-agents included."""
    return sum(len(step.tool_calls) for step in trajectory.steps)


def count_web_fetches(trajectory: Trajectory) -> int:
    """Web search and fetch calls over all steps."""
    return sum(1 for step in trajectory.steps for call in step.tool_calls if is_web_fetch(call))


def total_usage(trajectory: Trajectory) -> Usage:
    """Sum of the per-call usage of the steps."""
    total = Usage()
    for step in trajectory.steps:
        if step.usage is not None:
            total = total + step.usage
    return total
