"""Small task packages written file by file, so each test can break exactly one thing."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

GENERAL = "Rank the experiments of each group from the lowest to the highest value.\n"

# Values chosen so that no screen fires: no setting follows the measured order, the
# spread is wide, and neither the row order nor the contract order beats chance.
GROUPS: dict[str, dict[str, Any]] = {
    "G1": {"weight": 0.6, "values": {"E417": 12.5, "E902": 55.0, "E233": 31.25, "E781": 8.0,
                                     "E560": 47.5, "E118": 20.0}},
    "G2": {"weight": 0.4, "values": {"E345": 3.3, "E671": 0.9, "E829": 2.2, "E194": 5.1,
                                     "E456": 1.7}},
}
SETTINGS = {
    "E417": ("toluene", "60"), "E902": ("dioxane", "80"), "E233": ("THF", "100"),
    "E781": ("DMF", "80"), "E560": ("water", "60"), "E118": ("MeCN", "100"),
    "E345": ("toluene", "25"), "E671": ("THF", "40"), "E829": ("DMSO", "25"),
    "E194": ("MeOH", "40"), "E456": ("EtOAc", "60"),
}
ROW_ORDER = ["E233", "E345", "E781", "E902", "E829", "E417", "E194", "E118", "E671",
             "E560", "E456"]


def write_task(root: Path, task_id: str = "spu-test", **changes: Any) -> Path:
    """Write a valid two-group package; keyword arguments replace parts of it.

    ``groups`` (dict like GROUPS), ``rows`` (list of dict rows for targets.csv),
    ``contract`` / ``answers`` / ``protocol`` / ``meta`` (dicts), ``instruction`` and
    ``experiment`` (text), ``source`` (answer-key source) and ``files`` (name -> bytes).
    """
    groups = changes.get("groups", GROUPS)
    task = root / task_id
    (task / "hidden").mkdir(parents=True, exist_ok=True)
    meta = changes.get("meta", {"id": task_id, "version": "1.0",
                                "title": "Ranking test experiments", "discipline": "chemistry",
                                "subfield": "testing", "visibility": "public"})
    (task / "task.yaml").write_text(yaml.safe_dump(meta))
    contract = changes.get("contract", {
        "task_id": task_id, "task_version": "1.0",
        "groups": [{"group_id": gid, "endpoint": "yield (%)", "weight": g["weight"],
                    "items": sorted(g["values"], key=lambda e: SETTINGS.get(e, (e,))[0])}
                   for gid, g in groups.items()]})
    (task / "contract.json").write_text(json.dumps(contract))
    answers = changes.get("answers", {
        "task_id": task_id, "task_version": "1.0",
        "groups": {gid: g["values"] for gid, g in groups.items()},
        "source": changes.get("source", {"doi": "10.1234/example.5678",
                                         "title": "A study of test reactions in flow",
                                         "pmid": "31415926"})})
    text = answers if isinstance(answers, str) else json.dumps(answers)
    (task / "hidden" / "answers.json").write_text(text)
    protocol = changes.get("protocol", {
        "fixed_conditions": "Same substrate, 16 h.",
        "groups": [{"group_id": gid, "endpoint": "yield (%)", "unit": "%"} for gid in groups]})
    (task / "protocol.json").write_text(json.dumps(protocol))
    rows = changes.get("rows")
    if rows is None:
        group_of = {e: gid for gid, g in groups.items() for e in g["values"]}
        order = [e for e in ROW_ORDER if e in group_of] + sorted(set(group_of) - set(ROW_ORDER))
        rows = [{"experiment_id": e, "group_id": group_of[e],
                 "solvent": SETTINGS.get(e, ("neat", "0"))[0],
                 "temperature_c": SETTINGS.get(e, ("neat", "0"))[1]} for e in order]
    with open(task / "targets.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (task / "instruction.md").write_text(changes.get("instruction", GENERAL))
    (task / "experiment.md").write_text(changes.get("experiment", "Shared procedure.\n"))
    for name, data in changes.get("files", {}).items():
        (task / "files").mkdir(exist_ok=True)
        (task / "files" / name).write_bytes(data)
    return task


@pytest.fixture
def make_task(tmp_path: Path) -> Callable[..., Path]:
    """Write a small valid package under a temporary folder (see ``write_task``)."""

    def _make(**changes: Any) -> Path:
        return write_task(tmp_path, **changes)

    return _make
