"""What the two agent CLIs (Claude Code, Codex) have in common.

Both are pinned npm packages installed once into the tools folder and mounted
read-only in the sandbox; both talk to one model endpoint with one API key, read
from the variable the model config names; both leave session files in the agent's
home that :mod:`spu.harness.trajectory` reads back. The CLI is pointed at the run's
model gateway (:mod:`spu.gateway`) with the run's token in place of the key; with
``model=scripted`` the gateway's upstream is the scripted model server, so the real
CLI runs offline through the same gateway.
"""

from __future__ import annotations

import logging
import os
from abc import abstractmethod
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
    from spu.gateway.session import ModelEndpoint

log = logging.getLogger(__name__)

SCRIPTED = "scripted"
"""Provider of ``model=scripted``: the local scripted model server."""

TOOLS_MOUNT = "/spu-tools"
"""Where the tools folder's CLIs appear in sandboxes that remap paths."""

TEMP_FOLDER = ".tmp"
"""The CLIs' temporary folder, under the agent's home: a sandbox's ``/tmp`` may not be
writable by the agent's user, and Claude Code exits silently without one."""

STDERR_TAIL_CHARS = 500
"""How much of the CLI's stderr an infrastructure error quotes when the CLI said nothing else."""

KEY_CHECK_TIMEOUT_S = 15.0
"""How long the API key check waits for the provider before giving up (and running)."""



