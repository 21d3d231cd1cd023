"""The uvicorn server of a run's host-side services (the tools service, the model gateway).

A run starts and stops each of its services once, so what uvicorn spends around serving
is paid per run. uvicorn's own server looks at ``should_exit`` every 0.1 s and, when it
shuts down, waits a fixed 0.1 s and then polls every 0.1 s; a caller waiting for it to
listen polls ``started``. Here nothing waits for a clock:

- :func:`start_in_thread` returns when the server listens (an event its start-up sets);
- :class:`WakeableServer`'s loop sleeps until :meth:`~WakeableServer.wake`, which
  :func:`stop_thread` calls after setting ``should_exit``;
- its shutdown returns as soon as no connection or task is left (looked at every 5 ms, at
  most ``shutdown_timeout_s``), then cancels what is left.

"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 10.0
"""Seconds a shutdown waits for connections and tasks before it cancels them (default)."""
SHUTDOWN_STEP_S = 0.005
"""How often the shutdown looks whether connections and tasks are left."""


@functools.cache
def server_class() -> Any:
    """:class:`WakeableServer`, a ``uvicorn.Server`` (made on first use: uvicorn loads late)."""
    import uvicorn

    class WakeableServer(uvicorn.Server):
        """A uvicorn server that sleeps until woken, and stops as soon as it is idle."""

        shutdown_timeout_s = SHUTDOWN_TIMEOUT_S
        """Seconds the shutdown waits for connections and tasks before it cancels them."""

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self._wake: asyncio.Event | None = None
            self._loop: asyncio.AbstractEventLoop | None = None
            self.pumps: set[asyncio.Task[None]] = set()
            """Tasks besides the requests' own that the shutdown waits for, then cancels."""
            self.ready = threading.Event()
            """Set once the start-up has ended: listening (``started``) or failed."""

        async def startup(self, sockets: Any = None) -> None:
            try:
                await super().startup(sockets=sockets)
            finally:
                self.ready.set()

        async def main_loop(self) -> None:
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            while not self.should_exit:
                await self._wake.wait()

        def wake(self) -> None:
            """Make the loop look at ``should_exit`` now (from any thread)."""
            if self._loop is not None and self._wake is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: all done
                    self._loop.call_soon_threadsafe(self._wake.set)

        async def shutdown(self, sockets: Any = None) -> None:
            # uvicorn's own waits a fixed 0.1 s, then polls every 0.1 s. Answers still in
            # flight end when their upstream does, and write their record lines then.
            for server in self.servers:
                server.close()
            for connection in list(self.server_state.connections):
                connection.shutdown()
            deadline = time.monotonic() + self.shutdown_timeout_s
            while (self.server_state.connections or self.server_state.tasks or self.pumps) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(SHUTDOWN_STEP_S)
            # Requests still waiting for their answer, and answers still being read (after a
            # hang-up, or to an agent the run's end stopped), are cut here: each writes its
            # line (ModelGateway.stop set ``stopping``) before the upstream client closes.
            waiting = [t for t in self.server_state.tasks if not t.done()]
            for task in [*waiting, *self.pumps]:
                task.cancel()
            if waiting or self.pumps:
                await asyncio.wait([*waiting, *self.pumps], timeout=1.0)
            await self.lifespan.shutdown()

    return WakeableServer


def start_in_thread(server: Any, name: str, timeout_s: float = 30.0) -> threading.Thread:
    """Run ``server`` (a :class:`WakeableServer`) in a daemon thread; return once it listens.

    Raises:
        RuntimeError: it did not start (its thread ended, or ``timeout_s`` passed).
    """
    def run() -> None:
        try:
            server.run()
        except SystemExit:  # uvicorn's way out of a start-up that failed: raised below
            pass
        finally:
            server.ready.set()  # a start-up that failed before startup() ran

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if not server.ready.wait(timeout_s) or not server.started:
        stop_thread(server, thread, join_s=1.0)
        raise RuntimeError(f"{name} did not start (its thread ended, or {timeout_s:g} s passed)")
    return thread


def stop_thread(server: Any, thread: threading.Thread, join_s: float) -> None:
    """Ask ``server`` to stop, wake it, and wait (at most ``join_s``) for its thread."""
    server.should_exit = True
    server.wake()
    thread.join(timeout=join_s)


def bound_port(server: Any) -> int:
    """The TCP port a started server listens on."""
    return int(server.servers[0].sockets[0].getsockname()[1])
