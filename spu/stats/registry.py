"""The registry of analyses that ``spu stats`` runs: one decorated pure function each.

An analysis is a function from the shared inputs of one runs table
(:class:`~spu.stats.inputs.StatsInputs`) to a frozen :class:`AnalysisResult`: the tables it
computed, by file name, and the rows it adds to ``summary.csv`` and ``tests.csv``. It
reads nothing and writes nothing itself; :func:`spu.stats.analysis.analyze` runs every
registered analysis in order, and :func:`spu.stats.analysis.write_stats` writes the files.

>>> from spu.stats.registry import REGISTRY, AnalysisResult, analysis
>>> @analysis(files=("n_runs.csv",), section="3.1")
... def n_runs(inputs):
...     return AnalysisResult(tables={"n_runs.csv": inputs.runs.groupby("config").size()
...                                   .rename("n_runs").reset_index()})
>>> entry = REGISTRY["n_runs"]
>>> entry.files, entry.section, entry.needs, entry.source
(('n_runs.csv',), '3.1', (), 'spu.stats.registry:n_runs')
>>> REGISTRY.remove("n_runs")

``needs`` names what the analysis requires beyond the official public runs
(:data:`NEEDS`, or ``column:<name>`` for a column of the runs table); when the table lacks
one the analysis is skipped, and the manifest says why. Analyses kept outside this
package register themselves when their module is imported; :func:`discover` imports every
module named by an entry point of the group ``spu.analyses``::

    [project.entry-points."spu.analyses"]
    my_counts = "my_package.counts"

The built-in analyses (:mod:`spu.stats.builtin`) are registered the same way, in the
order of the paper, which is the order of the rows of ``summary.csv`` and ``tests.csv``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pandas as pd

    from spu.stats.inputs import StatsInputs

ENTRY_POINT_GROUP = "spu.analyses"
"""Entry-point group whose modules register analyses when imported."""

COLLECTED_FILES: dict[str, str] = {
    "tests.csv": "every named test (3.2-3.7, 4.4, 4.6, E.9, E.10)",
    "summary.csv": "scalar results quoted in the text",
}
"""Files gathered from every analysis' rows, and what they hold; no analysis may claim one."""


class AnalysisRegistryError(ValueError):
    """An analysis cannot be registered or loaded, or broke its declaration; names it."""


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class AnalysisResult:
    """What one analysis computed: tables by file name and rows for the collected files.

    The mappings are read-only views and the row sequences tuples, so a result cannot be
    changed after the analysis returned it.
    """

    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    """Tables by output file name; each name is one of the analysis' declared ``files``."""
    summary: Sequence[dict[str, Any]] = ()
    """Rows of ``summary.csv``: analysis, statistic, value, ci_low, ci_high, n."""
    tests: Sequence[dict[str, Any]] = ()
    """Rows of ``tests.csv`` (:func:`~spu.stats.named_tests.named_test`)."""
    notes: Sequence[str] = ()
    """What the analysis left out, and why."""
    values: Mapping[str, Any] = field(default_factory=dict)
    """Objects kept in memory for the report (for example the rank-stability result)."""
    rules: Mapping[str, Any] = field(default_factory=dict)
    """The rule that produced each file, by file name: a :class:`spu.stats.rules.Rule`
    (population, basis, the paper's sentence), or text replacing the text of the file's
    default rule (the manifest's ``outputs.<file>``: ``rule``, ``population``, ``basis``,
    ``sentence``); the paper's rule by default, or the option that replaced it."""

    def __post_init__(self) -> None:
        """Freeze the containers the analysis handed over."""
        object.__setattr__(self, "tables", _frozen_mapping(self.tables))
        object.__setattr__(self, "rules", _frozen_mapping(self.rules))
        object.__setattr__(self, "values", _frozen_mapping(self.values))
        object.__setattr__(self, "summary", tuple(self.summary))
        object.__setattr__(self, "tests", tuple(self.tests))
        object.__setattr__(self, "notes", tuple(self.notes))


AnalysisFunction = Callable[[Any], AnalysisResult]
"""The signature of an analysis: its inputs (:class:`~spu.stats.inputs.StatsInputs` for
``spu stats``) to its result."""

F = TypeVar("F", bound=AnalysisFunction)


