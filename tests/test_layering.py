"""Imports follow the data flow: no stage imports a later one (STYLE, "Architecture").

Every import of every module under ``spu/`` and ``launchers/`` is read with :mod:`ast`,
function-level (lazy) and ``TYPE_CHECKING`` imports included, and each module is placed
in a stage by :data:`STAGES` (the longest matching prefix wins). An import from a stage
to a later one fails the test, naming the file, the line and both stages.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STAGES: dict[str, int] = {
    # Shared low modules: the schema of every record, the config schema and its override
    # rules, strict JSON, the plugin registry, the door to private Hydra and Ray APIs.
    # Importable from anywhere.
    "spu": 0,
    "spu.schema": 0,
    "spu.config": 0,
    "spu.overrides": 0,
    "spu.strict_json": 0,
    "spu.registry": 0,
    "spu.options": 0,
    "spu.internals": 0,
    # Where config groups are read from (the packaged conf, the project folder's, plugins').
    "spu.project": 0,
    "spu.conf": 0,
    # The labelling rules of a tool call (paper E.7), pure functions of the call: tracking
    # puts them on each tool span, the analyses count them.
    "spu.activities": 0,
    # The uvicorn server every host-side service of a run (tools service, model gateway)
    # runs in, woken at once when asked to stop.
    "spu.serving": 0,
    # ISO dates of a source's publication and a model's training cutoff: the record and
    # config schemas check them.
    "spu.tasks.freshness": 0,
    # The pipeline, in the order the data flows (STYLE): task -> sandbox + harness ->
    # tools -> grading -> tracking -> stats -> analysis -> report. The tools service runs
    # in the sandbox's network and the harness hands it to the agent, so tools sit between
    # the sandbox and the harness.
    "spu.tasks": 10,
    # Datasets: sets of task packages, packed and pulled (they read tasks, nothing later).
    "spu.datasets": 15,
    "spu.sandbox": 20,
    "spu.tools": 30,
    # Pricing is a pure function of usage and a price table: the gateway's spend cap uses
    # it, and so does every later stage.
    "spu.cost": 32,
    # The scripted model server and its scripts import no stage: the offline demo's model,
    # which the model gateway plays as an upstream (STYLE).
    "spu.scripted": 34,
    # Test helpers (a corpus of whole runs, a private PostgreSQL): no product module
    # imports them (test_no_product_module_imports_the_test_helpers).
    "spu.testing": 220,
    # The simulated study writes whole run folders, their trajectories built by the test
    # corpus: a test double of a whole study, imported by no stage.
    "spu.stats.simulate": 220,
    # The model gateway, like the tools service, is a host-side service that the harness
    # hands to the agent.
    "spu.gateway": 35,
    "spu.harness": 40,
    # The consensus configuration reads its members' stored, graded submissions: after
    # grading and the seals, before the identity that names the members' run keys.
    "spu.harness.consensus": 62,
    "spu.grading": 50,
    # Task authoring checks a package with the grader (its answer key, its chance level),
    # so it comes after grading; the task contract itself (spu.tasks.package) comes first.
    "spu.tasks.threshold": 55,
    "spu.tasks.validate": 55,
    "spu.tasks.builder": 55,
    "spu.tasks.scaffold": 55,
    "spu.tasks.harbor": 55,
    "spu.tasks.templates": 55,
    # The run identity hashes what ran (the task's public files, what the harness declares),
    # so it sits above those stages; tracking stores it and the launcher resumes by it.
    # Seals hash and sign what a finished run left; the runner seals, tracking and the
    # bundle grader read the seals.
    "spu.seal": 60,
    "spu.identity": 65,
    "spu.tracking": 70,
    "spu.stats": 80,
    "spu.analysis": 90,
    "spu.report": 100,
    # Orchestration, above every stage it composes: one run, a sweep's jobs, the test
    # doubles (which start sweeps' servers), the Hydra plugins, then the entry points.
    "spu.runner": 200,
    "spu.launch": 210,
    "hydra_plugins": 230,
    "spu.callbacks": 300,
    "spu.main": 300,
    "spu.cli": 300,
    "spu.__main__": 300,
    "spu.listing": 300,
    "spu.plan": 300,
    "spu.project_init": 300,
    # The self-check kit runs whole runs (and so every stage) against a plugin.
    "spu.selfcheck": 300,
}
"""Module prefix -> stage rank; a module may import only modules of a rank at most its own."""

CLI_RANK = 300
"""A stage's own command line (``spu/<stage>/cli.py``) composes stages like the entry point."""

FORBIDDEN: dict[tuple[str, str], str] = {
    ("spu.grading", "spu.tracking"): "the grader writes nothing (spu regrade is tracking's)",
    ("spu.seal", "spu.tracking"): "a seal is made before anything is recorded or graded "
                                  "(spu grade-bundle is tracking's)",
    ("spu.stats", "spu.tracking"): "statistics take a table, not a store",
}
"""(importing stage, imported stage) -> why no module of the first may import the second,
its command line (``cli.py``) and the test doubles ranked apart (``spu.stats.simulate``)
included: a command that spans stages lives in the stage it ends in, or the entry layer."""

PENDING: dict[tuple[str, str], str] = {
}
"""Known backward imports being removed by other work, each with who removes it. An entry
that no longer occurs fails the test, so the list only shrinks."""


@dataclass(frozen=True)
class Import:
    """One import statement of one module."""

    module: str
    target: str
    path: Path
    line: int


