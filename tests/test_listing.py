"""``spu list models|harnesses|efforts|tasks``: the options Hydra accepts, one table each."""

from __future__ import annotations

import json

from spu.cli import main
from tests.conftest import EXAMPLE_TASK, REPO


def listed(capsys, *args: str) -> list[dict]:
    assert main(["list", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_each_group_lists_exactly_its_config_files(capsys) -> None:
    for kind, group in (("models", "model"), ("harnesses", "harness"), ("efforts", "effort")):
        names = [row["option"] for row in listed(capsys, kind)]
        assert names == sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml")), kind
    models = {row["option"]: row for row in listed(capsys, "models")}
    assert models["opus5"]["api_key_env"] == "ANTHROPIC_API_KEY"
    assert models["opus5"]["prices"]["cache_write_5m"] == 6.25
    harnesses = {row["option"]: row for row in listed(capsys, "harnesses")}
    assert harnesses["claude_code"]["version"] == "2.1.260"


def test_tasks_come_from_the_task_root(capsys, tmp_path) -> None:
    import shutil

    shutil.copytree(EXAMPLE_TASK, tmp_path / EXAMPLE_TASK.name)
    rows = listed(capsys, "tasks", "--task-root", str(tmp_path))
    assert [(r["option"], r["n_items"]) for r in rows] == [(EXAMPLE_TASK.name, 8)]
    assert main(["list", "tasks"]) == 0
    table = capsys.readouterr().out
    assert "example-electrolytes-and-films" in table and "materials science" in table
