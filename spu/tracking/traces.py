"""Each recorded run's trajectory as one MLflow trace, linked to its MLflow run (SPEC 13).

The trace is read from the run folder as the run left it, one step at a time:

- the root span (``AGENT``) is the agent run: inputs the task and configuration, outputs
  the submitted rankings, outcome and score, from the run's start to its end;
- a span per model turn (``CHAT_MODEL``): the message text and reasoning and, where the
  run has no model gateway record, the turn's token usage in MLflow's token-usage
  attribute; a run with a gateway record (``model/requests.jsonl``) has a span per model
  request (``LLM``) carrying the gateway's usage instead, so the trace's total is the
  gateway's, never counted twice;
- a span per tool call (``TOOL``): name, arguments, output, from the step that made the
  call to the next step (when the agent had the result);
- a span per audited search or fetch (``RETRIEVER``, ``tools/audit.jsonl``) at its real
  time, with its exposure flags;
- a sub-agent's steps nested in an ``AGENT`` span of its own.

Every span's text is cut at ``tracking.traces.max_chars`` with a note naming the artifact
that holds the rest, and a trace holds at most ``tracking.traces.max_spans`` spans, the
number left out counted on the root span. Writing is synchronous and bounded; a trace
that cannot be written leaves the run recorded and says so in one warning line.

MLflow is imported inside the functions that use it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.config import TracesConfig
from spu.identity import official_score
from spu.schema import GatewayRequest, RunRecord, Usage
from spu.tracking.trajectories import TRAJECTORY_FILE, find_trajectory, iter_step_views

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from spu.tracking.store import TrackingTarget

log = logging.getLogger(__name__)

TRACE_NAME = "agent run"
"""Name of each run's trace (and of its root span)."""

USAGE_ATTRIBUTE = "spu.usage"
"""Span attribute holding the four billing buckets of the paper as SPU counts them."""

MODEL_ENDPOINTS = frozenset({"messages", "responses", "chat_completions"})
"""Gateway endpoints whose requests are model turns (``count_tokens`` and ``models`` are not)."""

_WRITE_LOCK = threading.Lock()
"""MLflow's tracer is process-wide state (its tracking URI): one trace is written at a time."""


def cut(text: str | None, max_chars: int, artifact: str = TRAJECTORY_FILE) -> str | None:
    r"""``text`` cut at ``max_chars`` with a note of what was cut and where the rest is.

    Examples
    --------
    >>> cut("abcdefghij", 4)
    'abcd\n[... 6 of 10 characters cut; the whole text is in trajectory.jsonl.gz]'
    >>> cut("abc", 4)
    'abc'
    """
    if text is None or len(text) <= max_chars:
        return text
    return (f"{text[:max_chars]}\n[... {len(text) - max_chars} of {len(text)} characters cut;"
            f" the whole text is in {artifact}]")


def _ns(timestamp: str | None) -> int | None:
    if not timestamp:
        return None
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(moment.timestamp() * 1e9)


def token_usage(usage: Usage) -> dict[str, int]:
    """MLflow's token-usage attribute of a model call's usage.

    ``input_tokens`` counts every prompt token (uncached, read from and written to the
    cache), as MLflow's own totals expect; the cache buckets are given beside it.
    """
    prompt = usage.input + usage.cache_read + usage.cache_write
    return {
        "input_tokens": prompt,
        "output_tokens": usage.output,
        "total_tokens": prompt + usage.output,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation_input_tokens": usage.cache_write,
    }


def _buckets(usage: Any) -> dict[str, int]:
    return {k: int(getattr(usage, k)) for k in Usage.model_fields}


def trace_tags(record: RunRecord) -> dict[str, str]:
    """Tags of a run's trace: what the UI's trace search filters on."""
    tags = {
        "run_key": record.run_key,
        "config": record.config or "",
        "task_id": record.task_id,
        "outcome": record.outcome.value,
        "score": f"{official_score(record.scored, record.score_strict, record.score_recovered):g}",
        "model": record.model,
        "harness": record.harness,
        "flagged_exposure": "true" if record.flagged_exposure else "false",
    }
    if record.refusal_label:
        tags["refusal_label"] = record.refusal_label
    return tags


