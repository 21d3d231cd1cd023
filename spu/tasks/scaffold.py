"""``spu task new ID``: a new task to start from, as a build spec, a table and a package.

It writes a commented build spec (``<sources>/<ID>.yaml``) and a small illustrative
table beside it (``<sources>/<ID>.csv``), then builds ``<task_root>/<ID>`` from them
with :func:`spu.tasks.builder.build_task`, which validates the package before writing
it. Replace the table by measured data and the texts by the real procedure, then
rebuild with ``spu task build <sources>/<ID>.yaml --out <task_root>/<ID> --force``
(``docs/writing-a-task.md`` walks through it).

The table's values are illustrative, not measurements: they only make the scaffold a
package that passes ``spu task validate --strict``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TASK_ID = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}[a-z0-9]$")
"""A task id: lower-case letters, digits and hyphens (it becomes a folder and ``task=``)."""

TABLE = """series,temperature_c,catalyst,solvent,base,yield_pct
A,60,Pd(OAc)2,toluene,K3PO4,41.0
A,80,Pd(OAc)2,toluene,K3PO4,63.5
A,100,Pd(OAc)2,toluene,K3PO4,58.2
A,80,Pd2(dba)3,dioxane,K2CO3,71.9
A,80,PdCl2,dioxane,K2CO3,37.4
A,100,Pd2(dba)3,DMF,Cs2CO3,22.8
A,60,PdCl2,THF,K3PO4,49.1
A,80,Pd(OAc)2,THF/water,K2CO3,80.3
B,40,Pd(OAc)2,ethanol,K2CO3,12.6
B,60,Pd2(dba)3,ethanol,K2CO3,55.0
B,60,PdCl2,water,Na2CO3,30.7
B,40,Pd2(dba)3,water,Na2CO3,44.9
B,80,PdCl2,ethanol,Na2CO3,18.3
B,80,Pd(OAc)2,water,K2CO3,67.2
"""
"""An illustrative table: two series of coupling reactions and their yields."""

SPEC = """\
# Build spec of task {task_id} (spu task new). Edit, then rebuild the package:
#   spu task build {spec_rel} --out {out_rel} --force
# Every key is described in spu/tasks/builder.py (BuildSpec); docs/writing-a-task.md
# walks through them. The table beside this file holds ILLUSTRATIVE values: replace it
# by measured data before the task is used.
id: {task_id}                 # the task id: folder name and task=<id> in runs
version: "1.0"
title: Ranking coupling reactions by yield   # neutral: no hint of the source study
discipline: chemistry         # chemistry, materials science, biology or medicine
subfield: reaction optimization
visibility: public            # public or private
seed: {seed}                  # seeds ids, row order and item order (same spec, same bytes)
table:
  path: {table_name}          # a CSV beside this spec (or package: name==version + member)
  format: csv
value: yield_pct              # the measured value the agent ranks
settings:                     # the columns of targets.csv, in order
  - {{column: temperature_c, name: temperature, unit: C, description: "reaction temperature"}}
  - {{column: catalyst, description: "palladium source (2 mol%)"}}
  - {{column: solvent, description: "reaction solvent"}}
  - {{column: base, description: "inorganic base (2 equivalents)"}}
groups:                       # one comparison group per endpoint or series
  - where: {{series: A}}
    endpoint: isolated yield of the biaryl product after 16 h
    unit: "%"
    weight: 0.6
    conditions: {{scale: 0.5 mmol aryl bromide}}
  - where: {{series: B}}
    endpoint: isolated yield of the biaryl product after 16 h, aqueous series
    unit: "%"
    weight: 0.4
procedure: |
  Each experiment couples the same aryl bromide with the same boronic acid under one set
  of conditions; the varied settings are listed in targets.csv. Reactions run under
  nitrogen and the product is isolated by column chromatography.
task_text: |
  Predict which conditions give the highest yield. Order the experiments of each
  comparison group from the lowest to the highest yield.
source:                       # goes to the hidden answer key only (exposure detector)
  title: Illustrative example values (not measurements)
"""


class ScaffoldError(ValueError):
    """The scaffold cannot be written; the message says why."""


@dataclass(frozen=True)
class Scaffold:
    """What ``spu task new`` wrote."""

    spec: Path
    """The build spec."""
    table: Path
    """The illustrative table."""
    task_dir: Path
    """The built task package."""


def new_task(task_id: str, task_root: Path, sources: Path, *, force: bool = False,
             seed: int = 2024) -> Scaffold:
    """Write the spec and table of a new task and build its package.

    Raises:
        ScaffoldError: a bad id, or files that exist (without ``force``).
        spu.tasks.builder.BuildError: the package could not be built.
    """
    from spu.tasks.builder import build_task

    if not TASK_ID.match(task_id):
        raise ScaffoldError(f"task id {task_id!r}: use 3 to 64 lower-case letters, digits and "
                            f"hyphens, starting and ending with a letter or digit")
    spec = sources / f"{task_id}.yaml"
    table = sources / f"{task_id}.csv"
    out = task_root / task_id
    existing = [p for p in (spec, table, out) if p.exists()]
    if existing and not force:
        raise ScaffoldError(f"{existing[0]} exists; pass --force to replace it")
    sources.mkdir(parents=True, exist_ok=True)
    table.write_text(TABLE, encoding="utf-8")
    spec.write_text(SPEC.format(task_id=task_id, seed=seed, table_name=table.name,
                                spec_rel=_shown(spec), out_rel=_shown(out)), encoding="utf-8")
    try:
        build_task(spec, out, force=True, strict=True)
    except Exception:
        if not existing:  # leave nothing half-made behind
            spec.unlink(missing_ok=True)
            table.unlink(missing_ok=True)
        raise
    return Scaffold(spec=spec, table=table, task_dir=out)


def _shown(path: Path) -> str:
    """``path`` relative to the current folder where it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
