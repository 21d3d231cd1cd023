"""The task validator: what a package must satisfy before it is frozen.

Errors make a package unusable: a required file missing or malformed, experiment ids
that do not match one-to-one across ``targets.csv``, ``contract.json`` and the answer
key, an experiment listed twice, weights that are not positive or do not sum to 1, a
group with fewer than 2 experiments or with all measured values equal, a measured
value that is not a finite number, and a leak (measured values or source identifiers
in a public file).

Packages are data: a link (to a file or a folder), a device, a FIFO or a socket anywhere
in the package is an error (``unsafe-file``), and so is a file over its size limit.
No finding ever quotes a measured value or a source identifier: a leak names the file,
the column or group and the count of values found, so a report can be shared.

Warnings are the screens of the paper's construction protocol (section 2.3, steps 2
and 3); ``strict`` turns them into errors (unless the task's review waives a screen with
its reason, :mod:`spu.tasks.review`) and requires an accepted review of a public task's
current files: a group whose measured values rise or fall
strictly with one varied numeric setting (``strictly-monotone``, the paper's exclusion)
or follow one closely (``monotone-rho``, ``|rho| >= 0.95``), a group whose values lie
within the stated measurement error or a small relative spread, experiment ids that
are not anonymized, and a presented order (``targets.csv`` rows or contract items)
that scores above the chance threshold.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import stat
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spu.schema import AnswerKey, Contract, Protocol, TargetRow, TaskMeta
from spu.strict_json import StrictJSONError, loads_strict
from spu.tasks import leaks
from spu.tasks.package import (
    MAX_STAGED_FILE_BYTES,
    MAX_TABLE_BYTES,
    PUBLIC_PATHS,
    REQUIRED_PUBLIC,
    TaskLoadError,
    load_contract,
    load_meta,
    load_protocol,
    load_targets,
    read_task_file,
    read_task_text,
    unsafe_entries,
    validation_message,
)

WEIGHT_TOLERANCE = 1e-9
"""Largest accepted distance of the sum of group weights from 1."""

ANONYMIZED_ID = re.compile(r"^(?:[A-Za-z]{1,3}[-_]?\d{2,6}|(?=[A-Z0-9]*\d)[A-Z0-9]{3,8})$")
"""What an anonymized experiment id looks like: ``E503``, ``X-0417``, ``7K2Q``."""


class Severity(str, Enum):
    """How serious a finding is."""

    error = "error"
    warning = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem of a task package, located in a file."""

    severity: Severity
    file: str
    """The file concerned, relative to the task folder (or the answer key's path)."""
    code: str
    """Short machine-readable kind, e.g. ``id-mismatch`` or ``leak-values``."""
    message: str

    def __str__(self) -> str:
        return f"{self.severity.value}: {self.file}: {self.message}"


@dataclass(frozen=True)
class ScreenSettings:
    """Thresholds of the construction screens (paper section 2.3, step 2)."""

    monotone_rho: float = 0.95
    """The ``monotone-rho`` check fires when ``|Spearman rho|`` with a setting reaches this
    (a group strictly monotone in a setting is ``strictly-monotone`` whatever this is)."""
    min_relative_spread: float = 0.05
    """A group is narrow when ``(max - min) / max(|value|)`` is below this."""
    draws: int = 4000
    """Random submissions drawn for the sampled chance threshold."""
    seed: int = 0
    """Seed of those draws."""


@dataclass(frozen=True)
class ValidationReport:
    """All findings on one task package."""

    task_dir: Path
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def errors(self) -> list[Finding]:
        """Findings that make the package unusable."""
        return [f for f in self.findings if f.severity is Severity.error]

    @property
    def warnings(self) -> list[Finding]:
        """Findings of the construction screens."""
        return [f for f in self.findings if f.severity is Severity.warning]

    @property
    def ok(self) -> bool:
        """True when there is no error."""
        return not self.errors


