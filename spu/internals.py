"""The private Hydra, Ray and MLflow APIs SPU relies on, behind one door that checks versions.

Hydra, Ray and MLflow keep these out of their public API (``hydra._internal``,
``ray._private``, ``ray._raylet``, ``mlflow.tracking._tracking_service``, the client's
``_tracking_client``), so they may change in any release. Each is reached only through
a function here, which first checks that the installed library is a version these calls
were written against and otherwise says which one SPU needs. Nothing is imported at module import.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

SUPPORTED: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "hydra-core": ((1, 3), (1, 4)),
    "ray": ((2, 9), (3, 0)),
    "mlflow": ((3, 17), (4, 0)),
}
"""Distribution -> (lowest, first unsupported) major.minor whose private APIs are used here;
the same ranges as ``pyproject.toml``."""


class UnsupportedVersion(RuntimeError):
    """The installed library is not a version whose private API SPU was written against."""


def _major_minor(text: str) -> tuple[int, int]:
    parts = (text.split(".") + ["0"])[:2]
    return int("".join(c for c in parts[0] if c.isdigit()) or 0), int(
        "".join(c for c in parts[1] if c.isdigit()) or 0)


def require(distribution: str, what: str) -> str:
    """Check that ``distribution`` is installed in a supported version; return the version.

    Args:
        distribution: ``hydra-core``, ``ray`` or ``mlflow``.
        what: the private API about to be used, for the message.

    Raises:
        UnsupportedVersion: naming the installed version and the range SPU needs.

    Examples:
        >>> require("hydra-core", "BasicSweeper").startswith("1.3")
        True
    """
    low, high = SUPPORTED[distribution]
    needed = f"{distribution}>={low[0]}.{low[1]},<{high[0]}.{high[1]}"
    try:
        installed = version(distribution)
    except PackageNotFoundError:
        raise UnsupportedVersion(f"{what} needs {needed}, which is not installed "
                                 f"(pip install '{needed}')") from None
    if not low <= _major_minor(installed) < high:
        raise UnsupportedVersion(f"{what} is a private API of {distribution}: SPU needs "
                                 f"{needed}, {installed} is installed")
    return installed


HYDRA_BASIC_LAUNCHER_LOGGER = "hydra._internal.core_plugins.basic_launcher"
"""The logger Hydra's basic launcher says each launched job on. Only its level is set (no
version check: a logger of another name is left as it is, nothing fails)."""


def basic_sweeper() -> type:
    """Hydra's ``BasicSweeper`` class (``hydra._internal.core_plugins.basic_sweeper``)."""
    require("hydra-core", "hydra._internal.core_plugins.basic_sweeper.BasicSweeper")
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def split_sweep_arguments(overrides: list[Any], max_batch_size: int | None) -> list[list[Any]]:
    """The job batches Hydra's basic sweeper makes of parsed sweep overrides."""
    return basic_sweeper().split_arguments(overrides, max_batch_size)  # type: ignore[attr-defined, no-any-return]


def run_hydra(task_function: Callable[[Any], Any], args: Sequence[str], config_path: str,
              config_name: str, version_base: str) -> None:
    """Run a Hydra application on ``args`` as ``@hydra.main`` would on ``sys.argv``.

    The public decorator reads ``sys.argv`` itself; this runs the same steps on the
    command line the caller has already parsed, so ``sys.argv`` is never rewritten.
    ``config_path`` is relative to the file of ``task_function``, as with the decorator.
    """
    require("hydra-core", "hydra._internal.utils._run_hydra")
    from hydra import version as hydra_version
    from hydra._internal.utils import _run_hydra, get_args_parser

    hydra_version.setbase(version_base)
    parser = get_args_parser()
    parsed: argparse.Namespace = parser.parse_args(list(args))
    if parsed.experimental_rerun is not None:
        parser.error("--experimental-rerun is not supported by spu")
    _run_hydra(args=parsed, args_parser=parser, task_function=task_function,
               config_path=config_path, config_name=config_name)


def ray_session_dir() -> str:
    """The session folder of the local Ray node this process started (``ray.init`` done).

    Raises:
        RuntimeError: No local Ray node in this process.
    """
    require("ray", "ray._private.worker._global_node")
    import ray

    node = ray._private.worker._global_node
    if node is None:
        raise RuntimeError("no local Ray node in this process: call ray.init() first")
    return str(node.get_session_dir_path())


def reload_ray_auth_config() -> None:
    """Make this process's Ray read the ``RAY_AUTH_*`` variables again (Ray caches them).

    Uses ``ray._raylet.Config`` and ``ray._raylet.AuthenticationTokenLoader``.
    """
    require("ray", "ray._raylet.AuthenticationTokenLoader")
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def open_mlflow_store(client: Any) -> None:
    """Open the tracking store of an ``MlflowClient`` now (a SQLite store creates its schema).

    MLflow opens it lazily, on the first call, through the private ``_tracking_client``.
    """
    require("mlflow", "MlflowClient._tracking_client")
    client._tracking_client.store  # noqa: B018 - the property opens the store


@contextmanager
def mlflow_tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's current tracking URI is ``uri`` inside the block, as before after it.

    Uses ``mlflow.tracking._tracking_service.utils._use_tracking_uri``.
    """
    require("mlflow", "mlflow.tracking._tracking_service.utils._use_tracking_uri")
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    with _use_tracking_uri(uri):
        yield
