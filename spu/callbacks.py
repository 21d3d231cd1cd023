"""Hydra callbacks: broken tasks reported when a sweep starts, the results table when it ends."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from spu.launch.results import RESULT_FILE, collect_results, config_of, run_status

if TYPE_CHECKING:
    from spu.tasks.package import BrokenTask

log = logging.getLogger("spu")

BROKEN_TASK_FOLDER = "broken-task-{index}"
"""Sweep subfolder holding the result row of a broken task a glob left out."""


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)





def results_table(results: list[dict[str, Any]], title: str) -> Any:
    """A rich table of job results: task, configuration, harness, outcome, score, and how.

    The configuration label (``opus5-max``) names the model and the effort, and the
    harness when it is not the model's default; the harness column tells runs of one
    model in two harnesses apart (scripted Claude Code and Codex runs included).

    Runs skipped because an earlier launch finished them show their stored outcome and
    score, marked ``skipped``; the caption counts each kind.
    """
    from rich.table import Table

    from spu.printable import printable_markup

    statuses = [str(r.get("status", "ran")) for r in results]
    counts = {s: statuses.count(s)
              for s in ("ran", "skipped", "not_launched", "broken_task", "in_progress")}
    caption = f"{counts['ran']} ran now, {counts['skipped']} skipped (finished by an earlier " \
              f"launch: stored outcome and score)"
    if counts["not_launched"]:
        caption += f", {counts['not_launched']} not launched"
    if counts["in_progress"]:
        caption += f", {counts['in_progress']} running in another process"
    if counts["broken_task"]:
        caption += f", {counts['broken_task']} broken task(s) skipped (reason in the log)"
    table = Table(title=title, caption=caption)
    for name, justify in (("task", "left"), ("config", "left"), ("harness", "left"),
                          ("repeat", "right"), ("outcome", "left"), ("score", "right"),
                          ("threshold", "right"), ("time (s)", "right"), ("run", "left")):
        table.add_column(name, justify=justify,  # type: ignore[arg-type]
                         no_wrap=name in ("config", "harness", "outcome", "run"))
    for r in sorted(results, key=lambda r: (r["task"], config_of(r), str(r.get("harness")),
                                            r["repeat"])):
        cells = (r["task"], config_of(r), str(r.get("harness") or "-"), str(r["repeat"]),
                 r["outcome"], _fmt(r["score"]), _fmt(r.get("threshold")),
                 _fmt(r.get("runtime_s"), 1), run_status(r))
        # Task names come from folder names, notes from what failed: never read as rich
        # markup ("[/x]" would raise), never a terminal's control sequence.
        table.add_row(*(printable_markup(str(c), newlines=False) for c in cells))
    return table


def summary_table(results: list[dict[str, Any]]) -> Any:
    """A rich table with one row per configuration: runs, scored, mean score, above chance, cost.

    Above chance counts scored runs whose score exceeds the task's chance threshold
    (SPEC 6), out of the scored runs whose task has one.
    """
    from rich.table import Table

    from spu.launch.results import config_summaries
    from spu.printable import printable_markup

    table = Table(title="per configuration")
    for name in ("config", "runs", "scored", "mean score", "above chance", "cost"):
        table.add_column(name, justify="left" if name == "config" else "right",
                         no_wrap=name == "config")
    for s in config_summaries(results):
        table.add_row(printable_markup(s.config, newlines=False), str(s.runs), str(s.scored),
                      _fmt(s.mean_score), f"{s.above_chance}/{s.with_threshold}",
                      f"${s.cost_usd:.2f}")
    return table


def _task_sweep_value(config: DictConfig) -> str | None:
    """What the sweep gives ``task``: the command line's override, else the sweeper's."""
    value = None
    for override in OmegaConf.select(config, "hydra.overrides.task", default=None) or []:
        key, sep, rest = str(override).partition("=")
        if sep and key.lstrip("+~") == "task":
            value = rest
    if value is None:
        params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
        value = params.get("task") if hasattr(params, "get") else None
    return None if value is None else str(value)


def broken_tasks_of_sweep(config: DictConfig) -> list[BrokenTask]:
    """The broken task packages a sweep's ``task=glob(...)`` would have selected.

    The task config source never lists a broken package (:func:`spu.tasks.package.
    scan_task_root`), so a glob runs every other task; this names what it left out.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob

    from spu.tasks.package import scan_task_root

    value = _task_sweep_value(config)
    if value is None or "glob(" not in value:
        return []
    try:
        parsed = OverridesParser.create().parse_overrides([f"task={value}"])[0].value()
    except Exception:  # noqa: BLE001 (Hydra reports a bad override itself)
        return []
    if not isinstance(parsed, Glob):
        return []
    root = os.environ.get("SPU_TASK_ROOT") or str(OmegaConf.select(config, "task_root",
                                                                   default="tasks"))
    broken = scan_task_root(root).broken
    chosen = set(parsed.filter([b.name for b in broken]))
    return [b for b in broken if b.name in chosen]


