"""The real Claude Code and Codex CLIs, in the default sandbox, against the scripted model.

These run the pinned CLIs (installed once from npm into the tools folder) inside
bubblewrap on the example task. They skip, saying why, where npm cannot install the
CLIs or bubblewrap cannot run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spu.grading.rules import grade_submission
from spu.harness.npm_tools import ToolInstallError, ensure_installed, tools_dir
from spu.main import spec_from_config
from spu.runner import run_one
from spu.sandbox.local import LocalSandbox
from spu.schema import Outcome, Usage
from spu.tasks import load_answers, load_task
from spu.testing import reported_usage
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


@pytest.fixture(scope="module")
def cli_tools() -> None:
    """The pinned CLIs installed, and a sandbox to run them in; else skip with the reason."""
    import yaml

    ok, why = LocalSandbox.available()
    if not ok:
        pytest.skip(f"the default sandbox (bubblewrap) cannot run here: {why}")
    for name in HARNESSES:
        cfg = yaml.safe_load((REPO / "conf" / "harness" / f"{name}.yaml").read_text())
        try:
            ensure_installed(cfg["cli_package"], str(cfg["cli_version"]),
                             tools_dir(cfg.get("tools_dir")))
        except ToolInstallError as exc:
            pytest.skip(f"the {name} CLI is not available: {exc}")


def presented_order_score() -> float:
    """The grader's score of the presented order (targets.csv) on the example task."""
    task = load_task(EXAMPLE_TASK)
    position = {row["experiment_id"]: k for k, row in enumerate(task.targets_rows())}
    submission = {"task_id": task.id, "task_version": task.version, "rankings": [
        {"group_id": g.group_id, "order": sorted(g.items, key=position.__getitem__)}
        for g in task.contract.groups]}
    answers = load_answers(task.answers_path())
    return grade_submission(task.contract, answers, json.dumps(submission).encode()).score


@pytest.mark.parametrize("harness", HARNESSES)
def test_main_runs_the_cli_offline_to_a_graded_tracked_run(cli_tools, harness: str,
                                                          tmp_path: Path) -> None:
    """``python -m spu.main harness=<h> model=scripted task=<task> tools.corpus=<corpus>``
    (the commands of issues 13 and 6): the default script lists the task, searches and
    fetches through the audited tools, ranks in presented order and writes a report."""
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", f"harness={harness}", "model=scripted",
                       f"task={EXAMPLE_TASK.name}", f"tools.corpus={EXAMPLE_CORPUS}",
                       f"output_root={out}"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == "valid" and record["scored"], record.get("process")
    assert record["harness"] == harness and record["sandbox"]["backend"] == "local"
    assert record["score_strict"] == pytest.approx(presented_order_score())
    assert (out / "mlflow.db").is_file()

    # The CLI asked only for the six turns of the script (no side requests).
    log = run_dir / "logs" / "scripted_server.jsonl"
    asked = [json.loads(line) for line in log.read_text().splitlines()]
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
def test_an_exposure_and_a_policy_stop_through_the_real_cli(cli_tools, compose, harness: str,
                                                           tmp_path: Path) -> None:
    """The ``policy_stop`` script on a shipped task whose source DOI is in the example
    corpus: the search result is flagged, the agent calls ``policy_stop`` after writing a
    provisional ranking; the run is ``policy_stop``, scored, with its step in run.json and
    MLflow."""
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


def _run(compose, harness: str, script: str, tmp_path: Path):
    cfg = compose(f"harness={harness}", "model=scripted", f"model.api_model={script}",
                  "effort=max", f"task={EXAMPLE_TASK.name}", "limits.time_s=300")
    record = run_one(spec_from_config(cfg))
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    return record, reported_usage(run_dir / "logs" / "scripted_server.jsonl")


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_provider_refusal_is_classified_with_its_label(cli_tools, compose, harness: str,
                                                         tmp_path: Path) -> None:
    record, served = _run(compose, harness, "refusal", tmp_path)
    assert record.outcome is Outcome.refusal and not record.scored
    assert record.refusal_label == "[bio]"
    assert record.usage == served


@pytest.mark.parametrize("harness", HARNESSES)
def test_an_api_error_is_an_infra_error(cli_tools, compose, harness: str,
                                        tmp_path: Path) -> None:
    record, _ = _run(compose, harness, "api_error", tmp_path)
    assert record.outcome is Outcome.infra_error and not record.scored
    # The CLI stopped at the error the script served; it did not wait out the limit.
    assert not record.process.timed_out
    log = tmp_path / "outputs" / "runs" / record.run_key / "logs" / "scripted_server.jsonl"
    asked = [json.loads(line) for line in log.read_text().splitlines()]
    assert ("POST", API_PATH[harness], "error", 400, 1) in [
        (a["request"]["method"], a["path"], a["kind"], a["status"], a["turn"]) for a in asked]
    # The reason is kept in the record.
    reasons = [n for n in record.notes if n.startswith("infra error: ")]
    assert len(reasons) == 1 and "API error" in reasons[0] and "400" in reasons[0], record.notes