class _Collector:
    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def error(self, file: str, code: str, message: str) -> None:
        self.findings.append(Finding(Severity.error, file, code, message))

    def warning(self, file: str, code: str, message: str) -> None:
        self.findings.append(Finding(Severity.warning, file, code, message))


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _read_answers(path: Path, name: str, out: _Collector) -> AnswerKey | None:
    """The answer key, reporting where a value is not a finite number.

    Parsed by the grader's strict rules, except that ``NaN``/``Infinity`` are read so
    that the finding can name the experiment that holds one.
    """
    try:
        raw = loads_strict(read_task_text(path, MAX_TABLE_BYTES), allow_nan=True)
    except TaskLoadError as exc:
        out.error(name, "malformed", str(exc).removeprefix(f"{path}: "))
        return None
    except StrictJSONError as exc:
        if exc.kind == "duplicate":
            out.error(name, "duplicate-experiment",
                      f"key {exc.key!r} appears twice in one object (an experiment or group "
                      f"listed twice)")
        else:
            out.error(name, "malformed", str(exc))
        return None
    groups = raw.get("groups") if isinstance(raw, dict) else None
    bad = False
    if isinstance(groups, dict):
        for gid, values in groups.items():
            if not isinstance(values, dict):
                continue
            for eid, value in values.items():
                if not _is_number(value):
                    # The kind of value, not the value: reports never show the key.
                    kind = "NaN or infinite" if isinstance(value, float) else \
                        type(value).__name__
                    out.error(name, "non-numeric",
                              f"groups.{gid}.{eid}: measured value is not a finite number "
                              f"({kind})")
                    bad = True
    if bad:
        return None
    try:
        return AnswerKey.model_validate(raw)
    except ValidationError as exc:
        out.error(name, "malformed", validation_message(name, exc).removeprefix(f"{name}: "))
        return None


def _load(out: _Collector, name: str, loader: Any, *args: Any) -> Any:
    try:
        return loader(*args)
    except TaskLoadError as exc:
        # The loader's message starts with the absolute path; the finding names the file.
        where = Path(args[0])
        prefix = f"{where / name if where.is_dir() else where}: "
        out.error(name, "malformed", str(exc).removeprefix(prefix))
        return None


def _check_contract(contract: Contract, out: _Collector) -> None:
    name = "contract.json"
    ids = [g.group_id for g in contract.groups]
    for gid in {g for g in ids if ids.count(g) > 1}:
        out.error(name, "duplicate-group", f"group {gid} is listed {ids.count(gid)} times")
    if not contract.groups:
        out.error(name, "malformed", "the contract has no comparison group")
    seen: dict[str, str] = {}
    for g in contract.groups:
        if not g.weight > 0:
            out.error(name, "weights", f"group {g.group_id} has weight {g.weight}, not positive")
        if len(g.items) < 2:
            out.error(name, "group-size",
                      f"group {g.group_id} has {len(g.items)} experiment(s); at least 2 needed")
        for eid in g.items:
            if eid in seen:
                where = "the same group" if seen[eid] == g.group_id else f"group {seen[eid]}"
                out.error(name, "duplicate-experiment",
                          f"experiment {eid} is listed twice (in group {g.group_id} and "
                          f"{where})")
            seen[eid] = g.group_id
    total = math.fsum(g.weight for g in contract.groups)
    if contract.groups and abs(total - 1.0) > WEIGHT_TOLERANCE:
        out.error(name, "weights", f"group weights sum to {total!r}, not 1 "
                                   f"(tolerance {WEIGHT_TOLERANCE})")


def _check_identity(meta: TaskMeta, contract: Contract | None, answers: AnswerKey | None,
                    answers_name: str, task_dir: Path, out: _Collector) -> None:
    if task_dir.name != meta.id:
        out.warning("task.yaml", "identity",
                    f"id {meta.id!r} differs from the folder name {task_dir.name!r} "
                    f"(Hydra selects the task as task={task_dir.name})")
    for name, record in (("contract.json", contract), (answers_name, answers)):
        if record is None:
            continue
        if record.task_id != meta.id:
            out.error(name, "identity",
                      f"task_id {record.task_id!r} does not match task.yaml id {meta.id!r}")
        if record.task_version != meta.version:
            out.error(name, "identity", f"task_version {record.task_version!r} does not "
                                        f"match task.yaml version {meta.version!r}")


