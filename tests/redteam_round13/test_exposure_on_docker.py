"""E1-E3 of issue 41 replayed on Docker (``tests/gateway/test_exposure_runs.py`` runs them
on bubblewrap, the default sandbox): the agent sends the task's source DOI to its model
through the run's gateway, as a PDF, in halves, past 65,536 characters, in homoglyphs
with zero-width spaces, and after the tool results' record is full."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spu.schema import Outcome
from tests.gateway.sent_documents import DOI
from tests.gateway.test_exposure_runs import ATTACKS, _body, _run
from tests.sandbox.conftest import docker_engine, require_backend  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_docker_run_whose_model_was_sent_the_source_is_flagged(
        request: pytest.FixtureRequest, compose, tmp_path: Path, attack: str) -> None:
    require_backend(request, "docker")
    record = _run(compose, tmp_path, ATTACKS[attack], "sandbox=docker")
    assert record.outcome is Outcome.valid, (record.process, record.notes)
    assert record.flagged_exposure, attack
    assert {h.kind for h in record.exposure_hits} >= {"doi"}
    assert not record.screen_incomplete, record.notes


def test_a_docker_run_past_the_records_cap_says_its_screen_is_incomplete(
        request: pytest.FixtureRequest, compose, tmp_path: Path) -> None:
    require_backend(request, "docker")
    filler = ["z" * 1900, "w" * 1900]
    record = _run(compose, tmp_path, [_body(*filler), _body(*filler, f"doi {DOI}" + " " * 400)],
                  "sandbox=docker", "model_gateway.tool_results_mb=0.00390625")
    assert record.outcome is Outcome.valid, (record.process, record.notes)
    assert record.screen_incomplete
    saved = json.loads((tmp_path / "outputs" / "runs" / record.run_key / "run.json")
                       .read_text())
    assert saved["screen_incomplete"] is True
