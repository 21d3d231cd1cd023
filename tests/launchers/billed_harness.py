"""A harness whose agent reports token usage, so that runs cost money (budget tests).

The agent ranks every group in presented order and writes ``usage.json`` with the
input tokens named by ``BILLED_INPUT_TOKENS``; the harness reads it back as the run's
usage, which the runner prices with the model's list prices. Selected as
``harness=command harness.name=tests.launchers.billed_harness:BilledHarness``.
"""

from __future__ import annotations

import json

from spu.harness.base import AgentContext, AgentResult
from spu.harness.command import CommandHarness
from spu.schema import ProcessEvidence, Usage
from tests.launchers.agents import PRESENTED_ORDER_AGENT

AGENT = PRESENTED_ORDER_AGENT + """
usage = {"input": int(os.environ["BILLED_INPUT_TOKENS"])}
pathlib.Path(os.environ["SPU_WORKSPACE"], "usage.json").write_text(json.dumps(usage))
"""
"""Ranks in presented order, then reports the input tokens named by ``BILLED_INPUT_TOKENS``."""


class BilledHarness(CommandHarness):
    """``harness=command`` whose agent reports the tokens it used."""

    name = "billed"

    def model_api(self) -> str | None:
        """None: a test double that reports usage without calling a model (no gateway; its
        usage is what it reports)."""
        return None

    def parse(self, ctx: AgentContext, evidence: ProcessEvidence) -> AgentResult:
        """The usage the agent wrote to ``usage.json``."""
        usage_file = ctx.run_dir / "workspace" / "usage.json"
        return AgentResult(usage=Usage(**json.loads(usage_file.read_text())))
