"""The egress log of a run: a per-run proxy that records every connection, and shell downloads.

The agent gets ``HTTP_PROXY``/``HTTPS_PROXY`` (both spellings) pointing at its own
instance of ``proxy.py`` (a well-kept, dependency-free proxy), a child process on the
host's ``127.0.0.1`` and a free port, with the plugin
:class:`spu.tools.egress_plugin.EgressRecorder` appending one line per connection to
``<run_dir>/tools/egress.jsonl``: ``{"time", "method", "host", "port", "path", "address"}``.
It does not intercept TLS (a ``CONNECT`` tunnel is passed through; only its destination is
known) and blocks nothing on the internet: the paper's environment stays connected and
records rather than refuses (paper 3.7). It runs on the host, though, so it refuses (403,
logged with ``"refused"``) connections to the host's own loopback, private and link-local
addresses, except the endpoints :meth:`EgressProxy.allow` lists (the run's tools service):
otherwise it would be the agent's way to the tracking server or another run's service.
With a model gateway in place it also refuses the model providers' API hosts
(:meth:`EgressProxy.refuse_hosts`, logged with ``"refused": "model provider API..."``).

``requests_outside_tools`` counts the connections to anything other than the model
provider's API and the tools service (:func:`outside_requests`). Downloads started from
the shell (``curl``, ``wget``, ``pip install``, ``git clone``...) are counted apart, from
the trajectory (:func:`count_shell_downloads`): a program that ignores the proxy
variables is not in the egress log, but its command is in the trajectory.

Traps handled here:

- ``proxy.py`` drops a connection idle for ``--timeout`` seconds (10 by default); a
  model's streamed answer can pause longer than that while it thinks, so the proxy runs
  with a long idle timeout;
- the proxy's port is only known once it listens: it writes it (``--port-file``) into a
  named pipe that the forker reads, woken by the port or by the proxy's end (a pidfd),
  and the forker's answer to the start carries it (no file polled for);
- a new interpreter importing ``proxy.py`` costs half a second of CPU, more than the
  rest of a short run: each proxy is forked from a process that imported it once
  (:class:`ProxyForker`);
- the proxy is in its own session (stopped as a group with its workers), so it would
  outlive a runner killed with ``kill -9``: it asks for SIGTERM when its parent, the
  forker, ends, and the forker ends with the runner (its standard input closes);
- a host name and an address are different strings for the same destination: the
  allowed destinations are compared by host name and port as the client asked for them,
  and the tools service is allowed under every address the sandbox may use for the host.

Examples
--------
>>> lines = [{"method": "CONNECT", "host": "api.anthropic.com", "port": 443},
...          {"method": "CONNECT", "host": "pypi.org", "port": 443},
...          {"method": "GET", "host": "10.0.2.2", "port": 41000}]
>>> outside_requests(lines, allowed_hosts={"api.anthropic.com"},
...                  allowed_endpoints={("10.0.2.2", 41000)})
(1, ['pypi.org:443'])
>>> count_shell_downloads(["pip install rdkit && curl -sL https://x.org/a.pdf -o a.pdf",
...                        "git clone https://github.com/o/r", "ls -la"])
3
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from spu.sandbox.process import die_with_parent, exited_unreaped
from spu.schema import TrajectoryStep
from spu.tools.addresses import normal_address

log = logging.getLogger(__name__)

EGRESS_FILE = "egress.jsonl"
PROXY_IDLE_TIMEOUT_S = 900
"""Seconds a connection may stay idle in the proxy (a model may think that long)."""
START_TIMEOUT_S = 60.0
MAX_DESTINATIONS = 100

SHELL_TOOLS = frozenset({"Bash", "exec_command", "local_shell", "shell", "bash"})
"""Tool names of the CLIs' shell tools, whose commands are read for downloads."""

DOWNLOAD_PATTERNS = (
    r"\bcurl\b",
    r"\bwget\b",
    r"\baria2c\b",
    r"\bpip[0-9.]*\s+(?:-\S+\s+)*(?:install|download)\b",
    r"\bpython[0-9.]*\s+-m\s+pip\s+(?:-\S+\s+)*(?:install|download)\b",
    r"\buv\s+(?:pip\s+install|add|sync)\b",
    r"\bconda\s+(?:install|create)\b",
    r"\bmamba\s+(?:install|create)\b",
    r"\bmicromamba\s+(?:install|create)\b",
    r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\b",
    r"\bnpm\s+(?:install|i|ci)\b",
    r"\bgit\s+(?:clone|fetch|pull)\b",
    r"\bhuggingface-cli\s+download\b",
    r"\bhf\s+download\b",
)
"""Shell commands that download (counted once per occurrence)."""

