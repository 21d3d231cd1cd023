"""SPU: run the Science Prediction Universe benchmark.

Importing ``spu`` stays light: no ray, mlflow or docker at import time. Each stage
lives in its own subpackage (tasks, sandbox, harness, grading, tracking, cost, stats,
report) and imports only the stages before it and :mod:`spu.schema`.

``spu.__version__`` is the installed distribution's version (``pyproject.toml``'s, read
from the package metadata on first use: reading it costs a scan of the installed
distributions, which ``import spu`` does not pay).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("spu")
        except PackageNotFoundError:  # a source tree on sys.path, never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module 'spu' has no attribute {name!r}")
