"""Harbor interchange (SPEC section 10): an SPU task as a Harbor task, and back.

`Harbor <https://harborframework.com/>`_ runs Terminal-Bench and similar benchmarks; the
paper's tasks "are also packaged and run in Harbor" (section 5). The format followed is
the one Harbor defines in its own code and documentation, as of Harbor
:data:`HARBOR_VERSION` (``harbor.models.task.config.TaskConfig``, task schema
:data:`TASK_SCHEMA_VERSION`; ``harbor.models.trial.paths.EnvironmentPaths``):

- ``task.toml``: the task's name and version under ``[task]``, the SPU identity under
  ``[metadata]``, the agent's time limit (``[agent] timeout_sec``), its CPUs, memory,
  GPUs and network (``[environment]``), and a verifier that runs in a separate
  container without network (``[verifier] environment_mode = "separate"``), to which
  Harbor carries the agent's ``/output`` as an artifact (paper 2.5: the grader runs
  after the agent stops, in a container it never reaches);
- ``instruction.md``: the task's instruction, unchanged;
- ``environment/Dockerfile`` and ``environment/task/``: the public files, placed at
  ``/task`` as the instruction says, with ``/workspace`` and ``/output``;
- ``tests/``: ``test.sh`` and ``verify.py``, the task's contract and answer key, and the
  SPU grader itself (its rules copied unchanged, its records in the standard library:
  :file:`templates/harbor/grader_schema.py`), so that the verifier needs only
  ``python3``. Harbor copies ``tests/`` in only after the agent has finished; the answer
  key is nowhere else. The verifier writes the task score under the strict rules to
  ``/logs/verifier/reward.txt`` and the full grade to ``/logs/verifier/grade.json``.

Traps of the format, and what is done about them:

- ``reward.json`` takes precedence over ``reward.txt`` and must hold numbers only, so the
  grade goes to ``grade.json``, never to ``reward.json``;
- in a shared verifier a process the agent left behind could read ``/tests`` while the
  grader runs: the verifier's container is separate, and its network is off;
- ``tests/`` reaches the container as files under ``/tests`` (not the task folder), so
  ``test.sh`` finds its files from its own path and runs on its own as well;
- TOML keys of the root table must come before every table: ``tomli_w`` orders them.

Import takes back what export wrote: the public files from ``environment/task/``, the
answer key from ``tests/answers.json``; it refuses a Harbor task that has no SPU
contract and answer key (a ranking task needs them) and one whose copies disagree.
"""

from __future__ import annotations

import shutil
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spu.tasks.package import (
    MAX_TABLE_BYTES,
    MAX_YAML_BYTES,
    PUBLIC_PATHS,
    REQUIRED_PUBLIC,
    TaskLoadError,
    _copy_regular,
    _StageBudget,
    load_task,
    read_task_file,
    read_task_text,
    stage_public_files,
    unsafe_entries,
)
from spu.tasks.review import REVIEW_FILE

HARBOR_VERSION = "0.26.0"
"""The Harbor release whose task format is followed."""

TASK_SCHEMA_VERSION = "1.4"
"""``schema_version`` of ``task.toml`` in that release."""

DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
"""Base of ``environment/Dockerfile``: the project's agent image (docker/agent.Dockerfile)."""

PACKAGE_ORG = "spu"
"""Organization part of the Harbor task name (``spu/<task id>``)."""

VERIFIER_TIMEOUT_S = 600.0
"""Harbor's verifier timeout: grading takes well under a second."""

VERIFIER_CPUS = 1
VERIFIER_MEMORY_MB = 2048

SUBMISSION_DIR = "/output"
"""Where the agent writes ``rankings.json`` in the Harbor container (``$SPU_OUTPUT_DIR``)."""

PUBLIC_DIR = "environment/task"
"""Where the public task files sit in the Harbor task (copied to ``/task``)."""

TEMPLATES = Path(__file__).parent / "templates" / "harbor"

VENDORED_GRADER: tuple[str, ...] = (
    "spu/strict_json.py",
    "spu/grading/recovery.py",
    "spu/grading/rules.py",
    "spu/grading/submission.py",
)
"""The grader's modules copied unchanged into ``tests/grader/``."""


class HarborError(Exception):
    """A task cannot be exported or imported; the message names the file and the key."""


@dataclass(frozen=True)
class HarborExport:
    """What ``export_harbor`` wrote."""

    path: Path
    files: tuple[str, ...]
    """Every file written, relative to ``path``."""
    warnings: tuple[str, ...] = ()
    """The validator's warnings on the exported task (it had no errors)."""


