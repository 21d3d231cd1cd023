"""``harness=claude_code``: the Claude Code CLI, run non-interactively in the sandbox.

``claude -p <instruction> --output-format stream-json --verbose`` with permissions
bypassed (inside the sandbox; as root this needs ``IS_SANDBOX=1``), the model with
``--model`` and the effort with ``--effort``. ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``
keeps its traffic to the model endpoint. Its built-in ``WebSearch`` and ``WebFetch`` are
disallowed; the audited tools service is its MCP server ``spu`` (``--mcp-config``, a file
in its home: the service's secret URL on the command line would be readable by any user of
the host; ``--strict-mcp-config`` so no other MCP configuration is read), whose tools it offers
the model, and records, as ``mcp__spu__search``, ``mcp__spu__fetch`` and
``mcp__spu__policy_stop`` (``ENABLE_TOOL_SEARCH=false``: newer CLIs would otherwise
defer MCP tools behind a tool search). Models of other providers run through their
Anthropic-compatible endpoints (``ANTHROPIC_BASE_URL``), with every model tier
pinned to the configured model so that sub-agents and side queries use it too.

The trajectory comes from the session files in ``$HOME/.claude/projects/``
(sub-agents included); the stream on stdout adds the CLI's own cost estimate.
"""

from __future__ import annotations

import json
from typing import Any

from spu.gateway.session import KEY_AS_API_KEY
from spu.harness.base import AgentCommand, AgentContext
from spu.harness.cli_agent import CLIAgentHarness
from spu.harness.monitor import LiveEvent, claude_code_event
from spu.harness.trajectory import SessionReading
from spu.harness.trajectory.claude_code import read_claude_code_sessions
from spu.sandbox import Sandbox

MODEL_TIER_VARIABLES = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)
"""Every model choice Claude Code makes, pinned to the configuration's model."""

BUILTIN_WEB_TOOLS = ("WebSearch", "WebFetch")
"""Claude Code's own web tools, never offered: all web access goes through the audited
service (paper 3.7)."""

MCP_CONFIG_FILE = ".spu-mcp.json"
"""The ``--mcp-config`` file, in the agent's home (never the JSON itself on the command line)."""


class ClaudeCodeHarness(CLIAgentHarness):
    """Claude Code (``@anthropic-ai/claude-code``), pinned by ``conf/harness/claude_code.yaml``."""

    name = "claude_code"
    binary = "claude"
    efforts = {level: level for level in ("low", "medium", "high", "xhigh", "max")}
    """``effort=<level>`` runs ``claude --effort <level>``; ``none``: the CLI's default."""
    default_endpoint = "https://api.anthropic.com"

    def mcp_config(self, ctx: AgentContext) -> str | None:
        """``--mcp-config``: the audited tools service as the MCP server ``spu``."""
        if ctx.tools is None or not ctx.tools.url:
            return None
        from spu.tools.session import MCP_SERVER_NAME

        return json.dumps({"mcpServers": {MCP_SERVER_NAME: {"type": "http",
                                                             "url": ctx.tools.url}}})

    def mcp_config_path(self, ctx: AgentContext) -> str:
        """Where the agent finds its ``--mcp-config`` file (written by :meth:`prepare`)."""
        return f"{ctx.paths.workspace}/{MCP_CONFIG_FILE}"

    def prepare(self, ctx: AgentContext, sandbox: Sandbox) -> None:
        """Point at the run's gateway, then write the MCP configuration into the agent's home."""
        super().prepare(ctx, sandbox)
        mcp = self.mcp_config(ctx)
        if mcp is not None:
            sandbox.write_file(self.mcp_config_path(ctx), mcp.encode(), mode=0o600)

    def key_check_request(self) -> tuple[str, dict[str, str]]:
        """``GET /v1/models`` of the Messages API, with the key as Claude Code sends it."""
        key = self.api_key()
        # Asked from the host: the gateway's host-side address, where there is one.
        host_side = self.gateway.host_url if self.gateway is not None else None
        base = (host_side or self.endpoint() or self.default_endpoint or "").rstrip("/")
        headers = {"anthropic-version": "2023-06-01"}
        if self.model.provider in KEY_AS_API_KEY:
            headers["x-api-key"] = key
        else:
            headers["authorization"] = f"Bearer {key}"
        return f"{base}/v1/models", headers

    def model_api(self) -> str | None:
        """Claude Code speaks the Anthropic Messages API (to any provider's endpoint)."""
        return "anthropic"

    def live_event(self, entry: dict[str, Any]) -> LiveEvent | None:
        """The event of one line of the ``stream-json`` output (:mod:`spu.harness.monitor`)."""
        return claude_code_event(entry)

    def command(self, ctx: AgentContext) -> AgentCommand:
        """``claude -p`` with stream-json output, the model and the effort."""
        api_model = self.model.api_model or self.model.name
        argv = [self.executable(), "-p", self.instruction(ctx),
                "--output-format", "stream-json", "--verbose",
                "--dangerously-skip-permissions", "--model", api_model]
        effort = self.effort_value()
        if effort:
            argv += ["--effort", effort]
        argv += ["--disallowedTools", ",".join(BUILTIN_WEB_TOOLS)]
        if self.mcp_config(ctx) is not None:
            argv += ["--mcp-config", self.mcp_config_path(ctx), "--strict-mcp-config"]
        env = {
            "IS_SANDBOX": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            # Newer CLIs defer MCP tools behind a tool search; the audited tools are
            # offered to the model directly, as in the paper's runs.
            "ENABLE_TOOL_SEARCH": "false",
            **dict.fromkeys(MODEL_TIER_VARIABLES, api_model),
        }
        endpoint = self.endpoint()
        if endpoint:
            env["ANTHROPIC_BASE_URL"] = endpoint
        key_variable = ("ANTHROPIC_API_KEY" if self.model.provider in KEY_AS_API_KEY
                        else "ANTHROPIC_AUTH_TOKEN")
        env[key_variable] = self.api_key()
        return AgentCommand(argv=argv, env=self.agent_env(ctx, env))

    def read_sessions(self, events: list[dict[str, Any]]) -> SessionReading:
        """The session files in ``$HOME/.claude/projects/`` (sub-agents included)."""
        init: dict[str, Any] = next((e for e in events if e.get("subtype") == "init"), {})
        return read_claude_code_sessions(self.home() / ".claude" / "projects",
                                         cli_version=init.get("claude_code_version"))

    def cli_report(self, events: list[dict[str, Any]]) -> tuple[str | None, float | None]:
        """The ``result`` event's error (not a refusal) and ``total_cost_usd``."""
        result: dict[str, Any] = next(
            (e for e in reversed(events) if e.get("type") == "result"), {})
        cli_error = None
        if result.get("is_error") and result.get("stop_reason") != "refusal":
            cli_error = str(result.get("result") or result.get("subtype"))[:500]
        cost = result.get("total_cost_usd")
        return cli_error, float(cost) if cost is not None else None
