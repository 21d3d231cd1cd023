"""The ``result.json`` row each job leaves in its Hydra output folder, read back by a sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"


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