_DOWNLOAD = re.compile("|".join(f"(?:{p})" for p in DOWNLOAD_PATTERNS))
# The same alternation with the three ``(?:-\S+\s+)*`` option chains cut after their
# program: each chain is then walked once (:class:`_Options`), where ``pip -`` repeated
# made every ``pip`` inside an option walk the chain again (quadratic). At one place at
# most one alternative can match (their first letters tell them apart), so a program whose
# options do not end in its word matches nothing there, as in the full pattern.
_INSTALL_OR_DOWNLOAD = re.compile(r"(?:install|download)\b")
_CHAINED = {  # the full alternative -> its program, cut before the options
    r"\bpip[0-9.]*\s+(?:-\S+\s+)*(?:install|download)\b": r"(?P<pip>\bpip[0-9.]*\s++)",
    r"\bpython[0-9.]*\s+-m\s+pip\s+(?:-\S+\s+)*(?:install|download)\b":
        r"(?P<python>\bpython[0-9.]*\s+-m\s+pip\s++)",
    r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\b": r"(?P<apt>\bapt(?:-get)?\s++)",
}
_WORD_AFTER = {"pip": _INSTALL_OR_DOWNLOAD, "python": _INSTALL_OR_DOWNLOAD,
               "apt": re.compile(r"install\b")}
"""The word each cut program's options must end in."""
_DOWNLOAD_OR_PROGRAM = re.compile("|".join(
    _CHAINED.get(p, f"(?:{p})") for p in DOWNLOAD_PATTERNS))
_OPTION = re.compile(r"-\S++\s++")


