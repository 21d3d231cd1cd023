"""Outcomes decided from facts (SPEC 5), through ``run_one`` and the real ``conf/``, per backend.

A memory hog ends as ``memory_limit``, a sleeper as ``timeout`` with its early
submission graded and scored, a crash as ``no_file``, and an agent the sandbox cannot
start as ``infra_error``; the raw evidence is stored with the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy.stats import spearmanr

from spu.main import spec_from_config
from spu.runner import run_one
from spu.sandbox.limits import GIB
from spu.schema import Outcome, RunRecord
from spu.tasks import load_answers, load_task
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import BACKENDS, CHECK_AGENTS, require_backend

pytestmark = pytest.mark.slow


def _run(request, compose, backend: str, entrypoint: Path, *overrides: str) -> RunRecord:
    require_backend(request, backend)
    cfg = compose(
        "harness=command",
        f"harness.entrypoint={entrypoint}",
        f"sandbox={backend}",
        f"task={EXAMPLE_TASK.name}",
        "limits.cpus=1",
        "limits.gpus=0",
        "limits.grace_s=1",
        # sandbox=subprocess isolates nothing: these outcome tests run it knowingly.
        *(["sandbox.allow_unisolated=true"] if backend == "subprocess" else []),
        *overrides,
    )
    record = run_one(spec_from_config(cfg))
    saved = json.loads((Path(cfg.output_root) / "runs" / record.run_key / "run.json").read_text())
    assert saved["outcome"] == record.outcome.value and saved["process"] is not None
    return record


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_hog_ends_as_memory_limit(backend, request, compose) -> None:
    """Killed by the memory limit: ``memory_limit``, never scored, evidence kept."""
    record = _run(request, compose, backend, CHECK_AGENTS / "hog.py", "limits.memory_gb=0.2")
    if record.sandbox.limits.memory_mechanism == "rlimit-as":
        pytest.skip("no writable memory cgroup here: RLIMIT_AS leaves no OOM event")
    assert record.outcome is Outcome.memory_limit and not record.scored
    assert record.process.oom_killed and not record.process.timed_out
    assert record.process.exit_code == 137 or record.process.signal == 9
    if backend != "docker":  # sampled by docker, may miss a fast hog
        assert record.process.peak_memory_bytes >= 0.9 * 0.2 * GIB


@pytest.mark.parametrize("backend", BACKENDS)
def test_sleeper_times_out_and_its_early_submission_is_scored(backend, request, compose) -> None:
    """A run stopped at the wall limit after writing a valid file is graded and scored."""
    record = _run(request, compose, backend, CHECK_AGENTS / "sleeper.py", "limits.time_s=3")
    assert record.outcome is Outcome.timeout and record.process.timed_out
    assert record.scored, "paper 3.1: a valid file written before the limit is scored"
    # The sleeper submits each group in its presented (contract) order.
    task = load_task(EXAMPLE_TASK)
    answers = load_answers(task.answers_path())
    expected = sum(
        g.weight * spearmanr(range(len(g.items)), [answers.groups[g.group_id][i]
                                                    for i in g.items])[0]
        for g in task.contract.groups
    )
    assert record.score_strict == pytest.approx(expected, abs=1e-12)
    assert record.score_recovered == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_crash_ends_as_no_file(backend, request, compose) -> None:
    """An agent that dies before writing anything: ``no_file``, exit code kept."""
    record = _run(request, compose, backend, CHECK_AGENTS / "crash.py")
    assert record.outcome is Outcome.no_file and not record.scored
    assert record.process.exit_code == 1 and record.process.error is None
    assert record.score_strict == -1


@pytest.mark.parametrize("backend", BACKENDS)
def test_agent_that_cannot_start_is_an_infra_error(backend, request, compose, tmp_path) -> None:
    """An interpreter missing in the sandbox: the harness failed to start, ``infra_error``."""
    broken = tmp_path / "broken-agent"
    broken.write_text("#!/nonexistent/python3\nprint('never')\n")
    record = _run(request, compose, backend, broken)
    assert record.outcome is Outcome.infra_error and not record.scored
    assert record.process.error


@pytest.mark.docker
def test_missing_docker_image_is_an_infra_error(request, compose) -> None:
    """An image that does not exist: the sandbox failed to start, ``infra_error``."""
    record = _run(request, compose, "docker", CHECK_AGENTS / "crash.py",
                  "sandbox.image=spu-agent:no-such-tag")
    assert record.outcome is Outcome.infra_error
    assert "spu-agent:no-such-tag" in record.process.error
    assert "build-base-image.sh" in record.process.error
