"""Run inside a network namespace of a test: a DNS trick against the real egress proxy.

``python -m tests.tools.netns_egress_probe FOLDER RCODE`` (in a namespace whose
``/etc/resolv.conf`` names ``127.0.0.1``) starts :class:`tests.tools.dns_responder.
DnsResponder` on the namespace's loopback, a canary HTTP server there, and a real
:class:`spu.tools.egress.EgressProxy`, then asks the proxy for names whose first lookup
fails and whose second is the loopback (``CONNECT`` and plain ``GET``), and for a name
whose answer mixes a public address with the loopback. It prints one JSON object: the
proxy's status lines, the canary's requests and the egress log.
"""

from __future__ import annotations

import http.server
import json
import socket
import sys
import threading
from pathlib import Path

from spu.tools.egress import EgressProxy, read_egress
from tests.tools.dns_responder import DnsResponder


def _status(proxy_port: int, request: bytes) -> str:
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=30) as raw:
        raw.sendall(request)
        return raw.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")


def main() -> None:
    """Run the probe; print its findings."""
    folder, rcode = Path(sys.argv[1]), int(sys.argv[2])
    seen: list[str] = []

    class Canary(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"canary")

        def log_message(self, *args: object) -> None:
            pass

    canary = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Canary)
    threading.Thread(target=canary.serve_forever, daemon=True).start()
    port = canary.server_address[1]
    dns = DnsResponder({"flaky.test": ["127.0.0.1"], "flaky2.test": ["127.0.0.1"],
                        "mixed.test": ["93.184.216.34", "127.0.0.1"]},
                       {"flaky.test": 2, "flaky2.test": 2}, rcode=rcode)
    with EgressProxy(folder) as proxy:
        assert proxy.port is not None
        statuses = {
            "connect": _status(proxy.port, f"CONNECT flaky.test:{port} HTTP/1.1\r\n"
                                           f"Host: flaky.test:{port}\r\n\r\n".encode()),
            "get": _status(proxy.port, f"GET http://flaky2.test:{port}/get HTTP/1.1\r\n"
                                       f"Host: flaky2.test:{port}\r\n\r\n".encode()),
            "mixed": _status(proxy.port, f"CONNECT mixed.test:{port} HTTP/1.1\r\n"
                                         f"Host: mixed.test:{port}\r\n\r\n".encode()),
        }
    print(json.dumps({"statuses": statuses, "canary": seen, "queries": dns.queries,
                      "egress": list(read_egress(folder / "egress.jsonl"))}))


if __name__ == "__main__":
    main()
