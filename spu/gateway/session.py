"""The model gateway of one run, opened and read back by the runner.

The runner opens a :class:`GatewaySession` before the sandbox (its port goes into the
sandbox request, like the audited tools service's), hands :meth:`open_endpoint` to the
harness once the sandbox says at which address the agent reaches the host, closes it
when the agent has ended, and reads :meth:`summary` into the run record. The gateway
runs in a process of its own (:mod:`spu.gateway.process`) in the run's service group,
its descriptors and files bounded: what an agent does to it stays within its run.

With ``model=scripted`` the scripted model server (:mod:`spu.scripted`) is the
gateway's upstream: the real CLIs' offline runs go through the same gateway, token
and record as a provider's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spu.config import ModelConfig, ModelGatewayConfig, PriceConfig
from spu.gateway.answers import API_ANTHROPIC, APIS
from spu.gateway.verdict import GatewaySummary, read_requests, summarize
from spu.sandbox.base import RunLimits
from spu.sandbox.limits import ServiceGroup

log = logging.getLogger(__name__)

SCRIPTED = "scripted"
KEY_AS_API_KEY = frozenset({"anthropic", SCRIPTED})
"""Providers whose Messages API takes the key as ``x-api-key``; the others'
Anthropic-compatible endpoints document a bearer token (``ANTHROPIC_AUTH_TOKEN``)."""
DEFAULT_SCRIPT = "spu_agent"
"""The script ``model=scripted`` plays when ``model.api_model`` names none."""

DEFAULT_UPSTREAMS = {API_ANTHROPIC: "https://api.anthropic.com",
                     "openai-responses": "https://api.openai.com/v1",
                     "openai-chat": "https://api.openai.com/v1"}
"""The provider's API base by API style, where ``model.base_url`` is null."""

PROVIDER_API_HOSTS = frozenset({"api.anthropic.com", "api.openai.com"})
"""The model providers' API hosts the egress proxy refuses once a run has a gateway."""


class GatewayConfigError(ValueError):
    """The model configuration gives the gateway nothing to forward to; names the key."""


@dataclass(frozen=True)
class ModelEndpoint:
    """How the agent reaches its model, from inside the sandbox (SPEC 11)."""

    url: str
    """``SPU_MODEL_URL``: the gateway's root, standing for the provider's API base."""
    token: str
    """``SPU_MODEL_TOKEN``: this run's token, in place of a provider key."""
    api: str
    """``SPU_MODEL_API``: ``anthropic``, ``openai-responses`` or ``openai-chat``."""
    host_url: str
    """The gateway as the host reaches it (the key check runs on the host)."""

    def env(self) -> dict[str, str]:
        """The three variables every agent gets."""
        return {"SPU_MODEL_URL": self.url, "SPU_MODEL_TOKEN": self.token,
                "SPU_MODEL_API": self.api}


def check_upstream(model: ModelConfig) -> None:
    """Raise :class:`GatewayConfigError` when ``model`` gives the gateway no upstream.

    For ``model=scripted``: ``model.api_model`` names a script (built in, or a file).
    """
    if model.provider != SCRIPTED:
        return
    from spu.scripted import ScriptError, load_script

    try:
        load_script(model.api_model or DEFAULT_SCRIPT)
    except ScriptError as exc:
        raise GatewayConfigError(f"model.api_model: {exc}") from None


SCRIPTED_KEY = "scripted-model-key"
"""The key the gateway puts on requests to the scripted model server: a stand-in, so that
it travels in the provider's header (:func:`key_as_bearer`) as to a provider."""


def key_as_bearer(model: ModelConfig, api: str) -> bool:
    """Whether the provider takes the key as ``Authorization: Bearer`` (else ``x-api-key``).

    The model's configuration decides, never the agent's request: an agent choosing the
    header could make the provider refuse the key (Anthropic answers 401 to its API key
    sent as a bearer token) and end its run as a rejected key, retried free.

    >>> key_as_bearer(ModelConfig(name="m", provider="anthropic"), "anthropic")
    False
    >>> key_as_bearer(ModelConfig(name="m", provider="deepseek"), "anthropic")
    True
    """
    return api != API_ANTHROPIC or model.provider not in KEY_AS_API_KEY


