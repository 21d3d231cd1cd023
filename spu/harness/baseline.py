"""``harness=baseline``: the reference agents of the paper, runnable offline.

Each is the stdlib-only script ``agents/baseline_agent.py`` run as a command agent
inside the sandbox, so baselines exercise the same path as any real agent:

- ``model=random``: each group in a uniformly random order, seeded by the run key;
- ``model=presented_order``: the input order of ``targets.csv`` (paper 3.7: 0.030);
- ``model=monotone_prior``: each group along its numeric setting column with the
  largest spread, ascending (the monotone prior of paper section 4.2).
"""

from __future__ import annotations

from pathlib import Path

from spu.harness.base import AgentContext, HarnessError
from spu.harness.command import CommandHarness

STRATEGIES = ("random", "presented_order", "monotone_prior")
AGENT_SCRIPT = Path(__file__).parent / "agents" / "baseline_agent.py"


class BaselineHarness(CommandHarness):
    """The three baseline strategies, chosen by ``model.name``."""

    name = "baseline"
    uses_tools = False  # offline reference agents: no search, no network
    reference_agent = True
    selfcheck_overrides = ("model=presented_order",)

    def model_api(self) -> str | None:
        """None: the baselines call no model."""
        return None

    def entrypoint(self) -> Path:
        """The bundled baseline agent script."""
        return AGENT_SCRIPT

    def check(self) -> None:
        """Only the baseline models run in this harness."""
        if self.model.name == "consensus":
            raise HarnessError("model=consensus runs in harness=consensus")
        if self.model.name not in STRATEGIES:
            raise HarnessError(
                f"harness=baseline runs model=random, presented_order or monotone_prior, "
                f"not model={self.model.name}; use harness=claude_code or harness=codex "
                f"for real models"
            )

    def args(self, ctx: AgentContext) -> list[str]:
        """Strategy and seed."""
        return ["--strategy", self.model.name, "--seed", str(ctx.seed)]
