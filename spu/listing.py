"""``spu list harnesses|sandboxes|tools|analyses|models|efforts|tasks`` and ``spu run``.

``spu list`` prints one table per kind. Config groups (``models``, ``efforts``,
``tasks``) are read from the same config repository Hydra composes runs from (``conf/``,
the plugins' ``conf/`` folders and the task packages under ``task_root``), so what it
lists is exactly what ``model=``, ``effort=`` and ``task=`` accept. Plugin kinds
(``harnesses``, ``sandboxes``, ``tools``, ``analyses``) are read from their registries
(:mod:`spu.registry`, :mod:`spu.stats.registry`), joined with the config files of the
same name: every row names the package that provides it and the label the plugin gives
itself (:func:`spu.registry.plugin_label`), never one written here.
``spu run ...`` is ``python -m spu.main ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

KINDS = {"models": "model", "harnesses": "harness", "efforts": "effort", "tasks": "task",
         "sandboxes": "sandbox", "tools": "tools", "analyses": None}
"""``spu list`` argument -> config group (None: no config group, a registry only)."""


def register(sub: Any) -> None:
    """Add ``list`` and ``run`` to the ``spu`` parser."""
    p = sub.add_parser("list", help="what can be chosen: harnesses, sandboxes, tools, "
                                    "analyses, models, efforts or tasks",
                       description="One table of what harness=, sandbox=, tools.provider=, "
                       "model=, effort= or task= accept, or of the analyses of spu stats "
                       "and spu analyze (tasks: those under --task-root); plugin kinds name "
                       "the package providing each.")
    p.add_argument("kind", choices=sorted(KINDS), help="what to list")
    p.add_argument("--task-root", type=Path, default=None,
                   help="folder of task packages (default: $SPU_TASK_ROOT, else tasks/)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(handler=list_command)
    r = sub.add_parser("run", help="run or sweep a configuration (python -m spu.main)",
                       add_help=False,
                       description="Same as python -m spu.main: Hydra overrides, -m anywhere.")
    r.set_defaults(handler=None)


def run_command(argv: list[str]) -> int:
    """``spu run ARGS``: ``python -m spu.main ARGS``."""
    from spu.main import main

    sys.argv = [f"{Path(sys.argv[0]).name} run", *argv]
    main(argv)
    return 0


def _rows(kind: str, task_root: Path | None) -> list[dict[str, Any]]:
    """The rows of one kind; ``task_root`` (for tasks) only for this call."""
    before = os.environ.get("SPU_TASK_ROOT")
    if task_root is not None:
        os.environ["SPU_TASK_ROOT"] = str(task_root.expanduser().resolve())
    try:
        if kind == "analyses":
            return analysis_rows()
        if kind in PLUGIN_KINDS:
            return plugin_rows(kind)
        return _group_rows(kind)
    finally:
        if before is None:
            os.environ.pop("SPU_TASK_ROOT", None)
        else:
            os.environ["SPU_TASK_ROOT"] = before


def _group_rows(kind: str) -> list[dict[str, Any]]:
    from spu.config import EffortConfig, ModelConfig
    from spu.overrides import config_groups

    group = KINDS[kind]
    assert group is not None
    schema = {"model": ModelConfig, "effort": EffortConfig}
    rows: list[dict[str, Any]] = []
    with config_groups() as groups:
        names = groups.options(group)
        if group == "task":
            return _task_rows(names)
        for name in names:
            data, package = _config(groups, group, name, schema[group])
            rows.append({"option": name, **data, "package": package})
        if group == "effort":
            mapped = harness_efforts(groups)
            for row in rows:
                row["harnesses"] = {h: levels[row["name"]] for h, levels in mapped.items()
                                    if row["name"] in levels}
    return rows


def _config(groups: Any, group: str, name: str, schema: type | None
            ) -> tuple[dict[str, Any], str]:
    """A config file of ``group`` (merged into ``schema`` where given) and its package."""
    from omegaconf import OmegaConf

    found = groups.loader.repository.load_config(f"{group}/{name}")
    node = OmegaConf.merge(OmegaConf.structured(schema), found.config) if schema else \
        found.config
    data = OmegaConf.to_container(node, resolve=True)
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}, conf_package(str(found.provider))


def conf_package(provider: str) -> str:
    """The package a config file comes from, from the search path entry that found it.

    spu's own ``conf/`` is ``main`` to Hydra; a plugin's is ``spu-plugin-<entry point>``
    (group ``spu.conf``), named here by the distribution declaring that entry point;
    any other search path entry is named as Hydra names it.
    """
    from spu.registry import CONF, group_entry_points

    if provider == "main":
        return "spu"
    if provider.startswith("spu-plugin-"):
        ep = group_entry_points(CONF).get(provider.removeprefix("spu-plugin-"))
        if ep is not None and ep.dist is not None:
            return str(ep.dist.name)
    return provider


def harness_efforts(groups: Any) -> dict[str, dict[str, str]]:
    """``harness=`` option -> its effort levels (its class's, then its config file's).

    Options whose class has no efforts, or does not load, are left out.
    """
    from omegaconf import OmegaConf

    from spu.harness.base import get_harness

    out: dict[str, dict[str, str]] = {}
    for option in groups.options("harness"):
        found = groups.loader.repository.load_config(f"harness/{option}").config
        try:
            levels = dict(get_harness(str(found.get("name", option))).efforts)
        except KeyError:
            continue  # a plugin that does not load; selecting it says why
        extra = OmegaConf.to_container(found.get("efforts") or OmegaConf.create({}))
        if isinstance(extra, dict):
            levels.update({str(k): str(v) for k, v in extra.items()})
        if levels:
            out[option] = levels
    return out


PLUGIN_KINDS = {"harnesses": "harness", "sandboxes": "sandbox", "tools": "tools"}
"""``spu list`` argument -> config group of the plugin kinds kept in a :class:`Registry`."""


def _registry(kind: str) -> Any:
    if kind == "harnesses":
        from spu.harness.base import HARNESS_REGISTRY

        return HARNESS_REGISTRY
    if kind == "sandboxes":
        from spu.sandbox.base import SANDBOX_REGISTRY

        return SANDBOX_REGISTRY
    from spu.tools.providers import PROVIDER_REGISTRY

    return PROVIDER_REGISTRY


def plugin_rows(kind: str) -> list[dict[str, Any]]:
    """Every name of a plugin registry, and every config file of its group, one row each.

    A harness or backend row is named by its config option where one exists (its class
    by the file's ``name``); a tools provider row by its ``tools.provider`` name, with
    the ``tools=`` configs that select it.
    """
    from spu.config import HarnessConfig, SandboxConfig, ToolsConfig
    from spu.overrides import config_groups

    group = PLUGIN_KINDS[kind]
    schema = {"harness": HarnessConfig, "sandbox": SandboxConfig, "tools": ToolsConfig}[group]
    registry = _registry(kind)
    configs: dict[str, tuple[dict[str, Any], str]] = {}
    with config_groups() as groups:
        for name in groups.options(group):
            configs[name] = _config(groups, group, name, schema)
    if group == "tools":
        names = registry.names()
        selected = {n: sorted(c for c, (data, _) in configs.items() if data["provider"] == n)
                    for n in names}
        return [{**_plugin_row(registry, name, name), "configs": selected[name]}
                for name in names]
    rows = []
    for option in sorted(set(configs) | set(registry.names())):
        data, conf_from = configs.get(option, ({}, None))
        row = {"option": option, **data, "config_from": conf_from}
        rows.append({**row, **_plugin_row(registry, str(data.get("name") or option),
                                          option)})
    return rows


def _plugin_row(registry: Any, name: str, option: str) -> dict[str, Any]:
    """The registry's facts about ``name``: package, label, options, or why it does not load."""
    from spu.registry import RegistryError, plugin_label

    row: dict[str, Any] = {"option": option, "class": name, "package": registry.package(name)}
    try:
        cls = registry.get(name)
    except RegistryError as exc:
        return {**row, "error": str(exc)}
    model = getattr(cls, "options_model", None)
    options = {} if model is None else {
        field: (None if spec.is_required() else spec.get_default(call_default_factory=True))
        for field, spec in sorted(model.model_fields.items())}
    row.update(plugin_label=plugin_label(cls), options=options)
    if hasattr(cls, "isolates"):
        row.update(isolates=bool(cls.isolates), needs=list(getattr(cls, "needs", ())))
    return row


def analysis_rows() -> list[dict[str, Any]]:
    """Every analysis of ``spu stats`` and of ``spu analyze``, plugins' included."""
    import spu.analysis.builtin  # noqa: F401  (registers spu analyze's own)
    from spu.analysis.trajectory_analysis import TRAJECTORY_ANALYSES
    from spu.registry import distribution_of, plugin_label
    from spu.stats.registry import REGISTRY, discover

    discover()
    rows = []
    for command, registry in (("spu stats", REGISTRY), ("spu analyze", TRAJECTORY_ANALYSES)):
        for entry in registry:
            rows.append({"option": entry.name, "command": command,
                         "package": distribution_of(entry.function.__module__),
                         "plugin_label": plugin_label(entry.function),
                         "files": list(entry.files), "section": entry.section,
                         "source": entry.source})
    return rows


def _task_rows(names: list[str]) -> list[dict[str, Any]]:
    from spu.tasks.package import TaskLoadError, load_task

    root = Path(os.environ.get("SPU_TASK_ROOT", "tasks")).resolve()
    rows: list[dict[str, Any]] = []
    for name in names:
        try:
            t = load_task(root / name)
        except TaskLoadError as exc:
            rows.append({"option": name, "error": str(exc)})
            continue
        rows.append({"option": name, "id": t.id, "version": t.version,
                     "discipline": t.meta.discipline.value, "subfield": t.meta.subfield,
                     "visibility": t.meta.visibility.value, "n_items": t.n_items,
                     "n_groups": len(t.contract.groups), "title": t.meta.title})
    return rows


COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "models": (("option", "model="), ("label", "name"), ("provider", "provider"),
               ("default_harness", "harness"), ("api_key_env", "API key variable"),
               ("_prices", "USD per M tokens: input / cache read / cache write / output"),
               ("package", "package")),
    "harnesses": (("option", "harness="), ("package", "package"),
                  ("plugin_label", "label (the plugin's own)"), ("_options", "harness.options"),
                  ("_pin", "pinned CLI")),
    "sandboxes": (("option", "sandbox="), ("package", "package"),
                  ("plugin_label", "label (the plugin's own)"), ("_isolates", "isolates"),
                  ("_options", "sandbox.options")),
    "tools": (("option", "tools.provider="), ("package", "package"),
              ("plugin_label", "label (the plugin's own)"), ("_options", "tools.options"),
              ("_configs", "tools=")),
    "analyses": (("option", "analysis"), ("command", "run by"), ("package", "package"),
                 ("plugin_label", "label (the plugin's own)"), ("section", "paper"),
                 ("_files", "files")),
    "efforts": (("option", "effort="), ("_harnesses", "each harness's setting"),
                ("package", "package")),
    "tasks": (("option", "task="), ("discipline", "discipline"), ("visibility", "visibility"),
              ("n_items", "experiments"), ("n_groups", "groups"), ("title", "title")),
}


