"""``harness=example``: a harness kept outside spu, with options and effort levels of its own.

The agent is spu's offline reference agent (the baseline script), ranking by one of its
strategies. The strategy is the harness's option ``harness.options.strategy``
(:class:`ExampleHarnessOptions`: ``random``, ``presented_order`` or ``monotone_prior``);
left unset, the effort picks it: the harness's own setting for each ``effort=<name>``,
as Claude Code's is its ``--effort`` value. ``conf/harness/example.yaml`` declares the
options and adds a level (``harness.efforts``) that only this package's
``conf/effort/turbo.yaml`` defines.

The strategy changes what the agent submits, so it is part of the run identity; the
option ``log_level`` only sets how much this module logs, and is declared so
(``result_neutral``): changing it never runs a finished run again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from spu.harness.base import AgentContext, HarnessOptions
from spu.harness.baseline import AGENT_SCRIPT
from spu.harness.command import CommandHarness

log = logging.getLogger(__name__)


class ExampleHarnessOptions(HarnessOptions):
    """``harness.options`` of ``harness=example``."""

    result_neutral = frozenset({"log_level"})

    strategy: Literal["random", "presented_order", "monotone_prior"] | None = None
    """How the agent ranks; None: the strategy of the effort level."""
    log_level: Literal["debug", "info", "warning"] = "warning"
    """How much this harness logs on the host (never what the agent does)."""


class ExampleHarness(CommandHarness):
    """The baseline agent, at the strategy its option or its effort level names."""

    name = "example"
    uses_tools = False  # an offline agent: no tools service, no egress proxy
    options_model = ExampleHarnessOptions
    efforts = {"low": "random", "medium": "presented_order", "high": "monotone_prior",
               "max": "monotone_prior"}

    def entrypoint(self) -> Path:
        """The baseline agent bundled with spu."""
        return AGENT_SCRIPT

    def check(self) -> None:
        """Without a strategy option, the effort must be one of this harness's levels."""
        if self.options["strategy"] is None:
            self.effort_value()

    def strategy(self) -> str:
        """``harness.options.strategy``, else the effort's (``effort=none``: presented order)."""
        return str(self.options["strategy"] or self.effort_value() or "presented_order")

    def args(self, ctx: AgentContext) -> list[str]:
        """The strategy and the seed."""
        log.setLevel(self.options["log_level"].upper())
        log.info("harness=example ranks by %s (run %s)", self.strategy(), ctx.run_key)
        return ["--strategy", self.strategy(), "--seed", str(ctx.seed)]
