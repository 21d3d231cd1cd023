"""Whole runs with the audited tools: a stdlib agent, the policy, isolation, failing providers.

The agent is ``tests/tools/agents/tools_agent.py``, a ``harness=command`` agent with nothing
but the standard library that calls ``$SPU_TOOLS_URL``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spu.main import spec_from_config
from spu.runner import run_one
from spu.sandbox.local import LocalSandbox
from spu.schema import Outcome, RunRecord
from spu.tools.audit import AUDIT_FILE, read_audit
from spu.tracking.store import TrackingTarget, client_for, log_run
from spu.tracking.trajectories import read_trajectory
from tests.tools.conftest import write_corpus
from tests.tools.pages import LocalSite

pytestmark = pytest.mark.slow

AGENT = Path(__file__).parent / "agents" / "tools_agent.py"
TASK = "spu-aqyk"  # a shipped task whose answer key names its source DOI
SOURCE_URL = "https://corpus.test/source"
ADVERSARY = """#!/usr/bin/env python3
import json, os, urllib.error, urllib.request
seen = {}
target = os.environ["OTHER_RUN_TOOLS"]
try:
    seen["read_audit"] = open(os.path.join(target, "audit.jsonl")).read()[:100]
except OSError as exc:
    seen["read_audit"] = type(exc).__name__
port = os.environ["OTHER_RUN_PORT"]
for path in ("/mcp", "/", "/spu/mcp"):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream"})
    try:
        seen[path] = urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as exc:
        seen[path] = exc.code
    except OSError as exc:
        seen[path] = type(exc).__name__
