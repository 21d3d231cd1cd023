"""Typed configuration: the dataclass schema behind every Hydra config group.

``register_configs()`` stores the top-level schema ``spu_schema`` in Hydra's
ConfigStore; ``conf/config.yaml`` starts its defaults list with it, so every group
(``model``, ``harness``, ``effort``, ``task``, ``sandbox``, ``tracking``,
``experiment``) is merged into a typed node and an unknown key or a wrong type fails
at composition with a message that names the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from omegaconf import MISSING


class ToolsPolicy(StrEnum):
    """What the tools service does after an exposure flag (``tools.policy``, paper 3.7)."""

    record = "record"
    """Log and never block (the paper's rule)."""
    stop = "stop"
    """Refuse every call after the first exposure flag."""


class CacheWriteRate(StrEnum):
    """How cache writes are priced (``cost.cache_write_rate``, paper E.6)."""

    five_minute = "five_minute"
    """Every cache write at the five-minute price (the paper's rule)."""
    actual = "actual"
    """One-hour writes at the one-hour price, as providers bill them."""


class GraderIsolation(StrEnum):
    """How the grading process is isolated (``sandbox.grader_isolation``)."""

    auto = "auto"
    """The strongest of the others that works on this machine."""
    bwrap = "bwrap"
    netns = "netns"
    none = "none"


class ResumeMode(StrEnum):
    """What a relaunched sweep does with run keys that already have a record (``sweep.resume``)."""

    skip_finished = "skip_finished"
    retry_unscored = "retry_unscored"
    off = "off"

    @classmethod
    def parse(cls, value: str) -> ResumeMode:
        """The mode named ``value``; an unknown name raises naming ``sweep.resume``."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"sweep.resume={value!r}: not one of {names}") from None


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
    api: str | None = None
    """API style ``harness=command`` agents call through the gateway (``SPU_MODEL_API``):
    ``anthropic``, ``openai-responses`` or ``openai-chat``; null: by provider."""
    default_harness: str | None = None
    prices: PriceConfig = field(default_factory=PriceConfig)
    training_cutoff: str | None = None
    """The model's training cutoff (``2025-03``), shown on the leaderboard; null: unknown."""


@dataclass
class HarnessConfig:
    """One agent harness of ``conf/harness``."""

    name: str = MISSING
    label: str | None = None
    """Name of the harness in configuration labels (None: a command's entrypoint name, else
    the harness name); display only, never part of the run key."""
    entrypoint: str | None = None
    """Executable run as the agent (``harness=command``), copied into the sandbox."""
    args: list[str] = field(default_factory=list)
    cli_package: str | None = None
    """npm package of the agent CLI, e.g. ``@anthropic-ai/claude-code``."""
    version: str | None = None
    """Version of that package to run: the paper's by default, ``harness.version=X`` for another."""
    tools_dir: str | None = None
    """Cached folder the CLI is installed into (mounted read-only in the sandbox)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the agent (part of the run identity)."""
    efforts: dict[str, str] = field(default_factory=dict)
    """Effort name -> this harness's setting for it, over the harness class's own
    ``efforts`` (``+harness.efforts.max=high`` runs ``effort=max`` at the CLI's ``high``)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Options of the harness, which checks them itself (``Harness.options_model``), e.g.
    ``harness.options.probe=order`` of ``harness=recall``; part of the run identity but
    for those the harness declares result-neutral."""


@dataclass
class EffortConfig:
    """A reasoning effort (``conf/effort``), mapped by each harness to its own setting.

    See :attr:`spu.harness.base.Harness.efforts`.
    """

    name: str = MISSING


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
    broken: str = ""
    """Why the package cannot run (one line), for a broken task selected by name; empty
    when it is sound. Such a job records the reason and runs nothing."""


@dataclass
class SandboxConfig:
    """Where the agent runs (``conf/sandbox``)."""

    name: str = "local"
    """Backend: ``local`` (bubblewrap), ``docker`` or ``subprocess``."""
    network: bool = True
    """Agents have internet in the paper; false cuts it off."""
    image: str | None = None
    """Container image (docker backend)."""
    network_mode: str = "pasta"
    """Docker network (docker backend): ``pasta`` (the filtered user-mode network of
    ``sandbox=local``), or a Docker network mode such as ``bridge`` (unfiltered)."""
    host_ports: list[int] = field(default_factory=list)
    """Host loopback TCP ports every run may reach besides its harness's (e.g. a local
    model server); inside the sandbox at 127.0.0.1, same port."""
    allowed_networks: list[str] = field(default_factory=list)
    """Private or directly connected IPv4 networks runs may reach (e.g. a site proxy)."""
    pids_limit: int | None = 4096
    gpu_ids: list[str] = field(default_factory=list)
    """GPU ids assigned by the launcher; empty means none or let the backend choose."""
    grader_isolation: GraderIsolation = GraderIsolation.auto
    """Isolation of the grading process: ``auto``, ``bwrap``, ``netns`` or ``none``."""
    allow_unisolated: bool = False
    """An agent run (any harness but the baselines) refuses to start in a sandbox that
    isolates nothing (``subprocess``, asked for or fallen back to) or with an unisolated
    grader, unless this is true; the record then says so (``sandbox.unisolated_allowed``)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Options of the backend, which checks them itself (``Sandbox.options_model``): a
    backend of another package takes its settings here, e.g. ``sandbox.options.x=1``."""


@dataclass
class ToolsConfig:
    """The audited tools service of a run (``conf/tools``; SPEC section 7, paper 3.7)."""

    name: str = "offline"
    """Name of the configuration (``offline``, ``web``)."""
    enabled: bool = True
    """Start the service (and the egress proxy) for agents that can use it; baselines never."""
    provider: str = "offline"
    """Search and fetch provider: ``offline`` (a local corpus) or ``web`` (real providers)."""
    corpus: str | None = None
    """The provider's corpus (SPEC section 7): the offline provider's JSON Lines file, one
    ``{"url", "title", "text"}`` a line; a provider whose options have ``corpus`` takes
    it from here. Part of the run identity by its contents (a file's, or a folder's)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Options of the provider, which checks them itself (``Provider.options_model``),
    e.g. ``tools.options.search_url=...`` of ``tools.provider=web``."""
    policy: ToolsPolicy = ToolsPolicy.record
    """``record`` logs and never blocks (paper); ``stop`` refuses every call after the first
    exposure flag."""
    max_results: int = 10
    """Default and cap of ``search(max_results)`` (capped at 50)."""
    search_timeout_s: float = 20.0
    """Seconds a search may take before the agent gets an error."""
    fetch_timeout_s: float = 30.0
    """Seconds a fetch may take (connection and whole body) before the agent gets an error."""
    max_fetch_bytes: int = 10485760
    """Bytes of a fetched body read at most; the rest is cut (the text says so)."""
    max_text_chars: int = 100000
    """Characters of text returned to the agent at most (the full text is in the audit)."""
    egress_proxy: bool = True
    """Give the agent an egress proxy that records every connection (never blocks)."""
    allow_local_fetch: bool = False
    """Let ``fetch`` reach loopback and private addresses (tests, a local mirror); off, the
    service, which runs on the host, cannot be used to reach the host's own services."""


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


class SpansStore(StrEnum):
    """Where a trace's spans are written (``tracking.traces.spans``)."""

    artifact = "artifact"
    """One ``traces.json`` in the trace's artifact folder, with one store transaction for
    the trace itself: fast; the UI shows the spans, its trace search filters on tags."""
    store = "store"
    """Rows of the tracking store's span table (``log_spans``): span-level search in the
    UI, some ten times as long to write on SQLite."""


@dataclass(unsafe_hash=True)
class TracesConfig:
    """Each recorded run's trajectory as an MLflow trace (SPEC section 13)."""

    enabled: bool = True
    """Log the trace and ``transcript.html`` with each run (false: neither)."""
    max_chars: int = 4000
    """Characters kept of each span text (a note names what was cut and where to read it)."""
    max_spans: int = 2000
    """Spans of one run's trace at most (the rest are counted on the root span)."""
    spans: SpansStore = SpansStore.artifact
    """Where the spans are written: ``artifact`` (default, fast) or ``store``."""


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
    ui_url: str | None = None
    """An MLflow UI on this store (``http://127.0.0.1:5000``); a sweep ends with its
    experiment's address when the UI answers. None: an ``http(s)`` ``uri`` is its own UI."""
    server: TrackingServerConfig = field(default_factory=TrackingServerConfig)
    """``tracking=server``: a server on this store, started by the Ray launcher."""
    traces: TracesConfig = field(default_factory=TracesConfig)
    """The trace and transcript of each run (``tracking.traces.enabled=false``: none)."""


@dataclass
class LimitsConfig:
    """Run limits (SPEC section 4, paper section 2.1)."""

    time_s: float = 28800.0
    memory_gb: float = 16.0
    cpus: int = 8
    gpus: int = 1
    grace_s: float = 10.0
    """Seconds between the graceful stop and the kill at the time limit."""
    disk_gb: float = 50.0
    """Disk the agent may write (workspace and output); over it the run ends ``disk_limit``."""
    log_mb: float = 64.0
    """Cap on each of the agent's stdout and stderr (head and tail kept, a note between)."""
    max_cost_usd: float | None = None
    """Spend cap of one run at the model gateway (None: none); past it the run ends
    ``cost_limit``."""


@dataclass
class ModelGatewayConfig:
    """The per-run model gateway (SPEC section 11)."""

    log_bodies: bool = False
    """Keep every request and answer body under ``<run_dir>/model/bodies/``."""
    tool_result_chars: int = 524288
    """Characters kept of each text the model was sent, for the exposure screen: a text up to
    twice as long whole, a longer one as this many from its start and from its end."""
    tool_results_mb: float = 64.0
    """Cap on ``<run_dir>/model/tool_results.jsonl`` and ``model/documents/`` (what the
    exposure screen reads)."""
    record_mb: float = 64.0
    """Cap on ``<run_dir>/model/requests.jsonl``; past it every request is refused."""
    connect_timeout_s: float = 30.0
    """Seconds to connect to the upstream API."""
    read_timeout_s: float = 900.0
    """Seconds the upstream may stay silent (first byte included) before the request fails."""
    max_request_bytes: int = 32 * 1024 * 1024
    """Largest request body forwarded; a longer one is answered 413 (and recorded)."""
    request_timeout_s: float = 10.0
    """Seconds a request's line and headers, then its body, may take to arrive; a
    connection past it is closed (headers) or answered 408 (body)."""
    rate_limit_requests: int | None = None
    """The organisation's requests per minute, for a provider whose answers state none
    (Bedrock, Vertex, routers): a 429 the run's own requests pass is its own doing."""
    rate_limit_input_tokens: int | None = None
    """The same for input tokens per minute."""
    rate_limit_output_tokens: int | None = None
    """The same for output tokens per minute."""
    rate_limit_tokens: int | None = None
    """The same for all tokens per minute (a request counted at its ``max_tokens``)."""


EXPERIMENT_PREFIX = "spu-"
"""SPU's MLflow experiments are ``spu-<experiment.name>``: never confused with MLflow's
own empty ``Default`` experiment. The runs table's ``experiment`` column holds these names."""


@dataclass
class ExperimentConfig:
    """A named experiment: one MLflow experiment per sweep (``spu-<name>``)."""

    name: str = "default"
    description: str = ""


@dataclass
class BudgetConfig:
    """Spending limit of a sweep."""

    max_cost_usd: float | None = None


@dataclass
class CostConfig:
    """How API costs are estimated (paper 3.5, E.6)."""

    cache_write_rate: CacheWriteRate = CacheWriteRate.five_minute
    """``five_minute`` (the paper's rule: every cache write at the five-minute price) or
    ``actual`` (one-hour writes at the one-hour price, as providers bill them)."""


@dataclass
class SweepConfig:
    """How a sweep treats runs that already exist."""

    resume: ResumeMode = ResumeMode.skip_finished
    """``skip_finished``, ``retry_unscored`` or ``off``."""
    retries: int = 1
    """Retries of a run that ends as ``infra_error`` (paper 3.1: once)."""
    retry_limits_with_file: bool = False
    """True: a run that wrote a valid file and then hit ``memory_limit`` or ``disk_limit`` is
    excluded and rerun, as in the paper (3.1); False (default): it is scored from that file,
    as a timeout is, and not rerun (no second chance at will)."""
    status_every_s: float = 30.0
    """Seconds between status lines of a running run (elapsed time, the agent's latest
    event) and between repeats of an API error; 0: none."""


@dataclass
class ConsensusConfig:
    """The consensus configuration's members (``model=consensus``, paper E.8)."""

    members: list[str] = field(default_factory=list)
    """Member configurations, by configuration label (``opus5-max``) or by run key; each
    task's submission is the mean rank of the members' official submissions on it."""
    runs: str | None = None
    """Output root holding the members' runs (``runs/<run_key>/``); null: ``output_root``."""
    leave_out: str | None = None
    """One member left out (a label or a run key): the leave-one-out consensus."""
    label: str | None = None
    """Its name in configuration labels (``consensus-none-<label>``); null: one made from
    the members (:func:`spu.harness.consensus.consensus_label`)."""


@dataclass
class SPUConfig:
    """The whole configuration of one run."""

    model: ModelConfig = MISSING
    harness: HarnessConfig = MISSING
    effort: EffortConfig = MISSING
    task: TaskConfig = MISSING
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    model_gateway: ModelGatewayConfig = field(default_factory=ModelGatewayConfig)
    consensus: ConsensusConfig = field(default_factory=ConsensusConfig)
    """Members of ``model=consensus`` (:mod:`spu.harness.consensus`)."""
    repeat: int = 0
    task_root: str = "tasks"
    dataset: str | None = None
    """``NAME@VERSION`` of the pulled dataset that is the task root (``dataset=`` on the
    command line sets both, SPEC 16); recorded in ``run.json``."""
    output_root: str = "outputs"
    answers_root: str | None = None
    verbose: bool = False
    dry_run: bool = False
    """List the jobs the command would run, with their estimated cost, and run none."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form values for plugins; the schema checks nothing inside."""


def config_problems(conf: SPUConfig) -> list[str]:
    """Values the schema's types accept but no run can use, one line each.

    Examples:
        >>> config_problems(SPUConfig(repeat=-1, limits=LimitsConfig(time_s=-5)))
        ['repeat=-1: must be 0 (the official run) or more (repeated runs, paper 3.6)', \
'limits.time_s=-5: must be more than 0 (seconds)']
    """
    problems = []
    if conf.repeat < 0:
        problems.append(f"repeat={conf.repeat}: must be 0 (the official run) or more "
                        f"(repeated runs, paper 3.6)")
    limits = conf.limits
    for name, value, unit in (("time_s", limits.time_s, "seconds"),
                              ("memory_gb", limits.memory_gb, "GiB"),
                              ("cpus", limits.cpus, "cores")):
        if not value > 0:
            problems.append(f"limits.{name}={value:g}: must be more than 0 ({unit})")
    for name, value in (("gpus", limits.gpus), ("grace_s", limits.grace_s)):
        if not value >= 0:
            problems.append(f"limits.{name}={value:g}: must be 0 or more")
    if limits.max_cost_usd is not None and not limits.max_cost_usd >= 0:
        problems.append(f"limits.max_cost_usd={limits.max_cost_usd:g}: must be 0 or more "
                        f"(null: no cap)")
    if conf.budget.max_cost_usd is not None and not conf.budget.max_cost_usd >= 0:
        problems.append(f"budget.max_cost_usd={conf.budget.max_cost_usd:g}: must be 0 or "
                        f"more (null: no cap)")
    if conf.sweep.status_every_s < 0:
        problems.append(f"sweep.status_every_s={conf.sweep.status_every_s:g}: must be 0 (no "
                        f"status lines) or more")
    if conf.sweep.retries < 0:
        problems.append(f"sweep.retries={conf.sweep.retries}: must be 0 or more")
    cutoff = getattr(conf.model, "training_cutoff", None)
    if cutoff:
        from spu.tasks.freshness import DateError, check_date

        try:
            check_date(str(cutoff))
        except DateError as exc:
            problems.append(f"model.training_cutoff: {exc}")
    return problems


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
