"""``harness=example``: a harness kept outside spu, with effort levels of its own.

The agent is spu's offline reference agent (the baseline script), and the effort picks
its ranking strategy: the harness's own setting for each ``effort=<name>``, as Claude
Code's is its ``--effort`` value. ``conf/harness/example.yaml`` adds a level
(``harness.efforts``) that only this package's ``conf/effort/turbo.yaml`` defines.
"""

from __future__ import annotations

from pathlib import Path

from spu.harness.base import AgentContext
from spu.harness.baseline import AGENT_SCRIPT
from spu.harness.command import CommandHarness


class ExampleHarness(CommandHarness):
    """The baseline agent, at the strategy its effort level names."""

    name = "example"
    uses_tools = False  # an offline agent: no tools service, no egress proxy
    efforts = {"low": "random", "medium": "presented_order", "high": "monotone_prior",
               "max": "monotone_prior"}

    def entrypoint(self) -> Path:
        """The baseline agent bundled with spu."""
        return AGENT_SCRIPT

    def check(self) -> None:
        """The effort must be one of this harness's levels (or none)."""
        self.effort_value()

    def args(self, ctx: AgentContext) -> list[str]:
        """The strategy of the effort (``effort=none``: presented order) and the seed."""
        return ["--strategy", self.effort_value() or "presented_order", "--seed", str(ctx.seed)]