def _check_targets(rows: list[TargetRow], contract: Contract, out: _Collector) -> None:
    name = "targets.csv"
    group_of = {eid: g.group_id for g in contract.groups for eid in g.items}
    seen: set[str] = set()
    for line, row in enumerate(rows, start=2):
        eid = row.experiment_id
        if eid in seen:
            out.error(name, "duplicate-experiment", f"line {line}: experiment {eid} is "
                                                    f"listed twice")
        seen.add(eid)
        if eid not in group_of:
            out.error(name, "id-mismatch",
                      f"line {line}: experiment {eid} (group {row.group_id}) is not in "
                      f"contract.json")
        elif group_of[eid] != row.group_id:
            out.error(name, "id-mismatch",
                      f"line {line}: experiment {eid} is in group {row.group_id} here but in "
                      f"group {group_of[eid]} in contract.json")
    for g in contract.groups:
        missing = [eid for eid in g.items if eid not in seen]
        if missing:
            out.error(name, "id-mismatch",
                      f"group {g.group_id}: {len(missing)} experiment(s) of contract.json "
                      f"have no row: {', '.join(missing[:5])}")


def _check_answers(answers: AnswerKey, contract: Contract, name: str, out: _Collector) -> None:
    known = {g.group_id for g in contract.groups}
    for gid in answers.groups:
        if gid not in known:
            out.error(name, "id-mismatch", f"group {gid} is not in contract.json")
    for g in contract.groups:
        measured = answers.groups.get(g.group_id)
        if measured is None:
            out.error(name, "id-mismatch", f"group {g.group_id} of contract.json has no "
                                           f"measured values")
            continue
        extra = [eid for eid in measured if eid not in g.items]
        missing = [eid for eid in g.items if eid not in measured]
        if extra:
            out.error(name, "id-mismatch", f"group {g.group_id}: experiment(s) not in the "
                                           f"contract's group: {', '.join(extra[:5])}")
        if missing:
            out.error(name, "id-mismatch", f"group {g.group_id}: experiment(s) of the "
                                           f"contract without a value: {', '.join(missing[:5])}")
        values = [measured[eid] for eid in g.items if eid in measured]
        if len(values) >= 2 and len(set(values)) == 1:
            out.error(name, "constant-group", f"group {g.group_id}: all {len(values)} measured "
                                              f"values are equal")


def _check_protocol(protocol: Protocol, contract: Contract, rows: list[TargetRow] | None,
                    out: _Collector) -> None:
    name = "protocol.json"
    described = {g.group_id for g in protocol.groups}
    known = {g.group_id for g in contract.groups}
    for gid in sorted(known - described):
        out.error(name, "id-mismatch", f"group {gid} of contract.json has no endpoint here")
    for gid in sorted(described - known):
        out.error(name, "id-mismatch", f"group {gid} is not in contract.json")
    if rows:
        columns = set(rows[0].settings)
        for s in protocol.settings:
            if s.name not in columns:
                out.warning(name, "settings", f"setting {s.name!r} is not a column of "
                                              f"targets.csv")


