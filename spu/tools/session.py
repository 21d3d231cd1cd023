"""The audited tools of one run: the service and the egress proxy, opened and read back.

The runner opens a :class:`ToolsSession` before the sandbox (its ports go into the
sandbox request), hands :meth:`ToolsSession.endpoints` to the harness once the sandbox
says at which address the agent reaches the host, closes it when the agent has ended,
and reads :meth:`ToolsSession.summary` into the run record.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from spu.config import ToolsConfig
from spu.sandbox.base import RunLimits
from spu.sandbox.limits import ServiceGroup
from spu.schema import PolicyStop, ToolCall, Trajectory, TrajectoryStep
from spu.tools.audit import TOOLS_DIR, AuditLog, read_audit
from spu.tools.egress import EgressProxy, outside_requests, read_egress
from spu.tools.providers import Provider, ProviderConfigError, get_provider
from spu.tools.service import Screen, ToolsService

log = logging.getLogger(__name__)

MCP_SERVER_NAME = "spu"
"""The name the agent CLIs know the service by (``mcp__spu__search`` in their records)."""

TOOL_NAMES = ("search", "fetch", "policy_stop")


def mcp_tool_name(tool: str) -> str:
    """The qualified name of a service tool, as both CLIs record it.

    Examples
    --------
    >>> mcp_tool_name("search")
    'mcp__spu__search'
    """
    return f"mcp__{MCP_SERVER_NAME}__{tool}"


@dataclass(frozen=True)
class ToolEndpoints:
    """How the agent reaches its tools, from inside the sandbox."""

    url: str | None
    """``SPU_TOOLS_URL``: the MCP endpoint (secret path included)."""
    proxy_url: str | None
    """``HTTP_PROXY``/``HTTPS_PROXY``: the egress proxy."""
    host_address: str = "127.0.0.1"
    """The host's address as the agent sees it."""


@dataclass(frozen=True)
class ToolsSummary:
    """What the run record takes from the tools session."""

    audited_calls: int
    policy_stop: PolicyStop | None
    requests_outside_tools: int | None
    outside_destinations: list[str] = field(default_factory=list)


def make_provider(cfg: ToolsConfig) -> Provider:
    """The configured provider, checked (corpus parsed, API key present).

    Raises:
        ProviderConfigError: the configuration cannot work; the message names the key.
    """
    try:
        provider = get_provider(cfg.provider)(cfg)
    except KeyError as exc:
        raise ProviderConfigError(f"tools.provider: {exc.args[0]}") from None
    provider.check()
    return provider


