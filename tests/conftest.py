"""Shared fixtures: the real ``conf/`` composed and shrunk (tracking to a temporary folder)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from spu.testing.postgres import PrivatePostgres

REPO = Path(__file__).resolve().parents[1]

# A local sweep joins this user's Ray started by `ray start` (hydra.launcher.join_local):
# in the suite that would be a test's multi-node cluster, alive while tests of another file
# run beside it. The suite's sweeps start Rays of their own; the join test asks for it.
os.environ.setdefault("SPU_RAY_JOIN_LOCAL", "false")
TASKS = REPO / "tasks"
EXAMPLE_TASK = TASKS / "example-coupling-conditions"
EXAMPLE_TWO_GROUPS = TASKS / "example-electrolytes-and-films"


REMOVABLE_DEPTH = 200
"""Folders this many levels under a session's temporary root are removed when it ends:
pytest removes old sessions' roots with ``shutil.rmtree``, which recurses once a level
and dies with RecursionError past about 990 (a red-team agent leaves 1,500)."""


def remove_deep_trees(root: Path, depth: int = REMOVABLE_DEPTH) -> list[Path]:
    """Remove (``rm -rf``) every folder ``depth`` levels under ``root``; those removed.

    Walked with a stack, links unfollowed, never deeper than ``depth``: what is left is a
    tree any later session's clean-up can remove.
    """
    from spu.sandbox.disk import remove_tree

    removed, pending = [], [(Path(root), 0)]
    while pending:
        folder, level = pending.pop()
        if level >= depth:
            remove_tree(folder)
            removed.append(folder)
            continue
        try:
            with os.scandir(folder) as entries:
                pending += [(Path(e.path), level + 1) for e in entries
                            if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    return removed


@pytest.fixture(scope="session", autouse=True)
def _leave_no_tree_too_deep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of each session (each xdist worker's too), remove what pytest's own
    clean-up of old temporary roots could not (:func:`remove_deep_trees`): a later session
    on the same machine must still end with exit status 0."""
    yield
    removed = remove_deep_trees(tmp_path_factory.getbasetemp())
    if removed:
        print(f"\nremoved {len(removed)} folder(s) deeper than {REMOVABLE_DEPTH} levels under "
              f"{tmp_path_factory.getbasetemp()}", file=sys.stderr)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture
def example_task() -> Path:
    return EXAMPLE_TASK


@pytest.fixture
def two_group_task() -> Path:
    return EXAMPLE_TWO_GROUPS


@pytest.fixture
def compose(tmp_path: Path) -> Iterator[Callable[..., object]]:
    """Compose the real configuration with overrides; outputs go to a temporary folder."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import spu.main  # noqa: F401  (registers the schema)

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):

        def _compose(*overrides: str, return_hydra_config: bool = False) -> object:
            return hydra_compose(
                config_name="config",
                overrides=[f"output_root={tmp_path / 'outputs'}", *overrides],
                return_hydra_config=return_hydra_config,
            )

        yield _compose
    GlobalHydra.instance().clear()


def run_module(args: list[str], cwd: Path = REPO, env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ...`` with this interpreter, capturing text output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def nesting(value: object) -> int:
    """How deep the arrays and objects of ``value`` nest (walked without recursion)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            pending += [(c, depth + 1) for c in (item.values() if isinstance(item, dict)
                                                 else item)]
    return deepest


def have_bwrap() -> bool:
    return shutil.which("bwrap") is not None


def baseline_run_key(task_dir: Path, model: str = "random", repeat: int = 0) -> str:
    """The run key of a baseline (``harness=baseline effort=none``) on the task in ``task_dir``."""
    from spu.config import EffortConfig, HarnessConfig, ModelConfig, ToolsConfig
    from spu.identity import identity_for, run_key
    from spu.tasks.package import load_meta

    meta = load_meta(task_dir)
    return run_key(identity_for(ModelConfig(name=model, provider="baseline"),
                                HarnessConfig(name="baseline"), EffortConfig(name="none"),
                                ToolsConfig(), task_dir, meta.id, meta.version, repeat))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL cluster for the session, shared by the tracking and launcher
    tests of a worker (skipped where PostgreSQL is missing)."""
    from spu.testing.postgres import PrivatePostgres, unavailable

    why = unavailable()
    if why:
        pytest.skip(f"PostgreSQL tracking: {why}")
    # Under /tmp itself: PostgreSQL runs as another user, who cannot enter pytest's folders.
    with PrivatePostgres(Path(tempfile.mkdtemp(prefix="spu-pg-", dir="/tmp"))) as pg:
        yield pg
