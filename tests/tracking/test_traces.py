"""Issue 25: each recorded run's trajectory is an MLflow trace linked to its run, and a
``transcript.html`` artifact, both read from the run folder (MLflow on SQLite)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spu.config import TracesConfig
from spu.schema import GatewayRequest, RunRecord, Usage
from spu.testing.corpus import make_corpus
from spu.tracking.store import TrackingTarget, log_run
from spu.tracking.trajectories import iter_steps
from tests.conftest import EXAMPLE_TASK, REPO, run_module
from tests.harness.test_cli_runs import sandbox_ok  # noqa: F401 (a fixture)
from tests.launchers.conftest import sandbox_name
from tests.tracking.devtools import find_browser


def _corpus(tmp_path: Path) -> list[Path]:
    """Two runs: one from the recorded Claude Code session, one from the Codex session."""
    folders = make_corpus(tmp_path / "outputs", 7, task_root=REPO / "tasks", calls=12, seed=3)
    by_harness = {}
    for f in folders:
        record = RunRecord.model_validate_json((f / "run.json").read_text())
        by_harness.setdefault(record.harness, f)
    assert set(by_harness) == {"claude_code", "codex"}
    return list(by_harness.values())


def _traces(target: TrackingTarget, run_id: str | None) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=target.uri)
    exp = client.get_experiment_by_name(target.experiment).experiment_id
    return client.search_traces(locations=[exp], run_id=run_id)


def _record(folder: Path) -> RunRecord:
    return RunRecord.model_validate_json((folder / "run.json").read_text())


def _usage_of(span) -> dict | None:
    return span.attributes.get("spu.usage")


def test_each_recorded_run_has_one_trace_with_a_span_per_tool_call_and_turn(
        tmp_path, target) -> None:
    """One trace per run, linked to it; one TOOL span per tool call of the trajectory; the
    usage of each model turn is the trajectory's, bucket by bucket; tags searchable."""
    import mlflow

    from spu.internals import mlflow_tracking_uri

    for folder in _corpus(tmp_path):
        record = _record(folder)
        run_id = log_run(record, folder, target)
        traces = _traces(target, run_id)
        assert len(traces) == 1
        trace = traces[0]
        assert trace.info.request_metadata["mlflow.sourceRun"] == run_id
        assert trace.info.tags["run_key"] == record.run_key
        assert trace.info.tags["task_id"] == record.task_id
        assert trace.info.tags["config"] == record.config
        assert trace.info.tags["outcome"] == "valid"
        steps = list(iter_steps(folder / "trajectory.jsonl.gz"))
        calls = [c.name for s in steps for c in s.tool_calls]
        tools = [s for s in trace.data.spans if s.span_type == "TOOL"]
        assert [s.name for s in sorted(tools, key=lambda s: (s.start_time_ns,
                                                            s.attributes["spu.step"]))] == calls
        turns = [s for s in trace.data.spans if s.span_type == "CHAT_MODEL"]
        expected = [s.usage.model_dump() for s in steps
                    if s.role == "assistant" and s.usage is not None]
        got = [_usage_of(t) for t in sorted(turns, key=lambda t: t.attributes["spu.step"])
               if _usage_of(t) is not None]
        assert got == expected and expected
        root = next(s for s in trace.data.spans if s.parent_id is None)
        assert root.span_type == "AGENT" and root.inputs["task_id"] == record.task_id
        assert root.outputs["rankings"]["task_id"] == record.task_id
        # the spans lie within the run, at the trajectory's own times
        assert all(root.start_time_ns <= s.start_time_ns <= s.end_time_ns <= root.end_time_ns
                   for s in trace.data.spans)
        audited = [s for s in trace.data.spans if s.span_type == "RETRIEVER"]
        audit_lines = (folder / "tools" / "audit.jsonl").read_text().splitlines()
        assert len(audited) == len([line for line in audit_lines if line.strip()])
    with mlflow_tracking_uri(target.uri):  # the UI's trace search, by tag
        found = mlflow.search_traces(locations=[_experiment(target)],
                                     filter_string="tag.harness = 'codex'", return_type="list")
    assert len(found) == 1


