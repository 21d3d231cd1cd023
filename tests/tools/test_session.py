"""A run's tools session: the service and the egress proxy start side by side, stop together."""

from __future__ import annotations

from pathlib import Path

import pytest

from spu.config import ToolsConfig
from spu.sandbox.base import RunLimits
from spu.tools.egress import EgressProxy, EgressProxyError
from spu.tools.session import ToolsSession, make_provider
from tests.tools.conftest import call_tool


def test_the_session_starts_its_service_and_proxy_and_the_proxy_lets_the_service_through(
        corpus: Path, tmp_path: Path) -> None:
    """Started side by side, both listen when ``start`` returns, and the proxy already
    allows the service's port (the service's port is added to its allow list live)."""
    cfg = ToolsConfig(corpus=str(corpus))
    session = ToolsSession(cfg, tmp_path / "run", make_provider(cfg),
                           limits=RunLimits(time_s=60, memory_gb=1, cpus=1)).start()
    try:
        assert session.proxy is not None and session.proxy.port is not None
        error, _ = call_tool(session.service.url(), "search", {"query": "cement"})
        assert not error
        allowed = (session.folder / "egress.allow.json").read_text()
        assert f"127.0.0.1:{session.service.port}" in allowed
        assert sorted(session.host_ports()) == sorted([session.service.port,
                                                       session.proxy.port])
    finally:
        session.close()


def test_a_proxy_that_fails_to_start_stops_the_service_and_its_group(
        corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed start leaves nothing running: the error is the proxy's, the service that
    started beside it is stopped (its thread ended) and the services' cgroup is removed."""
    def refuses(self: EgressProxy) -> EgressProxy:
        raise EgressProxyError("the egress proxy exited with code 1 (test)")

    monkeypatch.setattr(EgressProxy, "start", refuses)
    cfg = ToolsConfig(corpus=str(corpus))
    session = ToolsSession(cfg, tmp_path / "run", make_provider(cfg),
                           limits=RunLimits(time_s=60, memory_gb=1, cpus=1))
    group_paths = session.group._enforcer.cgroup_paths if session.group is not None else []
    with pytest.raises(EgressProxyError, match="exited with code 1"):
        session.start()
    assert session.service._thread is None  # stopped, its thread joined
    assert not any(p.exists() for p in group_paths)
