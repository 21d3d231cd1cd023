"""The ``proxy.py`` plugin of the egress proxy: one JSON line per connection.

Loaded only in the proxies' processes (:class:`spu.tools.egress.ProxyForker` imports it
once, each proxy runs with ``--plugins spu.tools.egress_plugin.EgressRecorder
--spu-egress-log FILE ...``); importing it registers its flags with ``proxy.py``.

It blocks nothing on the internet (the paper's agents stay connected), but the proxy runs
on the host, so a connection to the host's own loopback, private or link-local addresses
(the tracking server, a database, other runs' services, the cluster's other nodes) is
refused with 403 and logged as refused, unless its ``host:port`` is in the allow file
(the run's own tools service); so is a connection to any address of the host's own
interfaces, public ones included. The name is resolved once, every address it returns is
checked, and the connection goes to a checked address, so DNS cannot change the answer in
between. A name that does not resolve (no answer, SERVFAIL, a timeout) is refused with
502 and logged with its reason: the proxy's own connection would resolve it again, and a
second answer may be the host's loopback or a cloud's metadata service (issue 30).
A host name in the deny file (the model providers' API hosts, once the run has a model
gateway) is refused with 403 before any lookup, and so is a connection to an address in the
deny-address file (the addresses those hosts resolved to on the host), whether asked as a
literal or through another name.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from proxy.common.flag import flags
from proxy.http.exception import HttpRequestRejected
from proxy.http.proxy import HttpProxyBasePlugin

from spu.tools.addresses import normal_address, public_address

flags.add_argument("--spu-egress-log", type=str, default="",
                   help="SPU: JSON Lines file recording the destination of every connection.")
flags.add_argument("--spu-allow-file", type=str, default="",
                   help="SPU: JSON list of host:port on local addresses that may be reached.")
flags.add_argument("--spu-deny-file", type=str, default="",
                   help="SPU: JSON list of host names refused (the model providers' APIs).")

flags.add_argument("--spu-deny-address-file", type=str, default="",
                   help="SPU: JSON list of addresses refused (those the providers' API "
                        "hosts resolve to).")

MODEL_API_REFUSED = ("model provider API: the agent reaches its model only through the run's "
                     "model gateway")
"""The ``refused`` reason of a direct connection to a model provider's API host."""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _local(address: str) -> bool:
    """Not a public address: :func:`spu.tools.addresses.public_address` says which are."""
    return not public_address(address)


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, in the resolver's order, each once.

    Raises:
        OSError: the lookup failed (``socket.gaierror``: no such name, no answer,
            SERVFAIL, a timeout).
        ValueError: it answered no address.
    """
    host = host.strip("[]")  # an IPv6 literal as a URL writes it
    if not host:
        raise ValueError("no host name")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise ValueError("no address")
    return addresses


def _literal(host: str) -> str | None:
    """``host`` as :func:`normal_address` writes it, when it is an address literal."""
    try:
        return normal_address(host.strip("[]"))
    except ValueError:
        return None


def _allowed(path: str) -> set[str]:
    """The entries of the JSON list in ``path`` (an allow or a deny file; none when unreadable)."""
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
        denied = _allowed(self.flags.spu_deny_address_file)
        if (host.lower().rstrip(".") in _allowed(self.flags.spu_deny_file)
                or _literal(host) in denied):
            # Before any lookup: the name is the provider's, whatever it resolves to (an
            # address literal of the provider's is refused here too).
            line["refused"] = MODEL_API_REFUSED
            self._log(line)
            raise HttpRequestRejected(status_code=403, reason=b"Forbidden",
                                      body=b"egress refused: " + MODEL_API_REFUSED.encode()
                                      + b"\n")
        try:
            addresses = resolve(host, port)
        except (OSError, UnicodeError, ValueError) as exc:
            # Never passed on unpinned: proxy.py would resolve the name again itself.
            line["refused"] = f"unresolved: {type(exc).__name__}: {exc}"[:300]
            self._log(line)
            raise HttpRequestRejected(status_code=502, reason=b"Bad Gateway",
                                      body=b"egress refused: the name did not resolve\n",
                                      ) from None
        line["address"] = addresses[0]
        if len(addresses) > 1:
            line["addresses"] = addresses[:16]
        provider = [a for a in addresses if normal_address(a) in denied]
        if provider:
            # An address a provider's API host resolves to: an address literal, or another
            # name for it, is the provider's API all the same.
            line["refused"] = MODEL_API_REFUSED
            line["address"] = provider[0]
            self._log(line)
            raise HttpRequestRejected(status_code=403, reason=b"Forbidden",
                                      body=b"egress refused: " + MODEL_API_REFUSED.encode()
                                      + b"\n")
        allowed = _allowed(self.flags.spu_allow_file)
        local = [a for a in addresses if _local(a)
                 and not {f"{host}:{port}", f"{a}:{port}"} & allowed]
        if local:
            line["refused"] = "local address"
            if local[0] != addresses[0]:
                line["address"] = local[0]
            self._log(line)
            raise HttpRequestRejected(status_code=403, reason=b"Forbidden",
                                      body=b"egress to a local address is refused\n")
        request.host = addresses[0].encode()
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

