"""The model gateway of one run in a process of its own, under the run's service limits.

A run's gateway works for the agent on the host: left in the driver's process, an agent
holding connections, sending bodies or filling its record spends the driver's
descriptors, memory and disk, and a gateway that fails takes the driver with it. Here
each run's gateway is a process of its own, forked by a :class:`GatewayHost` (one per
driver process, single-threaded, with the server's libraries imported once, so that a
run pays a fork, not an interpreter and its imports). The child joins the run's
:class:`~spu.sandbox.limits.ServiceGroup` (memory and CPU by cgroup, else by rlimit),
bounds its own descriptors (``RLIMIT_NOFILE``: :data:`OPEN_FILES`) and the files it
writes (``RLIMIT_FSIZE``, with the record's cap), then serves.

The driver talks to its run's gateway over a socket pair of its own (the
:class:`GatewayProcess`'s channel), passed to the child through the host: the child
sends its port and token on it, the driver sends ``stop``, the child answers with its
last word (the record's notes) and exits. The channel's end tells the driver the
gateway is gone: a gateway that dies before it is stopped is noticed at once
(:meth:`GatewayProcess.on_death`), and the run is ended as an ``infra_error`` that
names why (``memory_limit`` where its service group's memory limit killed it: the
agent's requests took that memory). A gateway whose driver dies sees the channel end and
stops, writing its record; its host ends with the driver.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.config import ModelGatewayConfig, PriceConfig
from spu.sandbox.process import die_with_parent

if TYPE_CHECKING:
    from spu.gateway.server import ModelGateway

log = logging.getLogger(__name__)

OPEN_FILES = 1024
"""Descriptors a run's gateway may hold (``RLIMIT_NOFILE``): the connections it serves
(:data:`~spu.gateway.server.CONCURRENCY`), the upstream pool's, its files, with room to
spare."""
START_TIMEOUT_S = 30.0
"""Seconds a gateway may take to say its port (the host's first start included)."""
STOP_TIMEOUT_S = 30.0
"""Seconds a stopped gateway may take to write its record and exit (its own shutdown
waits :data:`~spu.gateway.server.SHUTDOWN_TIMEOUT_S` for answers in flight)."""
LOG_FILE = "gateway.log"
"""The gateway process's log, under the run's ``model/`` folder."""
LOG_BYTES = 1024 * 1024
"""Bytes of :data:`LOG_FILE` written at most by its logging (a flood logs once a second)."""
MESSAGE_BYTES = 4 * 1024 * 1024
"""The largest request a host takes (a run's gateway spec)."""


def file_size_limit(cfg: ModelGatewayConfig) -> int:
    """The largest file a run's gateway may write (``RLIMIT_FSIZE``).

    Above the record's cap and its headroom and the tool results' cap; with
    ``log_bodies``, a body file of four requests' size (a longer one is not kept).

    Examples
    --------
    >>> file_size_limit(ModelGatewayConfig()) // 2**20
    81
    """
    from spu.gateway.record import RECORD_HEADROOM_BYTES

    mib = 1024 * 1024
    most = max(int(cfg.record_mb * mib) + RECORD_HEADROOM_BYTES, int(cfg.tool_results_mb * mib))
    if cfg.log_bodies:
        most = max(most, 4 * cfg.max_request_bytes)
    return most + 16 * mib


@dataclass(frozen=True)
class GatewaySpec:
    """Everything a run's gateway process is made from (sent, pickled, to its host)."""

    folder: Path
    """``<run_dir>/model``."""
    upstream: str
    api: str
    api_model: str | None
    api_key: str | None = field(default=None, repr=False)
    key_as_bearer: bool = False
    cfg: ModelGatewayConfig = field(default_factory=ModelGatewayConfig)
    prices: PriceConfig | None = None
    max_cost_usd: float | None = None
    cache_write_rate: str = "five_minute"
    read_submission: Callable[[], bytes | None] | None = None
    """Picklable (a module's function, or a ``functools.partial`` of one)."""
    submission_counts: Callable[[bytes], bool] | None = None
    """Picklable, likewise."""
    confinement: dict[str, Any] = field(default_factory=dict)
    """:meth:`~spu.sandbox.limits.ServiceGroup.confinement`, the gateway's own bounds in
    it (``nofile``, ``fsize``)."""

    def gateway(self) -> ModelGateway:
        """The gateway this spec describes (not started)."""
        from spu.gateway.server import ModelGateway

        return ModelGateway(self.folder, upstream=self.upstream, api=self.api,
                            api_model=self.api_model, api_key=self.api_key,
                            key_as_bearer=self.key_as_bearer, cfg=self.cfg,
                            prices=self.prices, max_cost_usd=self.max_cost_usd,
                            cache_write_rate=self.cache_write_rate,
                            read_submission=self.read_submission,
                            submission_counts=self.submission_counts)


class GatewayStartError(RuntimeError):
    """A run's gateway process did not start; the message says why (its log's tail)."""


class GatewayHost:
    """A process with the gateway's libraries imported that forks one gateway per run.

    Started on first use by the driver process (:meth:`shared`; again if it has ended),
    single-threaded: it answers one request at a time on a socket of its own (pickled
    dicts, ``SOCK_SEQPACKET``):

    - ``{"start": SPEC}`` with a descriptor: fork a gateway on that channel; ``{"pid"}``;
    - ``{"reap": PID, "timeout_s": S}``: wait for it to exit (SIGKILL after ``S``);
      ``{"status": TEXT}``, how it ended;
    - ``{"kill": PID}``: SIGKILL; ``{}``.

    Only it reaps its gateways, so a signal never reaches a reused process id. It ends
    when its socket does, that is when the driver ends (``kill -9`` included); each
    gateway then sees its own channel end and stops, and asked for SIGTERM at its host's
    end.
    """

    _shared: GatewayHost | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        self._lock = threading.Lock()
        self._owner = os.getpid()
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "spu.gateway.process", "--host", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, start_new_session=True)

    @classmethod
    def shared(cls) -> GatewayHost:
        """This process's host, started on first use (again if it has ended)."""
        with cls._shared_lock:
            # A forked copy of the driver has a host of its own: the socket is its parent's.
            if cls._shared is None or cls._shared._owner != os.getpid() \
                    or cls._shared._process.poll() is not None:
                cls._shared = cls()
            return cls._shared

    def ask(self, request: dict[str, Any], fds: tuple[int, ...] = ()) -> dict[str, Any]:
        """Send a request (with descriptors) and return the host's answer."""
        with self._lock:
            try:
                socket.send_fds(self._socket, [pickle.dumps(request)], list(fds))
                data = self._socket.recv(MESSAGE_BYTES)
            except OSError as exc:
                raise GatewayStartError(f"the model gateway host is gone: {exc}") from exc
        if not data:
            raise GatewayStartError(f"the model gateway host ended (code "
                                    f"{self._process.poll()})")
        answer: dict[str, Any] = pickle.loads(data)
        if "error" in answer:
            raise GatewayStartError(f"the model gateway host: {answer['error']}")
        return answer


