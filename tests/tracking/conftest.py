"""Fixtures for tracking tests: real runs (run_one) with outputs and MLflow in tmp_path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spu.config import EffortConfig, HarnessConfig, SandboxConfig
from spu.cost.catalogue import load_model_config
from spu.runner import RunSpec
from spu.schema import Outcome, RunRecord, SandboxInfo
from spu.tracking.store import TrackingTarget
from tests.conftest import EXAMPLE_TASK, have_bwrap

if TYPE_CHECKING:
    from spu.launch.server import TrackingServer
    from spu.testing.postgres import PrivatePostgres

SOURCE = {
    "doi": "10.1038/s41586-099-01234-5",
    "pmid": "39123456",
    "title": "Ligand-controlled selectivity in nickel-catalysed Suzuki coupling of heteroaryl "
             "chlorides",
}
"""A made-up source record for the example task's answer key."""

SESSION_REQUESTS = [
    # prompt 10,000 + 200,000 + 2,000 = 212,000 <= 272K: short-context rates
    {"input": 10_000, "cache_read": 200_000, "cache_write": 2_000, "output": 3_000},
    # prompt 20,000 + 250,000 + 30,000 = 300,000 > 272K: long-context rates
    {"input": 20_000, "cache_read": 250_000, "cache_write": 30_000, "output": 5_000},
    # prompt 1,500 + 260,000 = 261,500 <= 272K: short-context rates
    {"input": 1_500, "cache_read": 260_000, "cache_write": 0, "output": 800},
]
"""Per-request usage the session agent reports (priced with GPT-6.1 Sol's Table 7 rates)."""

SESSION_COST_USD = 0.467
"""GPT-6.1 Sol, USD per million tokens, short 2.00/0.10/2.50/10.00, long 4.00/0.20/5.00/15.00:
request 1: 0.01 x 2 + 0.2 x 0.1 + 0.002 x 2.5 + 0.003 x 10   = 0.02 + 0.02 + 0.005 + 0.03 = 0.075
request 2: 0.02 x 4 + 0.25 x 0.2 + 0.03 x 5 + 0.005 x 15     = 0.08 + 0.05 + 0.15 + 0.075 = 0.355
request 3: 0.0015 x 2 + 0.26 x 0.1 + 0 + 0.0008 x 10         = 0.003 + 0.026 + 0.008    = 0.037
total 0.075 + 0.355 + 0.037 = 0.467."""

SESSION_FULL_INPUT_COST_USD = 2.26
"""Every prompt token at the input price: 0.212 x 2 + 0.03 = 0.454; 0.3 x 4 + 0.075 = 1.275;
0.2615 x 2 + 0.008 = 0.531; total 2.26."""


def sandbox_name() -> str:
    """Bubblewrap where installed (the default backend), else the subprocess fallback."""
    return "local" if have_bwrap() else "subprocess"


@pytest.fixture
def answers_root(tmp_path: Path) -> Path:
    """An answer root whose key for the example task names a source study."""
    root = tmp_path / "answers"
    (root / EXAMPLE_TASK.name).mkdir(parents=True)
    key = json.loads((EXAMPLE_TASK / "hidden" / "answers.json").read_text())
    key["source"] = SOURCE
    (root / EXAMPLE_TASK.name / "answers.json").write_text(json.dumps(key))
    return root


@pytest.fixture
def target(tmp_path: Path) -> TrackingTarget:
    """MLflow on SQLite under tmp_path."""
    out = tmp_path / "outputs"
    return TrackingTarget(uri=f"sqlite:///{out / 'mlflow.db'}",
                          artifact_root=(out / "mlartifacts").as_uri(), experiment="test")


def session_spec(tmp_path: Path, answers_root: Path, *, cli_cost: float,
                 page: str, repeat: int = 0) -> RunSpec:
    """GPT-6.1 Sol's prices, run by the session agent on the example task."""
    return RunSpec(
        model=load_model_config("sol61"),
        harness=HarnessConfig(
            name="tests.tracking.session_harness:SessionHarness",
            args=["--usage", json.dumps(SESSION_REQUESTS), "--cli-cost", str(cli_cost)],
            env={"SESSION_PAGE": page},
        ),
        effort=EffortConfig(name="max"),
        task_dir=EXAMPLE_TASK,
        output_root=tmp_path / "outputs",
        answers_root=answers_root,
        sandbox=SandboxConfig(name=sandbox_name()),
        repeat=repeat,
    )


def make_record(**overrides: object) -> RunRecord:
    """A run record built by hand (for tracking tests that need no agent)."""
    fields: dict[str, object] = {
        "run_key": "0123456789abcdef", "task_id": "t", "task_version": "1.0",
        "discipline": "chemistry", "subfield": "catalysis", "visibility": "public",
        "model": "opus5", "harness": "claude_code", "effort": "max", "config": "opus5-max",
        "outcome": Outcome.valid, "scored": True, "score_strict": 0.5, "score_recovered": 0.5,
        "threshold": 0.6, "n_items": 8, "sandbox": SandboxInfo(backend="local"),
        "started_at": "2026-10-20T10:00:00+00:00", "finished_at": "2026-10-20T11:00:00+00:00",
    }
    fields.update(overrides)
    return RunRecord(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def postgres_server(postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[TrackingServer]:
    """``mlflow server`` on that cluster, as ``tracking=server`` runs it, for the session.

    Artifacts proxied, behind a token; each test logs into an experiment of its own.
    """
    from spu.launch.server import TrackingServer

    folder = tmp_path_factory.mktemp("pg-server")
    with TrackingServer(postgres.sqlalchemy_uri(), "", folder / "server.log",
                        artifacts_destination=(folder / "artifacts").as_uri()) as server:
        yield server


@pytest.fixture
def postgres_target(postgres_server: TrackingServer, request: pytest.FixtureRequest,
                    monkeypatch: pytest.MonkeyPatch) -> TrackingTarget:
    """A target on the session's PostgreSQL tracking server, in an experiment of its own."""
    for key, value in postgres_server.client_env().items():
        monkeypatch.setenv(key, value)
    return TrackingTarget(uri=postgres_server.uri,
                          artifact_root=postgres_server.client_artifact_root,
                          experiment=f"pg-{request.node.name}"[:200])
