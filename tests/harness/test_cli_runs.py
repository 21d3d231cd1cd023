"""The real Claude Code and Codex CLIs, in the default sandbox, against the scripted model.

These run the CLIs (installed once from npm into the tools folder) inside bubblewrap on
the example task, at two versions each: the paper's (Claude Code 2.1.260, Codex 0.156.1,
the defaults of ``conf/harness/``) and the newest published when this was written
(``npm view @anthropic-ai/claude-code version``, ``npm view @openai/codex version``;
``SPU_NEWEST_CLAUDE_CODE`` / ``SPU_NEWEST_CODEX`` name later ones). They skip, saying
why, where npm cannot install a CLI or bubblewrap cannot run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spu.grading.rules import grade_submission
from spu.harness.npm_tools import ToolInstallError, ensure_installed, tools_dir
from spu.main import spec_from_config
from spu.runner import run_one
from spu.sandbox.local import LocalSandbox
from spu.schema import Outcome, Usage
from spu.scripted import reported_usage
from spu.tasks import load_answers, load_task
from spu.tools.audit import read_audit
from spu.tracking.trajectories import read_trajectory
from tests.conftest import EXAMPLE_TASK, REPO, run_module

pytestmark = [pytest.mark.slow, pytest.mark.cli]

HARNESSES = ("claude_code", "codex")
SHELL_TOOL = {"claude_code": "Bash", "codex": "exec_command"}
API_PATH = {"claude_code": "/v1/messages", "codex": "/v1/responses"}
MCP_OFFERED = {"claude_code": {"mcp__spu__search", "mcp__spu__fetch", "mcp__spu__policy_stop"},
               "codex": {"mcp__spu"}}
"""How each CLI offers the audited tools (Codex: one namespace holding the three)."""
BUILTIN_WEB_TOOLS = {"WebSearch", "WebFetch", "web_search", "web_fetch"}
EXAMPLE_CORPUS = REPO / "examples" / "tools_corpus.jsonl"
PAPER_VERSION = {"claude_code": "2.1.260", "codex": "0.156.1"}
"""The versions the paper ran (section 3.1), the defaults of conf/harness/."""
NEWEST_VERSION = {"claude_code": os.environ.get("SPU_NEWEST_CLAUDE_CODE", "2.1.332"),
                  "codex": os.environ.get("SPU_NEWEST_CODEX", "0.171.0")}
"""The newest published versions (npm view ... version) when these tests were written."""
CASES = [pytest.param(h, v, id=f"{h}-{v}")
         for h in HARNESSES for v in dict.fromkeys((PAPER_VERSION[h], NEWEST_VERSION[h]))]


def _harness_config(name: str) -> dict:
    import yaml

    return yaml.safe_load((REPO / "conf" / "harness" / f"{name}.yaml").read_text())


def test_the_default_pins_are_the_papers_versions() -> None:
    """The paper ran Claude Code 2.1.260 and Codex 0.156.1: those are the defaults."""
    for name, version in PAPER_VERSION.items():
        assert str(_harness_config(name)["version"]) == version


@pytest.fixture(scope="module")
def sandbox_ok() -> None:
    ok, why = LocalSandbox.available()
    if not ok:
        pytest.skip(f"the default sandbox (bubblewrap) cannot run here: {why}")


def cli_installed(harness: str, version: str) -> None:
    """Install ``harness``'s CLI at ``version`` (once), or skip saying why."""
    cfg = _harness_config(harness)
    try:
        ensure_installed(cfg["cli_package"], version, tools_dir(cfg.get("tools_dir")))
    except ToolInstallError as exc:
        pytest.skip(f"the {harness} CLI {version} is not available: {exc}")


def presented_order_score() -> float:
    """The grader's score of the presented order (targets.csv) on the example task."""
    task = load_task(EXAMPLE_TASK)
    position = {row["experiment_id"]: k for k, row in enumerate(task.targets_rows())}
    submission = {"task_id": task.id, "task_version": task.version, "rankings": [
        {"group_id": g.group_id, "order": sorted(g.items, key=position.__getitem__)}
        for g in task.contract.groups]}
    answers = load_answers(task.answers_path())
    return grade_submission(task.contract, answers, json.dumps(submission).encode()).score


