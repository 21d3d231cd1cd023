"""The egress log of a run: a per-run proxy that records every connection, and shell downloads.

The agent gets ``HTTP_PROXY``/``HTTPS_PROXY`` (both spellings) pointing at its own
instance of ``proxy.py`` (a well-kept, dependency-free proxy), run as a child process on
the host's ``127.0.0.1`` and a free port, with the plugin
:class:`spu.tools.egress_plugin.EgressRecorder` appending one line per connection to
``<run_dir>/tools/egress.jsonl``: ``{"time", "method", "host", "port", "path", "address"}``.
It does not intercept TLS (a ``CONNECT`` tunnel is passed through; only its destination is
known) and blocks nothing on the internet: the paper's environment stays connected and
records rather than refuses (paper 3.7). It runs on the host, though, so it refuses (403,
logged with ``"refused"``) connections to the host's own loopback, private and link-local
addresses, except the endpoints :meth:`EgressProxy.allow` lists (the run's tools service):
otherwise it would be the agent's way to the tracking server or another run's service.

``requests_outside_tools`` counts the connections to anything other than the model
provider's API and the tools service (:func:`outside_requests`). Downloads started from
the shell (``curl``, ``wget``, ``pip install``, ``git clone``...) are counted apart, from
the trajectory (:func:`count_shell_downloads`): a program that ignores the proxy
variables is not in the egress log, but its command is in the trajectory.

Traps handled here:

- ``proxy.py`` drops a connection idle for ``--timeout`` seconds (10 by default); a
  model's streamed answer can pause longer than that while it thinks, so the proxy runs
  with a long idle timeout;
- the proxy's port is only known once it listens: it writes it to a file
  (``--port-file``), which the runner waits for;
- the proxy is a child process in its own session (stopped as a group with its workers),
  so it would outlive a runner killed with ``kill -9``: it asks for SIGTERM when its parent
  dies (:func:`main`);
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
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from spu.schema import TrajectoryStep

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


class EgressProxyError(RuntimeError):
    """The egress proxy could not start."""


class EgressProxy:
    """One ``proxy.py`` process for one run, recording to ``<folder>/egress.jsonl``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log_path = self.folder / EGRESS_FILE
        self.log_path.touch()
        self._port_file = self.folder / "egress.port"
        self._allow_file = self.folder / "egress.allow.json"
        self._allow_file.write_text("[]")
        self._process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    def allow(self, endpoints: Iterable[str]) -> None:
        """Let the agent reach these ``host:port`` on local addresses through the proxy."""
        current = set(json.loads(self._allow_file.read_text() or "[]"))
        partial = self._allow_file.with_suffix(".partial")
        partial.write_text(json.dumps(sorted(current | set(endpoints))))
        os.replace(partial, self._allow_file)

    def start(self) -> EgressProxy:
        """Start the proxy and wait until it listens.

        Raises:
            EgressProxyError: it did not start (its log is in ``egress.proxy.log``).
        """
        self._port_file.unlink(missing_ok=True)
        # Started through main(): it asks to die with its parent, then runs proxy.py
        # (not a preexec_fn: the runner has threads by then).
        argv = [sys.executable, "-m", "spu.tools.egress", "--hostname", "127.0.0.1",
                "--port", "0",
                "--port-file", str(self._port_file),
                "--plugins", "spu.tools.egress_plugin.EgressRecorder",
                "--spu-egress-log", str(self.log_path),
                "--spu-allow-file", str(self._allow_file),
                "--num-acceptors", "1", "--num-workers", "1",
                "--timeout", str(PROXY_IDLE_TIMEOUT_S), "--log-level", "ERROR"]
        output = open(self.folder / "egress.proxy.log", "wb")  # noqa: SIM115 - kept by the child
        try:
            self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output,
                                             stderr=subprocess.STDOUT, start_new_session=True,
                                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        finally:
            output.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EgressProxyError(f"the egress proxy exited with code "
                                       f"{self._process.returncode} (see "
                                       f"{self.folder / 'egress.proxy.log'})")
            text = self._port_file.read_text().strip() if self._port_file.exists() else ""
            if text.isdigit():
                self.port = int(text)
                log.info("egress proxy on 127.0.0.1:%d", self.port)
                return self
            time.sleep(0.05)
        self.stop()
        raise EgressProxyError(f"the egress proxy did not listen within {START_TIMEOUT_S:g} s")

    def stop(self) -> None:
        """Stop the proxy and every process it started."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
    return sum(len(_DOWNLOAD.findall(c)) for c in commands)


def shell_downloads(steps: Iterable[TrajectoryStep]) -> int:
    """Download commands in the shell tool calls of a trajectory."""
    commands = (shell_command(call.arguments) for step in steps for call in step.tool_calls
                if call.name in SHELL_TOOLS)
    return count_shell_downloads(c for c in commands if c)


def main() -> None:
    """``python -m spu.tools.egress ARGS``: ``proxy.py`` with ARGS, dying with its parent.

    The proxy is in its own session (the runner stops it as a group), so it would outlive
    a runner killed with ``kill -9``; on Linux it asks for SIGTERM when its parent dies.
    """
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
        except OSError:
            pass
        if os.getppid() == 1:  # the parent died before the request
            return
    from proxy.proxy import entry_point

    entry_point()


if __name__ == "__main__":
    main()
