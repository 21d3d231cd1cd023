"""Every shell command of README.md and docs/ runs as written (issue 14, "Done when").

The commands are read from the fenced shell blocks (```bash, ```sh, ```shell, ```console,
and untagged blocks whose lines start with a known program) of each document and run in
document order, from the root of a scratch copy of the repository (README, docs, tasks)
with ``.venv/bin`` first on PATH, as a user with the virtual environment active would.
A command fails the test on a non-zero exit status or a traceback.

A command runs exactly as written unless a row of the two tables below says otherwise:

- :data:`SKIPS`: commands that cannot run offline on one machine (servers that run until
  stopped, a Ray cluster, a remote tracking server, the Quick start's own targets), each
  with the reason;
- :data:`SUBSTITUTIONS`: the smallest change that lets a command run offline: a model
  that needs an API key becomes ``model=scripted`` (the real CLIs against the local
  scripted model server), a sweep over every task gets a task root of one example task,
  placeholder paths become real folders. Nothing else changes: the argument order stays
  as documented (the headline ``-m`` after the overrides included).

Other helpers add commands to these documents: a new command needs no change here unless
it needs a server, a cluster or an API key; then add one row, with its reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SHELL_LANGUAGES = {"bash", "sh", "shell", "console", "zsh"}
PROGRAMS = ("spu", "python", "python3", "mlflow", "make", "export", "ray", "docker", "cat",
            "ls", "cd", "source", "pip", "git")
"""First words that make an untagged block a shell block."""

API_KEY_MODELS = ("opus5", "opus55", "sonnet55", "fable51", "astra", "sol61", "deepseek",
                  "doubao", "glm53", "hy4", "kimi31", "qwen38")
"""Models of conf/model/ that call a provider with an API key."""

COMMAND_TIMEOUT_S = 1200


@dataclass(frozen=True)
class DocCommand:
    """One command of a document, continuation lines joined, comments dropped."""

    document: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


@dataclass(frozen=True)
class Scratch:
    """The scratch copy the commands of one document run in."""

    root: Path
    small_tasks: Path
    """A task root holding one example task (sweeps over 'every task' use it)."""
    private_tasks: Path
    """A task root with one private task (``/path/to/private/tasks``)."""
    answers: Path
    """An answer-key root, ``<task_id>/answers.json`` (``--answers-root /keys``)."""


SKIPS: list[tuple[str, str]] = [
    (r"^make (demo|test)\b", "the Quick start: `make test` runs this suite and CI runs both "
                             "(the default job of `make demo` is tests/test_main.py)"),
    (r"^export \w+=\.\.\.", "sets an API key; the commands that need one run with "
                            "model=scripted instead"),
    (r"^mlflow ui\b", "starts the MLflow UI, which serves until stopped"),
    (r"^spu ui\b", "starts the MLflow UI, which serves until Ctrl-C (tests/tracking/test_ui.py "
                   "drives it in headless Chromium)"),
    (r"^mlflow server\b", "starts a tracking server on PostgreSQL, which serves until stopped"),
    (r"^ray start\b", "joins or starts a Ray cluster node"),
    (r"^spu scripted-server\b", "serves the scripted model until stopped"),
    (r"hydra/launcher=ray_cluster", "needs a Ray cluster with shared storage"),
    (r"(tracking\.uri=|--tracking-uri )https?://", "needs a remote tracking server"),
    (r"^docker build\b", "needs a container registry"),
    (r"^pip install\b", "installs into the environment running the tests "
                        "(tests/test_installed.py installs the wheel into a fresh one)"),
    (r"^python -m http\.server\b", "serves a folder until stopped"),
    (r"--registry https://|dataset=spu-public@", "needs a published registry (tests/"
                                                 "test_installed.py pulls from one it serves)"),
]
"""Commands that cannot run offline on one machine: (regular expression, reason)."""


def _is_main(text: str) -> bool:
    return bool(re.match(r"^(python -m spu\.main|spu run)\b", text))


def _dry(text: str) -> bool:
    return bool(re.search(r"\bdry_run=(true|yes|1)\b", text))


def _sweeps_every_task(text: str) -> bool:
    """A run (not a dry run) whose tasks are a glob, or the default sweep of every task."""
    if not _is_main(text) or _dry(text) or "task_root=" in text or "dataset=" in text:
        return False  # a dataset is its own task root (the documents use small ones)
    task = re.search(r"\btask=(\S+)", text)
    if task is None:
        return "experiment=single" not in text
    return "glob(" in task.group(1)


SUBSTITUTIONS: list[tuple[str, Callable[[str], bool], Callable[[str, Scratch], str], str]] = [
    ("model=<a model with an API key> -> model=scripted",
     lambda t: _is_main(t) and not _dry(t),
     lambda t, s: re.sub(rf"\bmodel=({'|'.join(API_KEY_MODELS)})\b", "model=scripted", t),
     "the model needs an API key: the real CLI runs against the scripted model server"),
    ("a sweep over every task -> + task_root=<one example task>",
     _sweeps_every_task,
     lambda t, s: f"{t} task_root={s.small_tasks}",
     "a small task subset: one example task instead of every task"),
    ("/path/to/private/tasks -> a private task root",
     lambda t: "/path/to/private/tasks" in t,
     lambda t, s: t.replace("/path/to/private/tasks", str(s.private_tasks)),
     "a placeholder path"),
    ("--answers-root /keys -> an answer-key root",
     lambda t: "--answers-root /keys" in t,
     lambda t, s: t.replace("--answers-root /keys", f"--answers-root {s.answers}"),
     "a placeholder path"),
]
"""(what changes, when it applies, how, why), applied in this order."""


def _strip_comment(line: str) -> str:
    """``line`` without a trailing shell comment (a ``#`` outside quotes after a space)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def extract(document: Path) -> list[DocCommand]:
    """The shell commands of ``document``'s fenced blocks, in order."""
    commands: list[DocCommand] = []
    lines = document.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        language, start = fence.group(1).lower(), i + 1
        end = start
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        block = lines[start:end]
        i = end + 1
        first = next((b.strip() for b in block if b.strip() and not b.strip().startswith("#")),
                     "")
        if language not in SHELL_LANGUAGES and not (
                language == "" and first.split(" ")[0] in PROGRAMS):
            continue
        pending, at = "", None
        for k, raw in enumerate(block, start=start + 1):
            text = _strip_comment(raw.strip().removeprefix("$ "))
            if not text and not pending:
                continue
            at = at or k
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            full = " ".join((pending + text).split())
            pending = ""
            if full:
                commands.append(DocCommand(document, at, full))
            at = None
    return commands


def skip_reason(text: str) -> str | None:
    """Why a command is not run, or None."""
    return next((why for pattern, why in SKIPS if re.search(pattern, text)), None)


def adapt(text: str, scratch: Scratch) -> tuple[str, list[str]]:
    """The command as run, and the substitutions made (with their reasons)."""
    made = []
    for what, applies, change, why in SUBSTITUTIONS:
        if applies(text):
            changed = change(text, scratch)
            if changed != text:
                made.append(f"{what} ({why})")
                text = changed
    return text, made


def make_scratch(tmp: Path) -> Scratch:
    root = tmp / "repo"
    root.mkdir()
    shutil.copy(REPO / "README.md", root / "README.md")
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copytree(REPO / "tasks", root / "tasks")
    shutil.copytree(REPO / "examples", root / "examples")
    # The detector's labelled cases, which the README evaluates.
    (root / "tests" / "analysis").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "analysis" / "exposure_cases.jsonl",
                root / "tests" / "analysis" / "exposure_cases.jsonl")
    cache = REPO / ".cache" / "spu-tasks"
    if cache.is_dir():
        shutil.copytree(cache, root / ".cache" / "spu-tasks")
    small = tmp / "small-tasks"
    shutil.copytree(EXAMPLE_TASK, small / EXAMPLE_TASK.name)
    private = tmp / "private-tasks"
    shutil.copytree(EXAMPLE_TASK, private / "private-example")
    meta = (private / "private-example" / "task.yaml").read_text()
    (private / "private-example" / "task.yaml").write_text(
        meta.replace("visibility: public", "visibility: private"))
    answers = tmp / "keys"
    for task in sorted((REPO / "tasks").iterdir()):
        key = task / "hidden" / "answers.json"
        if key.is_file():
            (answers / task.name).mkdir(parents=True)
            shutil.copy(key, answers / task.name / "answers.json")
    return Scratch(root, small, private, answers)


