"""``harness=codex``: the Codex CLI, run non-interactively in the sandbox.

``codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox
-c analytics.enabled=false --disable plugins <instruction>`` with stdin closed and a
fresh ``CODEX_HOME`` (``/workspace/.codex``) whose ``config.toml`` declares the model
provider: a custom ``model_providers`` entry with ``base_url``, ``env_key`` and
``wire_api = "responses"`` (this version ignores ``OPENAI_BASE_URL``), and the
reasoning effort as ``model_reasoning_effort``. Its own web search is off
(``web_search = "disabled"``); the audited tools service is its MCP server ``spu``
(``[mcp_servers.spu]`` with the streamable-HTTP ``url``), whose tools Codex offers the
model in the namespace ``mcp__spu`` and records as calls of ``search`` in that namespace
(read back as ``mcp__spu__search``, ``mcp__spu__fetch``, ``mcp__spu__policy_stop``).

The trajectory comes from the rollout files in ``$CODEX_HOME/sessions/``.
"""

from __future__ import annotations

import json
from typing import Any

from spu.harness.base import AgentCommand, AgentContext
from spu.harness.cli_agent import CLIAgentHarness
from spu.harness.monitor import LiveEvent, codex_event
from spu.harness.trajectory import SessionReading
from spu.harness.trajectory.codex import read_codex_sessions
from spu.sandbox.base import Sandbox

CODEX_HOME = ".codex"
"""``CODEX_HOME`` under the agent's home folder."""
PROVIDER_ID = "spu"
"""Name of the model provider declared in ``config.toml``."""
DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Responses API endpoint when the model config names none."""
SCRIPTED_KEY_VARIABLE = "SPU_SCRIPTED_API_KEY"
MCP_TOOL_TIMEOUT_S = 180
"""Seconds Codex waits for an audited call (the service answers errors within its own
timeouts, well below this)."""


def codex_home(ctx: AgentContext) -> str:
    """``CODEX_HOME`` as the agent sees it: fresh for every run, in its home folder."""
    return f"{ctx.paths.workspace}/{CODEX_HOME}"


def _toml(value: str) -> str:
    # A JSON string is a valid TOML basic string.
    return json.dumps(value)


class CodexHarness(CLIAgentHarness):
    """Codex (``@openai/codex``), pinned by ``conf/harness/codex.yaml``."""

    name = "codex"
    binary = "codex"
    efforts = {level: level for level in ("low", "medium", "high", "xhigh", "max")}
    """``effort=<level>`` writes ``model_reasoning_effort = "<level>"``; ``none``: Codex's
    default."""
    default_endpoint = DEFAULT_BASE_URL

    def key_check_request(self) -> tuple[str, dict[str, str]]:
        """``GET /models`` of the Responses API endpoint, with the key as a bearer token."""
        # Asked from the host: the gateway's host-side address, where there is one.
        host_side = self.gateway.host_url if self.gateway is not None else None
        base = host_side or self.endpoint() or self.default_endpoint or ""
        return f"{base.rstrip('/')}/models", {"authorization": f"Bearer {self.api_key()}"}

    def model_api(self) -> str | None:
        """Codex speaks the OpenAI Responses API."""
        return "openai-responses"

    def live_event(self, entry: dict[str, Any]) -> LiveEvent | None:
        """The event of one line of the ``--json`` output (:mod:`spu.harness.monitor`)."""
        return codex_event(entry)

    def key_variable(self) -> str:
        """The variable Codex reads the key from (``env_key`` of the provider)."""
        return SCRIPTED_KEY_VARIABLE if self.scripted else str(self.model.api_key_env)

    def config_toml(self, tools_url: str | None = None) -> str:
        """``config.toml`` declaring the provider, the model, the effort and the MCP server."""
        # The gateway's root stands for the upstream's base (``/v1`` included).
        base_url = self.endpoint()
        lines = [
            f"model = {_toml(self.model.api_model or self.model.name)}",
            f"model_provider = {_toml(PROVIDER_ID)}",
        ]
        effort = self.effort_value()
        if effort:
            lines.append(f"model_reasoning_effort = {_toml(effort)}")
        lines += [
            "check_for_update_on_startup = false",
            'web_search = "disabled"',
            "",
            f"[model_providers.{PROVIDER_ID}]",
            f"name = {_toml(self.model.provider)}",
            f"base_url = {_toml(base_url or DEFAULT_BASE_URL)}",
            f"env_key = {_toml(self.key_variable())}",
            'wire_api = "responses"',
        ]
        if tools_url:
            from spu.tools.session import MCP_SERVER_NAME

            lines += [
                "",
                f"[mcp_servers.{MCP_SERVER_NAME}]",
                f"url = {_toml(tools_url)}",
                f"tool_timeout_sec = {MCP_TOOL_TIMEOUT_S}",
            ]
        return "\n".join(lines) + "\n"

    def prepare(self, ctx: AgentContext, sandbox: Sandbox) -> None:
        """Point at the run's gateway, then write a fresh ``CODEX_HOME``."""
        super().prepare(ctx, sandbox)
        tools_url = ctx.tools.url if ctx.tools is not None else None
        sandbox.write_file(f"{codex_home(ctx)}/config.toml",
                           self.config_toml(tools_url).encode(), mode=0o600)

    def command(self, ctx: AgentContext) -> AgentCommand:
        """``codex exec --json ...`` with the instruction as the prompt."""
        argv = [self.executable(), "exec", "--json", "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "-c", "analytics.enabled=false", "--disable", "plugins",
                "--cd", ctx.paths.workspace, self.instruction(ctx)]
        env = {"CODEX_HOME": codex_home(ctx), self.key_variable(): self.api_key()}
        return AgentCommand(argv=argv, env=self.agent_env(ctx, env))

    def read_sessions(self, events: list[dict[str, Any]]) -> SessionReading:
        """The rollout files in ``$CODEX_HOME/sessions/``."""
        return read_codex_sessions(self.home() / CODEX_HOME / "sessions")

    def cli_report(self, events: list[dict[str, Any]]) -> tuple[str | None, float | None]:
        """The last ``turn.failed`` or ``error`` event's message; Codex estimates no cost."""
        failed = [e for e in events if e.get("type") in ("turn.failed", "error")]
        if not failed:
            return None, None
        error = failed[-1].get("error") or failed[-1]
        return str(error.get("message") if isinstance(error, dict) else error)[:500], None
