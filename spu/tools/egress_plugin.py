"""The ``proxy.py`` plugin of the egress proxy: one JSON line per connection, never a block.

Loaded only inside the proxy's own process (``python -m proxy --plugins
spu.tools.egress_plugin.EgressRecorder --spu-egress-log FILE``); importing it registers
the ``--spu-egress-log`` flag with ``proxy.py``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from proxy.common.flag import flags
from proxy.http.proxy import HttpProxyBasePlugin

flags.add_argument("--spu-egress-log", type=str, default="",
                   help="SPU: JSON Lines file recording the destination of every connection.")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


class EgressRecorder(HttpProxyBasePlugin):  # type: ignore[misc]
    """Records ``{"time", "method", "host", "port", "path"}`` before each upstream connection."""

    def before_upstream_connection(self, request: Any) -> Any:
        """Append the destination of ``request`` to the log and let it through unchanged."""
        method = _text(request.method)
        line = {
            "time": round(time.time(), 3),
            "method": method,
            "host": _text(request.host),
            "port": request.port,
            # A CONNECT tunnel's path is opaque (TLS); plain HTTP shows what was asked.
            "path": None if method == "CONNECT" else _text(request.path),
        }
        path = self.flags.spu_egress_log
        if path:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(line) + "\n").encode())
            finally:
                os.close(fd)
        return request