def run_command(text: str, scratch: Scratch) -> subprocess.CompletedProcess[str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "VIRTUAL_ENV": str(Path(venv_bin).parent), "COLUMNS": "160"}
    env.pop("SPU_TASK_ROOT", None)
    env.pop("SPU_REGISTRY", None)
    env["SPU_DATA_DIR"] = str(scratch.root.parent / "spu-data")  # pulled datasets: the test's
    return subprocess.run(["bash", "-c", text], cwd=scratch.root, env=env,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)


def offline_gap(text: str, output: str) -> str | None:
    """Why a failed command could not run offline (a package archive not cached), or None."""
    if re.match(r"^spu task build tasks/sources/", text) and "pip download" in output:
        return "the spec's source package is neither cached (.cache/spu-tasks) nor downloadable"
    return None


# ---------------------------------------------------------------- fast checks of the tables


def test_every_document_has_commands_and_the_headline_keeps_its_order(tmp_path) -> None:
    readme = extract(REPO / "README.md")
    assert [c.text for c in readme[:2]] == ["make demo", "make test"]  # the Quick start
    scratch = Scratch(tmp_path, tmp_path / "small", tmp_path / "private", tmp_path / "keys")
    headline = next(c.text for c in readme if c.text.startswith(
        "python -m spu.main model=opus5 harness=claude_code effort=max -m task="))
    run, made = adapt(headline, scratch)
    assert run == ("python -m spu.main model=scripted harness=claude_code effort=max -m "
                   f"task='glob(*)' task_root={tmp_path / 'small'}")
    assert len(made) == 2
    for document in DOCUMENTS:
        assert extract(document), f"{document} has no shell command"