@dataclass
class _Writer:
    """Opens and ends the spans of one trace, counting them against the cap."""

    client: MlflowClient
    trace_id: str
    root_id: str
    settings: Any
    spans: int = 1
    left_out: int = 0
    last_ns: int = 0
    agents: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Sub-agent name -> (span id, end time so far)."""

    def text(self, value: str | None) -> str | None:
        return cut(value, int(self.settings.max_chars))

    def span(self, name: str, span_type: str, start: int, end: int, *, parent: str | None = None,
             inputs: Any = None, outputs: Any = None, attributes: dict[str, Any] | None = None,
             error: bool = False) -> None:
        if self.spans >= int(self.settings.max_spans):
            self.left_out += 1
            return
        self.spans += 1
        s = self.client.start_span(name, trace_id=self.trace_id, parent_id=parent or self.root_id,
                                   span_type=span_type, inputs=inputs, attributes=attributes,
                                   start_time_ns=start)
        self.client.end_span(self.trace_id, s.span_id, outputs=outputs,
                             status="ERROR" if error else "OK", end_time_ns=max(start, end))

    def agent(self, name: str, start: int, end: int) -> str | None:
        """The span of sub-agent ``name``, opened at its first step."""
        if name in self.agents:
            span_id, last = self.agents[name]
            self.agents[name] = (span_id, max(last, end))
            return span_id
        if self.spans >= int(self.settings.max_spans):
            self.left_out += 1
            return None
        self.spans += 1
        s = self.client.start_span(f"subagent {name}", trace_id=self.trace_id,
                                   parent_id=self.root_id, span_type="AGENT",
                                   inputs={"agent": name}, start_time_ns=start)
        self.agents[name] = (s.span_id, end)
        return str(s.span_id)

    def close_agents(self) -> None:
        for span_id, last in self.agents.values():
            self.client.end_span(self.trace_id, span_id, end_time_ns=last)


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


def gateway_requests(run_dir: Path) -> list[GatewayRequest]:
    """The model requests of the run's gateway record (``model/requests.jsonl``), if any."""
    out = []
    for data in _json_lines(Path(run_dir) / "model" / "requests.jsonl"):
        try:
            request = GatewayRequest.model_validate(data)
        except ValueError:
            continue
        if request.endpoint in MODEL_ENDPOINTS:
            out.append(request)
    return out


def audit_entries(run_dir: Path) -> list[dict[str, Any]]:
    """The audited search and fetch calls of the run (``tools/audit.jsonl``), as read.

    Read leniently (each line a :class:`~spu.schema.AuditEntry` as written, or an older or
    hand-made one): a transcript shows what is there rather than refusing the run.
    """
    out = []
    for n, data in enumerate(_json_lines(Path(run_dir) / "tools" / "audit.jsonl")):
        if not isinstance(data, dict):
            continue
        exposure = data.get("exposure") or []
        out.append({
            "call": data.get("call", n), "time": str(data.get("time", "")),
            "tool": str(data.get("tool", "?")), "args": data.get("args") or {},
            "status": str(data.get("status", "")),
            "latency_s": float(data.get("latency_s") or 0.0),
            "http_status": data.get("http_status"), "chars": data.get("chars"),
            "truncated": bool(data.get("truncated", False)),
            "exposure": [str(e) for e in exposure] if isinstance(exposure, list) else [],
            "error": data.get("error"),
        })
    return out


def submitted_rankings(run_dir: Path, max_chars: int) -> Any:
    """The submitted ``output/rankings.json`` (parsed; its text cut past ``max_chars``)."""
    path = Path(run_dir) / "output" / "rankings.json"
    if not path.is_file() or path.is_symlink():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if len(text) > max_chars:
        return cut(text, max_chars, "output/rankings.json")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@contextmanager