def provider_key(model: ModelConfig) -> str | None:
    """The provider key from the variable ``model.api_key_env`` names (None: no key set)."""
    if model.provider == SCRIPTED:
        return SCRIPTED_KEY
    if not model.api_key_env:
        return None
    return os.environ.get(model.api_key_env) or None


class GatewaySession:
    """The gateway of one run (and the scripted server behind it, for ``model=scripted``).

    Args:
        model: the model configuration (upstream, model id, key variable, prices).
        api: the API style the agent speaks.
        run_dir: the run folder; the record goes to ``<run_dir>/model/``.
        cfg: ``model_gateway`` options.
        max_cost_usd: ``limits.max_cost_usd``.
        cache_write_rate: ``cost.cache_write_rate``.
        read_submission: reads the run's submission as the grader does, for the files
            kept at refusals (:class:`~spu.gateway.server.ModelGateway`); picklable (it is
            called in the gateway's process).
        submission_counts: whether such a file counts (only those are kept); picklable.
        limits: the run's limits: the gateway gets a service group of its own under them,
            unless ``group`` is given.
        group: the run's service group (the tools service's) for the gateway to join; it
            is the caller's to clean up, after :meth:`close`.
    """

    def __init__(self, model: ModelConfig, api: str, run_dir: Path,
                 cfg: ModelGatewayConfig | None = None, max_cost_usd: float | None = None,
                 cache_write_rate: str = "five_minute",
                 read_submission: Callable[[], bytes | None] | None = None,
                 submission_counts: Callable[[bytes], bool] | None = None,
                 limits: RunLimits | None = None, group: ServiceGroup | None = None) -> None:
        if api not in APIS:
            raise GatewayConfigError(f"model.api: {api!r} is not one of {', '.join(APIS)}")
        self.model = model
        self.api = api
        self.run_dir = Path(run_dir)
        self.cfg = cfg or ModelGatewayConfig()
        self.max_cost_usd = max_cost_usd
        self.cache_write_rate = cache_write_rate
        self.read_submission = read_submission
        self.submission_counts = submission_counts
        self.limits = limits
        self.group = group
        self._own_group: ServiceGroup | None = None
        self.scripted_server: Any = None
        self.gateway: Any = None
        """The run's :class:`~spu.gateway.process.GatewayProcess`, once started."""
        self.memory_killed = False
        """Set at :meth:`close`: the gateway died unasked, killed at its service group's
        memory limit (by what the agent sent it)."""
        self.endpoint: ModelEndpoint | None = None
        self.upstream: str | None = None

    @property
    def api_model(self) -> str:
        """The one model the gateway forwards."""
        if self.model.provider == SCRIPTED:
            return self.model.api_model or DEFAULT_SCRIPT
        return self.model.api_model or self.model.name

    def start(self) -> GatewaySession:
        """Start the scripted upstream where the model is scripted, then the gateway."""
        upstream = self.model.base_url or DEFAULT_UPSTREAMS[self.api]
        if self.model.provider == SCRIPTED:
            from spu.scripted import ScriptedModelServer, load_script

            log_dir = self.run_dir / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            self.scripted_server = ScriptedModelServer(
                load_script(self.api_model), log_path=log_dir / "scripted_server.jsonl").start()
            upstream = self.scripted_server.url + ("" if self.api == API_ANTHROPIC else "/v1")
        self.upstream = upstream
        try:
            self.gateway = self._process(upstream).start()
        except Exception:
            self.close()
            raise
        return self

    def _process(self, upstream: str) -> Any:
        """The gateway's process, in the run's service group (its own if none is given)."""
        from spu.gateway.process import OPEN_FILES, GatewayProcess, GatewaySpec, file_size_limit

        group = self.group
        if group is None and self.limits is not None:
            group = self._own_group = ServiceGroup(self.limits, f"{self.run_dir.name}-gateway")
        bounds = {"open_files": OPEN_FILES, "file_bytes": file_size_limit(self.cfg)}
        confinement = (group.confinement(**bounds) if group is not None
                       else {"nofile": bounds["open_files"], "fsize": bounds["file_bytes"]})
        return GatewayProcess(GatewaySpec(
            self.run_dir / "model", upstream=upstream, api=self.api,
            api_model=self.api_model, api_key=provider_key(self.model),
            key_as_bearer=key_as_bearer(self.model, self.api), cfg=self.cfg,
            prices=self.model.prices, max_cost_usd=self.max_cost_usd,
            cache_write_rate=self.cache_write_rate, read_submission=self.read_submission,
            submission_counts=self.submission_counts, confinement=confinement))

    def provider_hosts(self) -> set[str]:
        """Host names the agent must not reach directly: the providers' APIs, the upstream's.

        The agent's way to its model is this gateway; a direct connection would be a model
        call the record does not hold (and one the agent brought its own key for).
        """
        from urllib.parse import urlsplit

        hosts = set(PROVIDER_API_HOSTS)
        for url in (self.model.base_url, self.upstream):
            host = urlsplit(url).hostname if url else None
            if host:
                hosts.add(host)
        return hosts

    def host_ports(self) -> list[int]:
        """The host port the agent must reach (``SandboxRequest.host_ports``)."""
        return [self.gateway.port] if self.gateway is not None else []

    def open_endpoint(self, host_address: str) -> ModelEndpoint:
        """The endpoint as the agent sees it, at the host's address ``host_address``."""
        self.endpoint = ModelEndpoint(url=self.gateway.url(host_address),
                                      token=self.gateway.token, api=self.api,
                                      host_url=self.gateway.url())
        return self.endpoint

    def on_death(self, call: Callable[[str], None]) -> None:
        """Have ``call(why)`` run if the gateway's process ends before :meth:`close`."""
        if self.gateway is not None:
            self.gateway.on_death(call)

    @property
    def died(self) -> str | None:
        """Why the gateway's process ended before :meth:`close` (None: it did not)."""
        return self.gateway.died if self.gateway is not None else None

    def close(self) -> None:
        """Stop the gateway, then its scripted upstream (the record stays). Never raises."""
        if self.gateway is not None:
            self.gateway.stop()
            self.memory_killed = self._died_of_memory()
        if self.scripted_server is not None:
            try:
                self.scripted_server.stop()
            except Exception:  # noqa: BLE001 - the run's end must not fail on its stand-in
                log.exception("the scripted model server did not stop cleanly")
            self.scripted_server = None
        if self._own_group is not None:
            self._own_group.cleanup()
            self._own_group = None

    def _died_of_memory(self) -> bool:
        """True when the gateway died unasked, killed by its service group's memory limit.

        Read before the group is removed (the tools service's group ends after this).
        """
        group = self.group if self.group is not None else self._own_group
        gateway = self.gateway
        if gateway is None or gateway.died is None or group is None:
            return False
        try:
            return bool(gateway.sigkilled and group.oom_killed(sigkilled=True))
        except (OSError, ValueError):
            return False

    def notes(self) -> list[str]:
        """What the run record should say of the gateway (its record's cap, a kill)."""
        return self.gateway.notes() if self.gateway is not None else []

    def summary(self, prices: PriceConfig | None = None) -> GatewaySummary:
        """The record summed: verdict, usage and cost at the model's prices."""
        entries = read_requests(self.run_dir / "model" / "requests.jsonl")
        return summarize(entries, prices or self.model.prices, self.cache_write_rate)

    def info(self) -> dict[str, Any]:
        """What ``run.json``'s ``gateway`` says: the endpoint, the upstream, the policy."""
        return {"endpoint": self.endpoint.url if self.endpoint is not None else None,
                "api": self.api, "upstream": self.upstream,
                "scripted": self.model.provider == SCRIPTED, "api_model": self.api_model,
                "max_cost_usd": self.max_cost_usd, "record": "model/requests.jsonl"}