@dataclass(frozen=True)
class Analysis:
    """One registered analysis: its function and its declaration."""

    name: str
    """Unique name (the function's name unless given)."""
    function: AnalysisFunction
    """The pure function from the inputs to its result."""
    files: tuple[str, ...]
    """Output files it may write."""
    section: str
    """Paper section (table, figure) it reproduces."""
    needs: tuple[str, ...] = ()
    """Inputs it requires (:data:`NEEDS` or ``column:<name>``)."""
    file_sections: Mapping[str, str] = field(default_factory=dict)
    """Paper section of each file, where it differs from :attr:`section`."""

    @property
    def source(self) -> str:
        """``module:function`` of the analysis."""
        return f"{self.function.__module__}:{self.function.__qualname__}"

    @property
    def identity(self) -> tuple[str, str]:
        """The function's qualified name and source file.

        A module imported twice under two names (a test folder collected by pytest and
        the same package installed with an entry point) registers the same analysis.
        """
        code = getattr(self.function, "__code__", None)
        path = os.path.realpath(code.co_filename) if code is not None else self.source
        return self.function.__qualname__, path

    def section_of(self, file: str) -> str:
        """The paper section the file ``file`` reproduces."""
        return self.file_sections.get(file, self.section)

    def __call__(self, inputs: Any) -> AnalysisResult:
        """Run the analysis and check it kept to its declared files."""
        result = self.function(inputs)
        if not isinstance(result, AnalysisResult):
            raise AnalysisRegistryError(f"analysis {self.name} ({self.source}) returned "
                                        f"{type(result).__name__}, not an AnalysisResult")
        undeclared = sorted((set(result.tables) | set(result.rules)) - set(self.files))
        if undeclared:
            raise AnalysisRegistryError(f"analysis {self.name} ({self.source}) returned "
                                        f"{', '.join(undeclared)}, not among its files")
        return result


def _check_columns(column: str) -> Callable[[StatsInputs], str | None]:
    def check(inputs: StatsInputs) -> str | None:
        if column in inputs.absent or column not in inputs.runs.columns:
            return f"the table has no {column} column"
        return None
    return check


def _needs_repeats(inputs: StatsInputs) -> str | None:
    if inputs.has_repeats:
        return None
    return "repeats: no repeated runs (repeat >= 1) on public tasks"


def _needs_private(inputs: StatsInputs) -> str | None:
    if len(inputs.private):
        return None
    return "private: no official runs on private tasks"


def _needs_tasks(inputs: StatsInputs) -> str | None:
    if inputs.tasks:
        return None
    return "tasks: no --tasks, so no tied groups, attainable maximum or presented order"


def _needs_orders(inputs: StatsInputs) -> str | None:
    prefix = "agreement, monotone prior, repeated orders, appendix F"
    if inputs.options.runs_dir is None:
        return f"{prefix}: no --runs-dir, so no submitted orders"
    if not inputs.tasks:
        return f"{prefix}: no --tasks, so no contracts or answer keys"
    return None


def _needs_run_sd(inputs: StatsInputs) -> str | None:
    if math.isfinite(inputs.run_sd):
        return None
    return ("rank stability: no run-to-run SD (no repeats with two scored runs on a task, "
            "and no --run-sd)")


NEEDS: dict[str, Callable[[StatsInputs], str | None]] = {
    "repeats": _needs_repeats,
    "private": _needs_private,
    "tasks": _needs_tasks,
    "orders": _needs_orders,
    "run_sd": _needs_run_sd,
}
"""Each named need and its check: ``None`` when the inputs have it, else why not.

``repeats``: repeated runs (``repeat >= 1``) of public tasks; ``private``: official runs of
private tasks; ``tasks``: task packages (``--tasks``); ``orders``: the submitted orders
(``--runs-dir`` and ``--tasks``); ``run_sd``: a run-to-run SD (repeats or ``--run-sd``).
``column:<name>`` needs that column in the runs table.
"""


def missing_need(need: str, inputs: StatsInputs) -> str | None:
    """Why ``inputs`` lack ``need``, or ``None`` when they have it.

    Raises
    ------
    AnalysisRegistryError
        For a need that is neither in :data:`NEEDS` nor ``column:<name>``.
    """
    if need.startswith("column:"):
        return _check_columns(need.removeprefix("column:"))(inputs)
    check = NEEDS.get(need)
    if check is None:
        raise AnalysisRegistryError(f"unknown need {need!r}; expected one of "
                                    f"{', '.join(NEEDS)} or column:<name>")
    return check(inputs)


