"""Round six: what the gateway keeps at a refusal, and whether an agent can spoil it.

Round five's fix keeps ``output/rankings.json`` as each refused request found it
(``model/refusal_files/``), the latest ``MAX_REFUSAL_FILES`` distinct ones, and grades the
latest kept file that counts when the run's final file does not. Whole runs through
``run_one`` (``harness=command``, ``model=scripted`` behind the real gateway) where an
agent is needed; otherwise the real gateway in front of a stand-in upstream that refuses
every request, reading a folder the test plants as the agent would.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import httpx
import pytest

from spu.gateway import read_requests
from spu.gateway.verdict import MAX_REFUSAL_FILES, files_at_refusals
from spu.grading.submission import read_submission
from spu.main import spec_from_config
from spu.runner import run_one
from spu.schema import Outcome
from tests.conftest import EXAMPLE_TASK
from tests.gateway_doubles import JsonProvider, gateway_before, stand_in
from tests.sandbox.conftest import require_backend

BACKENDS = [pytest.param("local", marks=pytest.mark.slow),  # a real sandbox
            pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow])]
FLUSHER = Path(__file__).parent / "agents" / "flusher.py"


def _run(compose, backend: str, script: Path, flushes: int):
    spec = spec_from_config(compose(
        "harness=command", f"harness.entrypoint={FLUSHER}", f"sandbox={backend}",
        f"task={EXAMPLE_TASK.name}", "model=scripted", f"model.api_model={script}",
        "limits.cpus=1", "limits.gpus=0", "limits.memory_gb=1", "limits.time_s=120"))
    spec = dataclasses.replace(spec, harness=dataclasses.replace(spec.harness,
                                                                 args=[str(flushes)]))
    record = run_one(spec)
    return record, spec.output_root / "runs" / record.run_key


def _script(tmp_path: Path, refusals: int) -> Path:
    script = tmp_path / "refuse_after_first.json"
    script.write_text(json.dumps({"name": "refuse_after_first", "turns": [
        {"text": "Ranked."}, *[{"refusal": "bio"}] * refusals]}))
    return script


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_refusal_after_the_file_then_removed_is_flagged(
        request: pytest.FixtureRequest, compose, backend: str, tmp_path: Path) -> None:
    """The baseline the flush below defeats: no flush, the kept file is graded."""
    require_backend(request, backend)
    record, run_dir = _run(compose, backend, _script(tmp_path, 1), 0)
    assert sum(e.refusal for e in read_requests(run_dir / "model" / "requests.jsonl")) == 1
    assert record.outcome is Outcome.refusal and record.refusal_after_file, record.notes


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_refusal_after_a_file_survives_a_flush_of_the_kept_files(
        request: pytest.FixtureRequest, compose, backend: str, tmp_path: Path) -> None:
    require_backend(request, backend)
    record, run_dir = _run(compose, backend, _script(tmp_path, 1 + MAX_REFUSAL_FILES),
                           MAX_REFUSAL_FILES)
    entries = read_requests(run_dir / "model" / "requests.jsonl")
    assert sum(e.refusal for e in entries) == 1 + MAX_REFUSAL_FILES  # the attack did its part
    assert not (run_dir / "output" / "rankings.json").exists()
    assert record.outcome is Outcome.refusal
    assert record.refusal_after_file, record.notes
    # Only the file that counts was kept: the others could not push it out.
    assert len(list((run_dir / "model" / "refusal_files").glob("*.json"))) == 1


ANSWER = {"id": "m1", "type": "message", "role": "assistant", "model": "m",
          "content": [], "stop_reason": "refusal",
          "stop_details": {"type": "refusal", "category": "bio"},
          "usage": {"input_tokens": 3, "output_tokens": 0}}


class _Refuses(JsonProvider):
    answer = ANSWER


def _refused_with(tmp_path: Path, plant: list) -> tuple[Path, list[bytes]]:
    """Before each refused request, ``plant[k](output)`` shapes the agent's folder."""
    output = tmp_path / "output"
    output.mkdir()
    with stand_in(_Refuses) as upstream, gateway_before(
            tmp_path / "model", upstream,
            read_submission=lambda: read_submission(output)) as gateway, \
            httpx.Client(trust_env=False, timeout=20) as client:
        for shape in plant:
            shape(output)
            said = client.post(gateway.url() + "/v1/messages",
                               headers={"x-api-key": gateway.token},
                               json={"model": "m", "max_tokens": 10,
                                     "messages": [{"role": "user", "content": "x"}]})
            assert said.status_code == 200 and said.json()["stop_reason"] == "refusal"
    assert all(e.refusal for e in read_requests(gateway.requests_path))
    return tmp_path / "model", files_at_refusals(tmp_path / "model")


def test_the_gateway_keeps_no_file_a_link_or_a_fifo_stands_for(tmp_path: Path) -> None:
    """A link to a file the agent may not write (here a host file with a secret), a link to
    a valid file of its own, a FIFO (opened for writing by no one: a blocking read would
    hang the gateway's event loop), a folder, a file no one may read: none is kept, as
    none is graded."""
    secret = tmp_path / "host_secret.json"
    secret.write_text('{"answer_key": "hidden"}')

    def link_to_host(out: Path) -> None:
        (out / "rankings.json").symlink_to(secret)

    def link_to_own(out: Path) -> None:
        (out / "rankings.json").unlink()
        (out / "real.json").write_text('{"rankings": []}')
        (out / "rankings.json").symlink_to(out / "real.json")

    def fifo(out: Path) -> None:
        (out / "rankings.json").unlink()
        os.mkfifo(out / "rankings.json")

    def folder(out: Path) -> None:
        (out / "rankings.json").unlink()
        (out / "rankings.json").mkdir()

    def unreadable(out: Path) -> None:
        (out / "rankings.json").rmdir()
        (out / "rankings.json").write_text('{"rankings": []}')
        (out / "rankings.json").chmod(0)

    model, kept = _refused_with(tmp_path, [link_to_host, link_to_own, fifo, folder, unreadable])
    if os.geteuid() == 0:  # root reads a mode-0 file, as the grader then does
        assert kept == [b'{"rankings": []}']
    else:
        assert kept == []
    assert not any(b"hidden" in k for k in kept)


def test_the_kept_files_stay_few_and_small_however_many_refusals(tmp_path: Path) -> None:
    """A distinct file of 1 MiB at each of 40 refusals: the folder holds the latest
    ``MAX_REFUSAL_FILES``, each at most the grader's 1 MiB and a byte; the gateway holds
    one hash per distinct file kept (bounded by the refusals, which the spend cap bounds)."""
    def big(k: int):
        def shape(out: Path) -> None:
            (out / "rankings.json").write_bytes(str(k).encode() * (1 << 21))
        return shape

    model, kept = _refused_with(tmp_path, [big(k % 10) for k in range(40)])
    assert len(kept) == MAX_REFUSAL_FILES
    assert all(len(k) <= (1 << 20) + 1 for k in kept)
    assert len(list((model / "refusal_files").iterdir())) == MAX_REFUSAL_FILES
