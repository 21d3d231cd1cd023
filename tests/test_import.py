"""``import spu`` stays light: no ray, mlflow or docker at import time."""

import subprocess
import sys

import pytest

HEAVY = ("ray", "mlflow", "docker")


@pytest.mark.parametrize(
    "module",
    ["spu", "spu.schema", "spu.cli", "spu.runner", "spu.grading", "spu.tasks", "spu.main"],
)
def test_import_does_not_load_heavy_dependencies(module: str) -> None:
    code = (
        f"import sys, {module}; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "", f"importing {module} loaded {out.stdout.strip()}"


def test_spu_help_lists_subcommands() -> None:
    out = subprocess.run([sys.executable, "-m", "spu", "--help"], capture_output=True,
                         text=True, check=True)
    assert "grade" in out.stdout
