"""The sandbox's way to the run's host ports: a relay, not pasta's port forwarding.

Inside the sandbox's network namespace the run's host ports (the tools service, the
egress proxy, the model gateway, a harness's own services) answer at ``127.0.0.1`` on
the same port. pasta can forward them (``-T``), but Debian 12's pasta (``passt``
2023-03-09) moves those connections through pipes (its splice path) and stops moving a
connection's last bytes for good when the receiving socket is full at the moment the
sender has sent everything: a request of 16 MiB or more to the gateway stalled until the
gateway answered 408 (fixed upstream in May 2024, passt commit 7e6a606, "tcp_splice: Set
OUT_WAIT_ flag whenever pipe isn't emptied"). A larger receive buffer on the service only
made it rarer: the sender's own buffer fills as well.

So the sockets the agent connects to are made here, inside its namespace (a thread that
joins the namespace makes them, then ends), and a loop in a thread of the run's process
copies each connection to the same port on the host's ``127.0.0.1``, waiting for each
side to take what it is given. pasta keeps the internet; it no longer reaches this
machine's loopback at all.

Bounds, as the agent chooses what it sends: at most :data:`MAX_CONNECTIONS` connections
at once (one more is closed at once: each costs two descriptors of the run's process),
and :data:`COPY_BYTES` held per direction of each.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import socket
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
MAX_CONNECTIONS = 128
"""Connections the agent may hold open at once through the relay, all ports together (each
holds two descriptors and at most about 1 MiB of buffers of the run's process)."""
COPY_BYTES = 256 * 1024
"""Bytes read from one side before they are handed to the other (and waited for)."""
BACKLOG = 128


class RelayError(OSError):
    """The relay's sockets could not be made inside the sandbox's namespace."""


def sockets_in_namespace(netns: str, ports: Sequence[int]) -> list[socket.socket]:
    """Listening TCP sockets on ``127.0.0.1:<port>`` inside the network namespace ``netns``.

    ``netns`` is a namespace file (``/proc/<pid>/ns/net``). A new thread joins the
    namespace, makes the sockets and ends: a socket stays in the namespace it was made
    in, and no thread of this process stays behind in the sandbox's.
    """
    made: list[socket.socket] = []
    failure: list[BaseException] = []

    def make() -> None:
        try:
            fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise RelayError(errno, f"setns into {netns}: {os.strerror(errno)}")
            finally:
                os.close(fd)
            for port in ports:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                made.append(sock)
                sock.bind(("127.0.0.1", int(port)))
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=make, name="spu-relay-namespace", daemon=True)
    thread.start()
    thread.join()
    if failure:
        for sock in made:
            sock.close()
        raise RelayError(f"the sandbox's host ports could not be opened in its namespace: "
                         f"{failure[0]}") from failure[0]
    return made


class HostPortRelay:
    """Relays connections made to sockets in a sandbox's namespace to the host's loopback.

    Args:
        listeners: sockets from :func:`sockets_in_namespace`, each relayed to the same
            port on the host's ``127.0.0.1``.
    """

    def __init__(self, listeners: Sequence[socket.socket]) -> None:
        self.listeners = list(listeners)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="spu-host-port-relay",
                                        daemon=True)
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.refused = 0
        """Connections closed at once, past :data:`MAX_CONNECTIONS`."""

    def start(self) -> HostPortRelay:
        """Start relaying; returns once every listener accepts.

        Raises:
            RelayError: the loop ended before it accepted.
        """
        self._thread.start()
        self._ready.wait()
        if not self._thread.is_alive():
            self.close()
            raise RelayError("the host-port relay ended as it started")
        return self

    def close(self) -> None:
        """Stop accepting, cut every connection, end the thread."""
        if self._stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread.ident is not None:
            self._thread.join()
        for sock in self.listeners:
            sock.close()

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self._ready.set()
            self.loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        servers = [await asyncio.start_server(
            functools.partial(self._accepted, port=sock.getsockname()[1]), sock=sock)
            for sock in self.listeners]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            for server in servers:
                server.close()
            for task in list(self._connections):
                task.cancel()
            if self._connections:
                await asyncio.wait(self._connections)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        port: int) -> None:
        if len(self._connections) >= MAX_CONNECTIONS:
            self.refused += 1
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)  # type: ignore[arg-type]
        upstream: asyncio.StreamWriter | None = None
        ended = False
        try:
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.gather(_copy(reader, upstream), _copy(up_reader, writer))
            ended = True
        except OSError:
            pass  # a side that went away ends the connection; the services log their side
        except asyncio.CancelledError:
            # Cut by close(): the end asked for. Not raised on, as Python 3.11's start_server
            # logs a cancelled handler as an error with its traceback.
            pass
        finally:
            self._connections.discard(task)  # type: ignore[arg-type]
            for side in (writer, upstream):
                if side is None:
                    continue
                if ended:
                    side.close()
                else:  # cut: what is left unsent is dropped, not waited for
                    side.transport.abort()


async def _copy(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
    """Copy ``source`` to ``target`` until its end, waiting whenever ``target`` is full."""
    while data := await source.read(COPY_BYTES):
        target.write(data)
        await target.drain()
    if target.can_write_eof() and not target.transport.is_closing():
        target.write_eof()
