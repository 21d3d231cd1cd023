"""``spu list models|harnesses|efforts|tasks``: the options Hydra accepts, one table each."""

from __future__ import annotations

import json
from pathlib import Path

from spu.cli import main
from tests.conftest import EXAMPLE_TASK, REPO


def listed(capsys, *args: str) -> list[dict]:
    assert main(["list", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def conf_folders() -> list[Path]:
    """spu's ``conf/`` and the installed plugin packages' (entry point group spu.conf)."""
    from hydra_plugins.spu_plugins.conf_search_path import plugin_conf_paths

    return [REPO / "conf", *(Path(path.removeprefix("file://"))
                             for _, path in plugin_conf_paths())]


def test_each_group_lists_exactly_its_config_files(capsys) -> None:
    for kind, group in (("models", "model"), ("harnesses", "harness"), ("efforts", "effort")):
        names = [row["option"] for row in listed(capsys, kind)]
        files = {p.stem for conf in conf_folders() for p in (conf / group).glob("*.yaml")}
        assert names == sorted(files), kind
    efforts = {row["option"]: row["harnesses"] for row in listed(capsys, "efforts")}
    assert efforts["max"]["claude_code"] == "max" and efforts["xhigh"]["codex"] == "xhigh"
    assert efforts["none"] == {}
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
