"""An MLflow tracking server for the length of a parallel sweep.

SQLite takes one writer at a time; several worker processes logging runs into the
same file at once fail with "database is locked" under load. When a sweep runs jobs
in parallel on a local SQLite store, the launcher starts ``mlflow server`` on that
store (bound to 127.0.0.1 on a free port), points the workers at it, and stops it
when the sweep ends: only the server then writes the file. Artifacts keep going to
the artifact root directly (each experiment records its own artifact location).

On a cluster whose workers are on other machines, run a shared server on a
PostgreSQL database instead and set ``tracking.uri`` to it (see the README).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


class TrackingServerError(RuntimeError):
    """The tracking server did not start; the message says why and where its log is."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # A driver killed with SIGKILL cannot stop the server; the kernel tells it instead.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


class TrackingServer:
    """``mlflow server`` on a SQLite store, as a context manager.

    Args:
        backend_uri: the ``sqlite:///`` store to serve.
        artifact_root: default artifact root for experiments the server creates.
        log_path: where the server's output goes.
        host: interface to bind (127.0.0.1: this machine only).
        workers: server worker processes.
        start_timeout_s: how long to wait for ``/health``.
    """

    def __init__(self, backend_uri: str, artifact_root: str, log_path: Path,
                 host: str = "127.0.0.1", workers: int = 1,
                 start_timeout_s: float = 120.0) -> None:
        self.backend_uri = backend_uri
        self.artifact_root = artifact_root
        self.log_path = Path(log_path)
        self.host = host
        self.workers = workers
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        """The tracking URI workers use."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Start the server and wait until it answers; returns its URI."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the server process without waiting (see :meth:`wait_ready`)."""
        if self.backend_uri.startswith("sqlite:///"):
            Path(self.backend_uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.host)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "mlflow", "server",
                "--backend-store-uri", self.backend_uri,
                "--default-artifact-root", self.artifact_root,
                "--host", self.host, "--port", str(self.port),
                "--workers", str(self.workers)]
        # The server's background job runner (AI gateway jobs) is of no use here.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True,
                                          preexec_fn=_die_with_parent)

    def wait_ready(self) -> str:
        """Wait until the spawned server answers ``/health``; returns its URI."""
        assert self._proc is not None, "spawn() first"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise TrackingServerError(
                    f"mlflow server for {self.backend_uri} exited with status "
                    f"{self._proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                    if reply.status == 200:
                        log.info("tracking server %s serves %s", self.uri, self.backend_uri)
                        return self.uri
            except (urllib.error.URLError, OSError):
                time.sleep(0.25)
        self.stop()
        raise TrackingServerError(f"mlflow server for {self.backend_uri} did not answer within "
                                  f"{self.start_timeout_s:.0f} s; see {self.log_path}")

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after ``grace_s``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace_s)
                break
            except subprocess.TimeoutExpired:
                continue
        # The group's other processes (uvicorn) exit with their parent; reap ours.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace_s)

    def __enter__(self) -> TrackingServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
