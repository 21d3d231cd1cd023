"""Broken and hostile task packages in a sweep (issue 12, point 4): one line each, recorded,
skipped; every other task runs; a ``${...}`` in a task file is never interpolated."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from spu.launch.job import RunIdentity
from spu.tasks.package import load_task
from tests.conftest import EXAMPLE_TASK, REPO, baseline_run_key
from tests.launchers.conftest import run_sweep, tracked_runs

INTERPOLATION = "${oc.env:HOME}"


def _copy_as(root: Path, name: str, task_id: str | None = None, version: str | None = None,
             title: str | None = None) -> Path:
    """The example task copied to ``root/name`` with its id, version or title replaced."""
    dest = root / name
    shutil.copytree(EXAMPLE_TASK, dest)
    task_id = task_id or name
    meta = (dest / "task.yaml").read_text().splitlines()
    fields = {"id": task_id, "version": version, "title": title}
    out = []
    for line in meta:
        key = line.split(":", 1)[0]
        value = fields.get(key)
        out.append(f"{key}: {json.dumps(value)}" if value is not None else line)
    (dest / "task.yaml").write_text("\n".join(out) + "\n")
    for rel in ("contract.json", "hidden/answers.json"):
        data = json.loads((dest / rel).read_text())
        data["task_id"] = task_id
        if version is not None:
            data["task_version"] = version
        (dest / rel).write_text(json.dumps(data))
    return dest


@pytest.fixture
def hostile_root(tmp_path: Path) -> Path:
    """Two sound tasks (one with ``${...}`` in its version and title) and six broken ones."""
    root = tmp_path / "tasks"
    root.mkdir()
    _copy_as(root, "spu-good")
    _copy_as(root, "spu-interp", version=INTERPOLATION, title=f"Yields at {INTERPOLATION}")
    for name in ("a,b", "x=y", "$(touch pwned)", f"t{INTERPOLATION}"):
        shutil.copytree(EXAMPLE_TASK, root / name)
    bad_utf8 = _copy_as(root, "spu-bytes")
    (bad_utf8 / "task.yaml").write_bytes(b"id: spu-bytes\ntitle: caf\xe9\n")
    bomb = _copy_as(root, "spu-bomb")
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (bomb / "task.yaml").write_text("\n".join(lines) + "\n")
    bad_id = _copy_as(root, "spu-badid")
    (bad_id / "task.yaml").write_text((bad_id / "task.yaml").read_text().replace(
        "id: \"spu-badid\"", "id: \"../spu-good\""))
    linked = _copy_as(root, "spu-linked")
    (linked / "files").mkdir(exist_ok=True)
    os.symlink("/etc/passwd", linked / "files" / "passwd")
    os.symlink(root / "spu-good", root / "spu-alias")
    return root


BROKEN = {"a,b": "is not a safe task name", "x=y": "is not a safe task name",
          "$(touch pwned)": "is not a safe task name",
          f"t{INTERPOLATION}": "is not a safe task name",
          "spu-bytes": "task.yaml: not UTF-8", "spu-bomb": "anchors and aliases",
          "spu-badid": "not a safe task id", "spu-alias": "the task folder is a link",
          "spu-linked": "files/passwd is a link to '/etc/passwd'"}


def table(stdout: str) -> dict[str, str]:
    """task -> the run column of the results table."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 10 and cells[0] != "task":  # the last: the run key
            rows[cells[0]] = cells[8]
    return rows