class GatewayProcess:
    """One run's gateway, in its own process: :meth:`start`, :attr:`port`, :meth:`stop`.

    Args:
        spec: what the gateway is made from.
    """

    def __init__(self, spec: GatewaySpec) -> None:
        self.spec = spec
        self.pid: int | None = None
        self.token = ""
        self.died: str | None = None
        """Why the gateway ended before it was stopped (None: it did not)."""
        self._port: int | None = None
        self._channel: socket.socket | None = None
        self._last_word: dict[str, Any] = {}
        """What the gateway said as it stopped (its record's notes)."""
        self._ended = threading.Event()
        self._stopping = False
        self._on_death: Callable[[str], None] | None = None
        self._status: str | None = None
        """How the process ended, once reaped."""
        self._reaping = threading.Lock()

    @property
    def port(self) -> int:
        """The TCP port on the host's loopback (known once started)."""
        if self._port is None:
            raise RuntimeError("the model gateway has not started")
        return self._port

    def url(self, host: str = "127.0.0.1") -> str:
        """The gateway's root as reached from ``host`` (the sandbox's address of the host)."""
        return f"http://{host}:{self.port}"

    @property
    def requests_path(self) -> Path:
        """The record (``<folder>/requests.jsonl``)."""
        return self.spec.folder / "requests.jsonl"

    def start(self) -> GatewayProcess:
        """Fork the gateway and wait for its port (raises :class:`GatewayStartError`)."""
        self.spec.folder.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair()
        self._channel = ours
        try:
            with theirs:
                self.pid = int(GatewayHost.shared().ask({"start": self.spec},
                                                        (theirs.fileno(),))["pid"])
            ours.settimeout(START_TIMEOUT_S)
            first = _read_line(ours)
        except (OSError, GatewayStartError) as exc:
            first = {"error": f"{type(exc).__name__}: {exc}"}
        if "port" not in first:
            self._end(wait_s=0.0 if "error" in first else 5.0)
            why = first.get("error") or f"it ended before it listened ({self._status})"
            raise GatewayStartError(f"the model gateway did not start: {why}"
                                    f"{self._log_tail()}")
        ours.settimeout(None)
        self._port, self.token = int(first["port"]), str(first["token"])
        threading.Thread(target=self._watch, name=f"spu-gateway-{self.pid}",
                         daemon=True).start()
        log.debug("model gateway (process %d) on 127.0.0.1:%d -> %s", self.pid, self._port,
                 self.spec.upstream)
        return self

    def on_death(self, call: Callable[[str], None]) -> None:
        """Have ``call(why)`` run if the gateway ends unasked (at once if it has)."""
        self._on_death = call
        if self.died is not None:
            call(self.died)

    def _watch(self) -> None:
        """Read the channel to its end: the gateway's last word, or its death."""
        channel = self._channel
        try:
            said = _read_line(channel) if channel is not None else {}
        except (OSError, ValueError):
            said = {}
        self._last_word = said
        self._ended.set()
        if said.get("stopped") is True or self._stopping:
            return
        self._end(wait_s=5.0)
        self.died = (f"the model gateway process ended while the agent ran "
                     f"({self._status}){self._log_tail()}")
        log.error("%s", self.died)
        if self._on_death is not None:
            self._on_death(self.died)

    def stop(self) -> None:
        """Stop the gateway; its record is whole when this returns. Never raises.

        A gateway that has not ended :data:`STOP_TIMEOUT_S` after it was asked is killed
        (requests then still in flight have no line; :meth:`notes` says so).
        """
        if self.pid is None or self._stopping:
            return
        self._stopping = True
        try:
            if not self._ended.is_set() and self._channel is not None:
                with contextlib.suppress(OSError):
                    self._channel.sendall(b"stop\n")
            # Reaped before this returns: its service group can then be removed at once.
            self._end(wait_s=5.0 if self._ended.wait(STOP_TIMEOUT_S) else 0.0)
        except Exception:  # noqa: BLE001 - a run's end must not fail on its gateway
            log.exception("the model gateway (process %s) did not stop cleanly", self.pid)

    @property
    def sigkilled(self) -> bool:
        """True once the reaped process is known to have died of SIGKILL."""
        return self._status is not None and self._status.endswith("killed by SIGKILL")

    def notes(self) -> list[str]:
        """What the run record should say of the gateway: its record's notes, a kill."""
        said = [str(n) for n in self._last_word.get("notes", [])]
        if self.died is None and self._status is not None and self._status.startswith("killed:"):
            said.append(f"the model gateway process was {self._status}; requests still in "
                        f"flight then have no line in its record")
        return said

    def _end(self, wait_s: float) -> None:
        """Reap the process (killed past ``wait_s``) and close the channel, once."""
        with self._reaping:
            if self.pid is not None and self._status is None:
                try:
                    self._status = str(GatewayHost.shared().ask(
                        {"reap": self.pid, "timeout_s": wait_s})["status"])
                except GatewayStartError as exc:
                    self._status = str(exc)
        self._close()

    def _close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            with contextlib.suppress(OSError):
                channel.shutdown(socket.SHUT_RDWR)
            channel.close()

    def _log_tail(self, most: int = 600) -> str:
        """The end of the gateway's log, for a message (empty where there is none)."""
        try:
            with open(self.spec.folder / LOG_FILE, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - most))
                tail = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        lines = [line for line in tail.splitlines() if line.strip()]
        return f"; its log ends: {lines[-1][-300:]}" if lines else ""


