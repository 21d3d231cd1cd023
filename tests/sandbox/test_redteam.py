"""Red-team suite: an agent attacks the framework and the host, through the real ``run_one``.

The attacks that apply to every backend claiming isolation are the self-check kit's
red-team checks (:mod:`spu.selfcheck.redteam`), the very functions ``spu selfcheck
sandbox=NAME`` runs: ``test_redteam`` runs each on every isolating backend of the
machine. Each runs the kit's ``redteam.py`` agent (``harness=command``) with one or more
of its attacks and checks two things: the attack failed, and nothing else was lost (the
run still has its ``run.json``, its outcome, its evidence). The tests below them are the
attacks that concern one backend or the reading of session files. Attacks and what
holds them:

- kernel keyrings as a channel between runs, user namespaces: the sandbox's seccomp
  filter (``local``), Docker's default profile (``docker``);
- ``/proc``, sysrq, sysctls, cgroup files, ``open_by_handle_at``: no capabilities,
  read-only ``/proc/sys``;
- every route to a host service (TCP and UDP on each IPv4 and IPv6 address of this
  machine, link-local, Unix sockets in ``/tmp`` and ``/run``, abstract sockets, the
  Docker socket): the network namespace and pasta's filter;
- device nodes, setuid/setgid files and file capabilities left for the host: disarmed
  when the run's files come back (:func:`spu.sandbox.disk.disarm`);
- links, FIFOs, sockets, sparse, deep, crowded and non-UTF-8 outputs: read without
  following, recorded, logged;
- writes outside ``/workspace`` and ``/output``: memory (``local``'s tmpfs) or the
  disk limit (``docker``'s container layer);
- a SIGTERM-deaf daemon: gone with its run;
- other tasks' answers and the answer root where a system folder would show them:
  masked.

Every address targeted is this machine's own.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spu.schema import Outcome
from spu.selfcheck import checks
from spu.selfcheck.redteam import Attacked, attack
from spu.selfcheck.targets import SandboxTarget
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import ISOLATING, kit_check, require_backend

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's isolation needs root")

RED_TEAM = [entry for entry in checks("sandbox") if entry.suite == "red-team"
            and entry.name != "odd_outputs_are_recorded_without_being_followed"]
"""The kit's red-team checks (the odd outputs' has a test of its own, below)."""


def _local(request, tmp_path: Path, name: str = "local") -> SandboxTarget:
    return SandboxTarget("local", require_backend(request, "local"), tmp_path / name,
                         task_home=tmp_path)


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("entry", RED_TEAM, ids=lambda entry: entry.name)
@pytest.mark.parametrize("backend", ISOLATING)
def test_redteam(backend, entry, request, tmp_path) -> None:
    """The backend holds the kit's attack (its docstring says which)."""
    kit_check(entry, backend, request, tmp_path)


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_odd_outputs_are_recorded_and_logged_without_being_followed(
        backend, request, tmp_path, monkeypatch) -> None:
    """Invariant: the kit's odd outputs (links, a FIFO, sparse, deep, crowded, non-UTF-8,
    forged records) are recorded without being followed, and MLflow logs a bounded part
    of them; the tree can be removed."""
    from mlflow.tracking import MlflowClient

    from spu.sandbox.disk import remove_tree
    from spu.selfcheck import CHECKS
    from spu.tracking import store
    from spu.tracking.store import TrackingTarget, log_run

    entry = CHECKS["sandbox"]["odd_outputs_are_recorded_without_being_followed"]
    # The 1,500-deep tree goes with the test, passed or failed: pytest's own clean-up of
    # old temporary roots (shutil.rmtree) could not remove it in a later session.
    runs = tmp_path / entry.name / "outputs" / "runs"
    request.addfinalizer(lambda: [remove_tree(deep) for pattern in
                                  ("*/output/deep", "*/attempts/*/output/deep")
                                  for deep in runs.glob(pattern)])
    run = kit_check(entry, backend, request, tmp_path)
    assert isinstance(run, Attacked)
    # MLflow logs regular files only, a bounded number and size of them, none too deep.
    monkeypatch.setattr(store, "MAX_ARTIFACT_FILES", 300)
    monkeypatch.setattr(store, "MAX_ARTIFACT_TOTAL_BYTES", 100 * 2**20)
    target = TrackingTarget(uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                            artifact_root=str(tmp_path / "artifacts"), experiment="redteam")
    run_id = log_run(run.record, run.run_dir, target)
    stored = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    names = {p.name for p in stored}
    assert "passwd" not in names and "rankings.json" not in names and "report.md" not in names
    assert len([p for p in stored if p.parent.name == "many"]) < 300
    assert sum(p.stat().st_blocks * 512 for p in stored) < 110 * 2**20
    mlflow_run = MlflowClient(target.uri).get_run(run_id)
    assert mlflow_run.info.status == "FINISHED"
    skipped = mlflow_run.data.tags["artifacts_skipped"]
    assert "deeper than" in skipped and "files past the first 300" in skipped
    # A run folder can be removed whole, however deep (a rerun of a crashed run does).
    remove_tree(run.run_dir)
    assert not run.run_dir.exists()


