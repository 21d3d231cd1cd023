"""Run inside a network namespace of a test: the host's own public address.

``python -m tests.tools.netns_own_address_probe`` (in a user and network namespace with
``CAP_NET_ADMIN``) gives its loopback interface the public address :data:`OWN_ADDRESS`, starts a
canary HTTP server on every interface, and asks the audited fetch and the egress proxy's
check for that address, and for IPv6 forms that stand for a local IPv4 address. It prints
one JSON object: what each answered and the paths the canary was asked for. The namespace
has no route out: nothing leaves it whatever the checks say.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading

from spu.config import ToolsConfig
from spu.tools.egress_plugin import _local
from spu.tools.providers import ProviderError
from spu.tools.web import WebProvider

OWN_ADDRESS = "93.184.216.40"
EMBEDDING_FORMS = ("::127.0.0.1", "2002:7f00:1::1", "64:ff9b:1::7f00:1",
                   "2001:0:4136:e378:8000:63bf:80ff:fffe")
"""IPv4-compatible, 6to4, local-use NAT64 and Teredo forms of 127.0.0.1."""


def main() -> None:
    """Run the probe; print its findings."""
    subprocess.run(["ip", "addr", "add", f"{OWN_ADDRESS}/32", "dev", "lo"], check=True)
    asked: list[str] = []

    class Canary(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"canary")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Canary)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    web = WebProvider(ToolsConfig(fetch_timeout_s=5.0))
    try:
        web.fetch(f"http://{OWN_ADDRESS}:{port}/secret")
        fetched = "fetched"
    except ProviderError as exc:
        fetched = str(exc)
    finally:
        web.close()
    server.shutdown()
    print(json.dumps({"fetch": fetched, "asked": asked,
                      "proxy_local": {a: _local(a) for a in (OWN_ADDRESS, *EMBEDDING_FORMS)}}))


if __name__ == "__main__":
    main()
