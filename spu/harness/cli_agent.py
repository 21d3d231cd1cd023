"""What the two agent CLIs (Claude Code, Codex) have in common.

Both are pinned npm packages installed once into the tools folder and mounted
read-only in the sandbox; both talk to one model endpoint with one API key, read
from the variable the model config names; both leave session files in the agent's
home that :mod:`spu.harness.trajectory` reads back. With ``model=scripted`` the
harness starts the scripted model server (:mod:`spu.testing`) for the run and points
the CLI at it, so the real CLI runs offline.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from spu.config import EffortConfig, HarnessConfig, ModelConfig
from spu.harness.base import AgentContext, AgentResult, Harness, HarnessError
from spu.harness.npm_tools import InstalledTool, ToolInstallError, ensure_installed, tools_dir
from spu.harness.trajectory import SessionReading, count_tool_calls, count_web_fetches
from spu.harness.trajectory.jsonl import read_jsonl
from spu.sandbox.base import Sandbox
from spu.schema import ProcessEvidence

if TYPE_CHECKING:
    from spu.testing import ScriptedModelServer

log = logging.getLogger(__name__)

SCRIPTED = "scripted"
"""Provider of ``model=scripted``: the local scripted model server."""

DEFAULT_SCRIPT = "presented_order"
"""The script ``model=scripted`` plays when ``model.api_model`` names none."""

TOOLS_MOUNT = "/spu-tools"
"""Where the tools folder's CLIs appear in sandboxes that remap paths."""

TEMP_FOLDER = ".tmp"
"""The CLIs' temporary folder, under the agent's home: a sandbox's ``/tmp`` may not be
writable by the agent's user, and Claude Code exits silently without one."""

PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                   "NO_PROXY")


