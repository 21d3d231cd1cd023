"""Round four: whole runs in which the agent picks its outcome, or hunts for secrets.

Through ``run_one`` with the real ``conf/`` and ``model=scripted`` (the gateway in front of
the scripted server), on both isolating backends (``local`` bubblewrap, ``docker``).
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
from tests.conftest import EXAMPLE_TASK
from tests.sandbox.conftest import require_backend

BACKENDS = [pytest.param("local", marks=pytest.mark.slow),  # a real sandbox
            pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow])]
"""The two isolating backends of the brief (the ``example`` plugin's is a test double)."""

AGENT = Path(__file__).parent / "agents" / "chooser.py"


def _run(compose, backend: str, mode: str, *overrides: str):
    spec = spec_from_config(compose(
        "harness=command", f"harness.entrypoint={AGENT}", f"sandbox={backend}",
        f"task={EXAMPLE_TASK.name}", "model=scripted", "model.api_model=presented_order",
        *overrides,
        "limits.cpus=1", "limits.gpus=0", "limits.memory_gb=1", "limits.time_s=120"))
    spec = dataclasses.replace(spec, harness=dataclasses.replace(spec.harness, args=[mode]))
    record = run_one(spec)
    return record, spec.output_root / "runs" / record.run_key


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_cannot_make_its_run_infra_error_with_a_bad_request(
        request: pytest.FixtureRequest, compose, backend: str) -> None:
    require_backend(request, backend)
    record, run_dir = _run(compose, backend, "infra404")
    statuses = [e.status for e in read_requests(run_dir / "model" / "requests.jsonl")]
    assert 404 in statuses  # the attack did what it meant to
    assert record.outcome is Outcome.valid and record.scored, (record.outcome, record.notes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_refusal_after_its_file_is_the_papers_visible_exclusion(
        request: pytest.FixtureRequest, compose, backend: str, tmp_path: Path) -> None:
    """Accepted residual (docs/security.md): an agent that has written a file it dislikes
    can provoke a real refusal with the token it holds. The paper's rule stays the default
    (3.1, Table 6's note: excluded as a refusal), but the record says so and keeps the
    file's grade, so the count is reported and ``spu stats --refusals-after-file=score``
    scores it (tests/stats/test_refusals_after_file.py)."""
    require_backend(request, backend)
    script = tmp_path / "refuse_second.json"
    script.write_text(json.dumps({"name": "refuse_second", "turns": [
        {"text": "Ranked."}, {"refusal": "bio"}]}))
    record, run_dir = _run(compose, backend, "refusal", f"model.api_model={script}")
    entries = read_requests(run_dir / "model" / "requests.jsonl")
    assert any(e.refusal for e in entries)  # the attack did what it meant to
    assert record.outcome is Outcome.refusal and not record.scored
    assert record.refusal_after_file, record.notes
    assert record.grade is not None and record.grade.status.value == "valid"
    assert record.score_strict == record.score_recovered == record.grade.score > -1.0
    assert any("refused after writing a valid file" in n for n in record.notes), record.notes
    saved = json.loads((run_dir / "run.json").read_text())
    assert saved["refusal_after_file"] is True and saved["outcome"] == "refusal"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_cannot_pose_as_a_sandbox_that_did_not_start(
        request: pytest.FixtureRequest, compose, backend: str) -> None:
    require_backend(request, backend)
    """Held: the start is the wrapper's own handshake (bubblewrap's --json-status-fd, the
    engine's state), not the agent's stderr (tests/sandbox/test_start_handshake.py)."""
    record, run_dir = _run(compose, backend, "wrapper")
    assert (run_dir / "output" / "notes.json").is_file()  # the agent did run
    assert record.outcome is Outcome.valid and record.scored, (record.outcome, record.notes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_agent_sees_no_host_process_and_no_secret(
        request: pytest.FixtureRequest, compose, backend: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Held: no host process in /proc, no variable but its own, no record file in reach."""
    require_backend(request, backend)
    monkeypatch.setenv("RT4_PROVIDER_SECRET", "sk-rt4-not-for-the-agent")
    record, run_dir = _run(compose, backend, "probe")
    notes = json.loads((run_dir / "output" / "notes.json").read_text())
    text = json.dumps(notes)
    assert "sk-rt4-not-for-the-agent" not in text and "RT4_PROVIDER_SECRET" not in text
    assert notes["other_env"] == [], notes["other_env"]
    assert len(notes["processes"]) <= 3, notes["processes"]
    commands = [c.split(" ", 1)[0] for c in notes["processes"].values()]
    assert set(commands) <= {"bwrap", "/sbin/docker-init", "python3"}, notes["processes"]
    assert not any("requests.jsonl" in f or "gateway.json" in f for f in notes["files"])
    assert record.outcome is Outcome.valid


@pytest.mark.parametrize("backend", BACKENDS)
def test_links_into_the_record_and_a_cgroup_escape_change_nothing(
        request: pytest.FixtureRequest, compose, backend: str) -> None:
    """Held: links from /output into ``<run>/model`` forge nothing; the agent stays in its
    cgroup (no ``cgroup.procs`` it can write, no cgroup2 mount)."""
    require_backend(request, backend)
    record, run_dir = _run(compose, backend, "planter")
    notes = json.loads((run_dir / "output" / "notes.json").read_text())
    assert notes["cgroup_before"] == notes["cgroup_after"], notes["cgroup_tries"]
    assert "written" not in notes["cgroup_tries"].values(), notes["cgroup_tries"]
    assert not str(notes["cgroup_tries"].get("mount", "")).startswith("rc=0")
    entries = read_requests(run_dir / "model" / "requests.jsonl")
    assert [e.status for e in entries] == [200]
    assert record.outcome is Outcome.valid and record.usage == entries[0].usage
    for link in (run_dir / "output").glob("link*"):
        assert not link.exists() or link.is_symlink()