@needs_root
@pytest.mark.slow
def test_a_run_cannot_starve_a_concurrent_run_of_per_user_kernel_resources(
        request, tmp_path) -> None:
    """Invariant: two runs at once never share a user id: one holding every inotify
    instance its user may have leaves the other its own (and both differ from host users).
    (``docker`` agents are all root: see the README's security section.)"""
    outputs = tmp_path / "hog-outputs"
    done: dict[str, Attacked] = {}
    hog_target, probe_target = _local(request, tmp_path, "hog"), _local(request, tmp_path)
    hog = threading.Thread(target=lambda: done.setdefault("hog", attack(
        hog_target, ["proc", "inotify-hog:25"], output_root=outputs)))
    hog.start()
    try:
        deadline = time.monotonic() + 120
        while not list(outputs.glob("runs/*/output/inotify-held")):
            assert time.monotonic() < deadline and hog.is_alive(), "the hog never started"
            time.sleep(0.2)
        probe = attack(probe_target, ["inotify-probe", "proc"], repeat=1)
    finally:
        hog.join()
    assert done["hog"].report["inotify-hog"]["held"] >= 64, done["hog"].report
    assert probe.report["inotify-probe"]["errno"] is None, probe.report
    assert probe.report["proc"]["uid"] != done["hog"].report["proc"]["uid"]
    assert done["hog"].record.outcome is probe.record.outcome is Outcome.no_file


# --------------------------------------------------------------------------- answers


def _task_tree(root: Path, canary: str) -> tuple[Path, Path]:
    """Two tasks under ``root``; the second's answers hold ``canary``. Returns both."""
    first, second = root / EXAMPLE_TASK.name, root / "spu-redteam-other"
    shutil.copytree(EXAMPLE_TASK, first)
    shutil.copytree(EXAMPLE_TASK, second)
    meta = (second / "task.yaml").read_text().replace(EXAMPLE_TASK.name, second.name)
    (second / "task.yaml").write_text(meta)
    answers = json.loads((second / "hidden" / "answers.json").read_text())
    answers["source"] = {"title": canary}
    (second / "hidden" / "answers.json").write_text(json.dumps(answers))
    return first, second


@pytest.fixture
def system_folder() -> Iterator[Path]:
    """A folder under ``/opt``, which ``sandbox=local`` shows the agent (read-only)."""
    if os.geteuid() != 0:
        pytest.skip("writing under /opt needs root")
    folder = Path("/opt") / f"spu-redteam-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["task_root", "answers_root"])
