"""Private Hydra and Ray APIs are reached through one module that checks versions."""

from __future__ import annotations

import ast

import pytest

import spu.internals as internals
from spu.internals import UnsupportedVersion, require
from tests.test_layering import ROOT, project_files


def test_a_supported_version_passes_and_an_unsupported_one_names_the_range(monkeypatch) -> None:
    """The message names the private API, the range SPU needs and what is installed."""
    assert require("hydra-core", "BasicSweeper").startswith("1.3")
    monkeypatch.setattr(internals, "version", lambda name: "1.4.0")
    with pytest.raises(UnsupportedVersion, match=r"SPU needs hydra-core>=1.3,<1.4, 1.4.0 is"):
        require("hydra-core", "hydra._internal.utils._run_hydra")


def test_a_missing_library_says_what_to_install(monkeypatch) -> None:
    """Without Ray installed (no ``ray`` extra), the reaper says which Ray it needs."""
    from importlib.metadata import PackageNotFoundError

    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(internals, "version", missing)
    with pytest.raises(UnsupportedVersion, match=r"pip install 'ray>=2.9,<3.0'"):
        internals.ray_session_dir()


def test_the_sweeper_is_hydras_basic_sweeper() -> None:
    """The sweeper plugin subclasses the class the door hands out."""
    from hydra_plugins.spu_sweeper import SPUSweeper

    assert issubclass(SPUSweeper, internals.basic_sweeper())


def test_no_other_module_reaches_a_private_api() -> None:
    """Only spu/internals.py imports or reads ``hydra._internal`` or ``ray._private``."""
    found = []
    for path in project_files():
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            name = None
            if isinstance(node, ast.ImportFrom):
                name = node.module or ""
            elif isinstance(node, ast.Attribute):
                name = ast.unparse(node)
            if name and ("hydra._internal" in name or "ray._private" in name):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found and all(f.startswith("spu/internals.py") for f in found), found
