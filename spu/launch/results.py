"""The ``result.json`` row each job leaves in its Hydra output folder, read back by a sweep."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"

RUN_KEY_CHARS = 12
"""Characters of a run key the console shows (enough to tell runs apart; ``spu show``
takes any unique prefix of a key)."""


def run_status(result: dict[str, Any]) -> str:
    """How a job got its row: ran now, retried, skipped (finished earlier) or not launched."""
    status = result.get("status", "ran")
    if status == "skipped":
        return "skipped"
    if status == "broken_task":
        return "skipped (broken task)"
    if status == "in_progress":
        return "skipped (running elsewhere)"
    if status == "not_launched":
        return f"not launched ({result.get('note') or 'budget'})"
    attempt = int(result.get("attempt") or 1)
    return "ran" if attempt == 1 else f"ran (attempt {attempt})"


def config_of(result: dict[str, Any]) -> str:
    """The configuration label of a result row (older rows carry none: model-effort)."""
    return str(result.get("config") or f"{result.get('model')}-{result.get('effort')}")


def collect_results(folder: Path) -> list[dict[str, Any]]:
    """Every ``result.json`` one level below ``folder`` (one per job)."""
    out = []
    for path in sorted(folder.glob(f"*/{RESULT_FILE}")) + sorted(folder.glob(RESULT_FILE)):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


SUMMARY_SEED = 0
"""Seed of the closing table's bootstrap (:func:`spu.stats.resampling.rng_for`)."""

SUMMARY_RESAMPLES = 10_000
"""Bootstrap resamples of the closing table's interval (paper section 3.1)."""


@dataclass(frozen=True)
class ConfigSummary:
    """What a sweep's results say about one configuration (the console's closing table)."""

    config: str
    """The configuration label."""
    runs: int
    """Result rows of the configuration that ran or were recorded (broken tasks excluded)."""
    scored: int
    """Runs with a score (``scored`` true)."""
    mean_score: float | None
    """Mean over tasks of each task's mean score over its scored runs (the mean of the
    scored runs when each task has one); None when none scored."""
    above_chance: int
    """Scored runs whose score exceeds the task's chance threshold (SPEC 6)."""
    with_threshold: int
    """Scored runs whose task has a chance threshold."""
    cost_usd: float
    """Cost of the runs, skipped ones included (what the results cost, not this launch)."""
    tasks: int = 0
    """Tasks with a scored run (the units the interval resamples)."""
    ci_low: float | None = None
    """Low end of the 95% percentile bootstrap interval of the mean, resampling tasks
    (None with fewer than two tasks)."""
    ci_high: float | None = None
    """High end of that interval."""


def task_means(rows: list[dict[str, Any]]) -> list[float]:
    """Each task's mean score over its scored rows, in task order.

    Examples:
        >>> task_means([{"task": "b", "score": 0.5}, {"task": "a", "score": 0.1},
        ...             {"task": "b", "score": 0.3}])
        [0.1, 0.4]
    """
    by_task: dict[str, list[float]] = {}
    for row in rows:
        by_task.setdefault(str(row.get("task")), []).append(float(row["score"]))
    return [sum(v) / len(v) for _, v in sorted(by_task.items())]


def task_interval(config: str, means: list[float]) -> tuple[float | None, float | None]:
    """The 95% bootstrap interval of the mean of ``means``, one value per task.

    Seeded by the configuration's label; (None, None) below two tasks. The bootstrap is
    the statistics module's (:func:`spu.stats.resampling.bootstrap_mean`,
    :data:`SUMMARY_RESAMPLES` resamples of the tasks).

    Examples:
        With two tasks every resampled mean is one of them or their average:

        >>> task_interval("a", [-0.524, 0.952])
        (-0.524, 0.952)
    """
    if len(means) < 2:
        return None, None
    import numpy as np

    from spu.stats.resampling import bootstrap_mean, rng_for

    found = bootstrap_mean(np.array(means), rng_for(SUMMARY_SEED, "closing table", config),
                           resamples=SUMMARY_RESAMPLES)
    return found.low, found.high


def config_summaries(results: list[dict[str, Any]]) -> list[ConfigSummary]:
    """One :class:`ConfigSummary` per configuration of ``results``, by label.

    Rows of broken tasks and runs not launched have no configuration's result and are
    left out.

    Examples:
        >>> rows = [{"config": "a", "status": "ran", "scored": True, "score": 0.5,
        ...          "threshold": 0.4, "cost_usd": 0.25},
        ...         {"config": "a", "status": "skipped", "scored": True, "score": 0.1,
        ...          "threshold": 0.4, "cost_usd": None},
        ...         {"config": "a", "status": "ran", "scored": False, "score": None,
        ...          "threshold": 0.4, "cost_usd": 0.5}]
        >>> s = config_summaries(rows)[0]
        >>> (s.runs, s.scored, round(s.mean_score, 3), s.above_chance, s.cost_usd)
        (3, 2, 0.3, 1, 0.75)
    """
    by_config: dict[str, list[dict[str, Any]]] = {}
    for row in results:
        if row.get("status") in ("broken_task", "not_launched", "in_progress"):
            continue
        by_config.setdefault(config_of(row), []).append(row)
    out = []
    for config in sorted(by_config):
        rows = by_config[config]
        scored = [r for r in rows if r.get("scored") and r.get("score") is not None]
        with_threshold = [r for r in scored if r.get("threshold") is not None]
        means = task_means(scored)
        low, high = task_interval(config, means)
        out.append(ConfigSummary(
            config=config, runs=len(rows), scored=len(scored),
            mean_score=sum(means) / len(means) if means else None,
            above_chance=sum(float(r["score"]) > float(r["threshold"]) for r in with_threshold),
            with_threshold=len(with_threshold),
            cost_usd=sum(float(r.get("cost_usd") or 0.0) for r in rows),
            tasks=len(means), ci_low=low, ci_high=high,
        ))
    return out
