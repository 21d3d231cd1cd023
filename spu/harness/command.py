"""``harness=command``: any executable as the agent (bring your own agent).

The entrypoint is copied into the sandbox (``/workspace/.agent/``) and run with
``harness.args``. It gets ``SPU_TASK_DIR``, ``SPU_OUTPUT_DIR``, ``SPU_TASK_ID`` and
``SPU_TIME_LIMIT_S`` (with the host's proxy variables and ``harness.env``, see
:meth:`~spu.harness.base.Harness.agent_env`) and writes its submission to the output folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from spu.harness.base import AgentCommand, AgentContext, Harness, HarnessError
from spu.sandbox.base import Sandbox

AGENT_DIR = ".agent"

SELFCHECK_AGENT = Path(__file__).parent / "agents" / "baseline_agent.py"
"""The agent ``spu selfcheck harness=command`` runs: the offline baseline script."""


class CommandHarness(Harness):
    """Runs ``harness.entrypoint`` with ``harness.args`` inside the sandbox."""

    name = "command"
    selfcheck_overrides: ClassVar[tuple[str, ...]] = (
        "model=scripted", f"harness.entrypoint={SELFCHECK_AGENT}",
        "harness.args=[--strategy,presented_order]")

    def entrypoint(self) -> Path:
        """The host path of the executable to copy in."""
        if not self.cfg.entrypoint:
            raise HarnessError("harness=command needs harness.entrypoint=/path/to/agent")
        path = Path(self.cfg.entrypoint).expanduser()
        if not path.is_file():
            raise HarnessError(f"harness.entrypoint {str(path)!r} is not a file")
        return path

    def check(self) -> None:
        """The entrypoint must exist."""
        self.entrypoint()

    def args(self, ctx: AgentContext) -> list[str]:
        """Arguments after the entrypoint."""
        return list(self.cfg.args)

    def prepare(self, ctx: AgentContext, sandbox: Sandbox) -> None:
        """Copy the entrypoint into ``<workspace>/.agent/`` as an executable."""
        src = self.entrypoint()
        inside = f"{ctx.paths.workspace}/{AGENT_DIR}/{src.name}"
        sandbox.write_file(inside, src.read_bytes(), mode=0o755)
        self._inside = inside

    def command(self, ctx: AgentContext) -> AgentCommand:
        """Run the copied entrypoint; scripts run through their shebang."""
        return AgentCommand(argv=[self._inside, *self.args(ctx)], env=self.agent_env(ctx, {}))