def _is_regular(path: Path) -> bool:
    """A regular file, not a link to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _public_files(task_dir: Path) -> list[Path]:
    """The public regular files (links and special files are reported apart, never read)."""
    files = []
    for name in PUBLIC_PATHS:
        path = task_dir / name
        if _is_regular(path):
            files.append(path)
        elif path.is_dir() and not path.is_symlink():
            for root, dirs, names in os.walk(path, followlinks=False):
                dirs.sort()
                files.extend(Path(root) / n for n in sorted(names)
                             if _is_regular(Path(root) / n))
    return files


def _check_leaks(task_dir: Path, rows: list[TargetRow] | None, answers: AnswerKey,
                 out: _Collector) -> None:
    found: list[leaks.Leak] = []
    identifiers = leaks.source_identifiers(answers.source)
    for path in _public_files(task_dir):
        rel = path.relative_to(task_dir).as_posix()
        try:
            data = read_task_file(path, MAX_STAGED_FILE_BYTES)
        except TaskLoadError as exc:
            out.error(rel, "malformed", str(exc).removeprefix(f"{path}: "))
            continue
        found += leaks.source_leaks(data, identifiers, rel)
        if rel == "targets.csv":
            if rows is not None:
                found += leaks.column_leaks(rows, answers.groups, rel)
            continue
        if rel == "contract.json":
            continue  # ids and weights only, checked by schema
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # images and other binary files: identifiers only
        found += leaks.text_leaks(text, answers.groups, rel)
    for leak in found:
        code = "leak-source" if leak.group_id is None else "leak-values"
        out.error(leak.file, code, f"leak: {leak.message}")


def _check_unsafe(task_dir: Path, out: _Collector) -> None:
    """Each link, device, FIFO or socket of the package is an error of its own."""
    for entry in unsafe_entries(task_dir):
        public = entry.path.split("/", 1)[0] in PUBLIC_PATHS
        where = "staging refuses the package" if public else "never read"
        out.error(entry.path, "unsafe-file",
                  f"is a {entry.kind}{'' if entry.target is None else f' to {entry.target!r}'}; "
                  f"task packages hold regular files and folders only ({where})")


def staged_package_errors(staged_dir: str | Path, contract: Contract,
                          answers: AnswerKey | None) -> list[Finding]:
    """Errors of a staged copy of a package, checked before the agent starts.

    The copy must hold every required file as a regular file, nothing unsafe, and a
    ``task.yaml``, ``contract.json`` and ``targets.csv`` consistent with the trusted
    contract and answer key: same task identity, the same groups and experiments, each
    experiment once (ids one-to-one across the three). The screens and the leak checks
    are the maintainer's (``spu task validate``), not repeated for every run.
    """
    staged = Path(staged_dir)
    out = _Collector()
    _check_unsafe(staged, out)
    for name in REQUIRED_PUBLIC:
        if not _is_regular(staged / name):
            out.error(name, "missing-file", "required file is missing from the staged copy")
    if out.findings:
        return out.findings
    meta = _load(out, "task.yaml", load_meta, staged)
    copy = _load(out, "contract.json", load_contract, staged / "contract.json")
    rows = _load(out, "targets.csv", load_targets, staged / "targets.csv")
    if meta is not None:
        for name, record in (("contract.json", copy), ("answers", answers)):
            if record is not None and (record.task_id, record.task_version) != (meta.id,
                                                                                meta.version):
                out.error(name, "identity", f"task {record.task_id!r} version "
                                            f"{record.task_version!r} does not match task.yaml "
                                            f"({meta.id!r} version {meta.version!r})")
    if copy is not None and copy != contract:
        out.error("contract.json", "id-mismatch", "the staged contract differs from the trusted "
                                                  "one")
    _check_contract(contract, out)
    if rows is not None:
        _check_targets(rows, contract, out)
    if answers is not None:  # None: a task whose key is pending (runs end sealed)
        _check_answers(answers, contract, "answers", out)
    return [f for f in out.findings if f.severity is Severity.error]


def _spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho (scipy), NaN where either side is constant (no order to follow).

    Examples:
        Ranks (1, 2, 3, 4) and (1, 2, 4, 3): d^2 sums to 2, rho = 1 - 6 * 2 / 60 = 0.8.

        >>> round(_spearman([1, 2, 3, 4], [10, 20, 40, 30]), 12), _spearman([1, 1, 1], [1, 2, 3])
        (0.8, nan)
    """
    from scipy.stats import spearmanr

    if len(set(x)) < 2 or len(set(y)) < 2:
        return math.nan
    return float(spearmanr(x, y).statistic)


def _as_number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def strict_trend(settings: list[float], values: list[float]) -> str | None:
    """``"rises"`` or ``"falls"`` when ``values`` move strictly with ``settings``, else None.

    Strictly: ordered by the setting (no two experiments at the same setting), every
    measured value is above (or every one below) the one before; a tie on either side
    breaks the trend. Extending such a series ranks the group perfectly (paper 2.3,
    step 2, Figure 4).

    Examples
    --------
    >>> strict_trend([10, 20, 40], [0.5, 0.9, 1.3])
    'rises'
    >>> strict_trend([10, 20, 40], [1.3, 0.9, 0.5])
    'falls'
    >>> strict_trend([10, 20, 20], [0.5, 0.9, 1.3]) is None  # a repeated setting
    True
    >>> strict_trend([10, 20, 40], [0.5, 1.3, 0.9]) is None
    True
    """
    pairs = sorted(zip(settings, values, strict=True))
    if any(a[0] == b[0] for a, b in itertools.pairwise(pairs)):
        return None
    steps = [b[1] - a[1] for a, b in itertools.pairwise(pairs)]
    if all(d > 0 for d in steps):
        return "rises"
    if all(d < 0 for d in steps):
        return "falls"
    return None


