"""``spu list``: what each config group and each plugin registry offers, one table each."""

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


def test_every_registry_is_listed_with_its_package_and_its_own_label(capsys) -> None:
    """Issue 42, item 4: harnesses, sandboxes, tools providers and analyses, built-in and
    plugin, each named with the distribution that provides it and the label its class
    gives itself (the first line of its docstring), never one written in the listing."""
    import pytest

    pytest.importorskip("spu_example_plugin", reason="the example plugin is not installed")
    from spu.harness.base import get_harness, harness_names
    from spu.registry import plugin_label
    from spu.sandbox.base import get_sandbox, sandbox_names
    from spu.tools.providers import get_provider, provider_names

    for kind, names, get in (("harnesses", harness_names, get_harness),
                             ("sandboxes", sandbox_names, get_sandbox),
                             ("tools", provider_names, get_provider)):
        rows = {row["option"]: row for row in listed(capsys, kind)}
        assert set(names()) <= set(rows), kind
        for name in names():
            row = rows[name]
            assert row["plugin_label"] == plugin_label(get(name)), (kind, name)
            expected = "spu-example-plugin" if name == "example" else "spu"
            assert row["package"] == expected, (kind, name)
    harnesses = {row["option"]: row for row in listed(capsys, "harnesses")}
    assert harnesses["example"]["options"] == {"log_level": "warning", "strategy": None}
    assert harnesses["recall"]["options"] == {"probe": "source"}
    assert not any("baseline agents" in str(row) for row in harnesses.values())
    tools = {row["option"]: row for row in listed(capsys, "tools")}
    assert tools["web"]["configs"] == ["web"] and tools["example"]["configs"] == []
    sandboxes = {row["option"]: row for row in listed(capsys, "sandboxes")}
    assert sandboxes["subprocess"]["isolates"] is False and sandboxes["docker"]["needs"] == \
        ["docker"]
    from spu.registry import distribution_of
    from spu.stats.registry import REGISTRY

    analyses = {row["option"]: row for row in listed(capsys, "analyses")}
    # The module its function was last registered from (another test imports the file
    # under a name of its own); installed, that is the plugin's distribution.
    module = REGISTRY["example_counts"].function.__module__
    assert analyses["example_counts"]["package"] == distribution_of(module)
    assert distribution_of("spu_example_plugin.analysis") == "spu-example-plugin"
    assert analyses["example_counts"]["plugin_label"].startswith("Official public runs")
    assert analyses["configs"]["command"] == "spu stats" and \
        analyses["activity_times"]["command"] == "spu analyze"
    models = {row["option"]: row for row in listed(capsys, "models")}
    assert {row["package"] for row in models.values()} == {"spu"}
    assert main(["list", "sandboxes"]) == 0
    table = capsys.readouterr().out
    assert "spu-example-plugin" in table and "Bubblewrap, with a message of the day" in table


def test_a_plugin_that_does_not_load_is_listed_with_why(capsys, monkeypatch) -> None:
    """A broken entry point is a row naming its package and the one-line reason."""
    from importlib.metadata import EntryPoint

    from spu.harness.base import HARNESS_REGISTRY

    broken = EntryPoint("broken", "nowhere_pkg.harness:Broken", "spu.harnesses")
    monkeypatch.setattr(HARNESS_REGISTRY, "_entry_points",
                        {**HARNESS_REGISTRY.entry_points(), "broken": broken})
    rows = {row["option"]: row for row in listed(capsys, "harnesses")}
    assert rows["broken"]["package"] == "nowhere_pkg"
    assert "does not load: ModuleNotFoundError" in rows["broken"]["error"]
    assert main(["list", "harnesses"]) == 0
    assert "does not load" in capsys.readouterr().out
