"""Fixtures of the round-six red team (the sandboxes' Docker engine)."""

from __future__ import annotations

collect_ignore = ["agents"]  # scripts run inside sandboxes, not test modules

from tests.sandbox.conftest import docker_engine  # noqa: E402,F401
