"""Ray is not an open door: the launcher's authentication setup, without starting Ray."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra_plugins.spu_ray_launcher._security import (
    AUTH_VARIABLES,
    INSECURE_NOTE,
    RaySecurityError,
    configure_ray_auth,
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in AUTH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    return tmp_path


def init(**values: object) -> SimpleNamespace:
    base = {"address": None, "auth_token_path": None, "verify_auth": True}
    return SimpleNamespace(**{**base, **values})


def test_joining_a_cluster_without_a_token_is_refused(clean_env: Path) -> None:
    with pytest.raises(RaySecurityError, match="refusing to join a Ray cluster without token "
                                               "authentication.*insecure=true"):
        configure_ray_auth(init(address="10.0.0.1:6379"), insecure=False)
    assert "RAY_AUTH_MODE" not in os.environ


def test_joining_with_a_token_file_sets_token_mode(clean_env: Path) -> None:
    token = clean_env / "token"
    token.write_text("0123456789abcdef0123456789abcdef")
    auth = configure_ray_auth(init(address="auto", auth_token_path=str(token)), insecure=False)
    try:
        assert os.environ["RAY_AUTH_MODE"] == "token"
        assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(token)
        assert auth.notes == []
    finally:
        auth.cleanup()
    assert "RAY_AUTH_MODE" not in os.environ and "RAY_AUTH_TOKEN_PATH" not in os.environ


def test_a_local_ray_gets_a_private_token_removed_at_the_end(clean_env: Path) -> None:
    auth = configure_ray_auth(init(), insecure=False)
    path = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
    try:
        assert os.environ["RAY_AUTH_MODE"] == "token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert len(path.read_text()) == 64
        assert not (clean_env / ".ray").exists()  # Ray's default would keep one there
    finally:
        auth.cleanup()
    assert not path.exists() and "RAY_AUTH_MODE" not in os.environ


def test_insecure_is_said_on_every_record(clean_env: Path) -> None:
    auth = configure_ray_auth(init(address="10.0.0.1:6379"), insecure=True)
    try:
        assert auth.notes == [INSECURE_NOTE]
    finally:
        auth.cleanup()