class _Options:
    r"""Where the options (``-\S+\s+`` repeated) from a place in a command end.

    Each option is read once, however many programs share it.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.end: dict[int, int] = {}

    def __call__(self, at: int) -> int:
        walked = []
        while at not in self.end and (option := _OPTION.match(self.text, at)):
            walked.append(at)
            at = option.end()
        end = self.end.get(at, at)
        for place in walked:
            self.end[place] = end
        return end


def _count_downloads(text: str) -> int:
    """``len(_DOWNLOAD.findall(text))``, in time linear in ``text``."""
    count, at, options = 0, 0, _Options(text)
    while (found := _DOWNLOAD_OR_PROGRAM.search(text, at)) is not None:
        program = found.lastgroup
        if program not in _WORD_AFTER:
            count, at = count + 1, found.end()
            continue
        end = options(found.end())
        word = _WORD_AFTER[program].match(text, end)  # type: ignore[index]
        if word is None:
            at = found.start() + 1
        else:
            count, at = count + 1, word.end()
    return count


class EgressProxyError(RuntimeError):
    """The egress proxy could not start."""


class EgressProxy:
    """One ``proxy.py`` process for one run, recording to ``<folder>/egress.jsonl``."""

    def __init__(self, folder: Path, confinement: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder)
        self.confinement = confinement or {}
        """:meth:`spu.sandbox.limits.ServiceGroup.confinement`: the proxy's limits."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log_path = self.folder / EGRESS_FILE
        self.log_path.touch()
        self._port_fifo = self.folder / "egress.port"
        self._allow_file = self.folder / "egress.allow.json"
        self._allow_file.write_text("[]")
        self._deny_file = self.folder / "egress.deny.json"
        self._deny_file.write_text("[]")
        self._deny_address_file = self.folder / "egress.deny_addresses.json"
        self._deny_address_file.write_text("[]")
        self._deny_lock = threading.Lock()
        self._resolvers: list[threading.Thread] = []
        self.pid: int | None = None
        self.port: int | None = None

    def allow(self, endpoints: Iterable[str]) -> None:
        """Let the agent reach these ``host:port`` on local addresses through the proxy."""
        _add_to(self._allow_file, endpoints)

    def refuse_hosts(self, hosts: Iterable[str]) -> None:
        """Refuse every connection to these host names (403, logged with the reason).

        The model providers' API hosts, once the run has a model gateway: the agent's way
        to its model is the gateway, so a direct connection is refused, not merely counted.
        Compared by name as the client asked (case and a final dot aside), before any DNS
        lookup. Each name is also resolved once, here, where it resolves (each in a thread
        of its own, so that an offline lookup delays nothing): a connection to one of its
        addresses (an address literal, or another name that resolves to it) is refused
        the same way once the lookup has answered.
        """
        names = sorted({h.lower().rstrip(".") for h in hosts if h})
        _add_to(self._deny_file, names)
        for name in names:
            thread = threading.Thread(target=self._refuse_addresses_of, args=(name,),
                                      name=f"spu-egress-resolve-{name}", daemon=True)
            thread.start()
            self._resolvers.append(thread)

    def _refuse_addresses_of(self, name: str) -> None:
        """Add the addresses ``name`` resolves to to the refused ones (none when offline)."""
        try:
            infos = socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            log.debug("provider host %s does not resolve here: %s", name, exc)
            return
        addresses = {normal_address(str(info[4][0])) for info in infos}
        with self._deny_lock:
            _add_to(self._deny_address_file, addresses)

    def wait_resolved(self, timeout_s: float = 5.0) -> None:
        """Wait (at most ``timeout_s``) for the lookups :meth:`refuse_hosts` started."""
        deadline = time.monotonic() + timeout_s
        for thread in self._resolvers:
            thread.join(max(0.0, deadline - time.monotonic()))

    def start(self) -> EgressProxy:
        """Start the proxy; return once it listens.

        Raises:
            EgressProxyError: it did not start (its log is in ``egress.proxy.log``).
        """
        argv = ["--hostname", "127.0.0.1", "--port", "0",
                "--plugins", "spu.tools.egress_plugin.EgressRecorder",
                "--spu-egress-log", str(self.log_path),
                "--spu-allow-file", str(self._allow_file),
                "--spu-deny-file", str(self._deny_file),
                "--spu-deny-address-file", str(self._deny_address_file),
                "--num-acceptors", "1", "--num-workers", "1",
                "--timeout", str(PROXY_IDLE_TIMEOUT_S), "--log-level", "ERROR"]
        log_path = self.folder / "egress.proxy.log"
        self.pid, self.port = ProxyForker.shared().start(argv, log_path, self.confinement,
                                                         self._port_fifo)
        log.info("egress proxy on 127.0.0.1:%d", self.port)
        return self

    def stop(self) -> int | None:
        """Stop the proxy and every process it started; its exit status (None: not running).

        0 when it stopped on the SIGTERM, as asked; negative: killed by that signal.
        """
        pid, self.pid = self.pid, None
        return ProxyForker.shared().stop(pid) if pid is not None else None

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _add_to(path: Path, values: Iterable[str]) -> None:
    """Add ``values`` to the JSON list in ``path``, replaced at once (the proxy reads it live)."""
    current = set(json.loads(path.read_text() or "[]"))
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(sorted(current | set(values))))
    os.replace(partial, path)


def read_egress(path: Path) -> Iterator[dict[str, Any]]:
    """The lines of an egress log (a partial last line is skipped)."""
    if not Path(path).is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict):
                yield entry


def outside_requests(lines: Iterable[dict[str, Any]], allowed_hosts: Iterable[str],
                     allowed_endpoints: Iterable[tuple[str, int]]) -> tuple[int, list[str]]:
    """Connections to anything but the allowed hosts (any port) and endpoints (host, port).

    Returns the count and the distinct ``host:port`` destinations, first seen first (at
    most :data:`MAX_DESTINATIONS`). Host names compare case-insensitively.
    """
    hosts = {h.lower() for h in allowed_hosts}
    endpoints = {(h.lower(), int(p)) for h, p in allowed_endpoints}
    count = 0
    seen: dict[str, None] = {}
    for line in lines:
        host = str(line.get("host") or "").lower().strip("[]")
        try:
            port = int(line.get("port") or 0)
        except (TypeError, ValueError):
            port = 0
        if host in hosts or (host, port) in endpoints:
            continue
        count += 1
        if len(seen) < MAX_DESTINATIONS:
            seen.setdefault(f"{host}:{port}", None)
    return count, list(seen)