def _screen_groups(rows: list[TargetRow], contract: Contract, answers: AnswerKey,
                   protocol: Protocol | None, screens: ScreenSettings, answers_name: str,
                   out: _Collector) -> None:
    by_id = {r.experiment_id: r for r in rows}
    errors = {g.group_id: g.measurement_error for g in protocol.groups} if protocol else {}
    for g in contract.groups:
        measured = answers.groups.get(g.group_id, {})
        items = [i for i in g.items if i in measured and i in by_id]
        if len(items) < 2:
            continue
        values = [measured[i] for i in items]
        spread = max(values) - min(values)
        if spread == 0:
            continue
        if len(items) >= 3:
            _screen_trends(g.group_id, [by_id[i] for i in items], values, screens, out)
        error = errors.get(g.group_id)
        if error is not None and spread <= error:
            out.warning(answers_name, "narrow",
                        f"group {g.group_id}: the values span no more than the stated "
                        f"measurement error {error:g} (paper 2.3, step 2)")
        scale = max(abs(v) for v in values)
        if scale > 0 and spread / scale < screens.min_relative_spread:
            out.warning(answers_name, "narrow",
                        f"group {g.group_id}: relative spread {spread / scale:.3f} is below "
                        f"{screens.min_relative_spread:g} (paper 2.3, step 2)")


def _screen_trends(group_id: str, rows: list[TargetRow], values: list[float],
                   screens: ScreenSettings, out: _Collector) -> None:
    """The two trend checks of step 2 on one group of at least three experiments.

    ``strictly-monotone``: the measured order rises or falls strictly with one numeric
    setting, the paper's exclusion (2.3, Figure 4). ``monotone-rho``: the looser
    warning, ``|Spearman rho| >=`` ``screens.monotone_rho`` with a setting that takes at
    least three values, for a near-series the strict check lets through.
    """
    columns = list(rows[0].settings)
    varied = [c for c in columns if len({r.settings.get(c, "") for r in rows}) > 1]
    for col in columns:
        numbers = [_as_number(r.settings.get(col, "")) for r in rows]
        if any(v is None for v in numbers):
            continue
        x = [float(v) for v in numbers if v is not None]
        trend = strict_trend(x, values)
        if trend is not None:
            only = " (the only setting varied in the group)" if varied == [col] else ""
            out.warning("targets.csv", "strictly-monotone",
                        f"group {group_id}: the measured values {trend} strictly with setting "
                        f"{col!r}{only}; extending the series ranks it perfectly "
                        f"(paper 2.3, step 2)")
            continue
        if len(set(x)) < 3:
            continue
        rho = _spearman(x, values)
        if abs(rho) >= screens.monotone_rho:
            direction = "rises" if rho > 0 else "falls"
            out.warning("targets.csv", "monotone-rho",
                        f"group {group_id}: the measured order {direction} with setting "
                        f"{col!r} (Spearman rho {rho:+.3f}, |rho| >= {screens.monotone_rho:g}); "
                        f"extending the trend ranks it well (paper 2.3, step 2)")