def broken_task_result(name: str, reason: str) -> dict[str, Any]:
    """The result row of a broken task: skipped, with its reason."""
    return {"run_key": None, "task": name, "model": "-", "harness": "-", "effort": "-",
            "repeat": 0, "outcome": "-", "scored": False, "score": None, "threshold": None,
            "cost_usd": None, "runtime_s": None, "mlflow_run_id": None,
            "status": "broken_task", "attempt": 0, "note": reason}


def record_broken_tasks(config: DictConfig, sweep_dir: Path) -> list[BrokenTask]:
    """Log each broken task of the sweep in one line and leave its row in the sweep folder."""
    broken = broken_tasks_of_sweep(config)
    for index, task in enumerate(broken):
        log.warning("%s", task)
        folder = sweep_dir / BROKEN_TASK_FOLDER.format(index=index)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / RESULT_FILE).write_text(json.dumps(broken_task_result(ascii(task.name)[1:-1],
                                                                        task.reason)))
    return broken


def say_ledger_head(config: DictConfig, root: Path, say: Callable[[str], Any]) -> str | None:
    """Print the ledger's head hash (SPEC 13) and tag the MLflow experiment with it.

    Published before anyone grades, the head fixes every sealed submission up to it.
    Returns the head, None when the output root has no ledger.
    """
    from spu.seal.ledger import head_hash, ledger_path

    head = head_hash(root)
    if head is None:
        return None
    lines = sum(1 for line in ledger_path(root).read_bytes().split(b"\n") if line)
    say(f"ledger head: {head} ({lines} sealed runs in {ledger_path(root)}; "
        "publish it before grading)")
    if config.tracking.enabled:
        from spu.launch.job import tracking_target
        from spu.tracking.store import client_for, experiment_id

        try:
            target = tracking_target(config, root)
            if target is not None:
                client = client_for(target)
                exp = experiment_id(client, target)
                client.set_experiment_tag(exp, "spu.ledger_head", head)
                client.set_experiment_tag(exp, "spu.ledger_entries", str(lines))
        except Exception as exc:  # noqa: BLE001 - the head is printed; tracking is a copy
            log.warning("ledger head not logged to MLflow: %s", exc)
    return head


def experiment_link(config: DictConfig, root: Path) -> str | None:
    """The sweep's experiment in the MLflow UI, when one answers (:mod:`spu.tracking.ui`)."""
    from spu.launch.job import tracking_target
    from spu.tracking.ui import experiment_url, ui_base, ui_is_up

    try:
        target = tracking_target(config, root)
    except ValueError:
        return None
    if target is None:
        return None
    base = ui_base(OmegaConf.select(config, "tracking.ui_url", default=None), target.uri)
    if base is None or not ui_is_up(base, os.environ.get("MLFLOW_TRACKING_TOKEN")):
        return None
    try:
        from spu.tracking.store import client_for

        found = client_for(target).get_experiment_by_name(target.experiment)
    except Exception as exc:  # noqa: BLE001 - the link is a convenience; the table is printed
        log.debug("experiment %s not looked up: %s", target.experiment, exc)
        return None
    return None if found is None else experiment_url(base, str(found.experiment_id))


class ResultsTable(Callback):
    """Reports broken tasks when a sweep starts; prints one row per job when it ends.

    A sweep's runs have their traces built beside their records
    (:mod:`spu.tracking.builder`) from its start to its end.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before a sweep: one line per broken task its glob leaves out, recorded as a row."""
        from spu.launch.console import quiet_launch_logs

        quiet_launch_logs(bool(config.get("verbose")))
        if config.tracking.enabled and config.tracking.traces.enabled:
            from spu.tracking.builder import open_builder

            open_builder()  # the sweep's traces built beside its records (issue 25)
        try:
            record_broken_tasks(config, Path(str(config.hydra.sweep.dir)))
        except OSError as exc:  # an unwritable output_root fails the jobs themselves
            log.warning("broken tasks not recorded: %s", exc)

    def _print(self, folder: Path, title: str, config: DictConfig) -> None:
        from rich.console import Console

        results = collect_results(folder)
        console = Console(width=None if Console().is_terminal
                          else int(os.environ.get("COLUMNS") or 160))
        if not results:
            console.print(f"[yellow]no finished run under {folder}[/yellow]")
            return
        console.print(results_table(results, title))
        console.print(summary_table(results))
        root = Path(config.output_root).resolve()
        uri = config.tracking.uri or f"sqlite:///{root / 'mlflow.db'}"
        console.print(f"runs: {root / 'runs'}")
        if config.tracking.enabled:
            url = experiment_link(config, root)
            console.print(f"compare in MLflow: {url}" if url is not None else
                          f"compare in MLflow: mlflow ui --backend-store-uri {uri}",
                          highlight=False, soft_wrap=True)
        say_ledger_head(config, root, console.print)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """After a sweep: the table of all its jobs."""
        from spu.tracking.builder import close_builder

        close_builder()
        self._print(Path(config.hydra.sweep.dir), f"SPU sweep · {config.experiment.name}", config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        """After a single run: its row."""
        self._print(Path(config.hydra.run.dir), f"SPU run · {config.experiment.name}", config)
