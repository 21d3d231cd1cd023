"""``spu init [DIR]``: a starting project folder (SPEC section 16).

An installed ``spu`` runs in a project folder: its ``conf/<group>/<name>.yaml`` add
options to the packaged config groups (:mod:`spu.project`), ``tasks/`` is the default
task root and ``outputs/`` the default output root. ``spu init`` writes such a folder:

- ``conf/model/my-model.yaml``: a model of the lab's own (``model=my-model``);
- ``conf/experiment/my-sweep.yaml``: an experiment (``experiment=my-sweep``);
- ``conf/harness/`` and ``conf/README.md``: where the lab's own harnesses and the other
  groups go;
- ``tasks/``: the lab's own task packages (``spu task new ID``);
- ``.gitignore`` (``outputs/``) and ``README.md``, the next commands.

Nothing is overwritten: when one of these files exists, nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

MY_MODEL = """\
# A model of this project: model=my-model. A file conf/<group>/<name>.yaml here adds an
# option to that group (spu list models shows it beside the packaged ones); one with the
# name of a packaged option shadows it. The keys are those of the packaged models
# (docs/configuration.md, "model").
name: my-model
label: My model
provider: anthropic             # anthropic, openai, ...: which API the harness speaks
api_model: claude-sonnet-5-5    # the provider's model id
base_url: null                  # null: the provider's endpoint; or a compatible URL
api_key_env: ANTHROPIC_API_KEY  # the variable holding the key (never the key itself)
default_harness: claude_code    # the agent that runs it (harness=...)
prices:                         # per million tokens: cost estimates and budgets
  currency: USD
  units_per_usd: 1.0
  input: 2.0
  cache_read: 0.1
  cache_write_5m: 2.5
  cache_write_1h: 4.0
  output: 10.0
"""

MY_SWEEP = """\
# @package _global_
# An experiment of this project: spu run experiment=my-sweep dataset=examples
# Two baselines and this project's model on every task of the task root (tasks/, or the
# dataset= given). A key given on the command line replaces its sweep parameter here
# (spu run experiment=my-sweep model=presented_order runs one configuration).
experiment:
  name: my-sweep
  description: Two baselines and my-model on every task
hydra:
  mode: MULTIRUN
  sweeper:
    params:
      model: presented_order,monotone_prior,my-model
      task: glob(*)
"""

CONF_README = """\
# conf/: this project's options

Each file `conf/<group>/<name>.yaml` is one option of a packaged config group: `model`,
`harness`, `effort`, `sandbox`, `tools`, `tracking`, `experiment`, `hydra/launcher`. It
adds `<group>=<name>` to what `spu run` accepts, or shadows the packaged option of the
same name (`spu run` says so in one line). `spu list models` (or `harnesses`, `efforts`)
lists the options with this project's. A file directly under `conf/` is not read: an
experiment (`conf/experiment/<name>.yaml`) is where the project sets its defaults.
"""

README = """\
# An SPU project

Run `spu` from this folder: `conf/` holds this project's options (`conf/README.md`),
`tasks/` its own task packages (the default task root), and `outputs/` what runs write.

```bash
# a baseline on the example tasks built into spu, then every job of the sweep with its cost
spu run experiment=my-sweep dataset=examples model=presented_order
spu run experiment=my-sweep dataset=examples dry_run=true
# a published task set, and the sweep on it
spu dataset pull NAME@VERSION --registry URL
spu run experiment=my-sweep dataset=NAME@VERSION
# the runs table and the paper's statistics
spu runs export --out outputs/runs.csv
spu stats outputs/runs.csv --out outputs/stats/
```

`model=my-model` needs `ANTHROPIC_API_KEY` in the environment (`conf/model/my-model.yaml`).
"""

GITIGNORE = """\
# What runs write (runs, tracking, statistics): spu's output root.
/outputs/
"""

FILES: dict[str, str] = {
    "README.md": README,
    ".gitignore": GITIGNORE,
    "conf/README.md": CONF_README,
    "conf/model/my-model.yaml": MY_MODEL,
    "conf/experiment/my-sweep.yaml": MY_SWEEP,
}
"""Relative path -> content of every file ``spu init`` writes."""

FOLDERS: tuple[str, ...] = ("conf/harness", "tasks")
"""The empty folders it makes."""


class ProjectExists(FileExistsError):
    """A file ``spu init`` would write is there already."""


def init_project(folder: str | Path) -> list[Path]:
    """Write a starting project into ``folder`` (made if missing); returns what was written.

    Raises:
        ProjectExists: one of the files exists; nothing was written.
    """
    folder = Path(folder)
    for rel in FILES:
        if (folder / rel).exists() or (folder / rel).is_symlink():
            raise ProjectExists(f"{folder / rel} exists; nothing was written (spu init "
                                f"starts a new project: choose an empty folder)")
    written = []
    for rel in FOLDERS:
        (folder / rel).mkdir(parents=True, exist_ok=True)
        written.append(folder / rel)
    for rel, text in FILES.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as f:  # never over a file made meanwhile
            f.write(text)
        written.append(path)
    return written


def register(sub: Any) -> None:
    """Add ``init`` to the ``spu`` parser."""
    p = sub.add_parser("init", help="write a starting project folder (conf/, tasks/)",
                       description="Write a project folder to run spu from: conf/ (an example "
                       "model and experiment, places for the lab's own options), tasks/, a "
                       ".gitignore for outputs/ and a README of the next commands.")
    p.add_argument("folder", nargs="?", type=Path, default=Path("."),
                   help="the project folder (default: the current one)")
    p.set_defaults(handler=init_command)


def init_command(args: argparse.Namespace) -> int:
    """Write the project; exit 2 when a file exists or the folder cannot be written."""
    try:
        written = init_project(args.folder)
    except (ProjectExists, OSError) as exc:
        print(f"spu init: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}{'/' if path.is_dir() else ''}")
    where = "" if args.folder == Path(".") else f"cd {args.folder} && "
    print(f"next: {where}spu run experiment=my-sweep dataset=examples model=presented_order "
          f"(README.md lists the next commands)")
    return 0
