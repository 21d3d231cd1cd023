"""Private Hydra, Ray and MLflow APIs are reached through one module that checks versions."""

from __future__ import annotations

import ast
import re

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


PRIVATE = re.compile(r"^(ray|hydra|mlflow)(\.\w+)*\._(?!_)|\._tracking_client\b")
"""A private module or name of Ray, Hydra or MLflow (``ray._raylet``, ``hydra._internal``,
``mlflow.tracking._tracking_service``), or the MLflow client's private ``_tracking_client``."""


def private_uses(text: str) -> list[int]:
    """Lines of ``text`` importing or reading a private Ray, Hydra or MLflow name."""
    found = []
    for node in ast.walk(ast.parse(text)):
        name = None
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
        elif isinstance(node, ast.Import):
            name = " ".join(alias.name for alias in node.names)
        elif isinstance(node, ast.Attribute):
            name = ast.unparse(node)
        if name and any(PRIVATE.search(part) for part in name.split()):
            found.append(node.lineno)
    return sorted(set(found))


def test_the_check_finds_each_kind_of_private_name() -> None:
    """The check below sees the names this module hides, however they are reached."""
    text = ("from ray._raylet import Config\nimport hydra._internal.utils\n"
            "from mlflow.tracking._tracking_service.utils import _use_tracking_uri\n"
            "x = ray._private.worker\nclient._tracking_client.store\n"
            "from ray.exceptions import RayError\nimport mlflow.tracking\n")
    assert private_uses(text) == [1, 2, 3, 4, 5]


def test_no_other_module_reaches_a_private_api() -> None:
    """Only spu/internals.py imports or reads a private name of Ray, Hydra or MLflow."""
    found = [f"{path.relative_to(ROOT)}:{line}" for path in project_files()
             for line in private_uses(path.read_text(encoding="utf-8"))]
    assert found and all(f.startswith("spu/internals.py") for f in found), found


@pytest.mark.parametrize("call", [internals.reload_ray_auth_config,
                                  lambda: internals.open_mlflow_store(object()),
                                  lambda: internals.mlflow_tracking_uri("x").__enter__()])
def test_the_raylet_and_mlflow_names_are_behind_the_version_check(monkeypatch, call) -> None:
    """An unsupported Ray or MLflow stops before its private name is touched, saying so."""
    monkeypatch.setattr(internals, "version", lambda name: "9.0.0")
    with pytest.raises(UnsupportedVersion, match=r"is a private API of (ray|mlflow): SPU "
                                                 r"needs (ray>=2.9,<3.0|mlflow>=3.17,<4.0)"):
        call()


def test_mlflow_tracking_uri_is_set_inside_the_block_only(tmp_path) -> None:
    """The current tracking URI is the block's inside it and the earlier one after it."""
    import mlflow

    before = mlflow.get_tracking_uri()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with internals.mlflow_tracking_uri(uri):
        assert mlflow.get_tracking_uri() == uri
    assert mlflow.get_tracking_uri() == before