def test_tool_spans_carry_the_activity_and_method_families_spu_analyze_gives(
        tmp_path, target) -> None:
    """Each tool span has the paper's activity label and the method families it credits
    (E.7), the same as ``spu analyze`` reads from the run folder, call by call."""
    from spu.analysis.runs import read_run

    folders = make_corpus(tmp_path / "outputs", 6, task_root=REPO / "tasks", calls=30, seed=5)
    activities, families = set(), set()
    for folder in folders:
        run_id = log_run(_record(folder), folder, target)
        (trace,) = _traces(target, run_id)
        tools = sorted((s for s in trace.data.spans if s.span_type == "TOOL"),
                       key=lambda s: s.attributes["spu.step"])
        got = [(s.name, s.attributes["spu.activity"], ";".join(s.attributes[
            "spu.method_families"])) for s in tools]
        expected = [(c.tool, c.activity, c.families) for c in read_run(folder).calls]
        assert got == expected
        activities.update(a for _, a, _ in got)
        families.update(f for _, _, f in got if f)
    assert len(activities) >= 4 and families  # the corpus runs scripts of method families


def test_spans_in_the_store_are_found_by_span_search_and_in_traces_json_by_tag(
        tmp_path, target) -> None:
    """``tracking.traces.spans=store`` writes the span table, so a span filter finds the
    trace; the default keeps the spans in the trace's ``traces.json`` artifact, read back
    span for span, and its trace is found by tag (a span filter does not see it)."""
    import mlflow

    from spu.internals import mlflow_tracking_uri

    folder = _corpus(tmp_path)[0]
    record = _record(folder)
    first = next(c.name for s in iter_steps(folder / "trajectory.jsonl.gz") for c in s.tool_calls)
    traces = {}
    for spans in ("artifact", "store"):
        where = dataclasses.replace(target, experiment=f"test-{spans}",
                                    traces=TracesConfig(spans=spans))
        run_id = log_run(record, folder, where)
        (traces[spans],) = _traces(where, run_id)
        with mlflow_tracking_uri(target.uri):
            by_span = mlflow.search_traces(locations=[_experiment(where)], return_type="list",
                                           filter_string=f"span.name = '{first}'")
            by_tag = mlflow.search_traces(locations=[_experiment(where)], return_type="list",
                                          filter_string=f"tag.run_key = '{record.run_key}'")
        assert len(by_tag) == 1
        assert len(by_span) == (1 if spans == "store" else 0)

    def shape(trace) -> list:
        return sorted((s.name, s.span_type, s.start_time_ns, s.end_time_ns,
                       s.attributes.get("spu.activity")) for s in trace.data.spans)

    assert shape(traces["artifact"]) == shape(traces["store"])
    artifact = traces["artifact"].info.tags["mlflow.artifactLocation"]
    assert Path(artifact.removeprefix("file://"), "traces.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("spans", ["artifact", "store"])
def test_traces_are_logged_and_searchable_on_the_postgresql_tracking_server(
        tmp_path, postgres_target, spans) -> None:
    """On ``mlflow server`` over PostgreSQL (artifacts proxied, a token), each recorded run
    has its trace: ``mlflow.search_traces`` finds it by tag, linked to the run, with one tool
    span per tool call carrying its activity label, whichever way the spans are written."""
    import mlflow

    from spu.internals import mlflow_tracking_uri

    target = dataclasses.replace(postgres_target, traces=TracesConfig(spans=spans))
    for folder in _corpus(tmp_path):
        record = _record(folder)
        run_id = log_run(record, folder, target)
        # As a user of the server does: its URI the current tracking URI (MLflow's client
        # reads a trace's traces.json from the server's artifact proxy by that URI).
        with mlflow_tracking_uri(target.uri):
            found = mlflow.search_traces(locations=[_experiment(target)], return_type="list",
                                         filter_string=f"tag.run_key = '{record.run_key}'")
            assert len(_traces(target, run_id)) == 1
        (trace,) = found
        assert trace.info.request_metadata["mlflow.sourceRun"] == run_id
        assert trace.info.tags["outcome"] == "valid"
        assert trace.info.tags["mlflow.trace.spansLocation"] == (
            "TRACKING_STORE" if spans == "store" else "ARTIFACT_REPO")
        calls = [c.name for s in iter_steps(folder / "trajectory.jsonl.gz") for c in s.tool_calls]
        tools = sorted((s for s in trace.data.spans if s.span_type == "TOOL"),
                       key=lambda s: s.attributes["spu.step"])
        assert [s.name for s in tools] == calls and calls
        assert all(s.attributes["spu.activity"] for s in tools)


def _experiment(target: TrackingTarget) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=target.uri)
    return client.get_experiment_by_name(target.experiment).experiment_id


