"""Headless Chromium driven over the DevTools protocol, and a listener that counts requests.

``--dump-dom`` shows a page as it first renders; the MLflow trace view shows a span's
inputs and outputs only when the span is clicked. :class:`Browser` starts
``chromium-headless-shell`` (or ``chromium``) with a DevTools port and drives one page
over its websocket (aiohttp's client, which MLflow itself requires): navigate, evaluate a
script, click. :class:`Listener` is a loopback HTTP server that records every path asked
of it: a page that loads an agent's image or follows its link shows up there.
"""

from __future__ import annotations

import asyncio
import http.server
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

BROWSERS = ("chromium-headless-shell", "chromium")


def find_browser() -> str | None:
    """A headless Chromium on PATH, or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


class Listener:
    """A loopback HTTP server that answers every GET with an empty PNG and records its path."""

    def __init__(self) -> None:
        paths: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.paths = paths
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Browser:
    """One headless Chromium page, driven over the DevTools protocol."""

    def __init__(self, binary: str, profile: Path, width: int = 1600, height: int = 1200):
        self.binary, self.profile, self.size = binary, profile, (width, height)
        self.proc: subprocess.Popen[str] | None = None
        self._ws: Any = None
        self._session: Any = None
        self._next = 0

    async def __aenter__(self) -> Browser:
        import aiohttp

        self.proc = subprocess.Popen(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             f"--window-size={self.size[0]},{self.size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = None
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            found = re.search(r"ws://127\.0\.0\.1:(\d+)/", line)
            if found:
                port = int(found.group(1))
                break
        if port is None:
            raise RuntimeError(f"{self.binary} gave no DevTools port")
        self._session = aiohttp.ClientSession()
        pages = await (await self._session.get(f"http://127.0.0.1:{port}/json/list")).json()
        page = next(p for p in pages if p["type"] == "page")
        self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events meanwhile are dropped)."""
        self._next += 1
        ident = self._next
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            message = await self._ws.receive_json(timeout=120)
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})

    async def js(self, expression: str) -> Any:
        """The value of a script evaluated in the page (promises awaited)."""
        result = await self.call("Runtime.evaluate", expression=expression,
                                 returnByValue=True, awaitPromise=True)
        return (result.get("result") or {}).get("value")

    async def text(self) -> str:
        """The page's visible text."""
        return str(await self.js("document.body ? document.body.innerText : ''") or "")

    async def wait_for_text(self, needle: str, timeout_s: float = 120) -> str:
        """The page's text once it shows ``needle``.

        Raises:
            TimeoutError: it never did.
        """
        for _ in range(int(timeout_s * 2)):
            text = await self.text()
            if needle in text:
                return text
            await asyncio.sleep(0.5)
        raise TimeoutError(f"the page never showed {needle!r}")

    async def click_text(self, label: str) -> int:
        """Click every element whose own text is exactly ``label``; how many there were."""
        import json

        script = ("(() => { const hits = [...document.querySelectorAll('*')].filter("
                  "e => e.children.length === 0 && e.textContent.trim() === "
                  f"{json.dumps(label)}); hits.forEach(e => e.click()); return hits.length; }})()")
        return int(await self.js(script) or 0)

    async def screenshot(self, path: Path) -> None:
        """Save what the page shows now as a PNG."""
        import base64

        shot = await self.call("Page.captureScreenshot")
        path.write_bytes(base64.b64decode(shot["data"]))