def test_answers_of_other_tasks_are_masked_under_a_system_folder(
        where, request, system_folder, tmp_path) -> None:
    """Invariant: a task root or an answer root deployed under a folder the sandbox shows
    (``/opt``) is hidden whole: no task's answers, not only the run's own."""
    canary = f"spu-redteam-canary-{uuid.uuid4().hex}"
    tasks = system_folder / "tasks"
    first, second = _task_tree(tasks, canary)
    overrides: list[str] = []
    if where == "answers_root":
        answers = system_folder / "answers"
        for task in (first, second):
            (answers / task.name).mkdir(parents=True)
            shutil.move(str(task / "hidden" / "answers.json"), answers / task.name)
        overrides.append(f"answers_root={answers}")
        probe = answers / second.name / "answers.json"
    else:
        probe = second / "hidden" / "answers.json"
    run = attack(_local(request, tmp_path), ["read:" + str(probe), "read:" + str(tasks)],
                 *overrides, task=first)
    assert probe.is_file(), "the host still has them"
    assert run.report["read:" + str(probe)]["content"] is None, run.report
    assert run.report["read:" + str(tasks)]["content"] in (None, []), run.report
    assert canary not in json.dumps(run.report)
    assert run.record.outcome is Outcome.no_file


# --------------------------------------------------------------------------- session files


def _planted_sessions(home: Path, host_file: Path) -> Path:
    """A CLI home the agent booby-trapped; returns its ``.claude/projects`` folder."""
    projects = home / ".claude" / "projects" / "p"
    (projects / "subagents").mkdir(parents=True)
    os.mkfifo(projects / "fifo.jsonl")  # never ends: a blocking reader hangs
    os.symlink(host_file, projects / "host.jsonl")  # the framework reads as root
    os.symlink("/dev/zero", projects / "zero.jsonl")  # endless, no newline
    os.symlink(host_file.parent, projects / "folder-link")
    (projects / "subagents" / "agent-x.jsonl").write_text("")
    os.mkfifo(projects / "subagents" / "agent-x.meta.json")
    (projects / "long.jsonl").write_bytes(b'{"type": "user", "x": "' + b"a" * 5000 + b'"}\n'
                                          + b'{"type": "nothing"}\n')
    return projects.parent


def _within_seconds(fn, seconds: float = 30.0):
    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, "the reader hung on a file the agent planted"
    return result[0]


@pytest.mark.parametrize("cli", ["claude_code", "codex"])
def test_session_files_the_agent_planted_are_not_followed(cli, tmp_path, monkeypatch) -> None:
    """Invariant: reading the agent's session files (as root, after the run) never follows
    a link to a host file, never blocks on a FIFO, never reads an endless file or holds a
    giant line; a home folder replaced by a link is not read."""
    from spu.harness.trajectory import jsonl
    from spu.harness.trajectory.claude_code import read_claude_code_sessions
    from spu.harness.trajectory.codex import read_codex_sessions

    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(jsonl, "MAX_FILE_BYTES", 1 << 20)
    canary = f"spu-redteam-host-{uuid.uuid4().hex}"
    host = tmp_path / "host"
    host.mkdir()
    line = {"type": "user", "message": {"role": "user", "content": canary}}
    (host / "secret.jsonl").write_text(json.dumps(line) + "\n")
    (host / "rollout-secret.jsonl").write_text(json.dumps(line) + "\n")
    home = tmp_path / "home"
    projects = _planted_sessions(home, host / "secret.jsonl")
    if cli == "codex":
        sessions = home / ".codex" / "sessions"
        sessions.parent.mkdir()
        projects.rename(sessions)
        for path in list(sessions.rglob("*.jsonl")):
            path.rename(path.with_name(f"rollout-{path.name}"))
        os.symlink(host / "rollout-secret.jsonl", sessions / "p" / "rollout-link.jsonl")
        reading = _within_seconds(lambda: read_codex_sessions(sessions))
    else:
        reading = _within_seconds(lambda: read_claude_code_sessions(projects))
    assert canary not in reading.model_dump_json() if hasattr(reading, "model_dump_json") \
        else canary not in repr(reading)
    assert all("host" not in f and "zero" not in f and "fifo" not in f for f in reading.files)
    assert any("longer than" in w for w in reading.warnings), reading.warnings
    # The CLI's whole folder replaced by a link to a host folder: not read at all.
    linked = tmp_path / "linked-home"
    linked.mkdir()
    os.symlink(host, linked / ".claude")
    reading = _within_seconds(lambda: read_claude_code_sessions(linked / ".claude"))
    assert reading.files == () and canary not in repr(reading)