def test_a_gateway_record_gives_the_usage_of_each_model_request(tmp_path, target) -> None:
    """With ``model/requests.jsonl``, the usage spans are the gateway's requests, bucket by
    bucket (a ``count_tokens`` request is no model turn), and the turns carry none."""
    folder = _corpus(tmp_path)[0]
    buckets = [Usage(input=10, cache_read=2000, cache_write=300, cache_write_1h=100, output=40),
               Usage(input=5, cache_read=2300, output=90)]
    lines = [GatewayRequest(time="2026-11-01T00:00:01+00:00", endpoint="messages", status=200,
                            latency_s=1.5, usage=u) for u in buckets]
    lines.insert(1, GatewayRequest(time="2026-11-01T00:00:02+00:00", endpoint="count_tokens",
                                   status=200))
    (folder / "model").mkdir()
    (folder / "model" / "requests.jsonl").write_text(
        "".join(line.model_dump_json() + "\n" for line in lines))
    run_id = log_run(_record(folder), folder, target)
    (trace,) = _traces(target, run_id)
    with_usage = [s for s in trace.data.spans if _usage_of(s) is not None and s.parent_id]
    assert [s.span_type for s in with_usage] == ["LLM", "LLM"]
    assert [_usage_of(s) for s in sorted(with_usage, key=lambda s: s.start_time_ns)] == \
        [u.model_dump() for u in buckets]
    assert trace.info.token_usage["input_tokens"] == 10 + 2000 + 300 + 5 + 2300


def test_a_corpus_with_run_files_is_the_same_corpus_with_what_run_one_leaves_beside(
        tmp_path, target) -> None:
    """``make_corpus(run_files=True)`` (what trace_bench records) adds the CLI's output, the
    gateway's record (a SPEC 11 line per model turn, with the turn's usage), the tools'
    answers (hashed as their audit lines say) and ``grade.json`` (the score of
    ``run.json``), and changes nothing else: its trace has an LLM span per request."""
    import gzip
    import hashlib

    from spu.schema import AuditEntry

    bare = make_corpus(tmp_path / "bare", 7, task_root=REPO / "tasks", calls=12, seed=3)
    full = make_corpus(tmp_path / "full", 7, task_root=REPO / "tasks", calls=12, seed=3,
                       run_files=True)
    for b, f in zip(bare, full, strict=True):
        for name in ("run.json", "output/rankings.json", "output/report.md"):
            assert (b / name).read_bytes() == (f / name).read_bytes()
        assert gzip.decompress((b / "trajectory.jsonl.gz").read_bytes()) == \
            gzip.decompress((f / "trajectory.jsonl.gz").read_bytes())
    folder = max(full, key=lambda f: len((f / "tools" / "audit.jsonl").read_text()))
    record = _record(folder)
    turns = [s for s in iter_steps(folder / "trajectory.jsonl.gz")
             if s.role == "assistant" and s.usage is not None]
    requests = [GatewayRequest.model_validate_json(line) for line in
                (folder / "model" / "requests.jsonl").read_text().splitlines()]
    assert [r.usage for r in requests] == [s.usage for s in turns] and len(turns) > 5
    assert (folder / "logs" / "agent.stdout").stat().st_size > 0
    audits = [AuditEntry.model_validate_json(line) for line in
              (folder / "tools" / "audit.jsonl").read_text().splitlines()]
    assert audits and [a.call for a in audits] == list(range(len(audits)))
    for a in audits:
        data = (folder / "tools" / (a.text_file or "")).read_bytes()
        assert hashlib.sha256(data).hexdigest() == a.text_sha256
    grade = json.loads((folder / "grade.json").read_text())
    assert grade["strict"]["score"] == pytest.approx(record.score_strict)
    run_id = log_run(record, folder, target)
    (trace,) = _traces(target, run_id)
    assert sum(s.span_type == "LLM" for s in trace.data.spans) == len(requests)


