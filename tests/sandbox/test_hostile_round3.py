"""Hostile inputs, round three (issue 30): limits, submissions, capabilities, bundles.

Through the real command line or ``run_one`` with the real ``conf/``, on both isolating
backends where the item applies:

- item 4: task limits of ``.nan``, ``.inf`` or ``-1`` are refused by ``spu task validate``
  and at load, with the file and the key;
- item 6: an agent's ``chmod 0777 /output`` and ``0666 rankings.json`` do not reach the
  host's run folder;
- item 7: a valid file written before ``disk_limit`` or ``memory_limit`` is scored like a
  timeout's and not retried; ``sweep.retry_limits_with_file=true`` restores the rerun;
- item 8: no raw or packet socket for the agent (Docker drops ``NET_RAW``);
- item 3: an agent node's bundle keeps sparse files sparse, within its caps.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from spu.launch.job import run_attempts
from spu.launch.resume import plan_run
from spu.main import spec_from_config
from spu.runner import run_one
from spu.schema import Outcome, RunRecord
from tests.conftest import EXAMPLE_TASK, REPO
from tests.sandbox.conftest import AGENTS, ISOLATING, require_backend

AGENT = AGENTS / "hostile3.py"


def _spec(compose, backend: str, mode: str, *overrides: str):
    spec = spec_from_config(compose(
        "harness=command", f"harness.entrypoint={AGENT}", f"sandbox={backend}",
        f"task={EXAMPLE_TASK.name}", "limits.cpus=1", "limits.gpus=0", "limits.grace_s=1",
        "limits.memory_gb=1", "limits.time_s=300", *overrides))
    return dataclasses.replace(spec, harness=dataclasses.replace(spec.harness, args=[mode]))


def _run_dir(spec, record: RunRecord) -> Path:
    return spec.output_root / "runs" / record.run_key


# --------------------------------------------------------------------------- item 4


@pytest.mark.parametrize("value,key", [(".nan", "time_s"), (".inf", "memory_gb"),
                                       ("-1", "memory_gb"), ("-1", "cpus"), ("0", "time_s")])
def test_task_limits_that_are_not_limits_are_refused_with_file_and_key(
        tmp_path: Path, value: str, key: str) -> None:
    task = tmp_path / EXAMPLE_TASK.name
    shutil.copytree(EXAMPLE_TASK, task)
    meta = task / "task.yaml"
    meta.write_text(meta.read_text() + f"limits:\n  {key}: {value}\n")
    checked = subprocess.run([sys.executable, "-m", "spu", "task", "validate", str(task)],
                             capture_output=True, text=True, timeout=120, check=False, cwd=REPO)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    said = checked.stdout + checked.stderr
    assert "task.yaml" in said and f"limits.{key}" in said, said
    from spu.tasks import load_task
    from spu.tasks.package import TaskLoadError

    with pytest.raises(TaskLoadError, match=rf"task\.yaml: limits\.{key}: "):
        load_task(task)


# --------------------------------------------------------------------------- item 6


@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_a_submission_made_writable_by_everyone_is_not_kept_so(backend, request, compose) -> None:
    require_backend(request, backend)
    spec = _spec(compose, backend, "perms")
    record = run_one(spec)
    assert record.outcome is Outcome.valid and record.scored
    output = _run_dir(spec, record) / "output"
    for path in (output, output / "rankings.json", output / "shared",
                 output / "shared" / "notes.txt"):
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert not mode & (stat.S_IWGRP | stat.S_IWOTH), f"{path}: {oct(mode)}"


# --------------------------------------------------------------------------- item 8


@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_the_agent_gets_no_raw_or_packet_socket(backend, request, compose) -> None:
    require_backend(request, backend)
    spec = _spec(compose, backend, "netraw")
    record = run_one(spec)
    assert record.outcome is Outcome.valid
    found = json.loads((_run_dir(spec, record) / "output" / "netraw.json").read_text())
    assert found["raw_icmp"].startswith("refused") and found["packet"].startswith("refused"), found
    cap_net_raw = 13
    assert not int(found["CapEff"], 16) & (1 << cap_net_raw), found


# --------------------------------------------------------------------------- item 7


def _attempts(spec):
    return run_attempts(spec, plan_run(None, "skip_finished", 1), None)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_a_file_written_before_the_disk_limit_is_scored_and_not_retried(
        backend, request, compose) -> None:
    require_backend(request, backend)
    spec = _spec(compose, backend, "", "limits.disk_gb=0.05")
    spec = dataclasses.replace(spec, harness=dataclasses.replace(
        spec.harness, entrypoint=str(AGENTS / "filler.py"), args=[]))
    done = _attempts(spec)
    assert done.record.outcome is Outcome.disk_limit and done.record.scored
    assert done.record.attempt == 1 and done.retries == 0
    assert done.record.score_recovered is not None
    # The paper's rule, on request: excluded, and run again.
    paper = _attempts(dataclasses.replace(spec, retry_limits_with_file=True, repeat=1))
    assert paper.record.outcome is Outcome.disk_limit and not paper.record.scored
    assert paper.retries == 1 and paper.record.attempt == 2
    assert any("retry_limits_with_file=true" in n for n in paper.record.notes)
    assert paper.record.excluded_for_rerun and not done.record.excluded_for_rerun


@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATING)
def test_a_file_written_before_the_memory_limit_is_scored_and_not_retried(
        backend, request, compose) -> None:
    require_backend(request, backend)
    spec = _spec(compose, backend, "oom", "limits.memory_gb=0.25")
    done = _attempts(spec)
    if done.record.sandbox.limits.memory_mechanism == "rlimit-as":
        pytest.skip("no writable memory cgroup here: RLIMIT_AS leaves no OOM event")
    assert done.record.outcome is Outcome.memory_limit and done.record.scored
    assert done.record.attempt == 1 and done.retries == 0


# --------------------------------------------------------------------------- item 3 (bundle)


@pytest.mark.slow
def test_an_agent_nodes_bundle_keeps_holes_and_its_caps(tmp_path: Path, compose) -> None:
    """Eight sparse 250 MiB files (0 bytes of the agent's disk) grew the worker to 6 GB
    and were written dense on the driver; the bundle now carries their data only."""
    from tests.conftest import have_bwrap

    if not have_bwrap():
        pytest.skip("bubblewrap is not installed (Debian package bubblewrap)")
    from spu.grading.isolated import GradingService
    from spu.launch.remote import agent_job, run_agent_job, settle_agent_return
    from spu.runner import prepare_run, stage

    spec = _spec(compose, "local", "sparse")
    run = prepare_run(spec, check=False)
    staged = stage(run)
    from spu.launch.remote import FileBundle

    job = agent_job(dataclasses.replace(run.spec, answers_root=None, output_root=Path(".")),
                    run.key)
    returned = run_agent_job(job, FileBundle.of(staged), node="node-a")
    moved = len(pickle.dumps(returned))  # what Ray's object store carries
    assert moved < 64 << 20, moved
    with GradingService() as grader:
        record = settle_agent_return(run, staged, returned, grader)
    assert record.outcome is Outcome.valid and record.scored
    for k in range(8):
        written = run.run_dir / "output" / f"sparse{k}.bin"
        info = written.stat()
        assert info.st_size == 250 << 20 and info.st_blocks * 512 < 1 << 20, info
        with open(written, "rb") as f:
            assert f.read(4) == b"head"


def test_a_bundle_over_its_caps_leaves_the_rest_on_the_node_named(tmp_path: Path) -> None:
    from spu.launch.remote import FileBundle

    folder = tmp_path / "run" / "output"
    folder.mkdir(parents=True)
    for k in range(5):
        (folder / f"f{k}.bin").write_bytes(bytes([k]) * 1000)
    by_bytes = FileBundle.of(tmp_path / "run", ("output",), max_total_bytes=2500)
    assert len(by_bytes.files) == 2 and by_bytes.size == 2000
    assert len(by_bytes.left_out) == 3 and all("over the bundle's 2500 bytes" in n
                                               for n in by_bytes.left_out)
    by_count = FileBundle.of(tmp_path / "run", ("output",), max_files=4)
    assert len(by_count.files) == 4 and by_count.left_out == (
        "output/f4.bin (over the bundle's 4 files)",)
    by_count.write(tmp_path / "back")
    assert (tmp_path / "back" / "output" / "f3.bin").read_bytes() == bytes([3]) * 1000