@dataclass(frozen=True)
class HarborImport:
    """What ``import_harbor`` wrote, and what it noticed."""

    path: Path
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Differences between ``task.toml`` and the package that import did not carry over."""


# ----------------------------------------------------------------------------- export


def _limits(meta_limits: Any) -> dict[str, float]:
    from spu.tasks.builder import stated_limits

    merged = stated_limits(meta_limits)
    return {"time_s": float(merged.time_s or 0), "memory_gb": float(merged.memory_gb or 0),
            "cpus": float(merged.cpus or 0), "gpus": float(merged.gpus or 0)}


def task_config(task_dir: Path, org: str = PACKAGE_ORG) -> dict[str, Any]:
    """The ``task.toml`` of a task package, as a dictionary."""
    import spu
    from spu.grading.rules import GRADER_VERSION

    task = load_task(task_dir)
    meta = task.meta
    limits = _limits(meta.limits)
    return {
        "schema_version": TASK_SCHEMA_VERSION,
        "artifacts": [SUBMISSION_DIR],
        "task": {
            "name": f"{org}/{meta.id}",
            "version": meta.version,
            "description": meta.title,
            "keywords": ["science-prediction-universe", meta.discipline.value, meta.subfield],
        },
        "metadata": {
            "spu_task_id": meta.id,
            "spu_task_version": meta.version,
            "title": meta.title,
            "discipline": meta.discipline.value,
            "subfield": meta.subfield,
            "visibility": meta.visibility.value,
            "n_experiments": task.n_items,
            "n_groups": len(task.contract.groups),
            "reward": "SPU task score under the strict rules: the weighted Spearman "
                      "correlation of the submitted orders with the measured values, -1 "
                      "for a failed file; the full grade is /logs/verifier/grade.json",
            "exported_by": f"spu {spu.__version__}",
            "grader_version": GRADER_VERSION,
            "harbor_version": HARBOR_VERSION,
        },
        "verifier": {
            "timeout_sec": VERIFIER_TIMEOUT_S,
            "environment_mode": "separate",
            "environment": {"network_mode": "no-network", "cpus": VERIFIER_CPUS,
                            "memory_mb": VERIFIER_MEMORY_MB},
        },
        "agent": {"timeout_sec": limits["time_s"]},
        "environment": {
            "build_timeout_sec": 1800.0,
            "cpus": int(limits["cpus"]),
            "memory_mb": int(limits["memory_gb"] * 1024),
            "gpus": int(limits["gpus"]),
            # Paper 3.7: the environment stays connected; searches go through the tools.
            "network_mode": "public",
            "env": {"SPU_TOOLS_URL": "${SPU_TOOLS_URL:-}"},
        },
    }


def _dockerfile(task_dir: Path, base_image: str) -> str:
    import spu

    task = load_task(task_dir)
    values = {"task_id": task.id, "task_version": task.version, "spu_version": spu.__version__,
              "harbor_version": HARBOR_VERSION, "base_image": base_image,
              "time_limit_s": f"{_limits(task.meta.limits)['time_s']:g}"}
    text = (TEMPLATES / "Dockerfile").read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _write_tests(tests: Path, contract: bytes, answers: bytes) -> None:
    import spu

    root = Path(spu.__file__).parent.parent
    tests.mkdir(parents=True)
    shutil.copyfile(TEMPLATES / "test.sh", tests / "test.sh")
    (tests / "test.sh").chmod(0o755)
    shutil.copyfile(TEMPLATES / "harbor_verify.py", tests / "verify.py")
    (tests / "contract.json").write_bytes(contract)
    (tests / "answers.json").write_bytes(answers)
    grader = tests / "grader"
    for rel in VENDORED_GRADER:
        (grader / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, grader / rel)
    shutil.copyfile(TEMPLATES / "grader_schema.py", grader / "spu" / "schema.py")
    doc = '"""The SPU grader, vendored by spu task export --format harbor (see ../verify.py)."""\n'
    (grader / "spu" / "__init__.py").write_text(doc, encoding="utf-8")
    (grader / "spu" / "grading" / "__init__.py").write_text(doc, encoding="utf-8")


def _replace(staging: Path, out: Path) -> None:
    if out.is_dir() and not out.is_symlink():
        shutil.rmtree(out)
    elif out.exists() or out.is_symlink():
        out.unlink()
    staging.rename(out)


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise HarborError(f"{out}: exists and is not empty; pass --force to replace it")


def export_harbor(
    task_dir: str | Path,
    out: str | Path,
    *,
    answers: str | Path | None = None,
    base_image: str = DEFAULT_BASE_IMAGE,
    org: str = PACKAGE_ORG,
    force: bool = False,
) -> HarborExport:
    """Write the Harbor task of an SPU task package.

    Parameters
    ----------
    task_dir
        The SPU task folder.
    out
        The Harbor task folder to write (empty or absent, unless ``force``).
    answers
        The answer key (default: ``<task_dir>/hidden/answers.json``).
    base_image
        ``FROM`` of ``environment/Dockerfile``; python3 is installed where it lacks it.
    org
        Organization of the Harbor task name ``<org>/<task id>``.
    force
        Replace an existing ``out``.

    Raises
    ------
    HarborError
        When the package fails validation or ``out`` is in the way; nothing is written.
    """
    import tomli_w

    from spu.tasks.validate import validate_task

    task_dir = Path(task_dir).resolve()
    out = Path(out).resolve()
    try:
        task = load_task(task_dir)
    except TaskLoadError as exc:
        raise HarborError(str(exc)) from None
    answers_path = Path(answers).resolve() if answers else task.answers_path()
    report = validate_task(task_dir, answers_path)
    if not report.ok:
        shown = "\n  ".join(str(f) for f in report.errors)
        raise HarborError(f"{task_dir}: the task fails validation; nothing was exported:\n"
                          f"  {shown}")
    _check_out(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        header = (f"# Harbor task of SPU task {task.id} version {task.version}, written by "
                  f"`spu task export --format harbor`\n# (Harbor {HARBOR_VERSION} task "
                  f"format, task schema {TASK_SCHEMA_VERSION}).\n")
        (staging / "task.toml").write_text(header + tomli_w.dumps(task_config(task_dir, org)),
                                           encoding="utf-8")
        shutil.copyfile(task_dir / "instruction.md", staging / "instruction.md")
        environment = staging / "environment"
        stage_public_files(task, staging / PUBLIC_DIR)
        (environment / "Dockerfile").write_text(_dockerfile(task_dir, base_image),
                                                encoding="utf-8")
        _write_tests(staging / "tests", (task_dir / "contract.json").read_bytes(),
                     answers_path.read_bytes())
        review = task_dir / REVIEW_FILE
        if review.is_file() and not review.is_symlink():
            # Kept with the verifier's files (never the agent's); import restores it, and
            # the public files come back byte for byte, so the review stays current.
            shutil.copyfile(review, staging / "tests" / REVIEW_FILE)
        files = tuple(sorted(p.relative_to(staging).as_posix()
                             for p in staging.rglob("*") if p.is_file()))
        _replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return HarborExport(path=out, files=files,
                        warnings=tuple(str(f) for f in report.warnings))


# ----------------------------------------------------------------------------- import


MAX_TOML_DEPTH = 64
"""Nesting of arrays and inline tables that ``task.toml`` may have (``tomllib`` recurses)."""


def toml_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in the values of a TOML text (strings skipped).

    Examples
    --------
    >>> toml_depth('a = [[1], {b = "[[["}]  # [[[')
    2
    >>> toml_depth("[table]\\n[[array.of.tables]]\\nx = 1")
    0
    """
    depth = deepest = 0
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else c
            i += len(quote)
            while i < n and text[i:i + len(quote)] != quote:
                i += 2 if c == '"' and text[i] == "\\" else 1
            i += len(quote)
            line_start = False
            continue
        if c == "\n":
            line_start = True
        elif c == "[" and line_start and depth == 0:  # a table header, not a value
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(depth - 1, 0)
        if not c.isspace():
            line_start = False
        i += 1
    return deepest