def test_long_texts_and_many_spans_are_cut_with_a_note(tmp_path, target) -> None:
    """Each span's text stops at ``max_chars`` with a note; spans past ``max_spans`` are
    counted on the root span."""
    folder = _corpus(tmp_path)[0]
    capped = dataclasses.replace(target, traces=TracesConfig(max_chars=50, max_spans=5))
    run_id = log_run(_record(folder), folder, capped)
    (trace,) = _traces(capped, run_id)
    assert len(trace.data.spans) == 5
    root = next(s for s in trace.data.spans if s.parent_id is None)
    assert "left out past tracking.traces.max_spans=5" in root.outputs["note"]
    assert root.attributes["spu.spans_left_out"] > 0
    texts = [json.dumps(s.outputs) for s in trace.data.spans if s.parent_id]
    assert any("characters cut; the whole text is in trajectory.jsonl.gz" in t for t in texts)


def test_traces_off_log_neither_trace_nor_transcript(tmp_path, target) -> None:
    """``tracking.traces.enabled=false``: the run is recorded without trace or transcript."""
    folder = _corpus(tmp_path)[0]
    off = dataclasses.replace(target, traces=TracesConfig(enabled=False))
    run_id = log_run(_record(folder), folder, off)
    assert _traces(off, run_id) == []
    from mlflow.tracking import MlflowClient

    names = [a.path for a in MlflowClient(tracking_uri=off.uri).list_artifacts(run_id)]
    assert "transcript.html" not in names and "run.json" in names


