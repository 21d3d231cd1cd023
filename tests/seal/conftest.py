"""Seal fixtures: baseline runs in a subprocess sandbox, a task whose key is kept apart."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spu.config import EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
from spu.runner import RunSpec
from tests.conftest import EXAMPLE_TASK


def seal_spec(task: Path, root: Path, repeat: int = 0, model: str = "random") -> RunSpec:
    """A baseline run of ``task`` under ``root`` (the subprocess sandbox: fast, everywhere)."""
    return RunSpec(model=ModelConfig(name=model, provider="baseline"),
                   harness=HarnessConfig(name="baseline"), effort=EffortConfig(name="none"),
                   task_dir=task, output_root=root, repeat=repeat,
                   sandbox=SandboxConfig(name="subprocess"))


@pytest.fixture
def keyless(tmp_path: Path) -> tuple[Path, Path]:
    """The example task with its key moved to a key holder's folder, marked pending."""
    task = tmp_path / "tasks" / EXAMPLE_TASK.name
    shutil.copytree(EXAMPLE_TASK, task)
    keys = tmp_path / "keys" / EXAMPLE_TASK.name
    keys.mkdir(parents=True)
    (task / "hidden" / "answers.json").rename(keys / "answers.json")
    with open(task / "task.yaml", "a") as f:
        f.write("answers: pending\n")
    return task, tmp_path / "keys"
