"""Hydra callbacks: the results table printed when a run or a sweep ends."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

RESULT_FILE = "result.json"


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def run_status(result: dict[str, Any]) -> str:
    """How a job got its row: ran now, retried, skipped (finished earlier) or not launched."""
    status = result.get("status", "ran")
    if status == "skipped":
        return "skipped"
    if status == "not_launched":
        return f"not launched ({result.get('note') or 'budget'})"
    attempt = int(result.get("attempt") or 1)
    return "ran" if attempt == 1 else f"ran (attempt {attempt})"


def config_of(result: dict[str, Any]) -> str:
    """The configuration label of a result row (older rows carry none: model-effort)."""
    return str(result.get("config") or f"{result.get('model')}-{result.get('effort')}")


def results_table(results: list[dict[str, Any]], title: str) -> Any:
    """A rich table of job results: task, configuration, harness, outcome, score, and how.

    The configuration label (``opus5-max``) names the model and the effort, and the
    harness when it is not the model's default; the harness column tells runs of one
    model in two harnesses apart (scripted Claude Code and Codex runs included).

    Runs skipped because an earlier launch finished them show their stored outcome and
    score, marked ``skipped``; the caption counts each kind.
    """
    from rich.table import Table

    statuses = [str(r.get("status", "ran")) for r in results]
    counts = {s: statuses.count(s) for s in ("ran", "skipped", "not_launched")}
    caption = f"{counts['ran']} ran now, {counts['skipped']} skipped (finished by an earlier " \
              f"launch: stored outcome and score)"
    if counts["not_launched"]:
        caption += f", {counts['not_launched']} not launched"
    table = Table(title=title, caption=caption)
    for name, justify in (("task", "left"), ("config", "left"), ("harness", "left"),
                          ("repeat", "right"), ("outcome", "left"), ("score", "right"),
                          ("threshold", "right"), ("time (s)", "right"), ("run", "left")):
        table.add_column(name, justify=justify,  # type: ignore[arg-type]
                         no_wrap=name in ("config", "harness", "outcome", "run"))
    for r in sorted(results, key=lambda r: (r["task"], config_of(r), str(r.get("harness")),
                                            r["repeat"])):
        table.add_row(
            r["task"], config_of(r), str(r.get("harness") or "-"), str(r["repeat"]), r["outcome"],
            _fmt(r["score"]), _fmt(r.get("threshold")), _fmt(r.get("runtime_s"), 1),
            run_status(r),
        )
    return table


def collect_results(folder: Path) -> list[dict[str, Any]]:
    """Every ``result.json`` one level below ``folder`` (one per job)."""
    out = []
    for path in sorted(folder.glob(f"*/{RESULT_FILE}")) + sorted(folder.glob(RESULT_FILE)):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


class ResultsTable(Callback):
    """Prints one row per finished job when the run or sweep ends."""

    def _print(self, folder: Path, title: str, config: DictConfig) -> None:
        from rich.console import Console

        results = collect_results(folder)
        console = Console(width=None if Console().is_terminal
                          else int(os.environ.get("COLUMNS") or 160))
        if not results:
            console.print(f"[yellow]no finished run under {folder}[/yellow]")
            return
        console.print(results_table(results, title))
        root = Path(config.output_root).resolve()
        uri = config.tracking.uri or f"sqlite:///{root / 'mlflow.db'}"
        console.print(f"runs: {root / 'runs'}")
        if config.tracking.enabled:
            console.print(f"compare in MLflow: mlflow ui --backend-store-uri {uri}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """After a sweep: the table of all its jobs."""
        self._print(Path(config.hydra.sweep.dir), f"SPU sweep · {config.experiment.name}", config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        """After a single run: its row."""
        self._print(Path(config.hydra.run.dir), f"SPU run · {config.experiment.name}", config)
