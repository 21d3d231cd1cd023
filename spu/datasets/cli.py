"""``spu dataset pack | list | pull | verify`` (SPEC section 16).

Every fault is one line on stderr, ``spu dataset: NAME@VERSION: <fault>``, and exit
status 2 (``verify``: 1 when a pulled copy differs from what was pulled).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add ``dataset`` and its subcommands to the ``spu`` parser."""
    p = sub.add_parser("dataset", help="pack, list, pull and verify versioned task sets",
                       description="Datasets: named, versioned sets of task packages "
                       "(NAME@VERSION), published in a registry (a registry.json, local or "
                       "http(s)) and pulled into $SPU_DATA_DIR/datasets (default "
                       "~/.cache/spu). dataset=NAME@VERSION on spu run makes a pulled "
                       "dataset the task root.")
    commands = p.add_subparsers(dest="dataset_command", metavar="COMMAND", required=True)
    pack = commands.add_parser("pack", help="pack a task root into an archive and a registry",
                               description="Pack every task package under TASK_ROOT into "
                               "DIR/NAME-VERSION.tar.gz and add (or replace) its entry in "
                               "DIR/registry.json.")
    pack.add_argument("task_root", type=Path, metavar="TASK_ROOT")
    pack.add_argument("--name", required=True, help="dataset name ([a-z0-9][a-z0-9._-]*)")
    pack.add_argument("--version", required=True, help="dataset version (PEP 440, e.g. 1.0)")
    pack.add_argument("--out", type=Path, required=True, metavar="DIR",
                      help="folder of the registry (made if missing)")
    pack.add_argument("--withhold-answers", action="store_true",
                      help="leave every answer key out (runs of those tasks end sealed)")
    pack.add_argument("--description", default="", help="one line about the dataset")
    pack.set_defaults(handler=pack_command)
    listing = commands.add_parser("list", help="the datasets of a registry, or those here",
                                  description="Without --registry (and $SPU_REGISTRY "
                                  "unset): the datasets on this machine, the built-in "
                                  "examples included. With one: what the registry lists.")
    listing.add_argument("--registry", default=None, metavar="REG",
                         help="registry.json, its folder or an http(s) URL")
    listing.add_argument("--json", action="store_true", help="print the rows as JSON")
    listing.set_defaults(handler=list_command)
    pull = commands.add_parser("pull", help="pull NAME@VERSION from a registry",
                               description="Fetch, check (SHA-256, each task's digest) and "
                               "install NAME@VERSION; a version already here is not fetched "
                               "again.")
    pull.add_argument("dataset", metavar="NAME@VERSION")
    pull.add_argument("--registry", default=None, metavar="REG",
                      help="registry.json, its folder or an http(s) URL (default: "
                      "$SPU_REGISTRY)")
    pull.set_defaults(handler=pull_command)
    check = commands.add_parser("verify", help="check a pulled dataset again",
                                description="Check NAME@VERSION's tasks against its "
                                "dataset.json and every file against what was pulled.")
    check.add_argument("dataset", metavar="NAME@VERSION")
    check.set_defaults(handler=verify_command)


def _fail(message: object) -> int:
    print(f"spu dataset: {message}", file=sys.stderr)
    return 2


def pack_command(args: argparse.Namespace) -> int:
    """``spu dataset pack``."""
    from spu.datasets import DatasetError, parse_ref
    from spu.datasets.pack import pack_dataset

    text = f"{args.name}@{args.version}"
    try:
        ref = parse_ref(text)
    except DatasetError as exc:
        return _fail(exc)
    try:
        packed = pack_dataset(args.task_root, ref, args.out,
                              withhold_answers=args.withhold_answers,
                              description=args.description)
    except (DatasetError, OSError) as exc:
        return _fail(f"{text}: {exc}")
    entry = packed.entry
    answers = "withheld" if args.withhold_answers else "included where present"
    print(f"packed {text}: {entry.n_tasks} tasks (answers {answers}) -> {packed.archive} "
          f"({entry.bytes} bytes, sha256 {entry.sha256})")
    print(f"{packed.registry} lists it; publish the folder as static files, then: "
          f"spu dataset pull {text} --registry URL")
    return 0


def list_command(args: argparse.Namespace) -> int:
    """``spu dataset list``."""
    import os

    from spu.datasets import DatasetError
    from spu.datasets.registry import REGISTRY_ENV, locate, read_registry
    from spu.datasets.store import BUILTIN, is_pulled, local_datasets

    rows: list[dict[str, Any]] = []
    try:
        if args.registry or os.environ.get(REGISTRY_ENV):
            location = locate(args.registry)
            for e in read_registry(location).datasets:
                rows.append({"dataset": f"{e.name}@{e.version}", "tasks": e.n_tasks,
                             "bytes": e.bytes, "pulled": is_pulled(e.name, e.version),
                             "description": e.description})
            title = f"registry {location}"
        else:
            for d in local_datasets():
                rows.append({"dataset": d.ref, "path": str(d.path),
                             "built_in": d.name == BUILTIN})
            title = "datasets on this machine"
    except DatasetError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    _print_table(title, rows)
    return 0


def _print_table(title: str, rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{title} ({len(rows)})")
    columns = list(rows[0]) if rows else ["dataset"]
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("yes" if v is True else "no" if v is False else str(v)
                        for v in row.values()))
    Console(width=None if Console().is_terminal else 160).print(table)


def pull_command(args: argparse.Namespace) -> int:
    """``spu dataset pull``."""
    from spu.datasets import DatasetError, parse_ref
    from spu.datasets.store import pull

    try:
        found = pull(parse_ref(args.dataset), args.registry)
    except DatasetError as exc:
        return _fail(exc)
    except OSError as exc:
        return _fail(f"{args.dataset}: {exc}")
    said = "pulled" if found.fetched else "already pulled"
    print(f"{found.ref} {said}: {found.path}")
    print(f"run it: spu run dataset={found.ref} -m task='glob(*)'")
    return 0


def verify_command(args: argparse.Namespace) -> int:
    """``spu dataset verify``: exit 0 when it holds, 1 when it differs, 2 when not here."""
    from spu.datasets import DatasetError, parse_ref
    from spu.datasets.store import find_pulled, verify

    try:
        ref = parse_ref(args.dataset)
        find_pulled(ref)
    except DatasetError as exc:
        return _fail(exc)
    try:
        found, manifest = verify(ref)
    except DatasetError as exc:
        print(f"spu dataset: {exc}", file=sys.stderr)
        return 1
    print(f"{found.ref}: {len(manifest.tasks)} tasks verified ({found.path})")
    return 0