@pytest.mark.slow
def test_a_sweep_skips_each_broken_task_in_one_line_and_runs_the_others(hostile_root,
                                                                        tmp_path) -> None:
    out = tmp_path / "outputs"
    common = ["-m", "model=random", f"task_root={hostile_root}", f"output_root={out}",
              "task=glob(*)"]
    first = run_sweep(*common)
    log = first.stdout + first.stderr
    assert first.returncode == 0, log[-4000:]
    rows = table(first.stdout)
    assert rows["spu-good"] == rows["spu-interp"] == "ran"
    for name, reason in BROKEN.items():
        said = [line for line in log.splitlines() if f"broken task {name!r} skipped" in line]
        assert len(said) == 1 and reason in said[0], (name, said)
        # The table's cell is cut to the column's width.
        assert any(task.startswith(name[:10].rstrip("…")) and run == "skipped (broken task)"
                   for task, run in rows.items()), (name, rows)
    assert "Traceback" not in log
    assert not list(REPO.glob("pwned")) and not list(hostile_root.glob("pwned"))
    # Exactly the two sound tasks ran, and only their public regular files were staged.
    keys = {p.name for p in (out / "runs").iterdir() if not p.name.startswith(".")}
    assert len(keys) == 2 and len(tracked_runs(out)) == 2
    records = [json.loads((out / "runs" / k / "run.json").read_text()) for k in keys]
    interp = next(r for r in records if r["task_id"] == "spu-interp")
    assert interp["task_version"] == INTERPOLATION  # never resolved
    for key in keys:
        assert not any(p.is_symlink() for p in (out / "runs" / key / "task").rglob("*"))

    # The sweep's run key is the run's: a relaunch skips both, the ${...} one included.
    second = run_sweep(*common)
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    rows = table(second.stdout)
    assert rows["spu-good"] == rows["spu-interp"] == "skipped"
    assert len(tracked_runs(out)) == 2


@pytest.mark.slow
def test_a_broken_task_selected_by_name_is_one_line_and_exit_2(hostile_root, tmp_path) -> None:
    result = run_sweep("experiment=single", "model=random", f"task_root={hostile_root}",
                       f"output_root={tmp_path / 'outputs'}", "task=spu-bytes")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("spu:")]
    assert len(lines) == 1 and "spu-bytes/task.yaml: not UTF-8" in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "outputs" / "runs").exists()


def test_the_task_config_never_interpolates_a_task_file(hostile_root, compose,
                                                        monkeypatch) -> None:
    """Attack: a ``${oc.env:HOME}`` in a task file was resolved by OmegaConf, so the sweep's
    run key (from the config) differed from the run's (from the package)."""
    monkeypatch.setenv("SPU_TASK_ROOT", str(hostile_root))
    cfg = compose("task=spu-interp")
    assert cfg.task.version == INTERPOLATION
    assert cfg.task.title == f"Yields at {INTERPOLATION}"
    task = load_task(cfg.task.path)
    identity = RunIdentity.from_config(cfg)
    assert identity is not None
    assert identity.run_key == baseline_run_key(task.path)
    assert identity.identity is not None and identity.identity.task.version == task.version
    # A broken task selected by name composes to its reason, and no run identity.
    broken = compose("task=spu-bytes")
    assert "not UTF-8" in broken.task.broken
    assert RunIdentity.from_config(broken) is None


def test_a_run_validates_its_staged_package_before_the_agent_starts(tmp_path) -> None:
    """Ids not one-to-one (a ``targets.csv`` row the contract lacks): a clear error naming
    the file, no agent run, and no run folder (an earlier finished run stays as it was)."""
    from spu.config import EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
    from spu.runner import RunSpec, run_one
    from spu.tasks.package import TaskLoadError

    task = _copy_as(tmp_path / "tasks", "spu-extra")
    marker = tmp_path / "agent-ran"
    agent = tmp_path / "agent.sh"
    agent.write_text(f"#!/bin/sh\ntouch {marker}\n")
    agent.chmod(0o755)
    spec = RunSpec(model=ModelConfig(name="random", provider="baseline"),
                   harness=HarnessConfig(name="command", entrypoint=str(agent)),
                   effort=EffortConfig(name="none"), task_dir=task,
                   output_root=tmp_path / "outputs",
                   sandbox=SandboxConfig(name="subprocess", allow_unisolated=True))
    first = run_one(spec)
    assert marker.exists()
    marker.unlink()
    run_json = tmp_path / "outputs" / "runs" / first.run_key / "run.json"
    saved = run_json.read_bytes()
    with open(task / "targets.csv", "a") as f:
        header = (task / "targets.csv").read_text().splitlines()[0].split(",")
        f.write(",".join(["E999", "G1"] + ["x"] * (len(header) - 2)) + "\n")
    with pytest.raises(TaskLoadError, match=r"staged package fails validation: targets.csv: "
                                            r"line \d+: experiment E999"):
        run_one(spec)
    assert not marker.exists()  # the agent never started
    assert run_json.read_bytes() == saved
    assert not list((tmp_path / "outputs" / "runs").glob(".*"))
