"""An MLflow tracking server for the length of a sweep, reachable by the grading side only.

SQLite takes one writer at a time; several writers logging runs into the same file at
once fail with "database is locked" under load. The Ray launcher records runs from its
driver (the grading side) with several threads, so it starts ``mlflow server`` for the
sweep and stops it at the end:

- on the local SQLite store when runs go in parallel (``tracking=mlflow``), or on a
  PostgreSQL database (``tracking=server``: ``tracking.server.backend_store_uri``),
  with artifacts proxied by the server (``--serve-artifacts``) into
  ``tracking.server.artifacts_destination``;
- bound to 127.0.0.1 on a free port: no other machine, and no sandbox with a network
  namespace of its own, can connect;
- behind a per-sweep bearer token (``--app-name spu-token``,
  :mod:`spu.launch.tracking_gate`): a request without it gets 401. The grading side's
  MLflow client sends it (``MLFLOW_TRACKING_TOKEN``).

The backend URI (which may hold a database password) goes to the server in its
environment, never on its command line, where ``ps`` would show it.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from spu.sandbox.process import dying_with_parent, exited_unreaped

log = logging.getLogger(__name__)

PROXIED_ARTIFACT_ROOT = "mlflow-artifacts:/"
"""Artifact root of a server that proxies artifacts: clients upload through it."""


def redact_uri(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` replaced by ``***``.

    Examples:
        >>> redact_uri("postgresql+psycopg://spu:s3cret@db:5432/spu")
        'postgresql+psycopg://spu:***@db:5432/spu'
        >>> redact_uri("tracking.server.backend_store_uri=postgresql://a:b@h/d")
        'tracking.server.backend_store_uri=postgresql://a:***@h/d'
        >>> redact_uri("sqlite:////tmp/mlflow.db")
        'sqlite:////tmp/mlflow.db'
    """
    import re

    return re.sub(r"(://[^:/@\s]+:)[^@/\s]+@", r"\1***@", text)


class TrackingServerError(RuntimeError):
    """The tracking server did not start; the message says why and where its log is."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class TrackingServer:
    """``mlflow server`` for one sweep, as a context manager.

    Args:
        backend_uri: the store to serve (``sqlite:///...`` or ``postgresql+psycopg://...``).
        artifact_root: default artifact root for experiments the server creates
            (ignored when ``artifacts_destination`` is set).
        log_path: where the server's output goes.
        host: interface to bind (127.0.0.1: this machine only).
        workers: server worker processes.
        start_timeout_s: how long to wait for ``/health``.
        artifacts_destination: proxy artifacts (``--serve-artifacts``) into this
            location; clients then log to ``mlflow-artifacts:/``.
        token: require this bearer token on every request (:mod:`spu.launch.tracking_gate`);
            ``"auto"`` draws one; None serves without a credential.
    """

    def __init__(self, backend_uri: str, artifact_root: str, log_path: Path,
                 host: str = "127.0.0.1", workers: int = 1,
                 start_timeout_s: float = 120.0, artifacts_destination: str | None = None,
                 token: str | None = "auto") -> None:
        self.backend_uri = backend_uri
        self.artifact_root = artifact_root
        self.log_path = Path(log_path)
        self.host = host
        self.workers = workers
        self.start_timeout_s = start_timeout_s
        self.artifacts_destination = artifacts_destination
        self.token = secrets.token_urlsafe(32) if token == "auto" else token
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        """The tracking URI clients use."""
        return f"http://{self.host}:{self.port}"

    @property
    def client_artifact_root(self) -> str:
        """The artifact root clients log to: the server's proxy, or the root itself."""
        return PROXIED_ARTIFACT_ROOT if self.artifacts_destination else self.artifact_root

    def client_env(self) -> dict[str, str]:
        """The environment an MLflow client needs to use the server (its credential)."""
        return {"MLFLOW_TRACKING_TOKEN": self.token} if self.token else {}

    @property
    def described_backend(self) -> str:
        """The backend URI without its password, for messages."""
        return redact_uri(self.backend_uri)

    def start(self) -> str:
        """Start the server and wait until it answers; returns its URI."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the server process without waiting (see :meth:`wait_ready`)."""
        from spu.launch.tracking_gate import TOKEN_ENV

        if self.backend_uri.startswith("sqlite:///"):
            from spu.tracking.empty_store import seed_sqlite_store
            from spu.tracking.store import store_lock

            db = Path(self.backend_uri[len("sqlite:///"):])
            db.parent.mkdir(parents=True, exist_ok=True)
            with store_lock(self.backend_uri):
                seed_sqlite_store(db)  # the server need not build the schema
        self.port = free_port(self.host)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "mlflow", "server",
                "--host", self.host, "--port", str(self.port),
                "--workers", str(self.workers)]
        if self.artifacts_destination:
            dest = self.artifacts_destination
            if dest.startswith("file://"):
                Path(dest[len("file://"):]).mkdir(parents=True, exist_ok=True)
            argv += ["--serve-artifacts", "--artifacts-destination", dest,
                     "--default-artifact-root", PROXIED_ARTIFACT_ROOT]
        else:
            argv += ["--no-serve-artifacts", "--default-artifact-root", self.artifact_root]
        # The server's background job runner (AI gateway jobs) is of no use here; the
        # store URI may hold a password: the environment, not the command line.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
               "MLFLOW_BACKEND_STORE_URI": self.backend_uri}
        env.pop("MLFLOW_TRACKING_TOKEN", None)
        if self.token:
            argv += ["--app-name", "spu-token"]
            env[TOKEN_ENV] = self.token
        with open(self.log_path, "ab") as out:
            # A driver killed with SIGKILL cannot stop the server; the kernel tells it.
            self._proc = subprocess.Popen(dying_with_parent(argv), stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=env, start_new_session=True)

    def wait_ready(self) -> str:
        """Wait until the spawned server answers ``/health``; returns its URI."""
        assert self._proc is not None, "spawn() first"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise TrackingServerError(
                    f"mlflow server for {self.described_backend} exited with status "
                    f"{self._proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                    if reply.status == 200:
                        log.info("tracking server %s serves %s", self.uri,
                                 self.described_backend)
                        return self.uri
            except (urllib.error.URLError, OSError):
                time.sleep(0.25)
        self.stop()
        raise TrackingServerError(f"mlflow server for {self.described_backend} did not answer "
                                  f"within "
                                  f"{self.start_timeout_s:.0f} s; see {self.log_path}")

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after ``grace_s``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        # Waited for without being reaped: the last SIGKILL to its group (uvicorn's
        # workers) can only reach them, never a process that took its number since.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            if exited_unreaped(proc.pid, grace_s):
                break
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace_s)

    def exit_status(self) -> int | None:
        """The server's exit status once it has exited on its own, else None."""
        return None if self._proc is None else self._proc.poll()

    def __enter__(self) -> TrackingServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