def _screen_ids(rows: list[TargetRow], contract: Contract, answers: AnswerKey,
                screens: ScreenSettings, out: _Collector) -> None:
    name = "targets.csv"
    descriptive = []
    for row in rows:
        eid = row.experiment_id
        if not ANONYMIZED_ID.match(eid):
            descriptive.append(eid)
            continue
        for col, cell in row.settings.items():
            if len(cell) >= 3 and _as_number(cell) is None and cell.casefold() in eid.casefold():
                descriptive.append(f"{eid} (contains {col} {cell!r})")
                break
    if descriptive:
        out.warning(name, "not-anonymized",
                    f"{len(descriptive)} experiment id(s) are not anonymized codes: "
                    f"{', '.join(descriptive[:5])}")
    for g in contract.groups:
        measured = answers.groups.get(g.group_id, {})
        codes = [(re.sub(r"\D", "", i), measured.get(i)) for i in g.items]
        pairs = [(float(c), v) for c, v in codes if c and v is not None]
        if len(pairs) < 4 or len(pairs) != len(g.items):
            continue
        rho = _spearman([c for c, _ in pairs], [v for _, v in pairs])
        if abs(rho) >= screens.monotone_rho:
            out.warning(name, "not-anonymized",
                        f"group {g.group_id}: id numbers follow the measured order "
                        f"(Spearman rho {rho:+.3f})")


def _screen_presented_order(rows: list[TargetRow], contract: Contract, answers: AnswerKey,
                            screens: ScreenSettings, out: _Collector) -> None:
    from spu.tasks.threshold import presented_order_score, task_threshold

    report = task_threshold(contract, answers, [r.experiment_id for r in rows],
                            draws=screens.draws, seed=screens.seed)
    threshold = report.exact_threshold if report.exact_threshold is not None \
        else report.threshold
    kind = "exact" if report.exact_threshold is not None else "sampled"
    if report.presented_order_score > threshold:
        out.warning("targets.csv", "presented-order",
                    f"rows in file order score {report.presented_order_score:.3f}, above the "
                    f"{kind} chance threshold {threshold:.3f}: shuffle them")
    contract_order = [i for g in contract.groups for i in g.items]
    score = presented_order_score(contract, answers, contract_order)
    if score > threshold:
        out.warning("contract.json", "presented-order",
                    f"items in contract order score {score:.3f}, above the {kind} chance "
                    f"threshold {threshold:.3f}: shuffle them")


def is_task_package(folder: str | Path) -> bool:
    """True when ``folder`` holds any file of a task package (``task.yaml``, ``contract.json``...).

    ``spu task validate tasks/*/`` reaches ``tasks/sources/`` (build specs) too: a folder
    with none of a package's files is not a broken task but something else, and is
    skipped with a note; one missing only some files is validated (and fails).
    """
    folder = Path(folder)
    return folder.is_dir() and (any((folder / name).exists() for name in REQUIRED_PUBLIC)
                                or (folder / "hidden").exists())


def validate_task(
    task_dir: str | Path,
    answers_path: str | Path | None = None,
    *,
    strict: bool = False,
    screens: ScreenSettings | None = None,
    review: bool | None = None,
) -> ValidationReport:
    """Check a task package against SPEC section 1 and the paper's construction screens.

    Parameters
    ----------
    task_dir
        The task folder.
    answers_path
        The answer key; default ``<task_dir>/hidden/answers.json``.
    strict
        Report the screens' warnings as errors, except a screen that the task's current
        accepted review waives (with its reason); and require of a public task that is
        not retired an accepted review of its current files (SPEC section 15).
    screens
        Thresholds of the screens.
    review
        Whether ``strict`` consults ``review.yaml`` (default: yes). The builder passes
        False: a package being built has not been reviewed yet.

    Returns
    -------
    ValidationReport
        Every finding, each naming its file; ``ok`` is False on any error.
    """
    given = Path(task_dir)
    task_dir = given.resolve()
    screens = screens or ScreenSettings()
    out = _Collector()
    if not task_dir.is_dir():
        out.error(str(task_dir), "missing-file", "task folder does not exist")
        return ValidationReport(task_dir, tuple(out.findings))
    if given.is_symlink():
        out.error(str(given), "unsafe-file", f"the task folder is a link (to "
                                             f"{os.readlink(given)!r}); sweeps skip it")
    answers_file, answers_name = _answers_file(task_dir, answers_path)
    _check_unsafe(task_dir, out)
    for name in REQUIRED_PUBLIC:
        if not os.path.lexists(task_dir / name):
            out.error(name, "missing-file", "required file is missing")

    def present(name: str) -> bool:
        return _is_regular(task_dir / name)

    meta = _load(out, "task.yaml", load_meta, task_dir) if present("task.yaml") else None
    pending = meta is not None and meta.answers == "pending"
    _check_key_present(answers_file, answers_name, pending, out)
    contract = (_load(out, "contract.json", load_contract, task_dir / "contract.json")
                if present("contract.json") else None)
    protocol = (_load(out, "protocol.json", load_protocol, task_dir / "protocol.json")
                if present("protocol.json") else None)
    rows = (_load(out, "targets.csv", load_targets, task_dir / "targets.csv")
            if present("targets.csv") else None)
    answers = (_read_answers(answers_file, answers_name, out)
               if os.path.lexists(answers_file) else None)

    _check_parts(task_dir, meta, contract, protocol, rows, answers, answers_name, out)
    # The screens score orderings with the grader, which needs a consistent package.
    broken = any(f.severity is Severity.error for f in out.findings)
    if contract is not None and answers is not None and rows is not None and not broken:
        _screen_groups(rows, contract, answers, protocol, screens, answers_name, out)
        _screen_ids(rows, contract, answers, screens, out)
        _screen_presented_order(rows, contract, answers, screens, out)
    findings = out.findings
    if strict:
        findings = _strict(findings, task_dir, meta, consult_review=review is not False)
    return ValidationReport(task_dir, tuple(findings))