class ToolsSession:
    """The service and the egress proxy of one run, under ``<run_dir>/tools/``."""

    def __init__(self, cfg: ToolsConfig, run_dir: Path, provider: Provider,
                 screen: Screen | None = None, limits: RunLimits | None = None) -> None:
        self.cfg = cfg
        self.folder = Path(run_dir) / TOOLS_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self.audit = AuditLog(self.folder)
        self.service = ToolsService(provider, self.audit, cfg, screen)
        # The services work on the agent's behalf, on the host: limits of their own.
        self.group = ServiceGroup(limits, Path(run_dir).name) if limits is not None else None
        extractor = getattr(provider, "extractor", None)
        if self.group is not None and extractor is not None:
            extractor.confine = self.group.add
        self.proxy = (EgressProxy(self.folder, self.group.confinement() if self.group else None)
                      if cfg.egress_proxy else None)
        self.endpoints: ToolEndpoints | None = None

    def start(self) -> ToolsSession:
        """Start the service and the proxy, side by side; a failure stops what started.

        The proxy boots in a process of its own while the service starts here; it reads
        its allow list live, so the service's port is added once the service listens.
        """
        proxy_failed: list[BaseException] = []

        def start_proxy() -> None:
            try:
                assert self.proxy is not None
                self.proxy.start()
            except BaseException as exc:  # noqa: BLE001 - raised below, in the caller
                proxy_failed.append(exc)

        booting = threading.Thread(target=start_proxy, name="spu-egress-start", daemon=True)
        if self.proxy is not None:
            booting.start()
        try:
            self.service.start()
            if self.proxy is not None:
                port = self.service.port
                self.proxy.allow(f"{host}:{port}" for host in ("127.0.0.1", "localhost", "::1"))
        except BaseException:
            self._abandon(booting)
            raise
        if booting.ident is not None:
            booting.join()
        if proxy_failed:
            self._abandon(booting)
            raise proxy_failed[0]
        return self

    def _abandon(self, booting: threading.Thread) -> None:
        """A start that failed: stop what started (the proxy once its start has ended)."""
        if booting.ident is not None:
            booting.join()
        if self.proxy is not None:
            self.proxy.stop()
        self.service.stop()
        if self.group is not None:
            self.group.cleanup()

    def refuse_hosts(self, hosts: set[str]) -> None:
        """Have the egress proxy refuse these host names (the model providers' APIs)."""
        if self.proxy is not None:
            self.proxy.refuse_hosts(hosts)

    def host_ports(self) -> list[int]:
        """The host ports the agent must reach (``SandboxRequest.host_ports``)."""
        ports = [self.service.port]
        if self.proxy is not None and self.proxy.port is not None:
            ports.append(self.proxy.port)
        return ports

    def open_endpoints(self, host_address: str) -> ToolEndpoints:
        """The endpoints as the agent sees them, at the host's address ``host_address``."""
        proxy = (f"http://{host_address}:{self.proxy.port}"
                 if self.proxy is not None and self.proxy.port is not None else None)
        self.endpoints = ToolEndpoints(url=self.service.url(host_address), proxy_url=proxy,
                                       host_address=host_address)
        if self.proxy is not None:
            self.proxy.allow([f"{host_address}:{self.service.port}"])
        (self.folder / "endpoints.json").write_text(json.dumps({
            "service_port": self.service.port,
            "proxy_port": self.proxy.port if self.proxy is not None else None,
            "host_address": host_address, "policy": self.cfg.policy,
            "provider": self.cfg.provider}, indent=1))
        return self.endpoints

    def close(self) -> None:
        """Stop the proxy and the service (the logs stay)."""
        if self.proxy is not None:
            self.proxy.stop()
        self.service.stop()
        if self.group is not None:
            self.group.cleanup()

    def summary(self, api_hosts: set[str]) -> ToolsSummary:
        """Audited calls, the first policy stop, and the connections around the service.

        ``api_hosts`` are the model provider's API hosts (host names or addresses).
        """
        outside: int | None = None
        destinations: list[str] = []
        if self.proxy is not None:
            endpoints = {(h, self.service.port) for h in self._host_names()}
            outside, destinations = outside_requests(
                read_egress(self.proxy.log_path), allowed_hosts=api_hosts,
                allowed_endpoints=endpoints)
        return ToolsSummary(audited_calls=len(self.audit.entries),
                            policy_stop=self.service.policy.first,
                            requests_outside_tools=outside,
                            outside_destinations=destinations)

    def _host_names(self) -> set[str]:
        names = {"127.0.0.1", "localhost", "::1"}
        if self.endpoints is not None:
            names.add(self.endpoints.host_address)
        return names


def trajectory_from_audit(folder: Path, harness: str) -> Trajectory:
    """A trajectory of the audited calls alone, for agents that leave none of their own.

    One step per call (``harness=command``), the tools named as the CLIs name them.
    """
    from spu.tools.audit import AUDIT_FILE, call_text

    steps = []
    for k, entry in enumerate(read_audit(Path(folder) / AUDIT_FILE)):
        call = ToolCall(id=f"audit-{entry.call}", name=mcp_tool_name(entry.tool),
                        arguments=entry.args, output=call_text(folder, entry),
                        is_error=entry.status != "ok")
        steps.append(TrajectoryStep(index=k, timestamp=entry.time, role="assistant",
                                    tool_calls=[call]))
    return Trajectory(harness=harness, steps=steps)
