"""An analysis kept outside ``spu`` is one file, and the registry that runs it.

How the plugin's module is registered: when the test environment has the plugin package
installed (``tests/plugins``, entry point ``spu.analyses: example =
spu_example_plugin.analysis``), through that entry point, as ``spu stats`` finds it
(:func:`spu.stats.registry.discover`); otherwise the test imports
``spu_example_plugin/analysis.py`` from its path, which is what the entry point's import
does, and removes the analysis again afterwards. Either way no file under ``spu/`` or
``conf/`` names the plugin.
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

import spu.stats.registry
from spu.cli import main
from spu.schema import write_runs_table
from spu.stats.analysis import analyze
from spu.stats.inputs import StatsInputs, StatsOptions
from spu.stats.registry import (
    REGISTRY,
    Analysis,
    AnalysisFunction,
    AnalysisRegistryError,
    AnalysisResult,
    Registry,
    analysis,
    discover,
    missing_need,
)
from spu.stats.runs_table import check_runs_table
from spu.stats.simulate import PAPER_CONFIGS, SimulationParameters, simulate_runs

PLUGIN_FILE = Path(__file__).parent / "spu_example_plugin" / "spu_example_plugin" / "analysis.py"
OPTIONS = StatsOptions(resamples=20, simulations=20, null_draws=20)
FAST = ["--resamples", "20", "--simulations", "20", "--null-draws", "20"]


def _installed() -> bool:
    return any(p.name == "example" for p in importlib.metadata.entry_points(group="spu.analyses"))


def _load(name: str) -> ModuleType:
    """Import the plugin's file as module ``name`` (what its entry point's import does)."""
    spec = importlib.util.spec_from_file_location(name, PLUGIN_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def plugin() -> Iterator[str]:
    """The example analysis registered; yields how (``entry point`` or ``file``)."""
    if _installed():
        discover()
        yield "entry point"
        return
    _load("spu_example_plugin_analysis")
    try:
        yield "file"
    finally:
        REGISTRY.remove("example_counts")


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    """Two configurations, no repeats: small enough to analyse in seconds (seed 4)."""
    params = SimulationParameters(configs=PAPER_CONFIGS[:2], repeats=0)
    return check_runs_table(simulate_runs(params, seed=4))


@pytest.fixture
def temporary() -> Iterator[list[str]]:
    """Names of analyses a test registers, removed afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        REGISTRY.remove(name)


def test_spu_stats_writes_the_plugin_file(plugin, runs, tmp_path) -> None:
    """``spu stats`` writes the plugin's file, and the manifest names its analysis."""
    table = tmp_path / "runs.csv"
    write_runs_table(runs, table)
    assert main(["stats", str(table), "--out", str(tmp_path / "stats"), *FAST]) == 0
    counts = pd.read_csv(tmp_path / "stats" / "example_counts.csv")
    public = runs[(runs["repeat"] == 0) & (runs["visibility"] == "public")]
    assert list(counts.columns) == ["config", "outcome", "n_runs", "share"]
    assert counts.groupby("config")["n_runs"].sum().to_dict() == (
        public.groupby("config").size().to_dict())
    assert counts.groupby("config")["share"].sum().round(12).eq(1.0).all()
    manifest = json.loads((tmp_path / "stats" / "manifest.json").read_text())
    assert "example_counts.csv" in manifest["files"]
    assert manifest["sections"]["example_counts.csv"] == "Table 6 (3.2), per outcome"
    entry = manifest["outputs"]["example_counts.csv"]
    assert entry["analysis"] == "example_counts" and entry["written"] is True
    assert entry["source"].endswith(":example_counts"), plugin


@pytest.mark.skipif(not _installed(), reason="the plugin package tests/plugins is not "
                    "installed (pip install -e tests/plugins), so no entry point to find")
def test_the_installed_entry_point_reaches_a_fresh_process(runs, tmp_path) -> None:
    """A new ``spu`` process finds the plugin through its entry point alone."""
    table = tmp_path / "runs.csv"
    write_runs_table(runs, table)
    spu = shutil.which("spu", path=str(Path(sys.executable).parent))
    assert spu is not None
    subprocess.run([spu, "stats", str(table), "--out", str(tmp_path / "stats"), *FAST],
                   check=True, capture_output=True)
    manifest = json.loads((tmp_path / "stats" / "manifest.json").read_text())
    assert manifest["outputs"]["example_counts.csv"]["written"] is True


ENTRY_MODULE = """
import pandas as pd
from spu.stats.registry import AnalysisResult, analysis

@analysis(files=("entry_point_rows.csv",), section="3.1")
def entry_point_rows(inputs):
    rows = pd.DataFrame({"rows": [len(inputs.runs)]})
    return AnalysisResult(tables={"entry_point_rows.csv": rows})
"""