class Registry:
    """Analyses in the order they were registered; file names and names unique.

    Args:
        needs: The needs its analyses may name (default :data:`NEEDS`).
        columns: Whether ``column:<name>`` needs are allowed (the inputs have a runs table).
    """

    def __init__(self, needs: Mapping[str, Callable[[Any], str | None]] | None = None,
                 columns: bool = True) -> None:
        """An empty registry."""
        self._analyses: dict[str, Analysis] = {}
        self.needs = dict(NEEDS if needs is None else needs)
        self.columns = columns

    def __iter__(self) -> Iterator[Analysis]:
        """The analyses in registration order."""
        return iter(list(self._analyses.values()))

    def __len__(self) -> int:
        """The number of analyses."""
        return len(self._analyses)

    def __contains__(self, name: object) -> bool:
        """Whether an analysis of that name is registered."""
        return name in self._analyses

    def __getitem__(self, name: str) -> Analysis:
        """The analysis named ``name``."""
        return self._analyses[name]

    def producer(self, file: str) -> Analysis | None:
        """The analysis that declares ``file``, if any."""
        return next((a for a in self._analyses.values() if file in a.files), None)

    def add(self, entry: Analysis) -> Analysis:
        """Register ``entry``; the same function registered again replaces itself.

        The same function is the same qualified name in the same source file
        (:attr:`Analysis.identity`), whatever name its module was imported under.

        Raises
        ------
        AnalysisRegistryError
            When another analysis has the name or one of the files, a file is one of
            :data:`COLLECTED_FILES`, or a need is unknown.
        """
        for need in entry.needs:
            if not (need in self.needs or (self.columns and need.startswith("column:"))):
                known = [*self.needs, *(["column:<name>"] if self.columns else [])]
                raise AnalysisRegistryError(
                    f"analysis {entry.name} ({entry.source}): unknown need {need!r}; "
                    f"expected one of {', '.join(known) or '(none)'}")
        if len(set(entry.files)) != len(entry.files):
            raise AnalysisRegistryError(f"analysis {entry.name} ({entry.source}) names a "
                                        "file twice")
        for file in entry.files:
            if file in COLLECTED_FILES or file == "manifest.json":
                raise AnalysisRegistryError(
                    f"analysis {entry.name} ({entry.source}): {file} is written from every "
                    "analysis' rows; return summary or tests rows instead")
        old = self._analyses.get(entry.name)
        if old is not None and old.identity != entry.identity:
            raise AnalysisRegistryError(f"analysis {entry.name} ({entry.source}): the name "
                                        f"is taken by {old.source}")
        for other in self._analyses.values():
            taken = set(other.files) & set(entry.files)
            if other.name != entry.name and taken:
                raise AnalysisRegistryError(
                    f"analysis {entry.name} ({entry.source}): {', '.join(sorted(taken))} "
                    f"already written by {other.name} ({other.source})")
        self._analyses[entry.name] = entry
        return entry

    def remove(self, name: str) -> None:
        """Unregister the analysis ``name`` (tests register and remove their own)."""
        self._analyses.pop(name, None)


REGISTRY = Registry()
"""Every analysis ``spu stats`` runs."""


def analysis(
    *, files: Sequence[str] | Mapping[str, str] = (), section: str, needs: Sequence[str] = (),
    name: str | None = None, registry: Registry | None = None,
) -> Callable[[F], F]:
    """Register a function of the inputs as an analysis of ``spu stats``.

    Parameters
    ----------
    files
        Output files the analysis may write: names, or names mapped to the paper table or
        figure each reproduces (where it is not ``section``).
    section
        Paper section the analysis reproduces, as written in the manifest.
    needs
        Inputs it requires: names of :data:`NEEDS` or ``column:<name>``.
    name
        Unique name (default: the function's name).
    registry
        Where to register it: :data:`REGISTRY` (``spu stats``, the default) or
        :data:`spu.analysis.trajectory_analysis.TRAJECTORY_ANALYSES` (``spu analyze``).

    Returns
    -------
    Callable
        The decorator. It returns the function unchanged, so tests call it directly;
        :data:`REGISTRY` holds its :class:`Analysis`.

    Raises
    ------
    AnalysisRegistryError
        As :meth:`Registry.add`.
    """
    def decorate(function: F) -> F:
        (REGISTRY if registry is None else registry).add(Analysis(
            name=name or function.__name__, function=function, files=tuple(files),
            section=section, needs=tuple(needs),
            file_sections=dict(files) if isinstance(files, Mapping) else {}))
        return function
    return decorate


_DISCOVERED: dict[str, str] = {}


def discover(group: str = ENTRY_POINT_GROUP) -> dict[str, str]:
    """Import every module named by an entry point of ``group`` (once); returns them.

    Importing the module registers its analyses. The result maps entry-point names to the
    modules imported.

    Raises
    ------
    AnalysisRegistryError
        When a module cannot be imported, naming the entry point.
    """
    import spu.stats.builtin  # noqa: F401  (the built-in analyses come first)

    for point in importlib.metadata.entry_points(group=group):
        if point.name in _DISCOVERED:
            continue
        try:
            point.load()
        except Exception as exc:  # a broken plugin is named, whatever it raised
            raise AnalysisRegistryError(f"entry point {group} {point.name} = {point.value}: "
                                        f"{type(exc).__name__}: {exc}") from exc
        _DISCOVERED[point.name] = point.value
    return dict(_DISCOVERED)


def load_module(module: str) -> None:
    """Import ``module`` so its analyses register (what an entry point does)."""
    importlib.import_module(module)
