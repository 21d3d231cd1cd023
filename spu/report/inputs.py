"""Everything a whole report needs, found from an output root (``spu report OUTPUT_ROOT``).

An output root holds the runs (``runs/<run_key>/``: records, submissions, trajectories),
their tracking store (``mlflow.db``) and the configuration of each launch as Hydra wrote it
(``hydra/<time>/.hydra/`` and ``multirun/<time>/<job>/.hydra/``). From these:

- the runs table: exported from ``<output_root>/mlflow.db`` where it exists (as
  ``spu runs export`` does), else from the runs' ``run.json`` files;
- the submitted orders and trajectories: the output root itself (``--runs-dir``);
- the task packages with their answer keys: each launch's ``task_root`` and
  ``answers_root`` (relative paths taken from the folder the launch ran in, Hydra's
  ``runtime.cwd``), where they still exist.

The report says where each came from; ``--tasks``, ``--answers-root`` and ``--runs-dir``
given on the command line win.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class OutputRootError(ValueError):
    """The folder is no output root, or its runs cannot be exported; one line."""


@dataclass(frozen=True)
class LaunchRoots:
    """The task and answer roots that an output root's launches used (those that exist)."""

    task_roots: tuple[Path, ...] = ()
    answers_root: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _launch_configs(output_root: Path) -> list[Path]:
    """One ``.hydra/config.yaml`` per launch: each single run, and one job per sweep."""
    found = sorted(output_root.glob("hydra/*/.hydra/config.yaml"))
    for sweep in sorted(p for p in output_root.glob("multirun/*") if p.is_dir()):
        first = next(iter(sorted(sweep.glob("*/.hydra/config.yaml"))), None)
        if first is not None:
            found.append(first)
    return found


def _resolved(value: Any, cwd: Path | None) -> Path | None:
    if not isinstance(value, str) or not value or "${" in value:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        if cwd is None:
            return None
        path = cwd / path
    return path.resolve()


def launch_roots(output_root: Path) -> LaunchRoots:
    r"""The task roots and answer root of the launches under ``output_root`` that exist.

    Examples
    --------
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "tasks").mkdir()
    >>> job = root / "out" / "multirun" / "t1" / "0" / ".hydra"
    >>> job.mkdir(parents=True)
    >>> _ = (job / "config.yaml").write_text("task_root: tasks\nanswers_root: null\n")
    >>> _ = (job / "hydra.yaml").write_text(f"hydra:\n  runtime:\n    cwd: {root}\n")
    >>> found = launch_roots(root / "out")
    >>> [p.name for p in found.task_roots], found.answers_root
    (['tasks'], None)
    """
    tasks: list[Path] = []
    answers: list[Path] = []
    gone: set[str] = set()
    for config in _launch_configs(Path(output_root)):
        data = _yaml(config)
        runtime = _yaml(config.parent / "hydra.yaml").get("hydra", {})
        cwd_text = runtime.get("runtime", {}).get("cwd") if isinstance(runtime, dict) else None
        cwd = Path(cwd_text) if isinstance(cwd_text, str) and cwd_text else None
        for key, into in (("task_root", tasks), ("answers_root", answers)):
            path = _resolved(data.get(key), cwd)
            if path is None:
                continue
            if path.is_dir():
                if path not in into:
                    into.append(path)
            else:
                gone.add(f"{key} {path}")
    notes = tuple(f"{what} of a launch no longer exists" for what in sorted(gone))
    tasks, skipped = _disjoint_roots(tasks)
    notes += tuple(f"task_root {root} of a launch is not read: its tasks are also under "
                   f"{other}, read instead" for root, other in skipped)
    if len(answers) > 1:
        notes += (f"launches used {len(answers)} answer roots; the first, {answers[0]}, is "
                  "read (--answers-root chooses)",)
    return LaunchRoots(tuple(tasks), answers[0] if answers else None, notes)


def _disjoint_roots(roots: list[Path]) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """The roots to read, no task in two of them, and those left out with the root read.

    The largest first; a later root that shares a task with one read is left out. A sweep
    over one example task and a run over the whole task root name the same task twice; the
    statistics read each task from one root.
    """
    from spu.tasks.package import discover_tasks

    names = {root: {p.name for p in discover_tasks(root)} for root in roots}
    kept: list[Path] = []
    skipped: list[tuple[Path, Path]] = []
    for root in sorted(roots, key=lambda r: -len(names[r])):
        overlap = next((other for other in kept if names[root] & names[other]), None)
        if overlap is None:
            kept.append(root)
        else:
            skipped.append((root, overlap))
    return kept, skipped


def export_runs(output_root: Path, out: Path) -> str:
    """Write the runs table of ``output_root`` to ``out``; returns where it came from.

    Raises
    ------
    OutputRootError
        ``output_root`` has no ``runs/`` folder, or its store or records cannot be read.
    """
    from spu.tracking.export import (
        RunsExportError,
        runs_table,
        runs_table_from_records,
        write_runs_table,
    )

    output_root = Path(output_root)
    if not (output_root / "runs").is_dir():
        raise OutputRootError(f"{output_root}: no runs/ folder, so not an output root (give "
                              "a runs table from spu runs export, or the output_root of a "
                              "finished sweep)")
    store = output_root / "mlflow.db"
    try:
        if store.is_file():
            uri = f"sqlite:///{store.resolve()}"
            table, source = runs_table(uri), f"the tracking store {uri}"
        else:
            table = runs_table_from_records(output_root / "runs")
            source = f"the run records under {output_root / 'runs'}"
        write_runs_table(table, out)
    except RunsExportError as exc:
        raise OutputRootError(f"{output_root}: {exc}") from None
    return source
