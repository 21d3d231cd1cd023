"""A private PostgreSQL cluster for tests and benchmarks: ``initdb`` in a temporary folder.

It runs Debian's PostgreSQL (``postgresql`` package: ``/usr/lib/postgresql/<v>/bin``)
as a user other than root (PostgreSQL refuses root: as root it runs as ``postgres``,
or ``nobody``), listens on 127.0.0.1 on a free port with password authentication
(scram-sha-256) and its socket in its own folder, and is removed with that folder at
the end. Nothing of the machine's own PostgreSQL (if any) is touched.

    with PrivatePostgres(Path("/tmp/pg")) as pg:
        uri = pg.sqlalchemy_uri()     # postgresql+psycopg://spu:...@127.0.0.1:PORT/spu
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import time
from pathlib import Path

DATABASE = "spu"
USER = "spu"


def postgres_bin() -> Path | None:
    """The folder of the newest installed PostgreSQL's programs, or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                   else 0)
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def unavailable() -> str | None:
    """Why a private PostgreSQL cannot run here, or None."""
    if postgres_bin() is None:
        return "PostgreSQL is not installed (Debian package postgresql; make test-system-deps)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install 'psycopg[binary]')"
    if os.geteuid() == 0 and _run_as() is None:
        return "running as root with neither a postgres nor a nobody user to run PostgreSQL"
    return None


def _run_as() -> pwd.struct_passwd | None:
    """The user PostgreSQL runs as when we are root."""
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


class PrivatePostgres:
    """A throw-away PostgreSQL cluster under ``folder`` (created, and removed at stop)."""

    def __init__(self, folder: Path, start_timeout_s: float = 120.0) -> None:
        from spu.launch.server import free_port

        self.folder = Path(folder)
        self.port = free_port()
        self.password = secrets.token_urlsafe(24)
        self.start_timeout_s = start_timeout_s
        self.bin = postgres_bin()
        self._started = False

    def _command(self, argv: list[str]) -> tuple[list[str], dict[str, object]]:
        """``argv`` as the PostgreSQL user (ourselves unless we are root)."""
        if os.geteuid() != 0:
            return argv, {}
        user = _run_as()
        assert user is not None
        return argv, {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    def _run(self, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        argv, who = self._command(argv)
        return subprocess.run(argv, capture_output=True, text=True, check=False,
                              env={"PATH": os.defpath, "LC_ALL": "C.UTF-8",
                                   "HOME": str(self.folder)},
                              **who, **kwargs)  # type: ignore[call-overload, no-any-return]

    def start(self) -> PrivatePostgres:
        """initdb, start the server, create the ``spu`` database; returns self."""
        if self.bin is None:
            raise RuntimeError(unavailable() or "PostgreSQL not found")
        self.folder.mkdir(parents=True, exist_ok=True)
        data, sock = self.folder / "data", self.folder / "sock"
        sock.mkdir(exist_ok=True)
        pwfile = self.folder / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            user = _run_as()
            assert user is not None
            for path in (self.folder, sock, pwfile):
                os.chown(path, user.pw_uid, user.pw_gid)
        self.folder.chmod(0o700)
        done = self._run([str(self.bin / "initdb"), "-D", str(data), "-U", USER,
                          f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8",
                          "--no-instructions"])
        pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")
        done = self._run([str(self.bin / "pg_ctl"), "-D", str(data), "-l",
                          str(self.folder / "postgres.log"), "-w",
                          "-t", str(int(self.start_timeout_s)), "-o",
                          f"-p {self.port} -h 127.0.0.1 -k {sock} -c max_connections=200 "
                          f"-c fsync=off -c full_page_writes=off", "start"])
        if done.returncode != 0:
            log = (self.folder / "postgres.log")
            raise RuntimeError(f"PostgreSQL did not start: {done.stderr[-1000:]} "
                               f"{log.read_text()[-2000:] if log.exists() else ''}")
        self._started = True
        self._create_database()
        return self

    def _create_database(self) -> None:
        import psycopg

        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                with psycopg.connect(host="127.0.0.1", port=self.port, user=USER,
                                     password=self.password, dbname="postgres",
                                     autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE {DATABASE}")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def sqlalchemy_uri(self) -> str:
        """The store URI for MLflow (SQLAlchemy with the psycopg driver)."""
        return (f"postgresql+psycopg://{USER}:{self.password}@127.0.0.1:{self.port}/"
                f"{DATABASE}")

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        if self._started and self.bin is not None:
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m",
                       "immediate", "-w", "stop"])
            self._started = False
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
