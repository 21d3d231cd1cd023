"""Run inside a network namespace of a test: a provider's API reached by its address.

``python -m tests.tools.netns_provider_probe FOLDER`` (in a namespace whose
``/etc/resolv.conf`` names ``127.0.0.1``) starts :class:`tests.tools.dns_responder.
DnsResponder` answering ``api.provider.test`` (the provider's API host, refused by name)
and ``alias.test`` with the same public address, and ``other.test`` with another one; a
real :class:`spu.tools.egress.EgressProxy` refuses the provider's host, then is asked for
the address literal (``CONNECT`` and plain ``GET``), for the alias and for the other name.
It prints one JSON object: the proxy's status lines and the egress log. The namespace has
no route out: nothing leaves it whatever the proxy does.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from spu.tools.egress import EgressProxy, read_egress
from tests.tools.dns_responder import DnsResponder

PROVIDER_ADDRESS = "93.184.216.34"
OTHER_ADDRESS = "93.184.216.35"


def _status(proxy_port: int, request: bytes) -> str:
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=30) as raw:
        raw.sendall(request)
        return raw.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")


def main() -> None:
    """Run the probe; print its findings."""
    folder = Path(sys.argv[1])
    DnsResponder({"api.provider.test": [PROVIDER_ADDRESS], "alias.test": [PROVIDER_ADDRESS],
                  "other.test": [OTHER_ADDRESS]}, {})
    with EgressProxy(folder) as proxy:
        assert proxy.port is not None
        proxy.refuse_hosts(["api.provider.test"])
        proxy.wait_resolved(10)
        statuses = {
            "name": _status(proxy.port, b"CONNECT api.provider.test:443 HTTP/1.1\r\n"
                                        b"Host: api.provider.test:443\r\n\r\n"),
            "literal": _status(proxy.port, f"CONNECT {PROVIDER_ADDRESS}:443 HTTP/1.1\r\n"
                                           f"Host: {PROVIDER_ADDRESS}:443\r\n\r\n".encode()),
            "mapped": _status(proxy.port, f"CONNECT [::ffff:{PROVIDER_ADDRESS}]:443 HTTP/1.1"
                                          f"\r\nHost: [::ffff:{PROVIDER_ADDRESS}]:443\r\n\r\n"
                                          .encode()),
            "get": _status(proxy.port, f"GET http://{PROVIDER_ADDRESS}/v1/messages HTTP/1.1\r\n"
                                       f"Host: {PROVIDER_ADDRESS}\r\n\r\n".encode()),
            "alias": _status(proxy.port, b"CONNECT alias.test:443 HTTP/1.1\r\n"
                                         b"Host: alias.test:443\r\n\r\n"),
            "other": _status(proxy.port, b"CONNECT other.test:443 HTTP/1.1\r\n"
                                         b"Host: other.test:443\r\n\r\n"),
        }
        denied = json.loads((folder / "egress.deny_addresses.json").read_text())
    print(json.dumps({"statuses": statuses, "denied": denied,
                      "egress": list(read_egress(folder / "egress.jsonl"))}))


if __name__ == "__main__":
    main()