class CLIAgentHarness(Harness):
    """A pinned npm agent CLI run in the sandbox against one model endpoint."""

    binary: ClassVar[str]
    """Executable name under ``node_modules/.bin``."""
    effort_field: ClassVar[str]
    """Field of :class:`~spu.config.EffortConfig` holding this harness's effort value."""

    def __init__(self, cfg: HarnessConfig, model: ModelConfig, effort: EffortConfig) -> None:
        super().__init__(cfg, model, effort)
        self.tool: InstalledTool | None = None
        self.server: ScriptedModelServer | None = None  # while a scripted run is on
        self.home_host: Path | None = None
        self.cli_root: str | None = None

    # ---------------------------------------------------------------- configuration

    @property
    def scripted(self) -> bool:
        """True for ``model=scripted`` (the local scripted model server)."""
        return self.model.provider == SCRIPTED

    def effort_value(self) -> str | None:
        """The CLI's value for the configured effort; None leaves the CLI's default."""
        return getattr(self.effort, self.effort_field, None)

    def api_key(self) -> str:
        """The API key, read from the variable the model config names."""
        if self.scripted:
            return "scripted-model-key"
        name = self.model.api_key_env
        if not name:
            raise HarnessError(f"model={self.model.name}: api_key_env is not set")
        value = os.environ.get(name)
        if not value:
            raise HarnessError(
                f"model={self.model.name} needs its API key in the environment variable "
                f"{name} (export {name}=...), or use model=scripted to run offline")
        return value

    def check(self) -> None:
        """The model is not a baseline, its key is set, an effort maps, the CLI installs."""
        if self.model.provider == "baseline":
            raise HarnessError(f"model={self.model.name} is a baseline; run it with "
                               f"harness=baseline")
        if self.effort.name != "none" and self.effort_value() is None:
            raise HarnessError(f"effort={self.effort.name} has no value for "
                               f"harness={self.cfg.name} (conf/effort/{self.effort.name}.yaml, "
                               f"key {self.effort_field})")
        self.api_key()
        if self.scripted:
            from spu.testing import ScriptError, load_script

            try:
                load_script(self.model.api_model or DEFAULT_SCRIPT)
            except ScriptError as exc:
                raise HarnessError(f"model.api_model: {exc}") from None
        self.install()

    def install(self) -> InstalledTool:
        """The pinned CLI, installed into the tools folder on first use."""
        if self.tool is None:
            if not self.cfg.cli_package or not self.cfg.cli_version:
                raise HarnessError(f"harness={self.cfg.name}: cli_package and cli_version "
                                   f"must be set (conf/harness/{self.cfg.name}.yaml)")
            try:
                self.tool = ensure_installed(self.cfg.cli_package, self.cfg.cli_version,
                                             tools_dir(self.cfg.tools_dir))
            except ToolInstallError as exc:
                raise HarnessError(str(exc)) from None
        return self.tool

    def mount_point(self) -> str:
        """Where the CLI's install folder appears in the sandbox."""
        return f"{TOOLS_MOUNT}/{self.install().prefix.name}"

    def sandbox_binds(self) -> dict[str, str]:
        """The tools folder, read-only.

        The whole folder is the mount point, so that no folder the sandbox creates
        on the way (root-only, under some backends) stands between the agent's
        user and the CLI.
        """
        return {str(self.install().prefix.parent): TOOLS_MOUNT}

    # ---------------------------------------------------------------- a run

    def prepare(self, ctx: AgentContext, sandbox: Sandbox) -> None:
        """Locate the CLI and the agent's home; start the scripted server when asked."""
        self.home_host = sandbox.host_path(ctx.paths.workspace)
        (self.home_host / TEMP_FOLDER).mkdir(parents=True, exist_ok=True)
        # A backend that hands out host paths (the subprocess fallback) mounts nothing.
        remapped = Path(ctx.paths.workspace) != self.home_host
        self.cli_root = self.mount_point() if remapped else str(self.install().prefix)
        if self.scripted:
            from spu.testing import ScriptedModelServer, load_script

            script = load_script(self.model.api_model or DEFAULT_SCRIPT)
            self.server = ScriptedModelServer(
                script, log_path=ctx.log_dir / "scripted_server.jsonl").start()
            log.info("scripted model %r at %s", script.name, self.server.url)

    def executable(self) -> str:
        """Path of the CLI as the agent process sees it."""
        return self.install().bin(self.binary, self.cli_root)

    def endpoint(self) -> str | None:
        """Base URL of the model API: the scripted server's, or the model config's."""
        if self.server is not None:
            return self.server.url
        return self.model.base_url

    def agent_env(self, ctx: AgentContext, cli_env: dict[str, str]) -> dict[str, str]:
        """The agent's environment: ``SPU_*``, proxies, ``cli_env``, then ``harness.env``.

        ``harness.env`` overrides everything; the scripted server bypasses proxies.
        """
        env = ctx.base_env()
        env["TMPDIR"] = f"{ctx.paths.workspace}/{TEMP_FOLDER}"
        for name in PROXY_VARIABLES:
            if name in os.environ:
                env[name] = os.environ[name]
        if self.server is not None:
            env["no_proxy"] = env["NO_PROXY"] = ",".join(
                filter(None, [env.get("no_proxy"), "127.0.0.1", "localhost"]))
        env.update(cli_env)
        env.update({k: str(v) for k, v in self.cfg.env.items()})
        return env

    def cleanup(self) -> None:
        """Stop the scripted model server, if one runs."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    # ---------------------------------------------------------------- reading back

    def result(self, reading: SessionReading, evidence: ProcessEvidence,
               cli_error: str | None, cli_cost_usd: float | None = None) -> AgentResult:
        """The agent result from the session files and what the CLI printed."""
        infra = infra_error(reading, evidence, cli_error)
        if reading.warnings:
            log.warning("session files: %s", "; ".join(reading.warnings[:5]))
        return AgentResult(
            trajectory=reading.trajectory,
            usage=reading.trajectory.usage,
            refused=reading.refused,
            refusal_label=reading.refusal_label,
            infra_error=infra,
            cli_cost_usd=cli_cost_usd,
            cli_version=reading.trajectory.cli_version,
            tool_calls=count_tool_calls(reading.trajectory),
            web_fetches=count_web_fetches(reading.trajectory),
        )


def infra_error(reading: SessionReading, evidence: ProcessEvidence,
                cli_error: str | None) -> str | None:
    """Why the run broke for reasons outside the agent (retried once), or None.

    A run that hit its time or memory limit is cut short by design (its outcome says
    so); a refusal is the model's answer. Otherwise an API error, a CLI that left no
    session, or a session without a final answer is an infrastructure error.
    """
    if evidence.timed_out or evidence.oom_killed or reading.refused:
        return None
    if reading.api_errors:
        return f"API error: {reading.api_errors[-1][:500]}"
    if not reading.files:
        return (f"the CLI left no session file (exit code {evidence.exit_code}, "
                f"signal {evidence.signal}){': ' + cli_error if cli_error else ''}")
    if not reading.complete:
        return (f"truncated session: no final answer (exit code {evidence.exit_code})"
                f"{': ' + cli_error if cli_error else ''}")
    return None


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON object lines of a CLI's stdout (other lines are ignored)."""
    if not path.is_file():
        return []
    return [entry for _, entry in read_jsonl(path, warnings=[])]