json.dump(seen, open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "seen.json"), "w"))
"""


@pytest.fixture(autouse=True)
def bubblewrap() -> None:
    ok, why = LocalSandbox.available()
    if not ok:
        pytest.skip(f"the default sandbox (bubblewrap) cannot run here: {why}")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl", [
        {"url": "https://corpus.test/a", "title": "Buchwald-Hartwig amination overview",
         "text": "Palladium catalysed C-N cross-coupling of aryl halides with amines."},
        {"url": SOURCE_URL, "title": "Reading list",
         "text": "See https://doi.org/10.1126/science.aar5169 for additive yields."},
    ])


def run(compose, tmp_path: Path, *args: str, agent: Path = AGENT,
        overrides: tuple[str, ...] = ()) -> tuple[RunRecord, Path]:
    quoted = ",".join(json.dumps(a) for a in args)
    cfg = compose("harness=command", f"harness.entrypoint={agent}", f"harness.args=[{quoted}]",
                  "model=random", f"task={TASK}", "limits.time_s=300", "limits.gpus=0",
                  *overrides)
    record = run_one(spec_from_config(cfg))
    return record, tmp_path / "outputs" / "runs" / record.run_key


def answers(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "output" / "tool_answers.json").read_text())


def test_a_stdlib_agent_searches_and_fetches_and_everything_is_recorded(
        compose, tmp_path: Path, corpus: Path) -> None:
    record, run_dir = run(compose, tmp_path, "amine cross-coupling", SOURCE_URL,
                          overrides=(f"tools.corpus={corpus}",))
    assert record.outcome is Outcome.valid and record.scored
    got = answers(run_dir)
    assert [a["tool"] for a in got] == ["search", "fetch"] and not got[0]["is_error"]
    assert json.loads(got[0]["text"])[0]["url"] == "https://corpus.test/a"

    # run.json: the audited calls, the egress count, the exposure flag.
    assert record.audited_calls == 2
    assert record.requests_outside_tools == 1
    assert record.outside_destinations == ["downloads.invalid:80"]
    assert record.flagged_exposure and {h.kind for h in record.exposure_hits} == {"doi"}
    (hit,) = record.exposure_hits
    assert hit.tool == "mcp__spu__fetch" and hit.matched == "10.1126/science.aar5169"
    assert not record.policy_stopped and record.policy_stop is None

    # The audit log and the trajectory (built from it: the agent keeps none of its own).
    entries = list(read_audit(run_dir / "tools" / AUDIT_FILE))
    assert [(e.tool, e.status, e.exposure) for e in entries] == [
        ("search", "ok", []), ("fetch", "ok", ["doi"])]
    trajectory = read_trajectory(run_dir / "trajectory.jsonl.gz")
    calls = [c for s in trajectory.steps for c in s.tool_calls]
    assert [c.name for c in calls] == ["mcp__spu__search", "mcp__spu__fetch"]
    assert "doi.org/10.1126" in str(calls[1].output)
    assert record.tool_calls == 2 and record.web_fetches == 2

    # MLflow: metrics, tags and the audit log as an artifact.
    target = TrackingTarget(uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                            artifact_root=(tmp_path / "artifacts").as_uri(), experiment="t")
    run_id = log_run(record, run_dir, target)
    logged = client_for(target).get_run(run_id)
    assert logged.data.metrics["audited_calls"] == 2
    assert logged.data.metrics["requests_outside_tools"] == 1
    assert logged.data.metrics["web_fetches"] == 2
    assert logged.data.tags["flagged_exposure"] == "true"
    assert logged.data.tags["policy_stopped"] == "false"
    artifacts = {a.path for a in client_for(target).list_artifacts(run_id, "tools")}
    assert {"tools/audit.jsonl", "tools/egress.jsonl", "tools/calls"} <= artifacts


@pytest.mark.parametrize("policy", ["stop", "record"])
def test_the_source_doi_flags_the_run_and_stop_refuses_the_next_call(
        compose, tmp_path: Path, corpus: Path, policy: str) -> None:
    record, run_dir = run(compose, tmp_path, "amine", SOURCE_URL, "https://corpus.test/a",
                          overrides=(f"tools.corpus={corpus}", f"tools.policy={policy}"))
    got = answers(run_dir)
    assert record.flagged_exposure
    assert not got[1]["is_error"] and "10.1126/science.aar5169" in got[1]["text"]
    if policy == "stop":
        assert got[2]["is_error"] and "refused under the information policy" in got[2]["text"]
        assert record.outcome is Outcome.policy_stop and record.policy_stopped
        assert record.scored  # it left a valid file (paper 3.1)
        assert record.policy_stop is not None and record.policy_stop.by == "service"
        assert record.policy_stop.step == "audited call 1 (fetch)"
        run_json = json.loads((run_dir / "run.json").read_text())
        assert run_json["policy_stop"]["step"] == "audited call 1 (fetch)"
    else:
        assert not got[2]["is_error"] and "Buchwald" in got[2]["text"]
        assert record.outcome is Outcome.valid and not record.policy_stopped


def test_the_agents_policy_stop_is_the_outcome_with_its_step(compose, tmp_path: Path,
                                                             corpus: Path) -> None:
    record, run_dir = run(compose, tmp_path, "amine", "--stop", "step 3: search result",
                          overrides=(f"tools.corpus={corpus}",))
    assert record.outcome is Outcome.policy_stop and record.scored
    assert record.policy_stop is not None
    assert (record.policy_stop.by, record.policy_stop.step) == ("agent", "step 3: search result")
    assert record.policy_stop.reason == "a result named the source"
    assert record.score_recovered == record.score_strict


def test_a_run_cannot_read_or_call_another_runs_service(compose, tmp_path: Path,
                                                        corpus: Path) -> None:
    """The other run's log is not visible in the sandbox; its live service answers nothing
    without its secret (and, once sandboxes have their own network, is not reachable)."""
    _, first_dir = run(compose, tmp_path, "amine", overrides=(f"tools.corpus={corpus}",))
    # That run's service ended with it: stand in a live service of another run, writing
    # into the same folder, for the second run's agent to aim at.
    from spu.config import ToolsConfig
    from spu.tools.audit import AuditLog
    from spu.tools.service import ToolsService
    from spu.tools.session import make_provider

    cfg = ToolsConfig(corpus=str(corpus))
    other = ToolsService(make_provider(cfg), AuditLog(first_dir / "tools"), cfg).start()
    try:
        adversary = tmp_path / "adversary.py"
        adversary.write_text(ADVERSARY)
        _, run_dir = run(compose, tmp_path, agent=adversary, overrides=(
            f"tools.corpus={corpus}", "model=presented_order",
            f"+harness.env.OTHER_RUN_TOOLS={first_dir / 'tools'}",
            f"+harness.env.OTHER_RUN_PORT={other.port}"))
    finally:
        other.stop()
    seen = json.loads((run_dir / "output" / "seen.json").read_text())
    assert seen["read_audit"] in ("FileNotFoundError", "PermissionError")
    # Without the other run's secret its port answers nothing (or is unreachable).
    for path in ("/mcp", "/", "/spu/mcp"):
        assert seen[path] in (404, "URLError", "ConnectionRefusedError"), (path, seen)


def test_failing_providers_give_errors_or_cut_texts_and_the_run_finishes(
        compose, tmp_path: Path) -> None:
    site = LocalSite()
    dead = LocalSite()
    dead.kill()  # the search provider is down
    try:
        record, run_dir = run(
            compose, tmp_path, "amine", f"{site.url}/big", f"{site.url}/slow",
            f"{site.url}/latin1",
            overrides=("tools=web", f"tools.options.search_url={dead.url}",
                       "tools.allow_local_fetch=true",
                       "tools.fetch_timeout_s=3", "tools.search_timeout_s=3",
                       "tools.max_fetch_bytes=1000000"))
    finally:
        site.kill()
    assert record.outcome is Outcome.valid and record.audited_calls == 4
    got = answers(run_dir)
    assert got[0]["is_error"] and "search failed" in got[0]["text"]
    assert "cut at the size limit" in got[1]["text"]
    assert got[2]["is_error"] and "did not answer within 3 s" in got[2]["text"]
    assert "Café" in got[3]["text"]
