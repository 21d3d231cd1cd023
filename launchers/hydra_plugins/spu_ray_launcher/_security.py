"""Ray is not an open door: token authentication, or a loud ``insecure: true``.

Whoever reaches a Ray cluster's ports without authentication can run code on every node
as the user Ray runs as, the head (with the answer keys) included; an agent that found
the port did just that. So the launcher:

- starting a local Ray: draws a token for this sweep into a private file (mode 0600 in
  a 0700 folder) and starts Ray with ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH``
  pointing at it; the folder is removed when the sweep ends. (Ray's own default would
  write a token into ``~/.ray/auth_token`` and keep it.)
- joining a cluster: refuses unless this process has ``RAY_AUTH_MODE=token`` and a token
  (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, or
  ``hydra.launcher.init.auth_token_path``), and, once joined, checks that the cluster
  turns away a client without the token (``hydra.launcher.init.verify_auth``);
- ``hydra.launcher.insecure=true`` skips all of that, and every run record says so.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")

INSECURE_NOTE = ("RAY WITHOUT TOKEN AUTHENTICATION (hydra.launcher.insecure=true): whoever "
                 "reaches the cluster's ports can run code on its nodes, the grading side "
                 "included")
"""The note every run record of an insecure sweep carries."""


class RaySecurityError(ValueError):
    """The launcher will not join or start Ray as configured; the message says what to set."""


def _token_available() -> str | None:
    """Where this process's token comes from, or None."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return f"RAY_AUTH_TOKEN_PATH={path}" if Path(path).is_file() and \
            Path(path).read_text().strip() else None
    default = Path.home() / ".ray" / "auth_token"
    return str(default) if default.is_file() and default.read_text().strip() else None


@dataclass
class RayAuth:
    """The authentication a sweep runs Ray under, and what to undo at its end."""

    insecure: bool
    address: str | None
    verify: bool = True
    notes: list[str] = field(default_factory=list)
    """Notes for every run record."""
    token_dir: Path | None = None
    saved_env: dict[str, str | None] = field(default_factory=dict)

    def check_joined(self) -> None:
        """After joining a cluster: refuse one that lets a client in without the token."""
        if self.insecure or not self.address or not self.verify:
            return
        import ray

        gcs = ray.get_runtime_context().gcs_address
        if accepts_without_token(gcs):
            ray.shutdown()
            raise RaySecurityError(
                f"hydra.launcher.init.address={self.address}: the cluster accepts clients "
                f"without a token; start every node with RAY_AUTH_MODE=token and the "
                f"cluster's token (README, 'Sweeps on Ray'), or set "
                f"hydra.launcher.insecure=true")

    def cleanup(self) -> None:
        """Put the environment back and delete this sweep's token."""
        for name, value in self.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self.saved_env:
            refresh_ray_config()
        if self.token_dir is not None:
            shutil.rmtree(self.token_dir, ignore_errors=True)


def refresh_ray_config() -> None:
    """Make this process's Ray read the ``RAY_AUTH_*`` variables again (Ray caches them)."""
    from spu.internals import reload_ray_auth_config

    reload_ray_auth_config()


def _set(auth: RayAuth, name: str, value: str | None) -> None:
    auth.saved_env.setdefault(name, os.environ.get(name))
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def configure_ray_auth(init: Any, insecure: bool) -> RayAuth:
    """Set this process up to start or join Ray with token authentication.

    Raises:
        RaySecurityError: joining a cluster without a token, and not ``insecure``.
    """
    address = str(init.address) if init.address else None
    auth = RayAuth(insecure=insecure, address=address,
                   verify=bool(getattr(init, "verify_auth", True)))
    if insecure:
        auth.notes.append(INSECURE_NOTE)
        if address is None:
            # Ray's default would turn token mode on and keep a token in ~/.ray.
            _set(auth, "RAY_AUTH_MODE", "disabled")
            refresh_ray_config()
        return auth
    token_path = getattr(init, "auth_token_path", None)
    if address is None:
        auth.token_dir = Path(tempfile.mkdtemp(prefix="spu-ray-auth-"))
        auth.token_dir.chmod(0o700)
        token_file = auth.token_dir / "token"
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
        _set(auth, "RAY_AUTH_MODE", "token")
        _set(auth, "RAY_AUTH_TOKEN", None)
        _set(auth, "RAY_AUTH_TOKEN_PATH", str(token_file))
        refresh_ray_config()
        return auth
    if token_path:
        path = Path(str(token_path)).expanduser()
        if not path.is_file():
            raise RaySecurityError(f"hydra.launcher.init.auth_token_path={path}: no such file")
        _set(auth, "RAY_AUTH_MODE", "token")
        _set(auth, "RAY_AUTH_TOKEN", None)
        _set(auth, "RAY_AUTH_TOKEN_PATH", str(path))
    mode = os.environ.get("RAY_AUTH_MODE", "")
    source = _token_available()
    if mode.lower() != "token" or source is None:
        missing = ("RAY_AUTH_MODE=token" if mode.lower() != "token"
                   else "a token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
        auth.cleanup()
        raise RaySecurityError(
            f"hydra.launcher.init.address={address}: refusing to join a Ray cluster without "
            f"token authentication ({missing} is not set here). Start every node with "
            f"RAY_AUTH_MODE=token and the cluster's token, give this process the same (or "
            f"hydra.launcher.init.auth_token_path=FILE), or set hydra.launcher.insecure=true "
            f"to run without (README, 'Sweeps on Ray')")
    refresh_ray_config()
    return auth


PROBE = """
import sys, ray
try:
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
    ray.get(ray.remote(lambda: 1).options(num_cpus=0).remote(), timeout=30)
except Exception:
    sys.exit(3)
sys.exit(0)
"""


def accepts_without_token(gcs_address: str, timeout_s: float = 90.0) -> bool:
    """Whether a client with no token gets into the cluster at ``gcs_address``.

    A separate process tries, with every authentication variable cleared and
    ``RAY_AUTH_MODE=disabled``, and no home folder holding a token.
    """
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARIABLES}
    env["RAY_AUTH_MODE"] = "disabled"
    with tempfile.TemporaryDirectory(prefix="spu-ray-probe-") as home:
        env["HOME"] = home
        try:
            done = subprocess.run([sys.executable, "-c", PROBE, gcs_address], env=env,
                                  capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
    return done.returncode == 0
