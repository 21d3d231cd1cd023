"""Hydra callbacks: broken tasks reported when a sweep starts, the results table when it ends."""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from spu.launch.results import (
    RESULT_FILE,
    RUN_KEY_CHARS,
    collect_results,
    config_of,
    run_status,
)
from spu.plan import usd

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
                          ("threshold", "right"), ("time (s)", "right"), ("run", "left"),
                          ("run key", "left")):
        table.add_column(name, justify=justify,  # type: ignore[arg-type]
                         no_wrap=name in ("config", "harness", "outcome", "run", "run key"))
    for r in sorted(results, key=lambda r: (r["task"], config_of(r), str(r.get("harness")),
                                            r["repeat"])):
        cells = (r["task"], config_of(r), str(r.get("harness") or "-"), str(r["repeat"]),
                 r["outcome"], _fmt(r["score"]), _fmt(r.get("threshold")),
                 _fmt(r.get("runtime_s"), 1), run_status(r),
                 str(r.get("run_key") or "-")[:RUN_KEY_CHARS])
        # Task names come from folder names, notes from what failed: never read as rich
        # markup ("[/x]" would raise), never a terminal's control sequence.
        table.add_row(*(printable_markup(str(c), newlines=False) for c in cells))
    return table


def summary_table(results: list[dict[str, Any]]) -> Any:
    """A rich table with one row per configuration: runs, scored, mean, above chance, cost.

    The mean is over tasks, with its 95% percentile bootstrap interval resampling the
    tasks (seeded: :func:`spu.launch.results.task_interval`), shown ``mean [low, high]``.
    Above chance counts scored runs whose score exceeds the task's chance threshold
    (SPEC 6), out of the scored runs whose task has one.
    """
    from rich.table import Table

    from spu.launch.results import config_summaries
    from spu.printable import printable_markup

    table = Table(title="per configuration",
                  caption="mean score over tasks [95% bootstrap interval over tasks, seeded]")
    for name in ("config", "runs", "scored", "mean score [95% CI]", "above chance", "cost"):
        table.add_column(name, justify="left" if name == "config" else "right",
                         no_wrap=name in ("config", "mean score [95% CI]"))
    for s in config_summaries(results):
        table.add_row(printable_markup(s.config, newlines=False), str(s.runs), str(s.scored),
                      mean_with_interval(s), f"{s.above_chance}/{s.with_threshold}",
                      usd(s.cost_usd))
    return table


def mean_with_interval(summary: Any) -> str:
    """``mean [low, high]``; ``mean (1 task)`` where no interval exists; ``-`` unscored.

    Examples:
        >>> from spu.launch.results import ConfigSummary
        >>> mean_with_interval(ConfigSummary("a", 2, 2, 0.25, 0, 2, 0.0, 2, -0.1, 0.6))
        '0.250 [-0.100, 0.600]'
        >>> mean_with_interval(ConfigSummary("a", 1, 1, 0.25, 0, 1, 0.0, 1))
        '0.250 (1 task)'
    """
    if summary.mean_score is None:
        return "-"
    if summary.ci_low is None or summary.ci_high is None:
        return f"{summary.mean_score:.3f} ({summary.tasks} task{'s' * (summary.tasks != 1)})"
    return f"{summary.mean_score:.3f} [{summary.ci_low:.3f}, {summary.ci_high:.3f}]"


def table_title(results: list[dict[str, Any]], experiment: str) -> str:
    """The closing table's title, saying what ran.

    Examples:
        >>> one = {"task": "t1", "config": "random-none", "repeat": 0}
        >>> table_title([one], "default")
        'SPU run · random-none on t1 (repeat 0)'
        >>> table_title([one, {**one, "task": "t2"}, {**one, "config": "c"}], "paper")
        'SPU sweep · paper · 3 runs: 2 configurations x 2 tasks'
    """
    rows = [r for r in results if r.get("status") != "broken_task"]
    if len(rows) == 1:
        r = rows[0]
        return f"SPU run · {config_of(r)} on {r.get('task')} (repeat {r.get('repeat')})"
    configs = {config_of(r) for r in rows}
    tasks = {str(r.get("task")) for r in rows}
    repeats = {r.get("repeat") for r in rows}
    parts = [f"{len(configs)} configuration{'s' * (len(configs) != 1)}",
             f"{len(tasks)} task{'s' * (len(tasks) != 1)}"]
    if len(repeats) > 1:
        parts.append(f"{len(repeats)} repeats")
    return f"SPU sweep · {experiment} · {len(results)} runs: {' x '.join(parts)}"


