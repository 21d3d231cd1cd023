"""A harness whose agent reports per-request usage, for tracking and cost tests.

The command agents of the project cannot report token usage; this one keeps a session
log the way the real CLIs do, and the harness parses it into a normalized trajectory.
Selected as ``harness.name="tests.tracking.session_harness:SessionHarness"``.
"""

from __future__ import annotations

import json
from pathlib import Path

from spu.harness.base import AgentContext, AgentResult
from spu.harness.command import CommandHarness
from spu.sandbox.base import Sandbox
from spu.schema import ProcessEvidence, ToolCall, Trajectory, TrajectoryStep, Usage

AGENT = Path(__file__).parent / "agents" / "session_agent.py"


class SessionHarness(CommandHarness):
    """Runs ``agents/session_agent.py``; ``harness.args`` carry its usage and CLI cost."""

    name = "session"

    def model_api(self) -> str | None:
        """None: a test double that reports usage without calling a model (no gateway; its
        usage is what it reports)."""
        return None

    def entrypoint(self) -> Path:
        return AGENT

    def prepare(self, ctx: AgentContext, sandbox: Sandbox) -> None:
        super().prepare(ctx, sandbox)
        page = self.cfg.env.get("SESSION_PAGE", "<html>no result</html>")
        sandbox.write_file(f"{ctx.paths.workspace}/page.html", page.encode())
        self._session = sandbox.host_path(f"{ctx.paths.workspace}/session.jsonl")

    def parse(self, ctx: AgentContext, evidence: ProcessEvidence) -> AgentResult:
        steps: list[TrajectoryStep] = []
        cost = version = None
        for line in self._session.read_text().splitlines():
            event = json.loads(line)
            if event["type"] == "result":
                cost, version = event["total_cost_usd"], event["version"]
                continue
            steps.append(TrajectoryStep(
                index=len(steps), message_id=event["id"],
                tool_calls=[ToolCall(name=event["tool"], arguments=event["arguments"],
                                     output=event["output"])],
                usage=Usage(**event["usage"]),
            ))
        total = Usage()
        for step in steps:
            assert step.usage is not None
            total = total + step.usage
        trajectory = Trajectory(harness=self.name, cli_version=version, steps=steps, usage=total)
        return AgentResult(trajectory=trajectory, usage=total, cli_cost_usd=cost,
                           cli_version=version, tool_calls=len(steps),
                           web_fetches=sum(s.tool_calls[0].name == "WebFetch" for s in steps))
