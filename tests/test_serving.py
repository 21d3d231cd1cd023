"""The host-side services' uvicorn server: it starts and stops without waiting for a clock."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from spu.serving import bound_port, server_class, start_in_thread, stop_thread
from tests.clocks import clock_waits, record_sleeps


async def hello(scope: dict[str, Any], receive: Callable[..., Any],
                send: Callable[..., Any]) -> None:
    """A minimal ASGI app: 200 and a JSON body to every HTTP request."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": f"{message['type']}.complete"})
            if message["type"] == "lifespan.shutdown":
                return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"ok": true}'})


def started() -> tuple[Any, threading.Thread]:
    import uvicorn

    config = uvicorn.Config(hello, host="127.0.0.1", port=0, log_config=None,
                            log_level=None, lifespan="on")
    server = server_class()(config)
    return server, start_in_thread(server, "test-server")


def test_a_server_listens_when_started_and_its_thread_ends_when_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant: ``start_in_thread`` returns once the server listens, and ``stop_thread``
    returns because the server's thread ended (not at its join deadline), with no sleep on a
    clock in between: uvicorn's own server waits 0.1 s for ``should_exit`` and 0.1 s more
    when it shuts down, a poll for ``started`` waits on its own clock."""
    slept = record_sleeps(monkeypatch)
    server, thread = started()
    url = f"http://127.0.0.1:{bound_port(server)}/"
    assert json.load(urllib.request.urlopen(url, timeout=10)) == {"ok": True}
    stop_thread(server, thread, join_s=60)
    assert not thread.is_alive()
    assert clock_waits(slept) == [], slept


def test_waking_a_server_whose_loop_has_closed_is_harmless() -> None:
    """A stop that comes after the server's loop ended (it failed, or stopped before) raises
    nothing: there is nothing left to wake."""
    server, thread = started()
    stop_thread(server, thread, join_s=60)
    assert not thread.is_alive()
    server.wake()  # the loop is closed now


def test_a_server_that_cannot_start_says_so() -> None:
    """A start-up that fails (the app's lifespan refuses) raises at once, naming the server."""
    import uvicorn

    async def refuses(scope: dict[str, Any], receive: Callable[..., Any],
                      send: Callable[..., Any]) -> None:
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no"})

    config = uvicorn.Config(refuses, host="127.0.0.1", port=0, log_config=None,
                            log_level=None, lifespan="on")
    with pytest.raises(RuntimeError, match="test-refused did not start"):
        start_in_thread(server_class()(config), "test-refused", timeout_s=60)