def _answers_file(task_dir: Path, answers_path: str | Path | None) -> tuple[Path, str]:
    """The answer key's path (its folders resolved) and its name in findings."""
    answers_file = Path(answers_path) if answers_path else task_dir / "hidden" / "answers.json"
    # Resolve the folders only: the key itself must not be a link.
    answers_file = answers_file.parent.resolve() / answers_file.name
    try:
        answers_name = answers_file.relative_to(task_dir).as_posix()
    except ValueError:
        answers_name = str(answers_file)
    return answers_file, answers_name


def _check_key_present(answers_file: Path, answers_name: str, pending: bool,
                       out: _Collector) -> None:
    """An answer key, or the ``answers: pending`` mark of a task to run sealed."""
    if not os.path.lexists(answers_file):
        if pending:  # a valid task to run: its runs end sealed (SPEC 13)
            out.warning(answers_name, "answers-pending", "no answer key yet (task.yaml: "
                        "answers: pending): runs end sealed, graded when the key is added")
        else:
            out.error(answers_name, "missing-file", "answer key is missing (mark "
                      "answers: pending in task.yaml to run the task sealed)")
    elif pending:
        out.warning("task.yaml", "answers-pending", "answers: pending, yet the key exists: "
                    "runs end sealed until the mark is removed")


def _check_parts(task_dir: Path, meta: TaskMeta | None, contract: Contract | None,
                 protocol: Protocol | None, rows: list[TargetRow] | None,
                 answers: AnswerKey | None,
                 answers_name: str, out: _Collector) -> None:
    """Each loaded file of the package, alone and against the others."""
    if meta is not None:
        _check_identity(meta, contract, answers, answers_name, task_dir, out)
    if contract is not None:
        _check_contract(contract, out)
        if rows is not None:
            _check_targets(rows, contract, out)
        if answers is not None:
            _check_answers(answers, contract, answers_name, out)
        if protocol is not None:
            _check_protocol(protocol, contract, rows, out)
    if answers is not None:
        _check_leaks(task_dir, rows, answers, out)


def _strict(findings: list[Finding], task_dir: Path, meta: TaskMeta | None,
            consult_review: bool) -> list[Finding]:
    """Warnings as errors, but for the screens the review waives; the review's own errors."""
    from spu.tasks.review import REVIEW_FILE, review_state

    state = review_state(task_dir, meta) if consult_review and meta is not None else None
    waivers = state.waivers if state is not None else {}
    strict = []
    for f in findings:
        if f.severity is Severity.warning and f.code in waivers:
            strict.append(replace(f, message=f"{f.message} [waived by {REVIEW_FILE}: "
                                             f"{waivers[f.code]}]"))
        else:
            strict.append(replace(f, severity=Severity.error))
    for code, message in state.problems if state is not None else ():
        strict.append(Finding(Severity.error, REVIEW_FILE, code, message))
    return strict
