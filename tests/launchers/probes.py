"""Health probes the actor tests control (``hydra.launcher.health_probe=...``).

A probe runs in each actor, on its agent node, before the first run and after each
one; it is given the actor's context and returns why the device is unhealthy, or None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def first_actor_fails_after_one_run(context: Mapping[str, Any]) -> str | None:
    """The device of the sweep's first actor (index 0) turns unhealthy after one run."""
    if context.get("index") == 0 and int(context.get("runs", 0)) >= 1:
        return f"test probe: device of {context['actor']} marked unhealthy"
    return None


def every_device_healthy(context: Mapping[str, Any]) -> str | None:
    """Nothing is wrong with any device."""
    del context
    return None


def every_device_unhealthy(context: Mapping[str, Any]) -> str | None:
    """Every device fails its first check, before any run."""
    return f"test probe: device of {context['actor']} unhealthy from the start"