def test_a_trace_that_cannot_be_written_leaves_the_run_recorded(tmp_path, target,
                                                                 caplog) -> None:
    """A trajectory cut short (unreadable gzip) fails the trace, not the run: the MLflow run
    is FINISHED with its tags, and one warning line names the run and what went wrong."""
    folder = _corpus(tmp_path)[0]
    data = (folder / "trajectory.jsonl.gz").read_bytes()
    (folder / "trajectory.jsonl.gz").write_bytes(data[: len(data) // 2])
    record = _record(folder)
    with caplog.at_level(logging.WARNING, logger="spu.tracking.traces"):
        run_id = log_run(record, folder, target)
    from mlflow.tracking import MlflowClient

    run = MlflowClient(tracking_uri=target.uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["outcome"] == "valid"
    (line,) = [r.getMessage() for r in caplog.records if "trace was not logged" in
               r.getMessage()]
    assert record.run_key in line and "\n" not in line


def test_spans_that_cannot_be_written_leave_no_half_trace(tmp_path, target, caplog) -> None:
    """A ``traces.json`` the artifact store refuses (its folder is a file) leaves the run
    recorded, says so in one line, and leaves no trace without spans, so ``spu runs
    log-traces`` adds the trace once the store takes it."""
    from mlflow.tracking import MlflowClient

    from spu.tracking.traces import backfill_traces

    target = dataclasses.replace(target, experiment="spu-test")  # log-traces reads spu-*
    first, second = _corpus(tmp_path)
    log_run(_record(first), first, target)
    client = MlflowClient(tracking_uri=target.uri)
    location = client.get_experiment_by_name(target.experiment).artifact_location
    traces_dir = Path(location.removeprefix("file://")) / "traces"
    traces_dir.rename(traces_dir.with_name("traces.away"))
    traces_dir.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="spu.tracking.traces"):
        run_id = log_run(_record(second), second, target)
    assert client.get_run(run_id).info.status == "FINISHED"
    (line,) = [r.getMessage() for r in caplog.records if "trace was not logged" in
               r.getMessage()]
    assert _record(second).run_key in line and "\n" not in line
    assert _traces(target, run_id) == []
    traces_dir.unlink()
    traces_dir.with_name("traces.away").rename(traces_dir)
    done = backfill_traces(tmp_path / "outputs", target.uri)
    assert (done.logged, done.present) == (1, 1)
    (trace,) = _traces(target, run_id)
    assert any(s.span_type == "TOOL" for s in trace.data.spans)


def test_the_transcript_shows_instruction_messages_calls_audits_and_grade(tmp_path,
                                                                          target) -> None:
    """``transcript.html`` is one self-contained page: each model message, each tool call
    (long outputs folded), the audited calls and the submission; no external asset."""
    from mlflow.tracking import MlflowClient

    folder = _corpus(tmp_path)[1]
    run_id = log_run(_record(folder), folder, target)
    local = MlflowClient(tracking_uri=target.uri).download_artifacts(
        run_id, "transcript.html", str(tmp_path / "dl"))
    page = Path(local).read_text()
    steps = list(iter_steps(folder / "trajectory.jsonl.gz"))
    for s in steps:
        for c in s.tool_calls:
            assert f"<b>{c.name}</b>" in page
    assert "<details>" in page and "Audited calls" in page and "Submission" in page
    assert 'src="http' not in page and 'href="http' not in page and "<script" not in page
    assert _record(folder).run_key in page
    _screenshot(Path(local), tmp_path)


def _screenshot(page: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-headless-shell")
    if browser is None:
        pytest.skip("no headless Chromium here (neither chromium nor "
                    "chromium-headless-shell is installed): the screenshot is not taken")
    import subprocess

    shot = tmp_path / "transcript.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert shot.is_file() and shot.stat().st_size > 0


@pytest.mark.slow  # more than a few seconds
def test_log_traces_adds_traces_to_runs_recorded_before_once(tmp_path, target) -> None:
    """``spu runs log-traces OUTPUT_ROOT`` gives each run recorded without a trace one; run
    again, it logs nothing (idempotent)."""
    off = dataclasses.replace(target, experiment="spu-test",
                              traces=TracesConfig(enabled=False))
    folders = _corpus(tmp_path)
    run_ids = [log_run(_record(f), f, off) for f in folders]
    assert all(_traces(off, r) == [] for r in run_ids)
    first = run_module(["spu", "runs", "log-traces", str(tmp_path / "outputs")])
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.startswith("logged 2 traces; 0 runs had one already")
    assert [len(_traces(off, r)) for r in run_ids] == [1, 1]
    again = run_module(["spu", "runs", "log-traces", str(tmp_path / "outputs")])
    assert again.returncode == 0 and again.stdout.startswith("logged 0 traces; 2 runs had")
    assert [len(_traces(off, r)) for r in run_ids] == [1, 1]


@pytest.mark.slow
def test_a_command_agent_run_from_the_command_line_has_its_trace(tmp_path) -> None:
    """``python -m spu.main harness=command ...``: the recorded run has one trace, linked to
    it, whose tool spans match its trajectory's tool calls (none for this agent)."""
    out = tmp_path / "outputs"
    agent = REPO / "spu" / "selfcheck" / "agents" / "probe.py"
    done = run_module(["spu.main", "experiment=single", "harness=command",
                       f"harness.entrypoint={agent}", f"task={EXAMPLE_TASK.name}",
                       f"output_root={out}", f"sandbox={sandbox_name()}", "limits.cpus=1",
                       "limits.gpus=0"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (trace,) = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id)
    run_dir = out / "runs" / run.data.tags["run_key"]
    path = run_dir / "trajectory.jsonl.gz"
    calls = [c for s in iter_steps(path) for c in s.tool_calls] if path.is_file() else []
    assert len([s for s in trace.data.spans if s.span_type == "TOOL"]) == len(calls)
    assert trace.info.tags["run_key"] == run.data.tags["run_key"]
    assert "transcript.html" in [a.path for a in client.list_artifacts(run.info.run_id)]




@contextlib.contextmanager
def _mlflow_ui(target: TrackingTarget) -> Iterator[str]:
    """``mlflow server`` on a loopback port over ``target``'s store; its URL."""
    import socket
    import subprocess
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow_bin = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    server = subprocess.Popen([mlflow_bin, "server", "--backend-store-uri", target.uri,
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_the_mlflow_ui_trace_view_shows_the_tool_calls_by_name(tmp_path, target) -> None:
    """The MLflow UI (``mlflow server`` on loopback, in headless Chromium) shows a recorded
    run's trace with its tool calls by name; a screenshot is kept beside the test's files."""
    import subprocess

    browser = find_browser()
    if browser is None:
        pytest.skip("no headless Chromium here (neither chromium nor chromium-headless-shell)")
    folder = _corpus(tmp_path)[0]
    log_run(_record(folder), folder, target)
    (trace,) = _traces(target, None)
    with _mlflow_ui(target) as url:
        page = (f"{url}/#/experiments/{_experiment(target)}/traces"
                f"?selectedEvaluationId={trace.info.trace_id}")
        common = [browser, "--headless", "--no-sandbox", "--disable-gpu",
                  "--virtual-time-budget=20000", "--window-size=1400,1000"]
        dom = subprocess.run([*common, "--dump-dom", page], capture_output=True, text=True,
                             timeout=120).stdout
        shot = tmp_path / "mlflow-trace-view.png"
        subprocess.run([*common, f"--screenshot={shot}", page], capture_output=True,
                       timeout=120, check=False)
    names = {s.name for s in trace.data.spans if s.span_type == "TOOL"}
    assert names and all(name in dom for name in names)
    assert "agent run" in dom
    assert shot.is_file() and shot.stat().st_size > 0


def _plant_markdown(folder: Path, listener: str) -> None:
    """An agent's texts in every place a span shows: each an image, a link and HTML that
    point at ``listener``, then a second image between lines of three backticks (which
    would close a fence of three and open one of their own)."""
    from spu.schema import ToolCall, Trajectory, TrajectoryStep
    from spu.tracking.trajectories import read_trajectory, write_trajectory

    def md(tag: str) -> str:
        return (f"![px]({listener}/{tag}.png) [link]({listener}/{tag}-link) "
                f'<img src="{listener}/{tag}-html.png"> {listener}/{tag}-bare\n'
                f"```\n![px]({listener}/{tag}-after-a-fence.png)\n```")

    old = read_trajectory(folder / "trajectory.jsonl.gz")
    steps = [
        TrajectoryStep(index=0, role="user", text=md("user")),
        TrajectoryStep(index=1, text=md("turn"), reasoning=md("reasoning"), tool_calls=[
            ToolCall(id="c1", name="Bash", arguments={"command": md("args")},
                     output=md("tool-output")),
            ToolCall(id=md("call-id"), name="apply_patch", arguments=md("string-args"),
                     output="ok")]),
        TrajectoryStep(index=2, text="sub-agent at work", agent=md("agent-name"))]
    write_trajectory(folder / "trajectory.jsonl.gz",
                     Trajectory(harness=old.harness, steps=steps, usage=old.usage))
    (folder / "output" / "rankings.json").write_text(md("rankings"))
    (folder / "tools" / "audit.jsonl").write_text(json.dumps({
        "call": 0, "time": "2026-11-01T00:00:01+00:00", "tool": "search",
        "args": {"query": md("query")}, "status": "error", "latency_s": 0.1,
        "error": md("audit-error")}) + "\n")
    (folder / "model").mkdir(exist_ok=True)
    (folder / "model" / "requests.jsonl").write_text(json.dumps({
        "time": "2026-11-01T00:00:01+00:00", "endpoint": "messages", "model": md("model"),
        "status": 403, "error": md("gateway-error")}) + "\n")


async def _open_every_span(browser: str, page: str, spans: list[str], profile: Path,
                           shot: Path, control: str) -> tuple[dict[str, int], Any]:
    """Open the trace view and click each span by its name: how many elements each name
    had, and what the page's own ``fetch`` of ``control`` answered (the listener is in
    the browser's reach)."""
    from tests.tracking.devtools import Browser

    clicked = {}
    async with Browser(browser, profile) as b:
        await b.call("Page.navigate", url=page)
        await b.wait_for_text("model turn 1")
        for name in spans:
            clicked[name] = await b.click_text(name)
            await asyncio.sleep(2)  # the span's inputs and outputs render
        await b.screenshot(shot)
        reached = await b.js(f"fetch({json.dumps(control)}).then(r => r.status)")
    return clicked, reached


@pytest.mark.slow
def test_span_texts_load_nothing_when_the_mlflow_ui_shows_them(tmp_path, target) -> None:
    """Invariant: the MLflow trace view renders the texts at the top of a span's inputs and
    outputs as markdown; an agent's image, link or HTML in any span text (a model turn, its
    reasoning, a message, a tool's output, string arguments or call id, a sub-agent's name,
    an audited call's query and error, the gateway's model and error, ``rankings.json``),
    with backticks that would close a three-backtick fence, makes the browser that opens
    each span (headless Chromium, the real MLflow UI) ask nothing of the agent's address."""
    from tests.tracking.devtools import Listener

    browser = find_browser()
    if browser is None:
        pytest.skip("no headless Chromium here (neither chromium nor chromium-headless-shell)")
    folder = _corpus(tmp_path)[0]
    with Listener() as listener:
        _plant_markdown(folder, listener.url)
        log_run(_record(folder), folder, target)
        (trace,) = _traces(target, None)
        names = [s.name for s in trace.data.spans]
        with _mlflow_ui(target) as url:
            page = (f"{url}/#/experiments/{_experiment(target)}/traces"
                    f"?selectedEvaluationId={trace.info.trace_id}")
            clicked, reached = asyncio.run(_open_every_span(
                browser, page, names, tmp_path / "profile", tmp_path / "mlflow-span-view.png",
                f"{listener.url}/control"))
        asked = [p for p in listener.paths if p != "/control"]
    # The browser reaches the listener (a request there would have been seen), and every
    # span was there to open.
    assert reached == 200 and "/control" in listener.paths
    assert all(clicked[name] for name in names), clicked
    assert asked == [], f"the trace view loaded the agent's addresses: {asked}"
    spans = {s.name: s for s in trace.data.spans}
    assert "![px](" in spans["model turn 1"].outputs["text"]  # kept, as text


@pytest.mark.slow
@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_a_real_cli_run_has_one_tool_span_per_call_and_the_gateways_usage(
        sandbox_ok, harness: str, tmp_path: Path) -> None:  # noqa: F811
    """The real CLI (scripted model, ``python -m spu.main``): the run's trace has one TOOL
    span per tool call of its trajectory, and one LLM span per model request of the
    gateway's record with that request's usage, bucket by bucket."""
    from spu.gateway import read_requests
    from tests.harness.test_cli_runs import EXAMPLE_CORPUS, PAPER_VERSION, cli_installed

    cli_installed(harness, PAPER_VERSION[harness])
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", f"harness={harness}", "model=scripted",
                       f"task={EXAMPLE_TASK.name}", f"tools.corpus={EXAMPLE_CORPUS}",
                       f"output_root={out}"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (trace,) = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id)
    calls = [c.name for s in iter_steps(run_dir / "trajectory.jsonl.gz") for c in s.tool_calls]
    tools = sorted((s for s in trace.data.spans if s.span_type == "TOOL"),
                   key=lambda s: (s.start_time_ns, s.attributes["spu.step"]))
    assert [s.name for s in tools] == calls and calls
    model = [r for r in read_requests(run_dir / "model" / "requests.jsonl")
             if r.endpoint in ("messages", "responses", "chat_completions")]
    llm = sorted((s for s in trace.data.spans if s.span_type == "LLM"),
                 key=lambda s: int(s.name.rsplit(" ", 1)[1]))
    assert [_usage_of(s) for s in llm] == [r.usage.model_dump() for r in model] and model