def run_warnings(results: list[dict[str, Any]], root: Path) -> list[tuple[str, int]]:
    """The warnings of the runs that ran now, with how many runs gave each.

    Read from each ``run.json``'s ``notes`` (fewer CPUs or no GPU than asked, a cost that
    disagrees with the CLI's, a sandbox that fell back...). Notes that differ only in
    their figures are one warning, said with the first run's figures; most frequent first.

    Examples:
        >>> import json, tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> for key, cost in (("a", "0.1"), ("b", "0.2")):
        ...     (root / "runs" / key).mkdir(parents=True)
        ...     notes = ["asked for 8 CPUs, this machine gives 2: using all",
        ...              f"cost estimate {cost} USD differs from the CLI's reported 1.0 USD"]
        ...     _ = (root / "runs" / key / "run.json").write_text(json.dumps({"notes": notes}))
        >>> run_warnings([{"run_key": "a"}, {"run_key": "b"}], root)[1]
        ("cost estimate 0.1 USD differs from the CLI's reported 1.0 USD (figures vary by run)", 2)
    """
    import re

    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    varied: set[str] = set()
    for r in results:
        key = r.get("run_key")
        if r.get("status", "ran") != "ran" or not key:
            continue
        try:
            record = json.loads((root / "runs" / str(key) / "run.json").read_text())
        except (OSError, ValueError):
            continue
        notes = record.get("notes") if isinstance(record, dict) else None
        for text in dict.fromkeys(str(n) for n in notes or []):
            shape = re.sub(r"\d+(?:\.\d+)?", "#", text)
            counts[shape] = counts.get(shape, 0) + 1
            first.setdefault(shape, text)
            if first[shape] != text:
                varied.add(shape)
    ordered = sorted(counts, key=lambda shape: -counts[shape])
    return [(first[s] + (" (figures vary by run)" if s in varied else ""), counts[s])
            for s in ordered]


def one_line(text: str, limit: int = 400) -> str:
    r"""``text`` on one line, control characters written as escapes, cut at ``limit``.

    A note may quote what an agent or a provider sent: never a terminal control sequence
    (:func:`spu.printable.printable`).

    Examples:
        >>> one_line("evil\x1b[2J\nline")
        'evil\\x1b[2J\\x0aline'
    """
    from spu.printable import printable

    shown = printable(text, newlines=False)
    return shown if len(shown) <= limit else shown[:limit] + "..."


MAX_WARNINGS = 12
"""Distinct warnings printed at a sweep's end; the rest are counted."""


def warning_lines(warnings: list[tuple[str, int]], runs: int) -> list[str]:
    """The closing lines that say the runs' warnings once each, with how many runs gave it.

    Examples:
        >>> for line in warning_lines([("asked for 8 CPUs, this machine gives 2", 6)], 6):
        ...     print(line)
        warnings of the runs (each run.json's notes):
          6 of 6 runs: asked for 8 CPUs, this machine gives 2
    """
    if not warnings:
        return []
    lines = ["warnings of the runs (each run.json's notes):"]
    for text, count in warnings[:MAX_WARNINGS]:
        lines.append(f"  {count} of {runs} run{'s' * (runs != 1)}: {one_line(text)}")
    if len(warnings) > MAX_WARNINGS:
        lines.append(f"  ... and {len(warnings) - MAX_WARNINGS} more (see each run.json)")
    return lines


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
    """The sweep's experiment in the MLflow UI's SPU view, when a UI answers there.

    See :mod:`spu.tracking.ui`.
    """
    from spu.launch.job import tracking_target
    from spu.tracking.ui import ui_base, ui_is_up, view_url

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
    return None if found is None else view_url(base, str(found.experiment_id))


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

    def _print(self, folder: Path, experiment: str, config: DictConfig) -> None:
        from rich.console import Console

        results = collect_results(folder)
        console = Console(width=None if Console().is_terminal
                          else int(os.environ.get("COLUMNS") or 160))
        if not results:
            console.print(f"[yellow]no finished run under {folder}[/yellow]")
            return
        console.print(results_table(results, table_title(results, experiment)))
        console.print(summary_table(results))
        root = Path(config.output_root).resolve()
        say = functools.partial(console.print, highlight=False, soft_wrap=True)
        for line in closing_lines(results, root, config):
            say(line)
        say_ledger_head(config, root, console.print)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """After a sweep: the table of all its jobs."""
        from spu.tracking.builder import close_builder

        close_builder()
        self._print(Path(config.hydra.sweep.dir), str(config.experiment.name), config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        """After a single run: its row."""
        self._print(Path(config.hydra.run.dir), str(config.experiment.name), config)


def closing_lines(results: list[dict[str, Any]], root: Path, config: DictConfig) -> list[str]:
    """The lines under the closing tables: runs, how to open one, MLflow, warnings.

    Where the runs are, how to open one, the MLflow view, and the runs' warnings, each said
    once. Run keys and paths are plain text (never rich markup).
    """
    from rich.markup import escape

    keys = [str(r["run_key"]) for r in results if r.get("run_key")]
    lines = [f"runs: {root / 'runs'} (one folder per run key: run.json, transcript.html, "
             f"output/, the trajectory and logs)"]
    if keys:
        lines.append(f"open a run: spu show {keys[0][:RUN_KEY_CHARS]} --output-root {root} "
                     f"(a run key or its first characters, as in the run key column); its "
                     f"transcript: {root / 'runs' / keys[0] / 'transcript.html'}")
    if config.tracking.enabled:
        url = experiment_link(config, root)
        lines.append(f"compare in MLflow: {url}" if url is not None else
                     f"compare in MLflow: spu ui {root}")
    ran = sum(1 for r in results if r.get("status", "ran") == "ran")
    lines += warning_lines(run_warnings(results, root), ran)
    return [escape(line) for line in lines]
