"""The harness interface: how an agent is started in a sandbox and how its run is read back.

A harness is one module holding one :class:`Harness` subclass, declared by an entry
point of group ``spu.harnesses`` (:mod:`spu.registry`); ``harness=<name>`` selects it.
It declares its own effort levels (:attr:`Harness.efforts`) and its own options
(:attr:`Harness.options_model`, set as ``harness.options.<key>``, checked before the run
starts; :mod:`spu.options`). The runner calls, in order,
``prepare`` (put files into the sandbox), ``command`` (what to execute, with which
environment) and, after the process ends, ``parse`` (trajectory, usage, refusals).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from spu.config import EffortConfig, HarnessConfig, ModelConfig
from spu.options import PluginOptions, check_options
from spu.registry import HARNESSES, Registry
from spu.sandbox.base import RunLimits, Sandbox, SandboxPaths
from spu.schema import Identity, ProcessEvidence, Trajectory, Usage
from spu.tasks.package import TaskPackage

if TYPE_CHECKING:
    from spu.gateway.session import ModelEndpoint
    from spu.harness.monitor import LiveEvent
    from spu.tools.session import ToolEndpoints

PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                   "NO_PROXY")
"""Proxy settings handed from the host to the agent, in both spellings, where set."""


def host_proxy_env() -> dict[str, str]:
    """The host's proxy variables that are set (:data:`PROXY_VARIABLES`)."""
    return {name: os.environ[name] for name in PROXY_VARIABLES if name in os.environ}