class CLIAgentHarness(Harness):
    """A pinned npm agent CLI run in the sandbox against one model endpoint."""

    binary: ClassVar[str]
    """Executable name under ``node_modules/.bin``."""
    default_endpoint: ClassVar[str | None] = None
    """The provider's API when the model config names no ``base_url``."""

    def __init__(self, cfg: HarnessConfig, model: ModelConfig, effort: EffortConfig) -> None:
        super().__init__(cfg, model, effort)
        self.tool: InstalledTool | None = None
        self.gateway: ModelEndpoint | None = None
        """The run's model gateway (known once :meth:`prepare` ran)."""
        self.home_host: Path | None = None
        self.cli_root: str | None = None
        self.host_address = "127.0.0.1"
        """Where the agent reaches the host's services (the sandbox's ``host_address``)."""

    # ---------------------------------------------------------------- configuration

    @property
    def scripted(self) -> bool:
        """True for ``model=scripted`` (the local scripted model server)."""
        return self.model.provider == SCRIPTED

    def api_key(self) -> str:
        """What the CLI gets as its key: the run's gateway token, once there is a gateway.

        Before that (:meth:`check`), the provider key, read from the variable the model
        config names, so that a missing key fails before anything starts.
        """
        if self.gateway is not None:
            return self.gateway.token
        if self.scripted:
            from spu.gateway.session import SCRIPTED_KEY

            return SCRIPTED_KEY
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
        self.effort_value()  # raises when this harness has no such effort
        self.api_key()
        from spu.gateway.session import GatewayConfigError, check_upstream

        try:
            check_upstream(self.model)
        except GatewayConfigError as exc:
            raise HarnessError(str(exc)) from None
        self.install()

    def install(self) -> InstalledTool:
        """The pinned CLI, installed into the tools folder on first use."""
        if self.tool is None:
            if not self.cfg.cli_package or not self.cfg.version:
                raise HarnessError(f"harness={self.cfg.name}: cli_package and version "
                                   f"must be set (conf/harness/{self.cfg.name}.yaml)")
            try:
                self.tool = ensure_installed(self.cfg.cli_package, self.cfg.version,
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
        """Locate the CLI and the agent's home; check the model gateway is reachable.

        Raises:
            HarnessError: a sandbox from which the run's model gateway cannot be reached
                (no network, or its port not among the sandbox's host ports), or
                ``model=scripted`` without a gateway.
        """
        self.gateway = ctx.model
        if self.gateway is None and self.scripted:
            raise HarnessError("model=scripted: the run has no model gateway (the runner "
                               "opens one, with the scripted model server as its upstream)")
        self.check_gateway_reachable(sandbox)
        self.host_address = ctx.paths.host_address
        self.home_host = sandbox.host_path(ctx.paths.workspace)
        (self.home_host / TEMP_FOLDER).mkdir(parents=True, exist_ok=True)
        # A backend that hands out host paths (the subprocess fallback) mounts nothing.
        remapped = Path(ctx.paths.workspace) != self.home_host
        self.cli_root = self.mount_point() if remapped else str(self.install().prefix)
        rejected = self.key_rejection()
        if rejected is not None:
            raise HarnessError(rejected)

    # ---------------------------------------------------------------- the API key

    @abstractmethod
    def key_check_request(self) -> tuple[str, dict[str, str]]:
        """URL and headers of a request that only a valid key passes (list the models)."""

    def key_rejection(self) -> str | None:
        """The provider's refusal of the API key (HTTP 401 or 403, in its words), or None.

        One request before the agent starts, so that a wrong key ends the run at once as
        ``infra_error`` with the provider's message, instead of after the CLI has retried
        for minutes. Anything else (no answer, another status) lets the run go ahead.
        """
        import httpx

        url, headers = self.key_check_request()
        try:
            # The run's gateway is on loopback: never through a proxy of the environment.
            response = httpx.get(url, headers=headers, timeout=KEY_CHECK_TIMEOUT_S,
                                 follow_redirects=True, trust_env=self.gateway is None)
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
            log.info("API key check of model=%s skipped: %s", self.model.name, exc)
            return None
        if response.status_code not in (401, 403):
            return None
        detail = provider_message(response.content[:4096]) or response.reason_phrase
        if self.scripted:
            return (f"API error {response.status_code}: the scripted model server rejected "
                    f"the key ({detail})")
        return (f"API error {response.status_code}: the provider rejected the API key in "
                f"{self.model.api_key_env} ({detail}); check the key, or use "
                f"model=scripted to run offline")

    def rejected_key_reason(self, seen: str) -> str | None:
        """The provider's words for a key rejected mid-run (asks it once more)."""
        return self.key_rejection()

    def check_gateway_reachable(self, sandbox: Sandbox) -> None:
        """Refuse a run whose agent cannot reach the run's model gateway.

        The gateway listens on the host's ``127.0.0.1``. An agent on the host's network
        reaches it; an agent in a network namespace reaches it only when its port is
        among the sandbox's host ports (the runner passes it on); offline
        (``sandbox.network=false``) nothing does, and the CLI would retry until the
        wall-clock limit.
        """
        if self.gateway is None:
            return
        info = sandbox.info()
        if info.network == "host" or "network-namespace" not in info.isolation:
            return
        from urllib.parse import urlsplit

        port = urlsplit(self.gateway.host_url).port
        if info.network == "offline":
            fix = "set sandbox.network=true"
        elif port in info.host_ports:
            return
        else:
            fix = sandbox.unreachable_port_fix
        raise HarnessError(
            f"model={self.model.name}: the run's model gateway listens on the host's "
            f"127.0.0.1 port {port}, which the agent cannot reach from "
            f"sandbox={info.backend} (network {info.network}); {fix}")

    def instruction(self, ctx: AgentContext) -> str:
        """The task's instruction, given as the prompt (every configuration gets the same)."""
        return (ctx.task.path / "instruction.md").read_text(encoding="utf-8")

    def home(self) -> Path:
        """The agent's home folder on the host (known once :meth:`prepare` ran)."""
        if self.home_host is None:
            raise HarnessError(f"harness={self.cfg.name}: parse called before prepare")
        return self.home_host

    def executable(self) -> str:
        """Path of the CLI as the agent process sees it."""
        return self.install().bin(self.binary, self.cli_root)

    def endpoint(self) -> str | None:
        """Base URL of the model API as the agent sees it: the run's gateway's."""
        if self.gateway is not None:
            return self.gateway.url
        return self.model.base_url

    def agent_env(self, ctx: AgentContext, extra: dict[str, str]) -> dict[str, str]:
        """The agent's environment (:meth:`Harness.agent_env`) with the CLI's temporary folder.

        ``harness.env`` still overrides everything; the model gateway bypasses proxies.
        """
        cli_env = {"TMPDIR": f"{ctx.paths.workspace}/{TEMP_FOLDER}"}
        if self.gateway is not None:
            proxies = ctx.proxy_env()
            host_bypass = proxies.get("no_proxy") or proxies.get("NO_PROXY")
            cli_env["no_proxy"] = cli_env["NO_PROXY"] = ",".join(dict.fromkeys(
                filter(None, [*(host_bypass or "").split(","), self.host_address, "127.0.0.1",
                              "localhost"])))
        return super().agent_env(ctx, {**cli_env, **extra})

    def api_hosts(self) -> set[str]:
        """The model endpoint's host (the run's gateway's, as the agent sees it)."""
        from urllib.parse import urlsplit

        endpoint = self.endpoint() or self.default_endpoint
        host = urlsplit(endpoint).hostname if endpoint else None
        return {host} if host else set()

    def cleanup(self) -> None:
        """Forget the run's gateway (the runner stops it)."""
        self.gateway = None

    # ---------------------------------------------------------------- reading back

    @abstractmethod
    def read_sessions(self, events: list[dict[str, Any]]) -> SessionReading:
        """This CLI's trajectory reader: the session files it left in the agent's home.

        ``events`` are the JSON lines the CLI printed on stdout (some CLIs say their
        version there).
        """

    def cli_report(self, events: list[dict[str, Any]]) -> tuple[str | None, float | None]:
        """The error the CLI reported on stdout (None: none) and its own cost estimate."""
        return None, None

    def parse(self, ctx: AgentContext, evidence: ProcessEvidence) -> AgentResult:
        """The trajectory from the session files; errors and cost from the CLI's stdout."""
        events = read_json_lines(ctx.log_dir / "agent.stdout")
        reading = self.read_sessions(events)
        cli_error, cost = self.cli_report(events)
        return self.result(ctx, reading, evidence, cli_error, cli_cost_usd=cost)

    def result(self, ctx: AgentContext, reading: SessionReading, evidence: ProcessEvidence,
               cli_error: str | None, cli_cost_usd: float | None = None) -> AgentResult:
        """The agent result from the session files and what the CLI printed.

        ``cli_error`` is the error the CLI reported on stdout; without one, the tail
        of its stderr stands in (a CLI that crashed says why there).
        """
        if cli_error is None:
            cli_error = stderr_tail(ctx.log_dir / "agent.stderr")
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
    so); a refusal is the model's answer; a session that reached its final answer is
    complete, even where a sub-agent recorded an API error on the way. Otherwise an
    API error, a CLI that left no session, or a session without a final answer is an
    infrastructure error.
    """
    if evidence.timed_out or evidence.oom_killed or reading.refused or reading.complete:
        return None
    if reading.api_errors:
        return f"API error: {reading.api_errors[-1][:500]}"
    if not reading.files:
        return (f"the CLI left no session file (exit code {evidence.exit_code}, "
                f"signal {evidence.signal}){': ' + cli_error if cli_error else ''}")
    return (f"truncated session: no final answer (exit code {evidence.exit_code})"
            f"{': ' + cli_error if cli_error else ''}")


def provider_message(body: bytes) -> str | None:
    """The message of a provider's JSON error body (Anthropic or OpenAI shape), or None.

    Examples:
        >>> provider_message(b'{"type": "error", "error": {"type": "authentication_error", '
        ...                  b'"message": "invalid x-api-key"}}')
        'authentication_error: invalid x-api-key'
        >>> provider_message(b'not json') is None
        True
    """
    import json

    try:
        data = json.loads(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    kind = error.get("type") or error.get("code")
    message = str(error.get("message") or "").strip()
    return f"{kind}: {message}" if kind and message else (message or None)


def stderr_tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str | None:
    """The last ``chars`` characters of a log file, stripped; None when empty or unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4 * chars))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return text.strip()[-chars:] or None


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON object lines of a CLI's stdout (other lines are ignored)."""
    if not path.is_file():
        return []
    return [entry for _, entry in read_jsonl(path, warnings=[])]
