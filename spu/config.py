"""Typed configuration: the dataclass schema behind every Hydra config group.

``register_configs()`` stores the top-level schema ``spu_schema`` in Hydra's
ConfigStore; ``conf/config.yaml`` starts its defaults list with it, so every group
(``model``, ``harness``, ``effort``, ``task``, ``sandbox``, ``tracking``,
``experiment``) is merged into a typed node and an unknown key or a wrong type fails
at composition with a message that names the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class PriceConfig:
    """List prices per million tokens (paper Table 7), in ``currency``."""

    currency: str = "USD"
    units_per_usd: float = 1.0
    """Units of ``currency`` per US dollar (Doubao: 6.72 CNY per USD)."""
    input: float = 0.0
    cache_read: float | None = None
    """None where the provider lists no cache-read price: billed at the input price."""
    cache_write_5m: float | None = None
    """None where the provider lists no cache-write price (n/a): billed at the input price."""
    cache_write_1h: float | None = None
    output: float = 0.0
    long_context_threshold: int | None = None
    """Input tokens of one request above which the long-context rates apply."""
    long_input: float | None = None
    long_cache_read: float | None = None
    long_cache_write: float | None = None
    long_output: float | None = None


@dataclass
class ModelConfig:
    """One model configuration of ``conf/model``."""

    name: str = MISSING
    label: str = ""
    """Display name in tables (``Opus 5``)."""
    provider: str = MISSING
    """``baseline``, ``scripted``, ``anthropic``, ``openai``, ``deepseek``..."""
    api_model: str | None = None
    """The provider's model id."""
    base_url: str | None = None
    """API endpoint; Anthropic-compatible or OpenAI Responses, by harness."""
    api_key_env: str | None = None
    """Environment variable holding the API key (never the key itself)."""
    default_harness: str | None = None
    prices: PriceConfig = field(default_factory=PriceConfig)


@dataclass
class HarnessConfig:
    """One agent harness of ``conf/harness``."""

    name: str = MISSING
    entrypoint: str | None = None
    """Executable run as the agent (``harness=command``), copied into the sandbox."""
    args: list[str] = field(default_factory=list)
    cli_package: str | None = None
    """npm package of the agent CLI, e.g. ``@anthropic-ai/claude-code``."""
    cli_version: str | None = None
    """Pinned version of that package."""
    tools_dir: str | None = None
    """Cached folder the CLI is installed into (mounted read-only in the sandbox)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the agent."""


@dataclass
class EffortConfig:
    """A reasoning effort, mapped per harness (``conf/effort``)."""

    name: str = MISSING
    claude_code: str | None = None
    """Value of ``claude --effort``."""
    codex: str | None = None
    """Value of Codex ``model_reasoning_effort``."""


@dataclass
class TaskConfig:
    """A task package, as found under ``task_root`` (filled from its ``task.yaml``)."""

    id: str = MISSING
    version: str = MISSING
    path: str = MISSING
    """Absolute path of the task folder."""
    title: str = ""
    discipline: str = ""
    subfield: str = ""
    visibility: str = "public"


@dataclass
class SandboxConfig:
    """Where the agent runs (``conf/sandbox``)."""

    name: str = "local"
    """Backend: ``local`` (bubblewrap), ``docker`` or ``subprocess``."""
    network: bool = True
    """Agents have internet in the paper; false cuts it off."""
    image: str | None = None
    """Container image (docker backend)."""
    network_mode: str = "bridge"
    """Docker network mode (docker backend)."""
    pids_limit: int | None = 4096
    gpu_ids: list[str] = field(default_factory=list)
    """GPU ids assigned by the launcher; empty means none or let the backend choose."""
    grader_isolation: str = "auto"
    """Isolation of the grading process: ``auto``, ``bwrap``, ``netns`` or ``none``."""


@dataclass
class TrackingServerConfig:
    """``tracking=server``: the MLflow server the Ray launcher starts for a sweep."""

    backend_store_uri: str | None = None
    """The store it serves (``postgresql+psycopg://user:password@host:5432/db``); None:
    no server of this kind."""
    artifacts_destination: str | None = None
    """Where it stores the artifacts it proxies (``--serve-artifacts``); None:
    ``<output_root>/mlartifacts``."""
    workers: int = 2
    """Its worker processes."""


@dataclass
class TrackingConfig:
    """Where runs are recorded (``conf/tracking``)."""

    enabled: bool = True
    uri: str | None = None
    """MLflow tracking URI; default ``sqlite:///<output_root>/mlflow.db``."""
    artifact_root: str | None = None
    """Artifact location; default ``<output_root>/mlartifacts``."""
    experiment: str | None = None
    """MLflow experiment name; default the experiment config's name."""
    server: TrackingServerConfig = field(default_factory=TrackingServerConfig)
    """``tracking=server``: a server on this store, started by the Ray launcher."""


@dataclass
class LimitsConfig:
    """Run limits (SPEC section 4, paper section 2.1)."""

    time_s: float = 28800.0
    memory_gb: float = 16.0
    cpus: int = 8
    gpus: int = 1
    grace_s: float = 10.0
    """Seconds between the graceful stop and the kill at the time limit."""


@dataclass
class ExperimentConfig:
    """A named experiment: one MLflow experiment per sweep."""

    name: str = "default"
    description: str = ""


@dataclass
class BudgetConfig:
    """Spending limit of a sweep."""

    max_cost_usd: float | None = None


@dataclass
class SweepConfig:
    """How a sweep treats runs that already exist."""

    resume: str = "skip_finished"
    """``skip_finished``, ``retry_unscored`` or ``off``."""
    retries: int = 1
    """Retries of a run that ends as ``infra_error`` (paper 3.1: once)."""


@dataclass
class SPUConfig:
    """The whole configuration of one run."""

    model: ModelConfig = MISSING
    harness: HarnessConfig = MISSING
    effort: EffortConfig = MISSING
    task: TaskConfig = MISSING
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    repeat: int = 0
    task_root: str = "tasks"
    output_root: str = "outputs"
    answers_root: str | None = None
    verbose: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form values for plugins; the schema checks nothing inside."""


_REGISTERED = False


def register_configs() -> None:
    """Store the schema in Hydra's ConfigStore (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="spu_schema", node=SPUConfig)
    _REGISTERED = True
