"""Round five: a refusal after a valid file is flagged, whatever the agent does to the file.

``refusal_after_file`` (spu/grading/outcome.py) keeps the paper's rule visible: a run that
refused after writing a valid file is excluded as a refusal, but the record says so and
``spu stats --refusals-after-file=score`` scores its file. Whole runs through ``run_one``
(``harness=command``, ``model=scripted`` behind the real gateway) on both backends.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from spu.gateway import read_requests
from spu.main import spec_from_config
from spu.runner import run_one
from spu.schema import Outcome
from spu.tracking.regrade import regrade_run
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import require_backend

BACKENDS = [pytest.param("local", marks=pytest.mark.slow),  # a real sandbox
            pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow])]
AGENT = Path(__file__).parent / "agents" / "refuser.py"


def _run(compose, backend: str, mode: str, script: Path):
    spec = spec_from_config(compose(
        "harness=command", f"harness.entrypoint={AGENT}", f"sandbox={backend}",
        f"task={EXAMPLE_TASK.name}", "model=scripted", f"model.api_model={script}",
        "limits.cpus=1", "limits.gpus=0", "limits.memory_gb=1", "limits.time_s=120"))
    spec = dataclasses.replace(spec, harness=dataclasses.replace(spec.harness, args=[mode]))
    record = run_one(spec)
    return record, spec.output_root / "runs" / record.run_key


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "refuse_second.json"
    script.write_text(json.dumps({"name": "refuse_second", "turns": [
        {"text": "Ranked."}, {"refusal": "bio"}]}))
    return script


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_refusal_after_a_kept_file_is_flagged(
        request: pytest.FixtureRequest, compose, backend: str, tmp_path: Path) -> None:
    require_backend(request, backend)
    record, run_dir = _run(compose, backend, "keep", _script(tmp_path))
    assert any(e.refusal for e in read_requests(run_dir / "model" / "requests.jsonl"))
    assert record.outcome is Outcome.refusal and record.refusal_after_file


@pytest.mark.parametrize("mode", ["remove", "invalid"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_refusal_after_a_file_the_agent_then_removed_is_flagged(
        request: pytest.FixtureRequest, compose, backend: str, mode: str,
        tmp_path: Path) -> None:
    require_backend(request, backend)
    record, run_dir = _run(compose, backend, mode, _script(tmp_path))
    assert any(e.refusal for e in read_requests(run_dir / "model" / "requests.jsonl"))
    assert (run_dir / "output" / "notes.json").is_file()  # the agent ran to its end
    assert record.outcome is Outcome.refusal and not record.scored
    assert record.refusal_after_file, record.notes
    # Graded on the file the refused request arrived with, and the record says so.
    assert record.score_recovered > -1
    assert any("as the model gateway kept it when the refused request arrived" in n
               for n in record.notes), record.notes
    # A regrade grades the same file: the flag and the score stay.
    result, _ = regrade_run(run_dir, EXAMPLE_TASK.parent)
    assert result.status == "unchanged", result
