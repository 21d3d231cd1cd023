"""``spu list models|harnesses|efforts|tasks`` and ``spu run``.

``spu list`` prints one table per config group, read from the same config
repository Hydra composes runs from (``conf/`` and the task packages under
``task_root``), so what it lists is exactly what ``model=``, ``harness=``,
``effort=`` and ``task=`` accept. ``spu run ...`` is ``python -m spu.main ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

KINDS = {"models": "model", "harnesses": "harness", "efforts": "effort", "tasks": "task"}
"""``spu list`` argument -> config group."""


def register(sub: Any) -> None:
    """Add ``list`` and ``run`` to the ``spu`` parser."""
    p = sub.add_parser("list", help="the options of a config group: models, harnesses, "
                                    "efforts or tasks",
                       description="One table of the options Hydra accepts for model=, "
                       "harness=, effort= or task= (tasks: those under --task-root).")
    p.add_argument("kind", choices=sorted(KINDS), help="which config group")
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
    """The options of one group; ``task_root`` (for tasks) only for this call."""
    before = os.environ.get("SPU_TASK_ROOT")
    if task_root is not None:
        os.environ["SPU_TASK_ROOT"] = str(task_root.expanduser().resolve())
    try:
        return _group_rows(kind)
    finally:
        if before is None:
            os.environ.pop("SPU_TASK_ROOT", None)
        else:
            os.environ["SPU_TASK_ROOT"] = before


def _group_rows(kind: str) -> list[dict[str, Any]]:
    from omegaconf import OmegaConf

    from spu.config import EffortConfig, HarnessConfig, ModelConfig
    from spu.overrides import config_groups

    group = KINDS[kind]
    schema = {"model": ModelConfig, "harness": HarnessConfig, "effort": EffortConfig}
    rows: list[dict[str, Any]] = []
    with config_groups() as groups:
        names = groups.options(group)
        if group == "task":
            return _task_rows(names)
        for name in names:
            found = groups.loader.repository.load_config(f"{group}/{name}")
            merged = OmegaConf.merge(OmegaConf.structured(schema[group]), found.config)
            data = OmegaConf.to_container(merged, resolve=True)
            assert isinstance(data, dict)
            rows.append({"option": name, **{str(k): v for k, v in data.items()}})
        if group == "effort":
            mapped = harness_efforts(groups)
            for row in rows:
                row["harnesses"] = {h: levels[row["name"]] for h, levels in mapped.items()
                                    if row["name"] in levels}
    return rows


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
               ("_prices", "USD per M tokens: input / cache read / cache write / output")),
    "harnesses": (("option", "harness="), ("_runs", "runs"), ("_pin", "pinned CLI")),
    "efforts": (("option", "effort="), ("_harnesses", "each harness's setting")),
    "tasks": (("option", "task="), ("discipline", "discipline"), ("visibility", "visibility"),
              ("n_items", "experiments"), ("n_groups", "groups"), ("title", "title")),
}


def _cell(kind: str, column: str, row: dict[str, Any]) -> str:
    if column == "_prices":
        p = row.get("prices") or {}
        if not any(p.get(k) for k in ("input", "output")):
            return "-"
        scale = float(p.get("units_per_usd") or 1.0)

        def fmt(value: Any) -> str:
            return "n/a" if value is None else f"{float(value) / scale:.3g}"

        return " / ".join(fmt(p.get(k)) for k in ("input", "cache_read", "cache_write_5m",
                                                   "output"))
    if column == "_runs":
        if row.get("cli_package"):
            return f"the {row['option']} CLI"
        if row.get("probe"):
            return f"recall probes (harness.probe={row['probe']})"
        return "harness.entrypoint" if row["option"] == "command" else "baseline agents"
    if column == "_harnesses":
        mapped = row.get("harnesses") or {}
        return ", ".join(f"{h}: {v}" for h, v in mapped.items()) or "-"
    if column == "_pin":
        version = row.get("version")
        return f"{row['cli_package']}@{version}" if row.get("cli_package") else "-"
    value = row.get(column)
    return "-" if value is None else str(value)


def list_command(args: argparse.Namespace) -> int:
    """Print one config group's options; exit 2 when the group cannot be read."""
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
            table.add_row(row["option"], f"[red]{row['error']}[/red]",
                          *[""] * (len(columns) - 2))
            continue
        table.add_row(*(_cell(args.kind, c, row) for c, _ in columns))
    Console(width=None if Console().is_terminal else 160).print(table)
    return 0
