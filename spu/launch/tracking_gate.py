"""The sweep's MLflow server behind a credential: ``mlflow server --app-name spu-token``.

The launcher starts its tracking server with this app (an entry point of the
``mlflow.app`` group, declared in ``pyproject.toml``): MLflow's own server, unchanged,
behind a gate that answers 401 to every request without the header
``Authorization: Bearer <token>``. The token is drawn per sweep and handed to the
server in its environment (:data:`TOKEN_ENV`) and to the MLflow client on the grading
side as ``MLFLOW_TRACKING_TOKEN``, which MLflow sends as that header. Agents never see
it: they run elsewhere, with an environment built from nothing, and the server listens
on the loopback of the grading side only.

``/health`` stays open: it says "OK" and nothing else, and the launcher polls it.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

TOKEN_ENV = "SPU_TRACKING_SERVER_TOKEN"
"""Environment variable that gives the server its token."""

OPEN_PATHS = frozenset({"/health"})
"""Paths answered without the token."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerTokenGate:
    """ASGI middleware: only requests bearing the token reach ``app``.

    The comparison takes the same time whatever the header holds (``hmac.compare_digest``).
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        if len(token) < 16:
            raise ValueError(f"{TOKEN_ENV}: a token of at least 16 characters is needed")
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 401."""
        if scope["type"] in ("http", "websocket") and scope.get("path") not in OPEN_PATHS:
            given = b""
            for name, value in scope.get("headers") or ():
                if name.lower() == b"authorization":
                    given = bytes(value)
            if not hmac.compare_digest(given, self.expected):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b"tracking server: credential required\n"})
                return
        await self.app(scope, receive, send)


def create_app() -> BearerTokenGate:
    """The gated MLflow app (the entry point ``spu-token`` of ``mlflow.app``)."""
    from mlflow.server.fastapi_app import app

    token = os.environ.get(TOKEN_ENV, "")
    return BearerTokenGate(app, token)