def _distribution(root: Path, entry_points: str) -> None:
    """An installed distribution on ``root``: metadata and entry points, as pip leaves them."""
    info = root / "spu_entry_point_test-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spu-entry-point-test\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


def test_discover_imports_entry_point_modules(runs, tmp_path, monkeypatch) -> None:
    """An installed distribution's ``spu.analyses`` entry point is found and imported."""
    (tmp_path / "spu_entry_point_test.py").write_text(ENTRY_MODULE)
    _distribution(tmp_path, "[spu.analyses]\nrows = spu_entry_point_test\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(spu.stats.registry, "_DISCOVERED", {})
    try:
        assert discover()["rows"] == "spu_entry_point_test"
        result = analyze(runs, OPTIONS)
        assert result.tables["entry_point_rows.csv"]["rows"].tolist() == [len(runs)]
        assert result.manifest["outputs"]["entry_point_rows.csv"]["source"] == (
            "spu_entry_point_test:entry_point_rows")
    finally:
        REGISTRY.remove("entry_point_rows")
        sys.modules.pop("spu_entry_point_test", None)


def test_a_broken_entry_point_is_named(tmp_path, monkeypatch) -> None:
    _distribution(tmp_path, "[spu.analyses]\nbroken = spu_no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(spu.stats.registry, "_DISCOVERED", {})
    with pytest.raises(AnalysisRegistryError,
                       match="entry point spu.analyses broken = spu_no_such_module_here: "
                             "ModuleNotFoundError"):
        discover()


def test_plugin_doctest() -> None:
    """The plugin's own hand-worked example (its folder is kept out of collection)."""
    module = _load("spu_example_plugin_doctest")
    if not _installed():
        REGISTRY.remove("example_counts")
    failures, tried = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried >= 3 and failures == 0


def test_a_module_imported_twice_registers_once(plugin) -> None:
    """The same function from the same file, under another module name, replaces itself."""
    before = len(REGISTRY)
    _load("spu_example_plugin_again")
    assert len(REGISTRY) == before
    assert REGISTRY.producer("example_counts.csv") is REGISTRY["example_counts"]


def test_needs_skip_with_their_reason(runs, temporary) -> None:
    """An analysis whose need the table lacks is not called; the manifest says why."""
    def never(inputs: StatsInputs) -> AnalysisResult:
        raise AssertionError("a skipped analysis must not run")

    analysis(files=("needs_repeats.csv",), section="3.6", needs=("repeats",),
             name="needs_repeats")(never)
    analysis(files=("needs_column.csv",), section="3.7", needs=("column:no_such_column",),
             name="needs_column")(never)
    temporary += ["needs_repeats", "needs_column"]
    result = analyze(runs, OPTIONS)
    outputs = result.manifest["outputs"]
    assert outputs["needs_repeats.csv"] == {
        "analysis": "needs_repeats", "source": f"{__name__}:{never.__qualname__}",
        "section": "3.6", "written": False,
        "skipped": "repeats: no repeated runs (repeat >= 1) on public tasks", "rule": None,
        "population": None, "basis": None, "sentence": None}
    assert outputs["needs_column.csv"]["skipped"] == "the table has no no_such_column column"
    assert "needs_repeats.csv" not in result.tables
    # A need's reason is noted once, however many analyses it stops.
    assert result.notes.count("repeats: no repeated runs (repeat >= 1) on public tasks") == 1
    assert outputs["repeats.csv"]["skipped"] == outputs["needs_repeats.csv"]["skipped"]


def test_missing_need_names_what_is_missing(runs) -> None:
    inputs = StatsInputs(runs, OPTIONS)
    assert missing_need("private", inputs) is None  # the simulated table has private tasks
    assert missing_need("orders", inputs) == (
        "agreement, monotone prior, repeated orders, appendix F: no --runs-dir, so no "
        "submitted orders")
    with pytest.raises(AnalysisRegistryError, match="unknown need 'gpus'"):
        missing_need("gpus", inputs)


def _table(inputs: StatsInputs) -> AnalysisResult:
    return AnalysisResult(tables={"a.csv": pd.DataFrame({"x": [1]})})


def _entry(function: AnalysisFunction, files: tuple[str, ...] = (),
           needs: tuple[str, ...] = (), name: str | None = None) -> Analysis:
    return Analysis(name=name or function.__name__, function=function, files=tuple(files),
                    section="1", needs=tuple(needs))


def test_duplicate_file_names_are_rejected() -> None:
    registry = Registry()
    registry.add(_entry(_table, files=("a.csv",)))

    def other(inputs: StatsInputs) -> AnalysisResult:
        return AnalysisResult()

    with pytest.raises(AnalysisRegistryError, match="a.csv already written by _table"):
        registry.add(_entry(other, files=("a.csv",)))
    with pytest.raises(AnalysisRegistryError, match="the name is taken"):
        registry.add(_entry(other, name="_table"))
    with pytest.raises(AnalysisRegistryError, match="tests.csv is written from every"):
        registry.add(_entry(other, files=("tests.csv",)))
    with pytest.raises(AnalysisRegistryError, match="unknown need 'gpu'"):
        registry.add(_entry(other, needs=("gpu",)))
    discover()
    with pytest.raises(AnalysisRegistryError, match="configs.csv already written by configs"):
        analysis(files=("configs.csv",), section="1")(other)
    assert [a.name for a in registry] == ["_table"] and "other" not in REGISTRY


def test_results_are_frozen(runs) -> None:
    table = pd.DataFrame({"x": [1]})
    result = AnalysisResult(tables={"a.csv": table}, summary=[{"statistic": "n"}],
                            notes=["a note"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.notes = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.tables["b.csv"] = table  # type: ignore[index]
    assert result.summary == ({"statistic": "n"},) and result.notes == ("a note",)
    discover()
    configs = REGISTRY["configs"](StatsInputs(runs, OPTIONS))
    with pytest.raises(TypeError):
        configs.tables["configs.csv"] = table  # type: ignore[index]


def test_an_analysis_keeps_to_its_files(runs) -> None:
    """Returning a table it did not declare is an error naming the analysis."""
    undeclared = _entry(_table, files=("b.csv",))
    with pytest.raises(AnalysisRegistryError, match=r"_table .* returned a.csv, not among"):
        undeclared(StatsInputs(runs, OPTIONS))


def test_the_built_in_analyses_come_in_paper_order() -> None:
    """The registry's order is the order of summary.csv's rows: means first."""
    discover()
    # The built-ins among themselves: an outside analysis that another test of this
    # worker registered from its file first (not through discover) may stand before them.
    names = [a.name for a in REGISTRY if a.function.__module__ == "spu.stats.builtin"]
    assert names[:2] == ["configs", "pairs"]
    assert names.index("tasks") < names.index("repeats") < names.index("agreement")
    assert all(a.section for a in REGISTRY)


def test_spu_analyze_runs_an_outside_table(tmp_path) -> None:
    """A table registered in ``spu analyze``'s registry is written, and the manifest names it."""
    from spu.analysis.trajectory_analysis import (
        ACTIVITY_TIME_RULE,
        ANALYZE_RULES,
        TRAJECTORY_ANALYSES,
        AnalyzeOptions,
        TrajectoryInputs,
        analyze_runs,
        write_analysis,
    )
    from spu.testing.corpus import make_corpus
    from tests.conftest import TASKS

    def calls_per_run(inputs: TrajectoryInputs) -> AnalysisResult:
        counts = inputs.calls.groupby("run_key").size().rename("n_calls").reset_index()
        return AnalysisResult(tables={"calls_per_run.csv": counts})

    analysis(files=("calls_per_run.csv",), section="Figure 14",
             registry=TRAJECTORY_ANALYSES)(calls_per_run)
    try:
        make_corpus(tmp_path / "corpus", n_runs=4, task_root=TASKS, calls=8, seed=2)
        result = analyze_runs(tmp_path / "corpus", AnalyzeOptions(resamples=20, trees=5,
                                                                   jobs=1))
    finally:
        TRAJECTORY_ANALYSES.remove("calls_per_run")
    write_analysis(result, tmp_path / "out")
    counts = pd.read_csv(tmp_path / "out" / "calls_per_run.csv")
    calls = pd.read_csv(tmp_path / "out" / "calls.csv")
    assert counts.set_index("run_key")["n_calls"].to_dict() == (
        calls.groupby("run_key").size().to_dict())
    outputs = json.loads((tmp_path / "out" / "manifest.json").read_text())["outputs"]
    assert outputs["calls_per_run.csv"]["analysis"] == "calls_per_run"
    assert outputs["activity_time.csv"] == {"analysis": "activity_times",
                                            "source": "spu.analysis.builtin:activity_times",
                                            "section": "Figure 14a",
                                            **ANALYZE_RULES["activity_time.csv"].entry()}
    assert ANALYZE_RULES["activity_time.csv"].text == ACTIVITY_TIME_RULE
    assert outputs["calls_per_run.csv"]["rule"] is None  # an outside table states none