def _read_toml(path: Path) -> dict[str, Any]:
    """``task.toml`` through the bounded reader: a regular file, UTF-8, size and depth capped."""
    try:
        text = read_task_text(path, MAX_YAML_BYTES)
    except TaskLoadError as exc:
        if not path.exists() and not path.is_symlink():
            raise HarborError(f"{path}: file is missing (not a Harbor task)") from None
        raise HarborError(str(exc)) from None
    depth = toml_depth(text)
    if depth > MAX_TOML_DEPTH:
        raise HarborError(f"{path}: arrays or tables nested {depth} deep, over the limit of "
                          f"{MAX_TOML_DEPTH}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarborError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise HarborError(f"{path}: not valid TOML (nested too deep)") from None


def _refuse_unsafe(source: Path) -> None:
    """Every path of the Harbor task checked with ``lstat``: links, devices, FIFOs refused."""
    if not source.is_dir():
        raise HarborError(f"{source}: not a folder (a Harbor task is one)")
    unsafe = unsafe_entries(source)
    if unsafe:
        first = unsafe[0]
        to = f" to {first.target}" if first.target else ""
        more = f" ({len(unsafe) - 1} more such entries)" if len(unsafe) > 1 else ""
        raise HarborError(f"{source / first.path}: not a regular file or folder (a "
                          f"{first.kind}{to}){more}; import reads regular files only")


def _bytes(path: Path) -> bytes:
    try:
        return read_task_file(path, MAX_TABLE_BYTES)
    except TaskLoadError as exc:
        raise HarborError(str(exc)) from None


def _copy_checked(src: Path, dst: Path, budget: _StageBudget) -> None:
    """Copy a regular file, refused (before anything is written) when over the limits."""
    try:
        _copy_regular(src, dst, budget)
    except TaskLoadError as exc:
        raise HarborError(str(exc)) from None


def _regular_files(folder: Path) -> list[Path]:
    """Every file under ``folder``; a link or any other non-regular entry is refused."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise HarborError(f"{path}: not a regular file or folder; import copies only "
                              f"regular files")
        if path.is_file():
            found.append(path)
    return found


def _resource_notes(config: dict[str, Any], task_dir: Path) -> list[str]:
    """Where ``task.toml`` asks for other resources than the package states."""
    limits = _limits(load_task(task_dir).meta.limits)
    environment = config.get("environment", {})
    agent = config.get("agent", {})
    pairs = [("[agent].timeout_sec", agent.get("timeout_sec"), limits["time_s"]),
             ("[environment].cpus", environment.get("cpus"), limits["cpus"]),
             ("[environment].memory_mb", environment.get("memory_mb"),
              limits["memory_gb"] * 1024),
             ("[environment].gpus", environment.get("gpus"), limits["gpus"])]
    return [f"task.toml: {key} is {given!r}, the package states {stated:g} (task.yaml "
            f"limits or the paper's); the package is kept as it is"
            for key, given, stated in pairs
            if isinstance(given, (int, float)) and float(given) != stated]


def import_harbor(source: str | Path, out: str | Path, *, force: bool = False) -> HarborImport:
    """Read a Harbor task written by :func:`export_harbor` back into an SPU task package.

    Parameters
    ----------
    source
        The Harbor task folder.
    out
        The SPU task folder to write (empty or absent, unless ``force``).
    force
        Replace an existing ``out``.

    Raises
    ------
    HarborError
        When ``source`` is not such a task, its copies disagree, or the package it gives
        fails validation; nothing is written then.
    """
    from spu.tasks.validate import validate_task

    source = Path(source).resolve()
    out = Path(out).resolve()
    _refuse_unsafe(source)
    config = _read_toml(source / "task.toml")
    metadata = config.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("spu_task_id"), str):
        raise HarborError(f"{source / 'task.toml'}: [metadata].spu_task_id is missing: not an "
                          f"SPU task (a ranking task needs its contract and answer key; "
                          f"write one with spu task export --format harbor)")
    public = source / PUBLIC_DIR
    for name in REQUIRED_PUBLIC:
        if not (public / name).is_file():
            raise HarborError(f"{public / name}: file is missing")
    key = source / "tests" / "answers.json"
    if not key.is_file():
        raise HarborError(f"{key}: file is missing (the answer key of the verifier)")
    for copy, original in ((source / "tests" / "contract.json", public / "contract.json"),
                           (source / "instruction.md", public / "instruction.md")):
        if not copy.is_file() or _bytes(copy) != _bytes(original):
            raise HarborError(f"{copy}: differs from {original} (the agent and the verifier "
                              f"would not see the same task)")
    _check_out(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        draft = staging / out.name
        budget = _StageBudget()  # sizes checked on each file before it is copied
        for name in PUBLIC_PATHS:
            src = public / name
            if src.is_symlink():
                raise HarborError(f"{src}: a link; import copies only regular files")
            if src.is_dir():
                for path in _regular_files(src):
                    target = draft / path.relative_to(public)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _copy_checked(path, target, budget)
            elif src.is_file():
                draft.mkdir(parents=True, exist_ok=True)
                _copy_checked(src, draft / name, budget)
        (draft / "hidden").mkdir(parents=True)
        _copy_checked(key, draft / "hidden" / "answers.json", budget)
        review = source / "tests" / REVIEW_FILE
        if review.is_file() and not review.is_symlink():
            _copy_checked(review, draft / REVIEW_FILE, budget)
        report = validate_task(draft)
        if not report.ok:
            shown = "\n  ".join(str(f) for f in report.errors)
            raise HarborError(f"{source}: the imported package fails validation; nothing was "
                              f"written:\n  {shown}")
        meta_id = load_task(draft).id
        if meta_id != metadata["spu_task_id"]:
            raise HarborError(f"{source / 'task.toml'}: [metadata].spu_task_id "
                              f"{metadata['spu_task_id']!r} differs from task.yaml id "
                              f"{meta_id!r}")
        notes = _resource_notes(config, draft)
        _replace(draft, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return HarborImport(path=out, notes=tuple(notes))

