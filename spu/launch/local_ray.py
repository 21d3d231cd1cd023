"""A Ray already running for this user on this machine, which a local sweep joins.

Starting a local Ray costs seconds (4.5 s of a 30-run sweep here). A user who sweeps
often keeps one up (``ray start --head``, docs/ray.md) and each local sweep joins it;
otherwise the sweep starts its own and says why it did not join one.

A Ray is joined only when all of this holds, read from the processes themselves
(``/proc``, nothing is asked of Ray):

- its GCS server is a process of this user (``/proc/<pid>``'s owner), of the Ray temporary
  folder the sweep asks for (``hydra.launcher.init.temp_dir``), and the only such one;
- it was started by ``ray start`` (which records its address in that folder's
  ``ray_current_cluster``; a driver's ``ray.init`` does not): another sweep's own Ray,
  which ends with that sweep, is never joined;
- it runs with token authentication (``RAY_AUTH_MODE=token`` in its own environment) and
  its token is a file (``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``) this process can
  read: the sweep joins with that token, so a Ray that lets a client in without one is
  never joined;
- its raylet offers sandbox slots (``--resources='{"sandbox_slot": N}'``).

Joined, the Ray is left running at the sweep's end (it was there before), and no reaper is
set on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
SANDBOX_SLOT = "sandbox_slot"


@dataclass(frozen=True)
class LocalRay:
    """What a local sweep found: a Ray to join (``address``), or why it starts its own."""

    address: str | None
    """``ip:port`` of the GCS to join; None: start a Ray of its own."""
    token_path: str | None = None
    """The token file the Ray was started with (the sweep joins with it)."""
    slots: float = 0.0
    """Sandbox slots its raylet offers."""
    why: str = ""
    """Why none is joined, or what was found (one line)."""


@dataclass(frozen=True)
class _Process:
    pid: int
    argv: list[str]
    environ: dict[str, str]

    def flag(self, name: str) -> str | None:
        """The value of ``--name=value`` on the command line."""
        prefix = f"--{name}="
        return next((a[len(prefix):] for a in self.argv if a.startswith(prefix)), None)


def _own_processes(named: str, proc: Path) -> list[_Process]:
    """This user's processes whose program is ``named``, with their argv and environment."""
    found = []
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            argv = [a.decode(errors="replace") for a in
                    (entry / "cmdline").read_bytes().split(b"\0") if a]
            if not argv or Path(argv[0]).name != named:
                continue
            environ = dict(item.decode(errors="replace").partition("=")[::2] for item in
                           (entry / "environ").read_bytes().split(b"\0") if b"=" in item)
        except OSError:  # ended meanwhile, or not readable
            continue
        found.append(_Process(int(entry.name), argv, environ))
    return found


def _slots(raylet: _Process) -> float:
    """The sandbox slots in a raylet's ``--static_resource_list=name,amount,...``."""
    items = (raylet.flag("static_resource_list") or raylet.flag("resource_list") or "").split(",")
    for name, amount in zip(items[::2], items[1::2], strict=False):
        if name == SANDBOX_SLOT:
            try:
                return float(amount)
            except ValueError:
                return 0.0
    return 0.0


def _token_file(gcs: _Process) -> tuple[str | None, str]:
    """The token file a GCS runs with, or None and why it cannot be joined."""
    if gcs.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return None, "it runs without token authentication (RAY_AUTH_MODE=token)"
    path = gcs.environ.get("RAY_AUTH_TOKEN_PATH")
    if not path and gcs.environ.get("RAY_AUTH_TOKEN"):
        return None, "its token was given inline (RAY_AUTH_TOKEN), not as a file"
    if not path:
        path = str(Path(gcs.environ.get("HOME", str(Path.home()))) / ".ray" / "auth_token")
    try:
        if not Path(path).read_text().strip():
            return None, f"its token file {path} is empty"
    except OSError as exc:
        return None, f"its token file {path} cannot be read here ({exc.strerror})"
    return path, ""


def _address(gcs: _Process) -> str:
    return f"{gcs.flag('node-ip-address') or '127.0.0.1'}:{gcs.flag('gcs_server_port')}"


def _temp_dir(gcs: _Process) -> Path:
    """The Ray temporary folder of a GCS (its ``--log_dir`` is ``<temp>/session_.../logs``)."""
    logs = Path(gcs.flag("log_dir") or "/")
    return logs.parents[1] if len(logs.parents) > 1 else logs


def _started_by_ray_start(gcs: _Process) -> bool:
    """Whether ``ray start`` recorded this GCS as its folder's current cluster."""
    try:
        recorded = (_temp_dir(gcs) / "ray_current_cluster").read_text().strip()
    except OSError:
        return False
    return recorded == _address(gcs)


def find_local_ray(temp_dir: str | None = None, proc: Path = PROC) -> LocalRay:
    """The Ray of this user on this machine that a local sweep may join (module docstring).

    Args:
        temp_dir: the sweep's ``hydra.launcher.init.temp_dir`` (None: any).
        proc: where the processes are listed (a parameter for tests).
    """
    wanted = Path(temp_dir).expanduser().resolve() if temp_dir else None
    servers = [g for g in _own_processes("gcs_server", proc)
               if _started_by_ray_start(g) and (wanted is None or _temp_dir(g) == wanted)]
    if not servers:
        where = f" with the temporary folder {wanted}" if wanted else ""
        return LocalRay(None, why=f"no Ray of this user started by 'ray start' runs on this "
                                  f"machine{where}")
    if len(servers) > 1:
        return LocalRay(None, why=f"{len(servers)} Rays of this user run here; set "
                                  f"hydra.launcher.init.address to the one to join")
    gcs = servers[0]
    address = _address(gcs)
    token, why = _token_file(gcs)
    if token is None:
        return LocalRay(None, why=f"the Ray at {address} is not joined: {why}")
    session = gcs.flag("session-name")
    # The raylet names its session in its sockets' paths and its workers' command line.
    slots = max((_slots(r) for r in _own_processes("raylet", proc)
                 if session is not None and any(session in a for a in r.argv)), default=0.0)
    if slots <= 0:
        return LocalRay(None, why=f"the Ray at {address} offers no sandbox slot (start it "
                                  f"with --resources='{{\"{SANDBOX_SLOT}\": N}}')")
    return LocalRay(address, token, slots, why=f"this user's Ray at {address}")