def _tracing_to(uri: str) -> Iterator[None]:
    """MLflow's tracer writing synchronously to ``uri`` for the length of the block."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    saved = os.environ.get("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING")
    os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] = "false"
    try:
        with _WRITE_LOCK, _use_tracking_uri(uri):
            yield
    finally:
        if saved is None:
            os.environ.pop("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", None)
        else:
            os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] = saved


def log_trace(client: MlflowClient, tracking_uri: str, experiment_id: str, run_id: str,
              record: RunRecord, run_dir: Path, settings: TracesConfig | None = None) -> str:
    """Log the trajectory of a recorded run as one trace linked to its MLflow run.

    Returns:
        The trace id.

    Raises:
        TrajectoryFileError: the trajectory cannot be read.
        MlflowException: the store refused the trace.
    """
    settings = settings or TracesConfig()
    run_dir = Path(run_dir)
    path = find_trajectory(run_dir)
    steps = list(iter_step_views(path)) if path is not None else []
    requests = gateway_requests(run_dir)
    audits = audit_entries(run_dir)
    times = [t for t in (_ns(s.timestamp) for s in steps) if t is not None]
    start = _ns(record.started_at) or (min(times) if times else 0)
    end = _ns(record.finished_at) or (max(times) if times else start)
    max_chars = int(settings.max_chars)
    with _tracing_to(tracking_uri):
        root = client.start_trace(
            TRACE_NAME, span_type="AGENT", experiment_id=experiment_id, run_id=run_id,
            start_time_ns=start, tags=trace_tags(record),
            inputs={"task_id": record.task_id, "task_version": record.task_version,
                    "config": record.config, "model": record.model, "harness": record.harness,
                    "effort": record.effort, "repeat": record.repeat})
        w = _Writer(client, root.trace_id, root.span_id, settings, last_ns=start)
        _step_spans(w, steps, start, end, usage_on_turns=not requests)
        for i, req in enumerate(requests):
            t0 = _ns(req.time) or start
            w.span(f"model request {i}", "LLM", t0, t0 + int(req.latency_s * 1e9),
                   inputs={"model": req.model, "endpoint": req.endpoint},
                   outputs={"status": req.status, "stop_reason": req.stop_reason,
                            "refusal": req.refusal, "error": w.text(req.error)},
                   attributes={"mlflow.chat.tokenUsage": token_usage(req.usage),
                               USAGE_ATTRIBUTE: _buckets(req.usage)},
                   error=req.status >= 400)
        for a in audits:
            t0 = _ns(a["time"]) or start
            w.span(f"audited {a['tool']}", "RETRIEVER", t0, t0 + int(a["latency_s"] * 1e9),
                   inputs=a["args"],
                   outputs={k: a[k] for k in ("status", "http_status", "chars", "truncated",
                                              "exposure")} | {"error": w.text(a["error"])},
                   attributes={"spu.exposure": ",".join(a["exposure"]),
                               "spu.audit_call": a["call"]},
                   error=a["status"] == "error")
        w.close_agents()
        outputs: dict[str, Any] = {
            "outcome": record.outcome.value,
            "score": official_score(record.scored, record.score_strict, record.score_recovered),
            "score_strict": record.score_strict, "score_recovered": record.score_recovered,
            "rankings": submitted_rankings(run_dir, max_chars),
        }
        attributes: dict[str, Any] = {USAGE_ATTRIBUTE: _buckets(record.usage)}
        if w.left_out:
            note = (f"{w.left_out} spans left out past tracking.traces.max_spans="
                    f"{settings.max_spans}; every step is in {TRAJECTORY_FILE}")
            outputs["note"] = note
            attributes["spu.spans_left_out"] = w.left_out
        client.end_trace(root.trace_id, outputs=outputs, attributes=attributes,
                         end_time_ns=max(end, w.last_ns))
    return str(root.trace_id)


def _step_spans(w: _Writer, steps: list[Any], start: int, end: int, *,
                usage_on_turns: bool) -> None:
    """A span per model turn and per tool call, sub-agents nested."""
    times: list[int] = []
    last = start
    for s in steps:
        t = _ns(s.timestamp)
        last = max(last, t) if t is not None else last
        times.append(last)
    for i, s in enumerate(steps):
        t = times[i]
        before = times[i - 1] if i else start
        after = times[i + 1] if i + 1 < len(steps) else max(end, t)
        w.last_ns = max(w.last_ns, after)
        parent = w.agent(s.agent, before, after) if s.agent else None
        if s.agent and parent is None:
            w.left_out += 1 + len(s.tool_calls)
            continue
        if s.role == "assistant" and (s.text or s.reasoning or s.usage is not None):
            attributes: dict[str, Any] = {"spu.step": s.index}
            if usage_on_turns and s.usage is not None:
                attributes["mlflow.chat.tokenUsage"] = token_usage(Usage(**_buckets(s.usage)))
                attributes[USAGE_ATTRIBUTE] = _buckets(s.usage)
            w.span(f"model turn {s.index}", "CHAT_MODEL", before, t, parent=parent,
                   inputs={"step": s.index, "agent": s.agent},
                   outputs={"text": w.text(s.text), "reasoning": w.text(s.reasoning)},
                   attributes=attributes)
        elif s.text:
            w.span(f"{s.role} message {s.index}", "UNKNOWN", t, t, parent=parent,
                   outputs={"text": w.text(s.text)}, attributes={"spu.step": s.index})
        for call in s.tool_calls:
            arguments = call.arguments
            text_args = json.dumps(arguments, default=str) if arguments is not None else None
            if text_args is not None and len(text_args) > int(w.settings.max_chars):
                arguments = w.text(text_args)
            w.span(call.name, "TOOL", t, after, parent=parent,
                   inputs={"arguments": arguments, "call_id": call.id},
                   outputs={"output": w.text(call.output), "is_error": call.is_error},
                   attributes={"spu.step": s.index, "spu.tool": call.name,
                               "spu.duration_s": round((after - t) / 1e9, 3)},
                   error=call.is_error)


def has_trace(client: MlflowClient, experiment_id: str, run_id: str) -> bool:
    """Whether the MLflow run has a trace already (so ``spu runs log-traces`` skips it)."""
    found = client.search_traces(locations=[experiment_id], run_id=run_id, max_results=1,
                                 include_spans=False)
    return len(found) > 0


def log_views(client: MlflowClient, experiment_id: str, run_id: str, artifact_uri: str,
              record: RunRecord, run_dir: Path, target: TrackingTarget) -> bool:
    """Log a recorded run's trace and ``transcript.html``; a failure is one warning line.

    Returns:
        True when both were logged (or ``tracking.traces.enabled`` is false).
    """
    settings = target.traces or TracesConfig()
    if not settings.enabled:
        return True
    try:
        from spu.tracking.store import run_artifacts
        from spu.tracking.transcript import write_transcript

        with tempfile.TemporaryDirectory(prefix="spu-transcript-") as scratch:
            page = write_transcript(Path(scratch) / "transcript.html", record, run_dir,
                                    max_chars=max(int(settings.max_chars), 20000))
            run_artifacts(artifact_uri, target.uri).log_artifact(str(page))
        log_trace(client, target.uri, experiment_id, run_id, record, run_dir, settings)
    except Exception as exc:  # noqa: BLE001 (the run is recorded; the trace is extra)
        detail = str(exc).split("\n", 1)[0][:300]
        log.warning("run %s: recorded, but its trace was not logged (%s: %s); "
                    "spu runs log-traces adds it later", record.run_key,
                    type(exc).__name__, detail)
        return False
    return True


@dataclass(frozen=True)
class BackfillResult:
    """What ``spu runs log-traces`` did."""

    logged: int
    """Runs given a trace now."""
    present: int
    """Runs that had a trace already (left as they are)."""
    missing: int
    """MLflow runs whose run folder (``runs/<run_key>/run.json``) is not there."""
    failed: int
    """Runs whose trace could not be written (each said in one warning line)."""


def backfill_traces(output_root: Path, tracking_uri: str | None = None,
                    settings: TracesConfig | None = None) -> BackfillResult:
    """Add a trace (and ``transcript.html``) to each recorded run that has none.

    Idempotent: a run with a trace is skipped, so running it twice logs nothing the second
    time. Runs are found in every SPU experiment of the store by their ``run_key`` tag and
    read from ``OUTPUT_ROOT/runs/<run_key>/``.
    """
    from spu.tracking.store import (
        EXPERIMENT_PREFIX,
        TrackingTarget,
        client_for,
        store_lock,
    )

    root = Path(output_root).resolve()
    uri = tracking_uri or f"sqlite:///{root / 'mlflow.db'}"
    client = client_for(uri)
    logged = present = missing = failed = 0
    for exp in client.search_experiments():
        if not exp.name.startswith(EXPERIMENT_PREFIX):
            continue
        target = TrackingTarget(uri=uri, artifact_root="", experiment=exp.name,
                                traces=settings or TracesConfig())
        token = None
        while True:
            page = client.search_runs([exp.experiment_id], "tags.outcome != ''",
                                      max_results=500, page_token=token)
            for run in page:
                run_dir = root / "runs" / run.data.tags.get("run_key", "")
                if not (run_dir / "run.json").is_file():
                    missing += 1
                    continue
                if has_trace(client, exp.experiment_id, run.info.run_id):
                    present += 1
                    continue
                record = RunRecord.model_validate_json((run_dir / "run.json").read_text())
                with store_lock(uri):
                    ok = log_views(client, exp.experiment_id, run.info.run_id,
                                   run.info.artifact_uri, record, run_dir, target)
                logged, failed = logged + ok, failed + (not ok)
            token = page.token
            if not token:
                break
    return BackfillResult(logged=logged, present=present, missing=missing, failed=failed)