def _cell(column: str, row: dict[str, Any]) -> str:
    if column == "_prices":
        return _prices(row.get("prices") or {})
    if column == "_harnesses":
        mapped = row.get("harnesses") or {}
        return ", ".join(f"{h}: {v}" for h, v in mapped.items()) or "-"
    if column == "_pin":
        version = row.get("version")
        return f"{row['cli_package']}@{version}" if row.get("cli_package") else "-"
    if column == "_options":
        options = row.get("options") or {}
        return ", ".join(f"{k}={v}" for k, v in options.items()) or "-"
    if column == "_isolates":
        needs = f" (needs {', '.join(row['needs'])})" if row.get("needs") else ""
        return ("yes" if row.get("isolates") else "no") + needs
    if column in ("_configs", "_files"):
        return ", ".join(row.get(column[1:]) or []) or "-"
    value = row.get(column)
    return "-" if value is None else str(value)


def _prices(p: dict[str, Any]) -> str:
    if not any(p.get(k) for k in ("input", "output")):
        return "-"
    scale = float(p.get("units_per_usd") or 1.0)

    def fmt(value: Any) -> str:
        return "n/a" if value is None else f"{float(value) / scale:.3g}"

    return " / ".join(fmt(p.get(k)) for k in ("input", "cache_read", "cache_write_5m", "output"))


def list_command(args: argparse.Namespace) -> int:
    """Print one kind's rows; exit 2 when there are none."""
    from rich.console import Console
    from rich.table import Table

    rows = _rows(args.kind, args.task_root)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    if not rows:
        where = f" under task_root={os.environ.get('SPU_TASK_ROOT', 'tasks')}" \
            if args.kind == "tasks" else ""
        print(f"spu list: no {args.kind}{where}", file=sys.stderr)
        return 2
    table = Table(title=f"{args.kind} ({len(rows)})")
    columns = COLUMNS[args.kind]
    for _, heading in columns:
        table.add_column(heading)
    for row in rows:
        if "error" in row:
            lead = [row["option"], *([row["package"]] if "package" in row else [])]
            table.add_row(*lead, f"[red]{row['error']}[/red]",
                          *[""] * (len(columns) - len(lead) - 1))
            continue
        table.add_row(*(_cell(c, row) for c, _ in columns))
    Console(width=None if Console().is_terminal else 160).print(table)
    return 0