def shell_command(arguments: Any) -> str | None:
    """The command line of a shell tool call's arguments (``command``, ``cmd``, argv lists)."""
    if isinstance(arguments, str):
        return arguments
    if not isinstance(arguments, dict):
        return None
    for key in ("command", "cmd"):
        value = arguments.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return " ".join(str(v) for v in value)
    return None


def count_shell_downloads(commands: Iterable[str]) -> int:
    """Download commands in ``commands`` (each occurrence of :data:`DOWNLOAD_PATTERNS`)."""
    return sum(_count_downloads(c) for c in commands)


def shell_downloads(steps: Iterable[TrajectoryStep]) -> int:
    """Download commands in the shell tool calls of a trajectory."""
    commands = (shell_command(call.arguments) for step in steps for call in step.tool_calls
                if call.name in SHELL_TOOLS)
    return count_shell_downloads(c for c in commands if c)


class ProxyForker:
    """A process with ``proxy.py`` imported that forks one proxy per request.

    A new interpreter importing ``proxy.py`` costs half a second of CPU, more than the
    rest of a short run; a fork of this one costs milliseconds. It is a child of the
    process that starts proxies (one per process, :meth:`shared`), single-threaded, and
    answers one JSON line per request on its standard input:

    - ``{"start": ARGV, "log": PATH}``: fork a proxy with ``ARGV`` writing to ``PATH``;
      ``{"pid": PID, "port": PORT}`` once it listens (its port comes through a pipe);
    - ``{"poll": PID}``: ``{"code": CODE}``, null while it runs;
    - ``{"stop": PID}``: SIGTERM to its process group (SIGKILL after 10 s), reaped;
      ``{"code": CODE}``.

    Only it reaps its proxies, so a proxy's process id cannot be reused before it is
    stopped: a signal never reaches another process. Each proxy is in its own session
    and asks for SIGTERM when the forker ends; the forker ends when its standard input
    does, that is when the process that started it ends, ``kill -9`` included.
    """

    _shared: ProxyForker | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "spu.tools.egress", "--fork-server"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    @classmethod
    def shared(cls) -> ProxyForker:
        """This process's forker, started on first use (again if it has ended)."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared._process.poll() is not None:
                cls._shared = cls()
            return cls._shared

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            stdin, stdout = self._process.stdin, self._process.stdout
            assert stdin is not None and stdout is not None
            try:
                stdin.write(json.dumps(request).encode() + b"\n")
                stdin.flush()
                line = stdout.readline()
            except OSError as exc:
                raise EgressProxyError(f"the egress proxy forker is gone: {exc}") from exc
        if not line:
            raise EgressProxyError(f"the egress proxy forker ended (code "
                                   f"{self._process.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise EgressProxyError(f"the egress proxy forker: {answer['error']}")
        return answer

    def start(self, argv: list[str], log_path: Path, confinement: dict[str, Any] | None,
              port_fifo: Path) -> tuple[int, int]:
        """Fork a proxy with ``argv``, its output to ``log_path``; its process id and port.

        Returns once it listens: it writes its port into the named pipe ``port_fifo``
        (made and removed here). ``confinement``
        (:meth:`spu.sandbox.limits.ServiceGroup.confinement`) is applied in the proxy
        before it starts its own processes.

        Raises:
            EgressProxyError: it ended, or did not listen within :data:`START_TIMEOUT_S`.
        """
        answer = self._ask({"start": argv, "log": str(log_path),
                            "confine": confinement or {}, "port_fifo": str(port_fifo)})
        return int(answer["pid"]), int(answer["port"])

    def poll(self, pid: int) -> int | None:
        """The exit code of the proxy ``pid``, or None while it runs."""
        code = self._ask({"poll": pid})["code"]
        return None if code is None else int(code)

    def stop(self, pid: int) -> int | None:
        """Stop the proxy ``pid`` with every process it started; its exit code."""
        code = self._ask({"stop": pid})["code"]
        return None if code is None else int(code)


def _fork_proxy(argv: list[str], output: str, confinement: dict[str, Any] | None = None) -> int:
    """Fork a ``proxy.py`` with ``argv`` in a session of its own, writing to ``output``."""
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: never returns
        os.setsid()
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        die_with_parent()
        if confinement:
            from spu.sandbox.limits import confine_self

            confine_self(confinement)
        from proxy.proxy import entry_point

        sys.argv = ["proxy", *argv]
        entry_point()
        os._exit(0)
    except SystemExit as exc:  # proxy.py's own way out (its SIGTERM handler): no traceback
        os._exit(_exit_code(exc))
    except BaseException:  # noqa: BLE001 - the child must never return to the loop
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def _exit_code(exc: SystemExit) -> int:
    """The status ``sys.exit(code)`` gives a process, its message (if any) on stderr.

    Examples
    --------
    >>> [_exit_code(SystemExit(c)) for c in (None, 0, 3)]
    [0, 0, 3]
    """
    if exc.code is None or isinstance(exc.code, int):
        return int(exc.code or 0)
    print(exc.code, file=sys.stderr, flush=True)
    return 1


def _reap(pid: int) -> int:
    """Kill what is left of the exited proxy's group while its id is held, then reap it."""
    _kill_group(pid)  # its acceptor and workers, if any are left
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _stop_proxy(pid: int) -> int:
    """SIGTERM to the proxy's group, SIGKILL after 10 s; reaped. Its exit code."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if not exited_unreaped(pid, 10):
        _kill_group(pid)
    return _reap(pid)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _start_proxy(request: dict[str, Any], children: set[int]) -> dict[str, Any]:
    """Fork one proxy and read its port from a named pipe: ``{"pid", "port"}``, or an error.

    The wait ends when the port arrives or when the proxy ends (its pidfd), at the latest
    after :data:`START_TIMEOUT_S` (then the proxy is stopped).
    """
    fifo = Path(str(request["port_fifo"]))
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo, 0o600)
    # Open before the fork, without blocking: the proxy's open for writing never waits.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        argv = [*(str(a) for a in request["start"]), "--port-file", str(fifo)]
        pid = _fork_proxy(argv, str(request["log"]), dict(request.get("confine") or {}))
        children.add(pid)
        text = _port_from(reader, pid)
    finally:
        os.close(reader)
        fifo.unlink(missing_ok=True)  # proxy.py's own removal at its end finds nothing
    if text.isdigit():
        return {"pid": pid, "port": int(text)}
    children.discard(pid)
    code = _stop_proxy(pid)
    why = (f"exited with code {code}" if text == "ended"
           else f"did not listen within {START_TIMEOUT_S:g} s")
    return {"error": f"the egress proxy {why} (see {request['log']})"}


def _port_from(reader: int, pid: int) -> str:
    """The port the proxy ``pid`` writes to the pipe ``reader``; "ended" or "" (time out)."""
    process = os.pidfd_open(pid)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        data = b""
        while b"\n" not in data:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([reader, process], [], [], max(0.0, left))
            if reader in ready:
                chunk = os.read(reader, 64)
                if not chunk:  # closed without a whole line: no port will come
                    return "ended"
                data += chunk
                continue
            if process in ready:
                return "ended"
            if not ready:
                return ""
        return data.split(b"\n", 1)[0].decode("ascii", "replace").strip()
    finally:
        os.close(process)


def serve_forks() -> None:
    """The loop of :class:`ProxyForker`: one answer per request line, until EOF."""
    import proxy.proxy  # noqa: F401 - imported once, here, for every fork

    import spu.tools.egress_plugin  # noqa: F401

    # Not tied to its parent's death by a signal: the thread that started it may end
    # long before the process does. Its standard input closing is the end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    children: set[int] = set()
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            if "start" in request:
                answer: dict[str, Any] = _start_proxy(request, children)
            elif int(request.get("poll", request.get("stop", -1))) not in children:
                answer = {"error": f"no proxy {request}"}
            elif "poll" in request:
                pid = int(request["poll"])
                answer = {"code": _reap(pid) if exited_unreaped(pid, 0) else None}
                if answer["code"] is not None:
                    children.discard(pid)
            else:
                pid = int(request["stop"])
                answer = {"code": _stop_proxy(pid)}
                children.discard(pid)
        except (ValueError, TypeError, KeyError, OSError) as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    for pid in children:  # the starter is gone: so are its proxies
        _stop_proxy(pid)


def main() -> None:
    """``python -m spu.tools.egress --fork-server``: :class:`ProxyForker`'s process."""
    if sys.argv[1:] != ["--fork-server"]:
        sys.exit("usage: python -m spu.tools.egress --fork-server (started by ProxyForker)")
    serve_forks()


if __name__ == "__main__":
    main()
