"""A local web site for the web provider's tests: search APIs, pages, and misbehaving servers.

It listens on 127.0.0.1 only (tests reach nothing else) and serves:

- ``/search?q=..&format=json``: a SearXNG answer; ``/brave/search``: a Brave answer
  (only with the key ``test-key``);
- ``/html``, ``/pdf``, ``/latin1``: a page, a real PDF, a page in Latin-1 without a charset;
- ``/big``: 50 MB, streamed; ``/slow``: headers after 30 s; ``/drip``: one byte every 0.5 s;
- ``/redirect``: a redirect to ``/html``.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

DOI = "10.1126/science.aar5169"
BIG_BYTES = 50 * 1024 * 1024

HTML = f"""<!doctype html><html><head><title>Additives in C-N coupling</title></head>
<body><nav>Home | About</nav><article><h1>Additives in C-N coupling</h1>
<p>Isoxazole additives change the yields of palladium catalysed C-N cross-coupling in a
high-throughput screen. The screen has been analysed with random forests by several groups,
and the descriptors include NMR shifts and LUMO energies of the additives.</p>
<p>Data: <a href="https://doi.org/{DOI}">the original study</a>.</p></article>
<footer>Copyright</footer></body></html>"""


def pdf_bytes(lines: list[str]) -> bytes:
    """A one-page PDF showing ``lines`` in Helvetica (a real file: xref offsets included)."""
    ops = ["BT", "/F1 11 Tf", "50 750 Td", "14 TL"]
    for line in lines:
        escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        ops += [f"({escaped}) Tj", "T*"]
    ops.append("ET")
    stream = zlib.compress("\n".join(ops).encode("latin-1"))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" /Filter /FlateDecode >>\nstream\n"
        + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
            .encode())
    return bytes(out)


PDF = pdf_bytes(["Predicting reaction performance in C-N cross-coupling",
                 f"using machine learning. doi:{DOI}"])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the slow page's test wants exactly that)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        if parts.path == "/search":
            results = [{"url": f"https://site.test/{k}", "title": f"{query['q'][0]} {k}",
                        "content": f"snippet {k} doi {DOI}" if k == 0 else f"snippet {k}",
                        "publishedDate": "2024-01-01"} for k in range(3)]
            self._send(200, json.dumps({"results": results}).encode(), "application/json")
        elif parts.path == "/brave/search":
            if self.headers.get("x-subscription-token") != "test-key":
                self._send(401, b"{}", "application/json")
                return
            items = [{"url": "https://site.test/b", "title": "Brave result",
                      "description": "a description", "page_age": "2023-05-01"}]
            self._send(200, json.dumps({"web": {"results": items}}).encode(),
                       "application/json")
        elif parts.path == "/html":
            self._send(200, HTML.encode(), "text/html; charset=utf-8")
        elif parts.path == "/pdf":
            self._send(200, PDF, "application/pdf")
        elif parts.path == "/latin1":
            self._send(200, "<html><body><p>Caf\xe9 cr\xe8me: r\xe9sum\xe9 of yields "
                       "for every additive in the screen, with notes.</p></body></html>"
                       .encode("latin-1"), "text/html")
        elif parts.path == "/redirect":
            self._send(302, b"", "text/plain", {"location": "/html"})
        elif parts.path == "/big":
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(BIG_BYTES))
            self.end_headers()
            chunk = b"x" * 65536
            try:
                for _ in range(BIG_BYTES // len(chunk)):
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif parts.path == "/slow":
            time.sleep(30)
            self._send(200, b"late", "text/plain")
        elif parts.path == "/drip":
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"d")
                    self.wfile.flush()
                    time.sleep(0.5)
            except (BrokenPipeError, ConnectionResetError):
                pass
        else:
            self._send(404, b"not found", "text/plain")


class LocalSite:
    """The site on 127.0.0.1 and a free port, served by a thread; :meth:`kill` stops it."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.requests = []  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def kill(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