def test_comments_and_continuations_are_read_as_a_shell_would(tmp_path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("```bash\nspu stats a.csv --out s/ \\\n    --seed 1   # a comment\n"
                   "# only a comment\npython -c 'print(\"#1\")'\n```\n\n```json\n{}\n```\n")
    assert [c.text for c in extract(doc)] == ["spu stats a.csv --out s/ --seed 1",
                                             "python -c 'print(\"#1\")'"]


# ---------------------------------------------------------------- the commands themselves


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_command_of_the_document_runs(document: Path, tmp_path: Path) -> None:
    scratch = make_scratch(tmp_path)
    before = {p.name for p in scratch.root.iterdir()}
    failures, ran, skipped = [], [], []
    for command in extract(document):
        reason = skip_reason(command.text)
        if reason:
            skipped.append(f"{command.where}: {command.text}  [{reason}]")
            continue
        text, made = adapt(command.text, scratch)
        proc = run_command(text, scratch)
        output = proc.stdout + proc.stderr
        gap = offline_gap(text, output) if proc.returncode != 0 else None
        if gap:
            skipped.append(f"{command.where}: {command.text}  [{gap}]")
            continue
        ran.append(command.where)
        if proc.returncode != 0 or "Traceback (most recent call last)" in output:
            failures.append(f"{command.where}: {text}\n  substitutions: {made or 'none'}\n"
                            f"  exit {proc.returncode}\n  ...{output[-2500:]}")
    print("\n".join(["skipped:", *skipped]))
    assert ran, f"no command of {document} ran"
    assert not failures, "\n\n".join(failures)
    left = sorted(p.name + ("/" if p.is_dir() else "") for p in scratch.root.iterdir()
                  if p.name not in before)
    unignored = [name for name in left if not _ignored(name)]
    assert not unignored, (f"the commands of {document.name} leave {unignored} at the root of a "
                           "checkout, which .gitignore does not cover")


def _ignored(name: str) -> bool:
    """Whether the repository's ``.gitignore`` covers ``name`` at the root of a checkout."""
    return subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "--no-index", name],
                          capture_output=True, check=False).returncode == 0