@pytest.mark.parametrize(("harness", "version"), CASES)
def test_main_runs_the_cli_offline_to_a_graded_tracked_run(sandbox_ok, harness: str,
                                                          version: str, tmp_path: Path) -> None:
    """``python -m spu.main harness=<h> model=scripted task=<task> tools.corpus=<corpus>``
    (the commands of issues 13 and 6): the default script lists the task, searches and
    fetches through the audited tools, ranks in presented order and writes a report."""
    cli_installed(harness, version)
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", f"harness={harness}", "model=scripted",
                       f"task={EXAMPLE_TASK.name}", f"tools.corpus={EXAMPLE_CORPUS}",
                       f"output_root={out}", f"harness.version={version}"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "valid" and record["scored"], record.get("process")
    assert record["harness"] == harness and record["sandbox"]["backend"] == "local"
    assert record["cli_version"] == version
    assert record["score_strict"] == pytest.approx(presented_order_score())
    assert (out / "mlflow.db").is_file()

    # The CLI asked only for the six turns of the script (no side requests); the one
    # request before them is the framework's API key check (the model list).
    log = run_dir / "logs" / "scripted_server.jsonl"
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(a["request"]["method"], a["path"]) for a in logged if a["kind"] != "script"] == [
        ("GET", "/v1/models")]
    asked = [a for a in logged if a["kind"] == "script"]
    assert [(a["request"]["method"], a["path"], a["kind"], a["turn"]) for a in asked] == [
        ("POST", API_PATH[harness], "script", turn) for turn in range(6)]
    # The audited tools are offered to the model, the CLI's own web tools are not.
    for request in asked:
        offered = set(request["request"]["tools"])
        assert MCP_OFFERED[harness] <= offered, offered
        assert not offered & BUILTIN_WEB_TOOLS, offered & BUILTIN_WEB_TOOLS

    # Usage equals what the server reported, bucket by bucket.
    served = reported_usage(log)
    assert Usage(**record["usage"]) == served
    assert served.input > 0 and served.cache_read > 0 and served.cache_write > 0
    assert served.output > 0

    # The trajectory holds the tool calls and their outputs, the audited ones by name.
    trajectory = read_trajectory(run_dir / "trajectory.jsonl.gz")
    assert trajectory.harness == harness and trajectory.usage == served
    calls = [c for s in trajectory.steps for c in s.tool_calls]
    shell = SHELL_TOOL[harness]
    assert [c.name for c in calls] == [shell, "mcp__spu__search", "mcp__spu__fetch", shell,
                                       shell]
    assert "contract.json" in (calls[0].output or "")
    assert "corpus.spu.invalid/citations/cn-coupling-machine-learning" in (calls[1].output or "")
    assert "Ranking experiments by a measured outcome" in (calls[2].output or "")
    assert "ranked 1 group(s)" in (calls[3].output or "")
    assert record["tool_calls"] == 5 and record["web_fetches"] == 2

    # The audit log and run.json agree with the trajectory; the egress log exists.
    entries = list(read_audit(run_dir / "tools" / "audit.jsonl"))
    assert [(e.tool, e.status) for e in entries] == [("search", "ok"), ("fetch", "ok")]
    assert record["audited_calls"] == 2 and not record["policy_stopped"]
    assert record["requests_outside_tools"] == 0
    assert (run_dir / "tools" / "egress.jsonl").is_file()
    if harness == "claude_code":
        assert record["cli_cost_usd"] > 0
        assert trajectory.usage.cache_write_1h > 0


@pytest.mark.parametrize("harness", HARNESSES)
def test_an_exposure_and_a_policy_stop_through_the_real_cli(sandbox_ok, compose, harness: str,
                                                           tmp_path: Path) -> None:
    """The ``policy_stop`` script on a shipped task whose source DOI is in the example
    corpus: the search result is flagged, the agent calls ``policy_stop`` after writing a
    provisional ranking; the run is ``policy_stop``, scored, with its step in run.json and
    MLflow."""
    cli_installed(harness, PAPER_VERSION[harness])
    cfg = compose(f"harness={harness}", "model=scripted", "model.api_model=policy_stop",
                  "effort=max", "task=spu-aqyk", f"tools.corpus={EXAMPLE_CORPUS}",
                  "limits.time_s=300")
    record = run_one(spec_from_config(cfg))
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    assert record.outcome is Outcome.policy_stop and record.scored
    assert record.policy_stop is not None
    assert (record.policy_stop.by, record.policy_stop.step) == ("agent", "search 1")
    assert record.flagged_exposure
    assert {(h.kind, h.tool) for h in record.exposure_hits} == {("doi", "mcp__spu__search")}
    calls = [c for s in read_trajectory(run_dir / "trajectory.jsonl.gz").steps
             for c in s.tool_calls]
    assert [c.name for c in calls if c.name.startswith("mcp__")] == [
        "mcp__spu__search", "mcp__spu__policy_stop"]
    assert "Policy stop recorded" in str(calls[-1].output)
    assert record.audited_calls == 2

    from spu.tracking.store import TrackingTarget, client_for, log_run

    target = TrackingTarget(uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                            artifact_root=(tmp_path / "artifacts").as_uri(), experiment="t")
    logged = client_for(target).get_run(log_run(record, run_dir, target))
    assert logged.data.tags["outcome"] == "policy_stop"
    assert logged.data.tags["policy_stopped"] == "true"
    assert logged.data.tags["policy_stop_step"] == "search 1"
    assert logged.data.tags["flagged_exposure"] == "true"
    assert logged.data.metrics["audited_calls"] == 2


def _run(compose, harness: str, script: str, tmp_path: Path, version: str | None = None):
    version = version or PAPER_VERSION[harness]
    cli_installed(harness, version)
    cfg = compose(f"harness={harness}", "model=scripted", f"model.api_model={script}",
                  "effort=max", f"task={EXAMPLE_TASK.name}", "limits.time_s=300",
                  f"harness.version={version}")
    record = run_one(spec_from_config(cfg))
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    return record, reported_usage(run_dir / "logs" / "scripted_server.jsonl")