@dataclass
class AgentContext:
    """Everything a harness may know about the run it starts."""

    task: TaskPackage
    paths: SandboxPaths
    """The layout as the agent sees it."""
    run_dir: Path
    """Host folder of the run (logs go to ``run_dir/logs``)."""
    run_key: str
    limits: RunLimits
    seed: int
    """Seed derived from the run key, for agents that draw random numbers."""
    gpu_ids: list[str] = field(default_factory=list)
    """GPUs the launcher assigned; the sandbox places them and sets the GPU environment."""
    tools: ToolEndpoints | None = None
    """The audited tools service and the egress proxy, as the agent reaches them."""
    model: ModelEndpoint | None = None
    """The run's model gateway, as the agent reaches it (None: the agent calls no model)."""

    @property
    def log_dir(self) -> Path:
        """Host folder for the agent's raw logs."""
        path = self.run_dir / "logs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def base_env(self) -> dict[str, str]:
        """The ``SPU_*`` variables every agent receives (SPEC section 4).

        GPU variables are not among them: every sandbox decides the GPU placement and
        hands it over itself (``CUDA_VISIBLE_DEVICES``, device nodes, device requests).
        """
        env = {
            "SPU_TASK_DIR": self.paths.task,
            "SPU_OUTPUT_DIR": self.paths.output,
            "SPU_WORKSPACE": self.paths.workspace,
            "SPU_TASK_ID": self.task.id,
            "SPU_TASK_VERSION": self.task.version,
            "SPU_TIME_LIMIT_S": str(int(self.limits.time_s)),
            "SPU_SEED": str(self.seed),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if self.tools is not None and self.tools.url:
            env["SPU_TOOLS_URL"] = self.tools.url
        if self.model is not None:
            env.update(self.model.env())
        return env

    def proxy_env(self) -> dict[str, str]:
        """The proxy variables of the agent (both spellings).

        With an egress proxy, every connection goes through it (the host's own proxy
        variables are replaced), except to the host's address, where the tools service
        is; without one, the host's proxy variables that are set.
        """
        if self.tools is None or not self.tools.proxy_url:
            return host_proxy_env()
        bypass = ",".join(dict.fromkeys([self.tools.host_address, "127.0.0.1", "localhost"]))
        return {**dict.fromkeys(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"),
                                self.tools.proxy_url),
                "no_proxy": bypass, "NO_PROXY": bypass}


@dataclass
class AgentCommand:
    """The process to start inside the sandbox."""

    argv: list[str]
    env: dict[str, str]


@dataclass
class AgentResult:
    """What the harness read back from a finished agent."""

    trajectory: Trajectory | None = None
    usage: Usage = field(default_factory=Usage)
    refused: bool = False
    refusal_label: str | None = None
    policy_stop: bool = False
    infra_error: str | None = None
    """An API error, a truncated session, a CLI that did not start: retried once."""
    cli_cost_usd: float | None = None
    cli_version: str | None = None
    tool_calls: int = 0
    web_fetches: int = 0
    used_gpu: bool = False
    model_requests: list[Usage] | None = None
    """Usage of each model request the run's gateway recorded (None: no gateway); with
    it, ``usage`` is the gateway's sum, not the session files'."""
    evidence_disagreement: str | None = None
    """Where the session files claimed what the provider side never saw."""
    cost_limit: bool = False
    """The gateway refused further requests at ``limits.max_cost_usd``."""
    agent_caused: tuple[str, ...] = ()
    """Provider-side failures the gateway's record counts as the agent's doing, each with
    its rule (:attr:`spu.gateway.verdict.GatewayVerdict.agent_caused`): notes of the run."""
    shell_downloads: int | None = None
    """Download commands among the model's shell calls, counted from the gateway's record
    (None: counted from the trajectory, :func:`spu.tools.egress.shell_downloads`)."""
    trajectory_from_audit: bool = False
    """The trajectory was built from the audit log (the agent left none of its own)."""
    screen_notes: list[str] = field(default_factory=list)
    """What kept the exposure screen from reading all the model was sent (empty: nothing)."""


class HarnessError(RuntimeError):
    """The harness cannot start on this configuration (e.g. a missing API key)."""


class HarnessOptionsError(HarnessError):
    """``harness.options`` does not suit the harness; the message is one line."""


class HarnessOptions(PluginOptions):
    """The options every harness takes (none); a harness's own model adds fields to it."""


def harness_options(cls: type[Harness], options: Any) -> dict[str, Any]:
    """``options`` (``harness.options``) checked by the options model of harness ``cls``.

    Raises:
        HarnessOptionsError: an unknown key or a wrong value, in one line naming the key
            and the harness's options.
    """
    return check_options("harness.options", f"harness={cls.name}", cls.options_model,
                         dict(options or {}), HarnessOptionsError)


class Harness(ABC):
    """Starts one kind of agent and reads back its run."""

    name: ClassVar[str]
    uses_tools: ClassVar[bool] = True
    """Whether the run gets the audited tools service and the egress proxy (not the
    offline baselines)."""
    reference_agent: ClassVar[bool] = False
    """A reference agent of the framework's own (the baselines, the consensus): trusted
    code that calls no model, so it may run without isolation."""
    screens_answers: ClassVar[bool] = False
    """Whether the exposure screen also reads the model's own text (the trajectory's
    assistant steps), not only tool outputs: a recall probe, where an answer naming the
    source study is the finding (:mod:`spu.harness.recall`)."""

    options_model: ClassVar[type[PluginOptions]] = HarnessOptions
    """This harness's options (``harness.options.<key>``), a pydantic model: checked when
    the harness is made, before anything starts; available as :attr:`options`. Options
    that can change a result are part of the run identity, the others are declared
    :attr:`~spu.options.PluginOptions.result_neutral`."""

    selfcheck_overrides: ClassVar[tuple[str, ...]] = ("model=scripted",)
    """Hydra overrides ``spu selfcheck harness=<name>`` checks this harness under: a model
    it runs offline, without a key (the scripted model by default)."""
    selfcheck_expected_failures: ClassVar[Mapping[str, str]] = {}
    """Checks of ``spu selfcheck harness=<name>`` this harness is known to fail, each with
    its reason: reported as expected failures (:mod:`spu.selfcheck`)."""

    efforts: ClassVar[Mapping[str, str]] = {}
    """Reasoning effort (``effort=<name>``, ``conf/effort``) -> this harness's own setting
    for it (e.g. the value of ``claude --effort``); ``harness.efforts`` of its config adds
    to it or overrides it. Empty: the harness has no such setting and runs every effort
    the same way (the runs are still labelled by it)."""

    def __init__(self, cfg: HarnessConfig, model: ModelConfig, effort: EffortConfig) -> None:
        self.cfg = cfg
        self.model = model
        self.effort = effort
        self.options = harness_options(type(self), getattr(cfg, "options", None))
        """Every option of :attr:`options_model`, checked (HarnessOptionsError if not)."""

    def effort_levels(self) -> dict[str, str]:
        """This harness's efforts: :attr:`efforts` updated by ``harness.efforts``."""
        return {**self.efforts, **self.cfg.efforts}

    def effort_value(self) -> str | None:
        """This harness's setting for the configured effort; None: its own default.

        ``effort=none`` (unless the harness maps it) and a harness without efforts give
        None.

        Raises:
            HarnessError: the harness has efforts, but not this one.
        """
        name = self.effort.name
        levels = self.effort_levels()
        if name in levels:
            return levels[name]
        if name == "none" or not levels:
            return None
        raise HarnessError(f"effort={name} has no value for harness={self.cfg.name}; its "
                           f"efforts: {', '.join(sorted(levels))} (or set "
                           f"+harness.efforts.{name}=VALUE)")

    def check(self) -> None:  # noqa: B027 - optional hook
        """Raise :class:`HarnessError` when this model/effort cannot run in this harness."""

    def bind_run(self, spec: Any, identity: Identity) -> None:  # noqa: B027 - optional hook
        """Read what this harness needs from the run, once its identity is known.

        Called before the run starts with its :class:`~spu.runner.RunSpec` and its
        identity (e.g. the consensus reads its members' run keys); by default nothing.

        Raises:
            HarnessError: the run cannot be made on this harness (one line).
        """

    def model_api(self) -> str | None:
        """The API style the agent calls its model in, through the run's gateway (SPEC 11).

        None for an agent that calls no model (no gateway is opened). By default
        ``model.api``, else ``anthropic`` for Anthropic and the scripted model,
        ``openai-responses`` for OpenAI and ``openai-chat`` for other providers.
        """
        if self.model.provider == "baseline":
            return None
        if self.model.api:
            return self.model.api
        return {"anthropic": "anthropic", "scripted": "anthropic",
                "openai": "openai-responses"}.get(self.model.provider, "openai-chat")

    def sandbox_binds(self) -> dict[str, str]:
        """Host folders to mount read-only in the sandbox (host path -> sandbox path)."""
        return {}

    def start_services(self, log_dir: Path) -> list[int]:
        """Start what the agent must reach on the host, before its sandbox opens.

        Returns the host-loopback TCP ports these services listen on (e.g. the scripted
        model server's). The runner hands them to the sandbox as
        :attr:`~spu.sandbox.base.SandboxRequest.host_ports`, the only host ports the
        agent can reach, at :attr:`~spu.sandbox.base.SandboxPaths.host_address` and the
        same port. :meth:`cleanup` stops them.
        """
        return []

    def prepare(self, ctx: AgentContext, sandbox: Sandbox) -> None:  # noqa: B027
        """Put what the agent needs into the sandbox (before ``command``)."""

    def api_hosts(self) -> set[str]:
        """Host names of the model provider's API.

        Connections to them are not counted as requests outside the audited tools. By
        default the host of ``model.base_url``, where the model config names one.
        """
        from urllib.parse import urlsplit

        host = urlsplit(self.model.base_url).hostname if self.model.base_url else None
        return {host} if host else set()

    def agent_env(self, ctx: AgentContext, extra: dict[str, str]) -> dict[str, str]:
        """The agent's environment, for :meth:`command`.

        In order, later entries winning: the ``SPU_*`` variables
        (:meth:`AgentContext.base_env`), the proxy variables (the egress proxy, or the
        host's that are set, both spellings: :meth:`AgentContext.proxy_env`), ``extra``
        (what this harness adds), then ``harness.env``.
        """
        env = ctx.base_env()
        env.update(ctx.proxy_env())
        env.update(extra)
        env.update({k: str(v) for k, v in self.cfg.env.items()})
        return env

    @abstractmethod
    def command(self, ctx: AgentContext) -> AgentCommand:
        """The argv and environment of the agent process."""

    def parse(self, ctx: AgentContext, evidence: ProcessEvidence) -> AgentResult:
        """Read the trajectory and usage back after the process ended."""
        return AgentResult()

    def live_event(self, entry: dict[str, Any]) -> LiveEvent | None:
        """The event one JSON line of the agent's stdout shows, while it runs (None: none).

        :class:`~spu.harness.monitor.AgentMonitor` calls it to show the agent's latest
        event and to count API errors; agents that print no JSON events show none.
        """
        return None

    def rejected_key_reason(self, seen: str) -> str | None:
        """The provider's own words when the agent's API key was rejected mid-run.

        ``seen`` is what the agent's output said; None when the provider does not
        confirm it (the agent is not stopped).
        """
        return None

    def cleanup(self) -> None:  # noqa: B027 - optional hook
        """Stop what ``prepare`` started (e.g. a local model server); runs even on failure."""


_REGISTRY: Registry[Harness] = Registry("harness", HARNESSES, Harness)
HARNESS_REGISTRY = _REGISTRY
"""Every harness by name (``spu list harnesses``)."""

register_harness = _REGISTRY.register
"""Class decorator: make a harness selectable by its ``name`` (without an entry point)."""

get_harness = _REGISTRY.get
"""The harness class called ``name`` (or ``package.module:Class``), imported on first use."""

harness_names = _REGISTRY.names
"""Every harness name declared (group ``spu.harnesses``) or registered, sorted."""
