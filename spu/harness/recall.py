"""``harness=recall``: contamination probes, asking the model what it remembers of a task.

A probe asks the configured model, through the run's model gateway and with no tools,
one question about the task's public files (``harness.options.probe``):

- ``source``: which study the experiments come from (title, authors, journal, year,
  DOI). The runner screens the answer with the exposure detector against the answer
  key's ``source`` (:attr:`~spu.harness.base.Harness.screens_answers`): a hit is a
  recalled source, recorded as the run's ``exposure_hits``.
- ``order``: the measured order of each group, from memory, without computing
  anything. The answer's rankings are the run's submission, graded like any other;
  ``spu task contamination`` compares the score with the task's chance threshold.

The agent is the stdlib-only script ``agents/recall_agent.py``, run in the sandbox like
any agent: it sees the staged public files and nothing else (never a key). The probe is
an option of the harness (:class:`RecallOptions`), so it is part of the run identity:
the two probes of one task are two runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from spu.harness.base import AgentCommand, AgentContext, AgentResult, HarnessError, HarnessOptions
from spu.harness.command import CommandHarness
from spu.harness.trajectory.jsonl import read_small
from spu.schema import ProcessEvidence, Trajectory, TrajectoryStep

PROBES = ("source", "order")
"""The questions a probe asks (``harness.options.probe``)."""


class RecallOptions(HarnessOptions):
    """``harness=recall``'s options."""

    probe: Literal["source", "order"] = "source"
    """``source``: which study the experiments come from; ``order``: the measured order."""

AGENT_SCRIPT = Path(__file__).parent / "agents" / "recall_agent.py"

RECALL_FILE = "recall.json"
"""What the agent writes to its output folder: the probe, the task files it saw, the
question and the model's answer."""


class RecallHarness(CommandHarness):
    """A contamination probe: one tool-less question to the model about the task."""

    name = "recall"
    uses_tools = False  # asked from memory: no search, no fetch
    screens_answers = True
    options_model = RecallOptions

    def entrypoint(self) -> Path:
        """The bundled recall agent script."""
        return AGENT_SCRIPT

    def probe(self) -> str:
        """The probe of this run (``harness.options.probe``: :data:`PROBES`)."""
        return str(self.options["probe"])

    def check(self) -> None:
        """A model that is called (no baseline)."""
        if self.model.provider == "baseline":
            raise HarnessError(f"model={self.model.name} is a baseline; a recall probe asks "
                               f"a model (model=scripted runs offline)")

    def args(self, ctx: AgentContext) -> list[str]:
        """``--probe=<probe>``."""
        return [f"--probe={self.probe()}"]

    def api_model(self) -> str:
        """The model id the run's gateway forwards (a script name for ``model=scripted``)."""
        from spu.gateway.session import DEFAULT_SCRIPT

        if self.model.provider == "scripted":
            return self.model.api_model or DEFAULT_SCRIPT
        return self.model.api_model or self.model.name

    def command(self, ctx: AgentContext) -> AgentCommand:
        """Run the recall agent with the probe and the model id."""
        return AgentCommand(argv=[self._inside, *self.args(ctx)],
                            env=self.agent_env(ctx, {"SPU_RECALL_MODEL": self.api_model()}))

    def parse(self, ctx: AgentContext, evidence: ProcessEvidence) -> AgentResult:
        """The question and the answer as a two-step trajectory (usage: the gateway's)."""
        raw = read_small(ctx.run_dir / "output" / RECALL_FILE)
        try:
            recalled = json.loads(raw) if raw else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            recalled = None
        if not isinstance(recalled, dict):
            return AgentResult()
        steps = [TrajectoryStep(index=0, role="user", text=str(recalled.get("prompt") or "")),
                 TrajectoryStep(index=1, role="assistant",
                                text=str(recalled.get("answer") or ""))]
        return AgentResult(trajectory=Trajectory(harness=self.name, steps=steps))
