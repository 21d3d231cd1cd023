"""The ``proxy.py`` plugin of the egress proxy: one JSON line per connection.

Loaded only in the proxies' processes (:class:`spu.tools.egress.ProxyForker` imports it
once, each proxy runs with ``--plugins spu.tools.egress_plugin.EgressRecorder
--spu-egress-log FILE ...``); importing it registers its flags with ``proxy.py``.

It blocks nothing on the internet (the paper's agents stay connected), but the proxy runs
on the host, so a connection to the host's own loopback, private or link-local addresses
(the tracking server, a database, other runs' services, the cluster's other nodes) is
refused with 403 and logged as refused, unless its ``host:port`` is in the allow file
(the run's own tools service); so is a connection to any address of the host's own
interfaces, public ones included. The name is resolved once and the connection goes to the
checked address, so DNS cannot change the answer in between.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import time
from typing import Any

from proxy.common.flag import flags
from proxy.http.exception import HttpRequestRejected
from proxy.http.proxy import HttpProxyBasePlugin

flags.add_argument("--spu-egress-log", type=str, default="",
                   help="SPU: JSON Lines file recording the destination of every connection.")
flags.add_argument("--spu-allow-file", type=str, default="",
                   help="SPU: JSON list of host:port on local addresses that may be reached.")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _local(address: str) -> bool:
    """A loopback, private, link-local or multicast address, or one of this host's own.

    A host with a public address answers on it too (services bound to every interface):
    an address that this process can bind to is the host's own, whatever its range.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast or own_address(str(ip))


def own_address(address: str) -> bool:
    """Whether ``address`` is assigned to an interface of this host (it can be bound).

    >>> own_address("127.0.0.1"), own_address("198.51.100.254")
    (True, False)
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def _allowed(path: str) -> set[str]:
    if not path:
        return set()
    try:
        with open(path, encoding="utf-8") as f:
            return {str(entry) for entry in json.load(f)}
    except (OSError, ValueError, TypeError):
        return set()


class EgressRecorder(HttpProxyBasePlugin):  # type: ignore[misc]
    """Records ``{"time", "method", "host", "port", "path", "address", "refused"}``."""

    def before_upstream_connection(self, request: Any) -> Any:
        """Log the destination of ``request``; refuse a local one; pin the checked address."""
        method = _text(request.method)
        host = _text(request.host) or ""
        port = int(request.port or 0)
        line: dict[str, Any] = {
            "time": round(time.time(), 3), "method": method, "host": host, "port": port,
            # A CONNECT tunnel's path is opaque (TLS); plain HTTP shows what was asked.
            "path": None if method == "CONNECT" else _text(request.path),
        }
        address = None
        try:
            address = str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
        except (OSError, UnicodeError, IndexError):
            pass  # unresolvable: the proxy's own connection attempt fails and says so
        if address is not None:
            line["address"] = address
            endpoints = {f"{host}:{port}", f"{address}:{port}"}
            if _local(address) and not endpoints & _allowed(self.flags.spu_allow_file):
                line["refused"] = "local address"
                self._log(line)
                raise HttpRequestRejected(status_code=403, reason=b"Forbidden",
                                          body=b"egress to a local address is refused\n")
            request.host = address.encode()
        self._log(line)
        return request

    def _log(self, line: dict[str, Any]) -> None:
        path = self.flags.spu_egress_log
        if not path:
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)

