"""What a sweep prints: the libraries' INFO logs are kept off the console unless asked for.

The tools service (MCP over StreamableHTTP), the model gateway (uvicorn) and the clients
that talk to them (httpx) log a line per session or request at INFO; a sweep's console
shows one line per run instead. ``verbose=true`` lets them through again, with Hydra's
line per job launched.

Every log line is printable text: a log line can carry what an agent chose (a session
file's name, its CLI's error line, a provider's message quoting its request), and each
handler of the root logger escapes the control characters of a line before it is
written (:class:`PrintableLines`), so no agent can clear, retitle or repaint the console
through a log line.
"""

from __future__ import annotations

import logging

from spu.internals import HYDRA_BASIC_LAUNCHER_LOGGER
from spu.printable import printable

LIBRARY_LOGGERS = ("mcp", "httpx", "httpcore", "uvicorn", "uvicorn.access", "uvicorn.error",
                   "spu.tools.service", "spu.tools.egress", "spu.gateway.server")
"""Loggers whose INFO lines are plumbing (a session opened, a request answered, a port)."""

HYDRA_LAUNCH_LOGGERS = (HYDRA_BASIC_LAUNCHER_LOGGER,)
"""Hydra's launcher, which logs each job's overrides before it starts."""


class PrintableLines(logging.Filter):
    """Escapes the control characters of each record's message and traceback.

    Newlines and tabs stay (a traceback has them); everything else a terminal would obey
    is written as an escape (:func:`spu.printable.printable`). The record is changed in
    place, so every handler after this one gets the printable text too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Make ``record``'s text printable; never drops a record."""
        try:
            message = record.getMessage()
            record.msg, record.args = printable(message), None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = printable(record.exc_text)
            if record.stack_info:
                record.stack_info = printable(record.stack_info)
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is logging's
            pass
        return True


def printable_log_lines() -> None:
    """Give every handler of the root logger a :class:`PrintableLines` filter (once).

    Logging's last resort (the stderr handler of a process with none, a Ray worker's)
    gets one too.
    """
    last = [logging.lastResort] if logging.lastResort is not None else []
    for handler in [*logging.getLogger().handlers, *last]:
        if not any(isinstance(f, PrintableLines) for f in handler.filters):
            handler.addFilter(PrintableLines())


def quiet_library_logs(verbose: bool) -> None:
    """Show only warnings of :data:`LIBRARY_LOGGERS` unless ``verbose`` (then INFO too).

    Also makes every log line printable (:func:`printable_log_lines`).

    Args:
        verbose: the config's ``verbose`` key.
    """
    level = logging.INFO if verbose else logging.WARNING
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    printable_log_lines()


def quiet_launch_logs(verbose: bool) -> None:
    """Hydra's line per launched job only with ``verbose``: the run's own line follows it.

    Args:
        verbose: the config's ``verbose`` key.
    """
    level = logging.INFO if verbose else logging.WARNING
    for name in HYDRA_LAUNCH_LOGGERS:
        logging.getLogger(name).setLevel(level)