@pytest.mark.parametrize(("harness", "version"), CASES)
def test_a_provider_refusal_is_classified_with_its_label(sandbox_ok, compose, harness: str,
                                                         version: str, tmp_path: Path) -> None:
    record, served = _run(compose, harness, "refusal", tmp_path, version)
    assert record.outcome is Outcome.refusal and not record.scored
    assert record.refusal_label == "[bio]"
    assert record.usage == served


@pytest.mark.parametrize(("harness", "version"), CASES)
def test_a_400_for_the_clis_request_is_no_infra_error(sandbox_ok, compose, harness: str,
                                                      version: str, tmp_path: Path) -> None:
    """A 400 for the CLI's request is the request's fault, not the provider's (issue 23).

    The gateway cannot tell the CLI's request from one the agent sent to choose its
    outcome, so only provider failures (5xx, 429/529, 401, a dropped stream) make an
    ``infra_error``; the CLI's own claim of an API error is named as a disagreement.
    """
    record, _ = _run(compose, harness, "api_error", tmp_path, version)
    assert record.outcome is Outcome.no_file and not record.scored
    # The CLI stopped at the error the script served; it did not wait out the limit.
    assert not record.process.timed_out
    log = tmp_path / "outputs" / "runs" / record.run_key / "logs" / "scripted_server.jsonl"
    asked = [json.loads(line) for line in log.read_text().splitlines()]
    assert ("POST", API_PATH[harness], "error", 400, 1) in [
        (a["request"]["method"], a["path"], a["kind"], a["status"], a["turn"]) for a in asked]
    # The gateway's record holds the answer; the CLI's claim is the disagreement.
    requests = (tmp_path / "outputs" / "runs" / record.run_key / "model" / "requests.jsonl")
    assert 400 in [json.loads(line)["status"] for line in requests.read_text().splitlines()]
    assert record.evidence_disagreement and "error" in record.evidence_disagreement


def _server_log(out: Path) -> list[dict]:
    (run_dir,) = (out / "runs").iterdir()
    return [json.loads(line) for line in
            (run_dir / "logs" / "scripted_server.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_key_the_provider_rejects_ends_the_run_with_its_message(sandbox_ok, harness: str,
                                                                  tmp_path: Path) -> None:
    """Issue 14 item 6: a wrong key is ``infra_error`` with the provider's message at once.

    The scripted server answers 401 to every request, as a provider does for a wrong
    key: the key check before the agent starts gets the provider's message, and the CLI
    (which would retry for minutes) never starts.
    """
    cli_installed(harness, PAPER_VERSION[harness])
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", "experiment=single", f"harness={harness}", "model=scripted",
                       "model.api_model=rejected_key", f"task={EXAMPLE_TASK.name}",
                       f"output_root={out}", "tracking=none", "sweep.retries=0"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "infra_error"
    provider = {"claude_code": "authentication_error: invalid x-api-key",
                "codex": "Incorrect API key provided"}[harness]
    assert "rejected the key" in record["process"]["error"]
    assert provider in record["process"]["error"]
    assert provider in proc.stdout + proc.stderr  # on the console
    assert [(a["request"]["method"], a["status"]) for a in _server_log(out)] == [("GET", 401)]
    assert not (run_dir / "logs" / "agent.stdout").exists()


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_key_rejected_mid_run_stops_the_cli_before_its_retries(sandbox_ok, harness: str,
                                                                 tmp_path: Path) -> None:
    """The key lists models but every generation gets 401: the monitor sees the CLI's
    retries, says so on the console within 30 s of the start, and stops the CLI after the
    second rejection (Claude Code would retry ten times over three minutes)."""
    from datetime import datetime, timedelta

    cli_installed(harness, PAPER_VERSION[harness])
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", "experiment=single", f"harness={harness}", "model=scripted",
                       "model.api_model=auth_error", f"task={EXAMPLE_TASK.name}",
                       f"output_root={out}", "tracking=none", "sweep.retries=0"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "infra_error" and not record["process"]["timed_out"]
    reasons = [n for n in record["notes"] if "rejected the API key (HTTP 401)" in n]
    assert reasons, record["notes"]
    posts = [a for a in _server_log(out) if a["request"]["method"] == "POST"]
    assert 2 <= len(posts) < 10, len(posts)
    console = proc.stdout + proc.stderr
    warning = next(line for line in console.splitlines() if "API error 401, 2 times" in line)
    said = datetime.strptime(warning[1:24], "%Y-%m-%d %H:%M:%S,%f")
    # Said live, while the CLI was still retrying (not read from the log afterwards): the
    # monitor reports the second error as it happens (no timed assertion here: the CLI's
    # own back-off and the machine's load set how many seconds that takes).
    finished = datetime.fromisoformat(record["finished_at"]).astimezone().replace(tzinfo=None)
    # finished_at is written to the second: the warning may fall within that second.
    assert said < finished + timedelta(seconds=1), (warning, record["finished_at"])