def module_name(path: Path) -> str:
    """The dotted module name of a source file under the repository (or ``launchers/``)."""
    rel = path.relative_to(ROOT / "launchers" if "launchers" in path.parts else ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, source: str | None = None) -> list[Import]:
    """Every import in ``path`` (or in ``source`` read as that file) of a project module."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if source is None:
        source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                targets = [".".join([*base, *([node.module] if node.module else [])])]
            else:
                targets = [node.module or ""]
        else:
            continue
        found += [Import(module, t, path, node.lineno) for t in targets
                  if t.split(".")[0] in ("spu", "hydra_plugins")]
    return found


def rank(module: str) -> int:
    """The stage rank of ``module`` (longest matching prefix of :data:`STAGES`)."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[0] == "spu" and parts[2] == "cli":
        return CLI_RANK
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in STAGES:
            return STAGES[prefix]
    raise KeyError(module)


def project_files() -> list[Path]:
    """Every Python file of ``spu/`` and of the Hydra plugins."""
    return sorted([*(ROOT / "spu").rglob("*.py"), *(ROOT / "launchers").rglob("*.py")])


def all_imports() -> list[Import]:
    """The imports of every project file."""
    return [imp for path in project_files() for imp in imports_of(path)]


def backward(imp: Import) -> bool:
    """The import goes from a stage to a later one."""
    return rank(imp.target) > rank(imp.module)


def test_every_module_has_a_stage() -> None:
    """A new package is placed in the table before its imports can be judged."""
    unplaced = []
    for path in project_files():
        try:
            rank(module_name(path))
        except KeyError:
            unplaced.append(str(path.relative_to(ROOT)))
    assert not unplaced, f"add these to STAGES in {__file__}: {unplaced}"


def test_no_stage_imports_a_later_stage() -> None:
    """No module imports one of a later stage, except the pending ones being removed."""
    bad = [f"{i.path.relative_to(ROOT)}:{i.line}: {i.module} (stage {rank(i.module)}) imports "
           f"{i.target} (stage {rank(i.target)})"
           for i in all_imports()
           if backward(i) and (i.module, i.target.rpartition(".")[0] or i.target) not in PENDING
           and (i.module, i.target) not in PENDING]
    assert not bad, "imports against the data flow:\n" + "\n".join(bad)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_stage_makes_a_forbidden_import_not_even_its_command_line() -> None:
    """The imports of :data:`FORBIDDEN` occur nowhere, whatever the importer's rank."""
    bad = [f"{i.path.relative_to(ROOT)}:{i.line}: {i.module} imports {i.target}: {why}"
           for i in all_imports() for (source, target), why in FORBIDDEN.items()
           if _under(i.module, source) and _under(i.target, target)]
    assert not bad, "forbidden imports:\n" + "\n".join(bad)


def test_pending_exceptions_still_occur() -> None:
    """Each pending exception names an import that still exists (remove it once fixed)."""
    seen = {(i.module, i.target) for i in all_imports() if backward(i)}
    seen |= {(m, t.rpartition(".")[0]) for m, t in seen}
    gone = [f"{m} -> {t}: {why}" for (m, t), why in PENDING.items() if (m, t) not in seen]
    assert not gone, "fixed, remove from PENDING:\n" + "\n".join(gone)


TEST_DOUBLES: dict[str, str] = {
    "spu.stats.simulate": "a simulated study (python -m spu.stats.simulate): its run folders' "
                          "trajectories come from the test corpus",
}
"""Modules outside ``spu.testing`` that are test doubles themselves, each with why."""


def test_no_product_module_imports_the_test_helpers() -> None:
    """``spu.testing`` holds test helpers only: no product module imports it (issue 42).

    The scripted model server, which the offline demo and the gateway use, is a product
    part (:mod:`spu.scripted`); a module that needs a test helper is a test double itself
    and says so in :data:`TEST_DOUBLES`.
    """
    bad = [f"{i.path.relative_to(ROOT)}:{i.line}: {i.module} imports {i.target}"
           for i in all_imports()
           if (i.target == "spu.testing" or i.target.startswith("spu.testing."))
           and not (i.module == "spu.testing" or i.module.startswith("spu.testing."))
           and i.module not in TEST_DOUBLES]
    assert not bad, "product modules importing test helpers:\n" + "\n".join(bad)


def test_a_product_import_of_the_test_helpers_is_caught(tmp_path: Path) -> None:
    """The rule itself, on the import the scripted model's move removed."""
    source = "def f():\n    from spu.testing import ScriptedModelServer\n"
    found = imports_of(ROOT / "spu" / "gateway" / "session.py", source)
    assert [(i.module, i.target) for i in found] == [("spu.gateway.session", "spu.testing")]
    assert rank("spu.testing") > rank("spu.gateway.session")


@pytest.mark.parametrize(("source", "expected"), [
    ("from spu.tracking.store import x\n", "spu.tracking.store"),
    ("def f():\n    from spu.runner import run_key\n", "spu.runner"),
    ("from .store import x\n", "spu.tracking.store"),
    ("from . import store\n", "spu.tracking"),
    ("from ..grading import rules\n", "spu.grading"),
    ("import spu.stats.paired as p\n", "spu.stats.paired"),
    ("import numpy\n", None),
])
def test_imports_are_read_lazy_and_relative_ones_included(source: str,
                                                          expected: str | None) -> None:
    """The reader resolves relative imports and finds imports inside functions."""
    found = [i.target for i in imports_of(ROOT / "spu" / "tracking" / "probe.py", source)]
    assert found == ([expected] if expected else [])


def test_a_backward_import_is_caught() -> None:
    """The rule itself: grading importing tracking is against the flow; the reverse is not."""
    assert backward(Import("spu.grading.rules", "spu.tracking.store", Path("x"), 1))
    assert not backward(Import("spu.tracking.store", "spu.grading.rules", Path("x"), 1))
    assert not backward(Import("spu.sandbox.base", "spu.schema", Path("x"), 1))
    assert not backward(Import("spu.analysis.cli", "spu.report.figures", Path("x"), 1))
