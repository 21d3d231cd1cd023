"""The adversarial agent, run through ``run_one`` in every backend (issue 5).

It walks every readable path looking for the answer file and for its own task's
measured values (unique canary values written for this test), tries to write into
``/task``, to read another run's workspace, to signal a host process and to rewrite
a host sysctl. In an isolating backend it must find and change nothing. The
``subprocess`` fallback isolates nothing, and a test shows that it indeed exposes
the answers (what its loud warning says).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from spu.main import spec_from_config
from spu.runner import run_one
from spu.sandbox.subprocess import WARNING as NO_SANDBOX
from spu.tasks import load_task
from spu.tasks.package import PUBLIC_PATHS
from tests.sandbox.conftest import (
    AGENTS,
    ISOLATING,
    CanaryTask,
    read_json,
    require_backend,
    tree_digest,
    victim_process,
)

pytestmark = pytest.mark.slow

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")


def _run_adversary(request, compose, monkeypatch, canary: CanaryTask, backend: str,
                   *extra_args: str):
    require_backend(request, backend)
    task_root = canary.path.parent
    monkeypatch.setenv("SPU_TASK_ROOT", str(task_root))
    cfg = compose("harness=command", f"harness.entrypoint={AGENTS / 'adversary.py'}",
                  f"sandbox={backend}", f"task_root={task_root}", f"task={canary.path.name}",
                  "limits.cpus=1", "limits.gpus=0", "limits.time_s=600",
                  f"sandbox.allow_unisolated={backend == 'subprocess'}")
    spec = spec_from_config(cfg)
    sibling = spec.output_root / "runs" / "another-run" / "workspace"
    sibling.mkdir(parents=True)
    secret = f"another-run-secret-{canary.needles[0]}"
    (sibling / "notes.txt").write_text(secret)
    before = {"task": tree_digest(canary.path), "sibling": tree_digest(sibling.parent),
              "core_pattern": CORE_PATTERN.read_bytes()}
    with victim_process() as victim:
        args = [a for n in (*canary.needles, secret) for a in ("--needle", n)]
        args += ["--other-workspace-file", str(sibling / "notes.txt"),
                 "--victim-pid", str(victim.pid), *extra_args]
        spec = dataclasses.replace(spec, harness=dataclasses.replace(spec.harness, args=args))
        record = run_one(spec)
        victim_alive = victim.poll() is None
    run_dir = spec.output_root / "runs" / record.run_key
    after = {"task": tree_digest(canary.path), "sibling": tree_digest(sibling.parent),
             "core_pattern": CORE_PATTERN.read_bytes()}
    report = read_json(run_dir / "output" / "adversary.json")
    return record, report, before, after, victim_alive, run_dir


@pytest.mark.parametrize("backend", ISOLATING)
def test_adversary_finds_and_changes_nothing(backend, request, compose, monkeypatch,
                                             canary_task) -> None:
    """Invariant: no answer, no other run, no host process is reachable from the sandbox."""
    record, report, before, after, victim_alive, run_dir = _run_adversary(
        request, compose, monkeypatch, canary_task, backend)
    assert record.sandbox.backend == backend
    assert report["walked"]["files"] > 1000, "the adversary really walked the file system"
    assert report["found_names"] == [], "an answer file is visible"
    assert report["found_content"] == [], "measured values or another run are readable"
    assert not any(report["task_tampering"].values()), report["task_tampering"]
    assert report["other_workspace"] == {"read": None, "listed": None}
    assert not report["signalled_outside"] and not report["victim_visible"] and victim_alive
    assert not report["rewrote_sysctl"]
    if backend == "local":
        assert report["capabilities"] == 0 and report["uid"] != 0
    # Nothing changed on the host: the task with its answers, the other run, the kernel.
    assert after == before
    public = load_task(canary_task.path)
    staged = tree_digest(run_dir / "task")
    expected = {k: v for k, v in tree_digest(public.path).items()
                if k.split("/")[0] in PUBLIC_PATHS}
    assert staged == expected
    assert record.outcome.value == "no_file"


def test_subprocess_fallback_exposes_the_answers(request, compose, monkeypatch,
                                                 canary_task) -> None:
    """The fallback isolates nothing: the adversary reaches the answers, and the run says so."""
    record, report, *_ = _run_adversary(request, compose, monkeypatch, canary_task,
                                        "subprocess", "--stop-after", "1")
    assert report["found_names"] or report["found_content"]
    assert NO_SANDBOX in record.notes and record.sandbox.isolation == ["network:host"]
