"""What a sweep prints: the libraries' INFO logs are kept off the console unless asked for.

The tools service (MCP over StreamableHTTP), the model gateway (uvicorn) and the clients
that talk to them (httpx) log a line per session or request at INFO; a sweep's console
shows one line per run instead. ``verbose=true`` lets them through again, with Hydra's
line per job launched.
"""

from __future__ import annotations

import logging

LIBRARY_LOGGERS = ("mcp", "httpx", "httpcore", "uvicorn", "uvicorn.access", "uvicorn.error",
                   "spu.tools.service", "spu.tools.egress", "spu.gateway.server")
"""Loggers whose INFO lines are plumbing (a session opened, a request answered, a port)."""

HYDRA_LAUNCH_LOGGERS = ("hydra._internal.core_plugins.basic_launcher",)
"""Hydra's launcher, which logs each job's overrides before it starts."""


def quiet_library_logs(verbose: bool) -> None:
    """Show only warnings of :data:`LIBRARY_LOGGERS` unless ``verbose`` (then INFO too).

    Args:
        verbose: the config's ``verbose`` key.
    """
    level = logging.INFO if verbose else logging.WARNING
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(level)


def quiet_launch_logs(verbose: bool) -> None:
    """Hydra's line per launched job only with ``verbose``: the run's own line follows it.

    Args:
        verbose: the config's ``verbose`` key.
    """
    level = logging.INFO if verbose else logging.WARNING
    for name in HYDRA_LAUNCH_LOGGERS:
        logging.getLogger(name).setLevel(level)