def _read_line(channel: socket.socket) -> dict[str, Any]:
    """One JSON line from a gateway's channel ({} at its end)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = channel.recv(65536)
        if not chunk:
            return {}
        data += chunk
        if len(data) > MESSAGE_BYTES:
            return {}
    said = json.loads(data)
    return said if isinstance(said, dict) else {}


# ---------------------------------------------------------------------- the host's side


def _describe(status: int) -> str:
    """A wait status in words.

    Examples
    --------
    >>> _describe(0), _describe(9)
    ('exit code 0', 'killed by SIGKILL')
    """
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


class _Host:
    """The loop of :class:`GatewayHost`, in its own process."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self.children: set[int] = set()
        self.ended: dict[int, str] = {}

    def serve(self) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.socket, MESSAGE_BYTES, 4)
            except InterruptedError:
                continue
            if not data:
                return  # the driver is gone: so is every gateway (their channels end)
            try:
                answer = self.answer(pickle.loads(data), fds)
            except Exception as exc:  # noqa: BLE001 - the host answers, whatever failed
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                for fd in fds:
                    os.close(fd)
            self.socket.send(pickle.dumps(answer))
            self.reap_ended()

    def answer(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        if "start" in request:
            if len(fds) != 1:
                raise ValueError("a start needs its channel")
            pid = _fork_gateway(request["start"], fds[0], self.socket.fileno())
            self.children.add(pid)
            return {"pid": pid}
        pid = int(request.get("reap", request.get("kill", -1)))
        if pid not in self.children and pid not in self.ended:
            raise ValueError(f"no gateway {pid}")
        if "kill" in request:
            _kill(pid)
            return {}
        return {"status": self.reap(pid, float(request.get("timeout_s", 0.0)))}

    def reap(self, pid: int, timeout_s: float) -> str:
        """Wait for ``pid`` to exit (SIGKILL past ``timeout_s``); how it ended."""
        if pid in self.ended:
            return self.ended.pop(pid)
        deadline = time.monotonic() + timeout_s
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.children.discard(pid)
                return _describe(status)
            if time.monotonic() >= deadline:
                _kill(pid)
                _, status = os.waitpid(pid, 0)
                self.children.discard(pid)
                return f"killed: {_describe(status)} after {timeout_s:g} s"
            time.sleep(0.0005)

    def reap_ended(self) -> None:
        """Reap gateways that exited unasked, keeping how (asked for later)."""
        for pid in list(self.children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.children.discard(pid)
                self.ended[pid] = _describe(status)
        while len(self.ended) > 1024:
            self.ended.pop(next(iter(self.ended)))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _fork_gateway(spec: GatewaySpec, channel_fd: int, host_fd: int) -> int:
    """Fork a gateway serving ``spec`` on the channel ``channel_fd``; its process id."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: never returns
        os.close(host_fd)
        channel = socket.socket(fileno=os.dup(channel_fd))
        code = _serve_gateway(spec, channel)
    except BaseException:  # noqa: BLE001 - the child must never return to the host's loop
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(code)


def _serve_gateway(spec: GatewaySpec, channel: socket.socket) -> int:
    """The gateway child: confine itself, serve, stop when asked; its exit code."""
    from spu.sandbox.limits import join_service_cgroups, set_service_rlimits

    die_with_parent()
    spec.folder.mkdir(parents=True, exist_ok=True)
    out = os.open(spec.folder / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    _log_to_file(spec.folder / LOG_FILE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_service_rlimits(spec.confinement)
    gateway = spec.gateway()
    signal.signal(signal.SIGTERM, lambda *_: gateway.request_stop())
    threading.Thread(target=_wait_for_stop, args=(channel, gateway.request_stop),
                     daemon=True).start()

    def ready() -> None:
        _say(channel, {"port": gateway.port, "token": gateway.token})
        # The run's sandbox starts meanwhile; no request is served before it is joined.
        join_service_cgroups(spec.confinement)

    try:
        gateway.serve(ready=ready)
    except BaseException as exc:
        _say(channel, {"error": f"{type(exc).__name__}: {exc}"})
        raise
    _say(channel, {"stopped": True, "notes": gateway.record.notes()})
    return 0


def _wait_for_stop(channel: socket.socket, stop: Callable[[], None]) -> None:
    """Call ``stop`` at ``stop`` on the channel, or at its end (the driver gone)."""
    try:
        while (data := channel.recv(64)) and b"stop" not in data:
            pass
    except OSError:
        pass
    stop()


def _say(channel: socket.socket, message: dict[str, Any]) -> None:
    try:
        channel.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # the driver is gone: the record on disk is what counts


class _CappedFileHandler(logging.FileHandler):
    """A log file that stops at :data:`LOG_BYTES` (a flood of errors cannot fill a disk)."""

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not None and self.stream.tell() >= LOG_BYTES:
            return
        super().emit(record)


def _log_to_file(path: Path) -> None:
    """The gateway process's logging: warnings (and the gateway's own info) to its file."""
    handler = _CappedFileHandler(path, encoding="utf-8", errors="backslashreplace")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("spu.gateway").setLevel(logging.INFO)


def serve_host(fd: int) -> None:
    """The host's loop on the socket ``fd``: warm once, then fork a gateway per request."""
    import gc

    _warm_up()
    gc.freeze()  # what the host holds stays shared with its forks (no copy on a collection)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with socket.socket(fileno=fd) as sock:
        _Host(sock).serve()


def _warm_up() -> None:
    """Serve one request in the host itself (then stop), so that every fork starts warm.

    Starlette, uvicorn, httpx and their backends import much of what they use only when a
    server starts or a request comes (an event loop, a client's transport, the request's
    parsing), and the CA bundle loads once (50 ms): done here once, a run's gateway is a
    fork that pays none of it. The host is single-threaded again when this returns.
    """
    import ctypes  # noqa: F401 - die_with_parent's
    import http.client
    import tempfile

    import spu.sandbox.limits  # noqa: F401 - _serve_gateway's
    from spu.gateway.server import ModelGateway

    with tempfile.TemporaryDirectory(prefix="spu-gateway-warm-") as folder:
        gateway = ModelGateway(Path(folder), upstream="http://127.0.0.1:9", api_model="m")
        gateway.start()
        try:
            connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
            connection.request("POST", "/v1/messages", body=b'{"model": "m", "messages": []}',
                               headers={"x-api-key": gateway.token,
                                        "content-type": "application/json"})
            connection.getresponse().read()
            connection.close()
        except OSError as exc:  # a warm-up only: the forks import what is left
            log.debug("model gateway host: warm-up request failed: %s", exc)
        finally:
            gateway.stop()


def main() -> None:
    """``python -m spu.gateway.process --host FD``: :class:`GatewayHost`'s process."""
    if len(sys.argv) != 3 or sys.argv[1] != "--host" or not sys.argv[2].isdigit():
        sys.exit("usage: python -m spu.gateway.process --host FD (started by GatewayHost)")
    serve_host(int(sys.argv[2]))


if __name__ == "__main__":
    main()
