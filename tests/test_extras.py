"""The core install: ``import spu`` and the statistics work without any extra."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.conftest import REPO

EXTRA_MODULES = ("ray", "docker", "psycopg", "pynvml", "trafilatura")
"""What the extras ``ray``, ``docker``, ``postgres``, ``gpu`` and ``web`` install."""

BLOCKED = f"""
import importlib.abc, sys
BLOCKED = {EXTRA_MODULES!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (extra not installed)")
        return None
sys.meta_path.insert(0, Block())
"""


def run_without_extras(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where the extras' modules cannot be imported."""
    return subprocess.run([sys.executable, "-c", BLOCKED + code], capture_output=True,
                          text=True, cwd=REPO, timeout=300)


def test_spu_and_the_statistics_import_without_the_extras() -> None:
    """The statistics, analysis and report modules need none of the extras."""
    proc = run_without_extras(
        "import spu, spu.cli, spu.stats.cli, spu.stats.analysis, spu.report.build, "
        "spu.grading, spu.tasks.package\n"
        f"assert not [m for m in {EXTRA_MODULES!r} if m in sys.modules]\nprint('ok')")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_stats_command_runs_without_the_extras() -> None:
    """``spu stats --help`` (the command line of the statistics) starts on a core install."""
    proc = run_without_extras("from spu.cli import main\nraise SystemExit(main(['stats', "
                              "'--help']))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage" in proc.stdout


def test_the_block_really_blocks() -> None:
    """The blocking finder itself works (so the tests above prove something)."""
    proc = run_without_extras("import ray")
    assert proc.returncode != 0 and "extra not installed" in proc.stderr


def test_pyproject_declares_the_extras() -> None:
    """Core dependencies hold none of the extras; ``all`` is every extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    extras = project["optional-dependencies"]
    for name in ("ray", "docker", "psycopg", "nvidia-ml-py", "trafilatura"):
        assert name not in core
    assert set(extras) >= {"docker", "ray", "postgres", "gpu", "web", "all"}
    assert extras["all"] == ["spu[docker,ray,postgres,gpu,web]"]
