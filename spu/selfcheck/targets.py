"""What the checks act on: a backend with its options, a scratch folder and a task of its own.

A :class:`SandboxTarget` opens prepared sandboxes of one backend on a task package the
kit writes for itself (:func:`selfcheck_task`, the scaffold of ``spu task new``), so
the checks need neither the repository's tasks nor its tests; :func:`compose_spec`
composes a whole run (``run_one``) from the packaged configuration, for the checks that
run an agent end to end. :func:`run_agent` copies one of the kit's agents
(:data:`spu.selfcheck.AGENTS`) into a sandbox and runs it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spu.sandbox.base import RunLimits, Sandbox, SandboxPaths, SandboxRequest, get_sandbox
from spu.schema import ProcessEvidence
from spu.selfcheck import AGENTS, CheckSkipped

TASK_ID = "selfcheck-task"
"""The id of the kit's own task package."""

SMALL = RunLimits(time_s=60, memory_gb=0.5, cpus=1, gpus=0, grace_s=1)
"""Limits of a conformance sandbox: small, so that a limit check fires fast."""


def selfcheck_task(scratch: Path) -> Path:
    """A valid task package under ``scratch`` (written once): ``spu task new``'s scaffold."""
    from spu.tasks.scaffold import new_task

    task_dir = scratch / "tasks" / TASK_ID
    if not (task_dir / "task.yaml").is_file():
        new_task(TASK_ID, scratch / "tasks", scratch / "task-sources", force=True)
    return task_dir


@dataclass(frozen=True)
class Opened:
    """A prepared sandbox with the layout its agent sees."""

    sandbox: Sandbox
    paths: SandboxPaths
    run_dir: Path

    def output(self, name: str) -> Path:
        """A file the agent left in its output folder, on the host."""
        return self.sandbox.collect() / name


@dataclass
class SandboxTarget:
    """One backend with its options, checked in ``scratch``."""

    name: str
    """``sandbox.name`` of the backend."""
    options: dict[str, Any]
    """Its ``sandbox.options`` (checked by its own model when it is made)."""
    scratch: Path
    """A folder of the check's own: its runs and output roots."""
    task_home: Path | None = None
    """Where the kit's task package is written (None: in ``scratch``), shared by checks."""
    opened: list[Sandbox] = field(default_factory=list)

    @property
    def cls(self) -> type[Sandbox]:
        """The backend's class."""
        return get_sandbox(self.name)

    @property
    def task_dir(self) -> Path:
        """The kit's task package (written on first use)."""
        return selfcheck_task(self.task_home or self.scratch)

    def require(self) -> None:
        """Skip (CheckSkipped, with the reason) unless the backend runs here."""
        ok, why = self.cls.available()
        if not ok:
            raise CheckSkipped(f"sandbox={self.name} unavailable: {why}")

    def open(self, limits: RunLimits | None = None, run: str = "run",
             **request_fields: Any) -> Opened:
        """A prepared sandbox of the backend on the kit's task (closed by :meth:`close`)."""
        from spu.tasks.package import load_task, stage_public_files

        self.require()
        run_dir = self.scratch / "runs" / run
        staged = stage_public_files(load_task(self.task_dir), run_dir / "task")
        sandbox = self.cls(options=self.options)
        self.opened.append(sandbox)
        paths = sandbox.prepare(SandboxRequest(task_dir=staged, run_dir=run_dir,
                                               limits=limits or SMALL, **request_fields))
        return Opened(sandbox, paths, run_dir)

    def close(self) -> None:
        """Clean up every sandbox :meth:`open` made."""
        while self.opened:
            with contextlib.suppress(Exception):
                self.opened.pop().cleanup()


def run_agent(box: Opened, script: str, *args: str, env: dict[str, str] | None = None,
              timeout_s: float | None = None) -> ProcessEvidence:
    """Copy the kit's agent ``script`` into the workspace and run it there."""
    inside = f"{box.paths.workspace}/.agent/{script}"
    box.sandbox.write_file(inside, (AGENTS / script).read_bytes(), mode=0o755)
    base = {"SPU_TASK_DIR": box.paths.task, "SPU_OUTPUT_DIR": box.paths.output,
            "SPU_WORKSPACE": box.paths.workspace, "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8"}
    logs = box.run_dir / "logs"
    return box.sandbox.exec(["python3", inside, *args], {**base, **(env or {})},
                            stdout=logs / f"{script}.stdout", stderr=logs / f"{script}.stderr",
                            timeout_s=timeout_s)


def read_json(path: Path) -> Any:
    """A JSON file an agent left."""
    return json.loads(path.read_text())


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """This process's environment with ``values`` set, restored afterwards."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _hydra() -> Iterator[None]:
    """Hydra initialized on the packaged configuration (or as it already is)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from spu.config import register_configs
    from spu.overrides import CONF_DIR

    register_configs()
    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def compose_spec(task_dir: Path, output_root: Path, *overrides: str) -> Any:
    """The :class:`~spu.runner.RunSpec` of ``overrides`` on the task ``task_dir``."""
    from hydra import compose

    from spu.launch.spec import spec_from_config

    root = task_dir.parent
    with environment(SPU_TASK_ROOT=str(root)), _hydra():
        cfg = compose(config_name="config", overrides=[
            f"task_root={root}", f"task={task_dir.name}", f"output_root={output_root}",
            "tracking=none", *overrides])
        return spec_from_config(cfg)
