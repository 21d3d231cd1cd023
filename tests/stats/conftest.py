"""Shared fixtures of the statistics tests: small runs tables, simulated and hand-made."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from spu.stats.runs_table import check_runs_table
from spu.stats.simulate import simulate_runs


@pytest.fixture(scope="session")
def paper_runs() -> pd.DataFrame:
    """A checked runs table with the paper's structure (seed 7)."""
    return check_runs_table(simulate_runs(seed=7))


def run_row(config: str, task: str, score: float | None, *, outcome: str = "valid",
            repeat: int = 0, visibility: str = "public", discipline: str = "chemistry",
            threshold: float = 0.44, **extra: object) -> dict[str, object]:
    """One row of a hand-made runs table; ``score=None`` makes an unscored run."""
    scored = score is not None
    return {
        "run_id": f"{config}-{task}-{repeat}", "config": config, "task_id": task,
        "discipline": discipline, "visibility": visibility, "repeat": repeat,
        "outcome": outcome if scored or outcome != "valid" else "no_file",
        "score_strict": score if scored and outcome == "valid" else -1.0,
        "score_recovered": score if scored else -1.0, "scored": scored,
        "threshold": threshold, **extra,
    }


def write_task(root: Path, task_id: str, groups: dict[str, dict[str, float]],
               settings: dict[str, dict[str, object]] | None = None,
               weights: dict[str, float] | None = None, visibility: str = "public") -> Path:
    """A task package under ``root``: measured values by group, settings by experiment."""
    folder = root / task_id
    (folder / "hidden").mkdir(parents=True)
    (folder / "task.yaml").write_text(
        f"id: {task_id}\nversion: '1.0'\ntitle: test task\ndiscipline: chemistry\n"
        f"subfield: test\nvisibility: {visibility}\n")
    for name in ("instruction.md", "experiment.md"):
        (folder / name).write_text("test\n")
    weights = weights or {g: 1.0 / len(groups) for g in groups}
    contract = {"task_id": task_id, "task_version": "1.0", "groups": [
        {"group_id": g, "endpoint": "y", "weight": weights[g], "items": sorted(values)}
        for g, values in groups.items()]}
    (folder / "contract.json").write_text(json.dumps(contract))
    (folder / "protocol.json").write_text(json.dumps({"groups": []}))
    (folder / "hidden" / "answers.json").write_text(json.dumps(
        {"task_id": task_id, "task_version": "1.0", "groups": groups}))
    settings = settings or {}
    columns = sorted({k for s in settings.values() for k in s})
    lines = [",".join(["experiment_id", "group_id", *columns])]
    for g, values in groups.items():
        for item in sorted(values):
            lines.append(",".join([item, g, *(str(settings.get(item, {}).get(c, ""))
                                              for c in columns)]))
    (folder / "targets.csv").write_text("\n".join(lines) + "\n")
    return folder


def write_run(output_root: Path, run_key: str, task_id: str, rankings: object,
              raw: bytes | None = None) -> Path:
    """A run folder with ``output/rankings.json`` (the document, or ``raw`` bytes)."""
    folder = output_root / "runs" / run_key
    (folder / "output").mkdir(parents=True)
    data = raw if raw is not None else json.dumps(
        {"task_id": task_id, "task_version": "1.0", "rankings": rankings}).encode()
    (folder / "output" / "rankings.json").write_bytes(data)
    (folder / "run.json").write_text(json.dumps({"run_key": run_key, "task_id": task_id}))
    return folder
