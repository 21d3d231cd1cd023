"""The uvicorn server of a run's host-side services, woken at once when it is asked to stop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

SHUTDOWN_TIMEOUT_S = 10.0


def server_class() -> Any:
    """The uvicorn server, woken at once by :meth:`ModelGateway.stop`.

    uvicorn looks at ``should_exit`` every 0.1 s and waits 0.1 s more when it shuts down;
    a run's gateway starts and stops once per run, and those waits were most of its cost
    (0.2 s per run, where a sweep's fast path spends that on a whole run).
    """
    import uvicorn

    class WakeableServer(uvicorn.Server):
        _wake: asyncio.Event | None = None
        _loop: asyncio.AbstractEventLoop | None = None
        pumps: set[asyncio.Task[None]] = set()  # noqa: RUF012 (set per instance)
        shutdown_timeout_s = SHUTDOWN_TIMEOUT_S
        """Seconds the shutdown waits for connections and tasks before it cancels them."""

        async def main_loop(self) -> None:
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            while not self.should_exit:
                await self._wake.wait()

        def wake(self) -> None:
            if self._loop is not None and self._wake is not None:
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
                await asyncio.sleep(0.005)
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
