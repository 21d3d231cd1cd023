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
  call to the next step (when the agent had the result), and the paper's activity label
  and the method families it credits (``spu.activity``, ``spu.method_families``, labelled
  by :mod:`spu.activities` as ``spu analyze`` labels them);
- a span per audited search or fetch (``RETRIEVER``, ``tools/audit.jsonl``) at its real
  time, with its exposure flags;
- a sub-agent's steps nested in an ``AGENT`` span of its own.

Every span's text is cut at ``tracking.traces.max_chars`` with a note naming the artifact
that holds the rest, and loads nothing where MLflow's trace view shows it: the view
renders each text at the top of a span's inputs and outputs as markdown, where an agent's
``![px](http://host/pixel.png)`` would make the browser that opens the span fetch that
address. Such a text is a fenced code block (:func:`inert`), its fence longer than any
run of backticks in it, so nothing in it can close the fence; the trace's previews hold
no agent text at all. A text of letters, digits and plain punctuation stays as it is.
A trace holds at most ``tracking.traces.max_spans`` spans, the
number left out counted on the root span. The spans are built in memory with their real
times and written synchronously: by default (``tracking.traces.spans=artifact``) the trace
is one store transaction (``start_trace``: its tags and its link to the run) and its spans
one ``traces.json`` artifact, the way MLflow itself logs to a store without a span table;
with ``spans=store`` they are rows of the span table (one ``log_spans`` call, some ten
times as long on SQLite, for span-level search). A trace that cannot be written leaves the
run recorded and says so in one warning line.

MLflow is imported inside the functions that use it.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.activities import RunContext, label_call
from spu.config import SpansStore, TracesConfig
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

ACTIVITY_ATTRIBUTE = "spu.activity"
"""Tool span attribute: the call's primary activity (paper E.7, :mod:`spu.activities`)."""

FAMILIES_ATTRIBUTE = "spu.method_families"
"""Tool span attribute: the method families the call ran (a list, empty for most calls)."""

MODEL_ENDPOINTS = frozenset({"messages", "responses", "chat_completions"})
"""Gateway endpoints whose requests are model turns (``count_tokens`` and ``models`` are not)."""

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


_PLAIN = re.compile(r"[\w .,:;/+=@%-]*")
"""A text markdown shows as it is: letters, digits, spaces and plain punctuation."""

_BACKTICKS = re.compile(r"`+")


def inert(text: str) -> str:
    r"""``text`` as markdown that shows it and loads nothing: a fenced code block.

    Inside a fenced block markdown reads no image, link or HTML. The block ends only at
    a line of at least as many backticks as opened it, so the fence is one backtick
    longer than the longest run of backticks in ``text`` (and at least three): nothing
    the agent wrote can close it. A plain text (:data:`_PLAIN`) is left as it is.

    Examples
    --------
    >>> inert("end_turn"), inert("10.1038/s41586-099-01234-5")
    ('end_turn', '10.1038/s41586-099-01234-5')
    >>> print(inert("![px](http://127.0.0.1:8765/pixel.png)"))
    ```
    ![px](http://127.0.0.1:8765/pixel.png)
    ```
    >>> print(inert("````\n![px](http://h/p.png)\n````"))
    `````
    ````
    ![px](http://h/p.png)
    ````
    `````
    """
    if _PLAIN.fullmatch(text):
        return text
    longest = max((m.end() - m.start() for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _inert_top(value: Any) -> Any:
    """``value`` with its own text, or each text at its top level, made :func:`inert`.

    MLflow's trace view renders those as markdown; deeper values it shows as JSON.
    """
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {k: inert(v) if isinstance(v, str) else v for k, v in value.items()}
    return value


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


_BUCKETS = tuple(Usage.model_fields)
"""The four billing buckets, in order (read once: pydantic builds the mapping per access)."""


def _buckets(usage: Any) -> dict[str, int]:
    return {k: int(getattr(usage, k)) for k in _BUCKETS}


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
    """Collects the spans of one trace in memory, counting them against the cap.

    Each span is built directly as the dictionary MLflow's ``Span.to_dict`` gives (what
    ``traces.json`` holds, read back by ``Span.from_dict``): its attributes JSON-encoded
    once, by one shared encoder, with no OpenTelemetry span in between (building those,
    then turning them into dictionaries, took most of a trace's time). MLflow's live
    tracer would write (and commit) each span as it ends and swallow a failed write.
    """

    otel_trace_id: int
    trace_id: str
    settings: Any
    trace_id_b64: str = ""
    """The trace id as MLflow's span dictionaries give it (base64 of its 16 bytes)."""
    request_id_json: str = ""
    """The ``mlflow.traceRequestId`` attribute of every span (the trace id, JSON-encoded)."""
    max_chars: int = 0
    """``settings.max_chars`` (read once)."""
    max_spans: int = 0
    """``settings.max_spans`` (read once)."""
    spans: list[dict[str, Any]] = field(default_factory=list)
    """The spans, each as MLflow's ``Span.to_dict`` gives it."""
    left_out: int = 0
    last_ns: int = 0
    next_id: int = 1
    agents: dict[str, list[Any]] = field(default_factory=dict)
    """Sub-agent name -> [span id, start, end so far]."""
    usage: dict[str, int] = field(default_factory=dict)
    """The sum of the spans' token-usage attributes (the trace's token usage)."""
    labels: RunContext = field(default_factory=RunContext)
    """The activity labeller's memory of the run (the scripts written so far)."""

    def __post_init__(self) -> None:
        self.trace_id_b64 = base64.b64encode(self.otel_trace_id.to_bytes(16, "big")).decode()
        self.request_id_json = _encode(self.trace_id)
        self.max_chars = int(self.settings.max_chars)
        self.max_spans = int(self.settings.max_spans)

    def text(self, value: str | None) -> str | None:
        return cut(value, self.max_chars)

    def full(self) -> bool:
        return len(self.spans) + len(self.agents) + 1 >= self.max_spans  # + root

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def add(self, span_id: int, name: str, span_type: str, start: int, end: int,
            parent: int | None, inputs: Any = None, outputs: Any = None,
            attributes: dict[str, Any] | None = None, error: bool = False) -> None:
        usage = (attributes or {}).get("mlflow.chat.tokenUsage") or {}
        for k, v in usage.items():
            self.usage[k] = self.usage.get(k, 0) + int(v)
        encode = _encode
        encoded = {"mlflow.traceRequestId": self.request_id_json,
                   "mlflow.spanType": _span_type(span_type)}
        if inputs is not None:
            encoded["mlflow.spanInputs"] = (inputs if isinstance(inputs, _JSON)
                                            else encode(_inert_top(inputs)))
        if outputs is not None:
            encoded["mlflow.spanOutputs"] = encode(_inert_top(outputs))
        for k, v in (attributes or {}).items():
            if v is not None:
                encoded[k] = encode(v)
        self.spans.append({
            "trace_id": self.trace_id_b64, "span_id": _span_id(span_id),
            "parent_span_id": _span_id(parent) if parent is not None else None,
            "name": name, "start_time_unix_nano": start, "end_time_unix_nano": max(start, end),
            "events": [], "status": {"code": _ERROR if error else _OK, "message": ""},
            "attributes": encoded, "links": [],
        })

    def span(self, name: str, span_type: str, start: int, end: int, *, parent: int | None = None,
             inputs: Any = None, outputs: Any = None, attributes: dict[str, Any] | None = None,
             error: bool = False) -> None:
        if self.full():
            self.left_out += 1
            return
        self.add(self.new_id(), name, span_type, start, end, parent if parent else ROOT_SPAN,
                 inputs, outputs, attributes, error)

    def agent(self, name: str, start: int, end: int) -> int | None:
        """The span id of sub-agent ``name``'s span, ended at its last step."""
        if name in self.agents:
            self.agents[name][2] = max(self.agents[name][2], end)
            return int(self.agents[name][0])
        if self.full():
            return None
        self.agents[name] = [self.new_id(), start, end]
        return int(self.agents[name][0])

    def close_agents(self) -> None:
        for name, (span_id, start, end) in self.agents.items():
            self.add(span_id, f"subagent {name}", "AGENT", start, end, ROOT_SPAN,
                     inputs={"agent": name})


ROOT_SPAN = 1
"""Span id of each trace's root span."""

_ENCODER = json.JSONEncoder(default=str)
"""Encodes span attribute values as ``json.dumps(value, default=str)`` does, built once."""


def _make_encode() -> Callable[[Any], str]:
    """``json.dumps(value, default=str)``, with the C encoder made once, not per value.

    ``JSONEncoder.encode`` builds a new C encoder for every value it is given, which was
    most of the time of encoding a span's small attribute values. The same text comes out
    (no circularity check: the values are read from JSON and cannot hold a cycle).
    """
    from json.encoder import encode_basestring_ascii

    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # not in the stubs
    if c_make_encoder is None:  # an interpreter without json's C speedups
        return _ENCODER.encode
    try:
        chunks = c_make_encoder(None, str, encode_basestring_ascii, None, ": ", ", ",
                                False, False, True)
    except TypeError:  # another signature: the plain way
        return _ENCODER.encode

    def encode(value: Any) -> str:
        if type(value) is str:
            return encode_basestring_ascii(value)
        return "".join(chunks(value, 0))

    return encode


_encode = _make_encode()

class _JSON(str):
    """A span's inputs already JSON-encoded (as :data:`_ENCODER` encodes them)."""


_OK, _ERROR = "STATUS_CODE_OK", "STATUS_CODE_ERROR"
"""Span status codes as MLflow's span dictionaries name them (OTLP's names)."""


@functools.cache
def _span_type(span_type: str) -> str:
    """A span type as its ``mlflow.spanType`` attribute holds it (JSON-encoded)."""
    return _encode(span_type)


@functools.lru_cache(maxsize=4096)
def _span_id(span_id: int) -> str:
    """A span id as MLflow's span dictionaries give it (base64 of its 8 bytes)."""
    return base64.b64encode(span_id.to_bytes(8, "big")).decode()


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
    from spu.gateway.verdict import read_requests

    return [r for r in read_requests(Path(run_dir) / "model" / "requests.jsonl")
            if r.endpoint in MODEL_ENDPOINTS]


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
    from spu.grading.submission import read_submission_file

    # The agent's file: never through a link, never blocking on a FIFO, at most 1 MiB read.
    data = read_submission_file(Path(run_dir) / "output" / "rankings.json")
    if not data:
        return None
    text = data.decode("utf-8", "replace")
    if len(text) > max_chars:
        return cut(text, max_chars, "output/rankings.json")
    if _nesting(text) > MAX_RANKINGS_NESTING:  # the agent's file: kept as text
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


MAX_RANKINGS_NESTING = 64
"""Deepest ``rankings.json`` a trace shows parsed (deeper: its text). Parsing and encoding
nest on the interpreter's stack, so past a fixed depth the result would depend on how deep
the caller's stack is: the builder process and an inline build must agree."""

_BRACKETS = re.compile(r"[\[\]{}]")


def _nesting(text: str) -> int:
    """How deep the brackets of ``text`` nest.

    Those inside strings are counted too: an upper bound of a JSON value's depth.

    >>> _nesting('{"a": [[1], {"b": 2}]}'), _nesting("[]]]"), _nesting("x")
    (3, 1, 0)
    """
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        depth = depth + 1 if m.group() in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


@dataclass(frozen=True)
class TraceViews:
    """A run's trace and ``transcript.html``, built from its folder and ready to write.

    Holds only text and numbers (picklable): :mod:`spu.tracking.builder` builds it in a
    process of its own while the run's own record is written.
    """

    trace_id: str
    transcript: str
    """``transcript.html``."""
    spans_json: str
    """``traces.json``: the spans as MLflow's ``TraceData.to_dict`` gives them."""
    request_time_ms: int
    execution_ms: int
    request_preview: str
    response_preview: str
    token_usage: dict[str, int]
    tags: dict[str, str]


def new_trace_id() -> int:
    """A trace's random 128-bit OpenTelemetry id (its MLflow id is ``tr-<hex>``)."""
    import secrets

    return secrets.randbits(128) or 1


def settings_of(settings: Any) -> TracesConfig:
    """``tracking.traces`` as a plain :class:`~spu.config.TracesConfig`.

    A composed config gives an OmegaConf node; None gives the defaults.
    """
    if settings is None:
        return TracesConfig()
    if isinstance(settings, TracesConfig):
        return settings
    return TracesConfig(enabled=bool(settings.enabled), max_chars=int(settings.max_chars),
                        max_spans=int(settings.max_spans), spans=SpansStore(settings.spans))


def build_views(record: RunRecord, run_dir: Path, settings: TracesConfig | None = None,
                otel_id: int | None = None) -> TraceViews:
    """A recorded run's trace and transcript, read from its folder; nothing is written.

    Raises:
        TrajectoryFileError: the trajectory cannot be read.
    """
    settings = settings_of(settings)
    run_dir = Path(run_dir)
    from spu.tracking.transcript import render_transcript

    # twice a span's text, and as many steps as a trace has spans: a few MB at most
    page = render_transcript(record, run_dir, max_chars=2 * int(settings.max_chars),
                             max_steps=int(settings.max_spans))
    path = find_trajectory(run_dir)
    requests = gateway_requests(run_dir)
    audits = audit_entries(run_dir)
    start = _ns(record.started_at)
    if start is None:  # an older record: the first step's time (a second pass, rare)
        first = (_ns(st.timestamp) for st in (iter_step_views(path) if path else ()))
        start = next((t for t in first if t is not None), 0)
    end = _ns(record.finished_at) or start
    max_chars = int(settings.max_chars)
    otel_id = otel_id or new_trace_id()
    trace_id = f"tr-{otel_id:032x}"
    w = _Writer(otel_id, trace_id, settings, last_ns=start, labels=RunContext.for_run(run_dir))
    steps = iter_step_views(path) if path is not None else iter(())
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
    inputs = {"task_id": record.task_id, "task_version": record.task_version,
              "config": record.config, "model": record.model, "harness": record.harness,
              "effort": record.effort, "repeat": record.repeat}
    outputs: dict[str, Any] = {
        "outcome": record.outcome.value,
        "score": official_score(record.scored, record.score_strict, record.score_recovered),
        "score_strict": record.score_strict, "score_recovered": record.score_recovered,
        "rankings": submitted_rankings(run_dir, max_chars),
    }
    attributes: dict[str, Any] = {USAGE_ATTRIBUTE: _buckets(record.usage)}
    if w.left_out:
        outputs["note"] = (f"{w.left_out} spans left out past tracking.traces.max_spans="
                           f"{settings.max_spans}; every step is in {TRAJECTORY_FILE}")
        attributes["spu.spans_left_out"] = w.left_out
    finish = max(end, w.last_ns, start)
    w.add(ROOT_SPAN, TRACE_NAME, "AGENT", start, finish, None, inputs, outputs, attributes)
    return TraceViews(
        trace_id=trace_id, transcript=page,
        # what ``TraceData(spans).to_dict()`` gives, every attribute a JSON string already
        spans_json=json.dumps({"spans": w.spans}, ensure_ascii=False),
        request_time_ms=start // 1_000_000, execution_ms=(finish - start) // 1_000_000,
        # the previews the trace list shows: what SPU wrote, never the agent's rankings
        request_preview=json.dumps(inputs, default=str)[:1000],
        response_preview=json.dumps({k: v for k, v in outputs.items() if k != "rankings"},
                                    default=str)[:1000],
        token_usage=dict(w.usage), tags=trace_tags(record))


def write_trace(tracking_uri: str, experiment_id: str, run_id: str, views: TraceViews,
                settings: TracesConfig | None = None) -> str:
    """Write a built trace, linked to MLflow run ``run_id``; returns the trace id.

    Raises:
        MlflowException: the store refused the trace.
    """
    from mlflow.entities import TraceInfo, TraceLocation, TraceState
    from mlflow.tracing.client import TracingClient

    in_store = SpansStore(settings_of(settings).spans) is SpansStore.store
    info = TraceInfo(
        trace_id=views.trace_id,
        trace_location=TraceLocation.from_experiment_id(experiment_id),
        request_time=views.request_time_ms, execution_duration=views.execution_ms,
        state=TraceState.OK, request_preview=views.request_preview,
        response_preview=views.response_preview,
        trace_metadata={"mlflow.sourceRun": run_id, "mlflow.trace_schema.version": "3",
                        "mlflow.traceInputs": views.request_preview,
                        "mlflow.trace.tokenUsage": json.dumps(views.token_usage)},
        tags={**views.tags, "mlflow.traceName": TRACE_NAME,
              "mlflow.trace.spansLocation": "TRACKING_STORE" if in_store else "ARTIFACT_REPO"})
    tracing = TracingClient(tracking_uri)
    if in_store:
        from mlflow.entities import Span

        tracing.log_spans(experiment_id, [Span.from_dict(d) for d in
                                          json.loads(views.spans_json)["spans"]])
        tracing.start_trace(info)
        return views.trace_id
    _write_to_artifacts(tracing, tracking_uri, experiment_id, info, views.spans_json)
    return views.trace_id


def log_trace(tracking_uri: str, experiment_id: str, run_id: str, record: RunRecord,
              run_dir: Path, settings: TracesConfig | None = None) -> str:
    """Log the trajectory of a recorded run as one trace linked to its MLflow run.

    Returns:
        The trace id.

    Raises:
        TrajectoryFileError: the trajectory cannot be read.
        MlflowException: the store refused the trace.
    """
    views = build_views(record, run_dir, settings)
    return write_trace(tracking_uri, experiment_id, run_id, views, settings)


def _write_to_artifacts(tracing: Any, tracking_uri: str, experiment_id: str, info: Any,
                        data: str) -> None:
    """The trace in one store transaction, its spans as one ``traces.json`` artifact.

    MLflow's own way for a store without a span table, read back by ``search_traces`` and
    the UI alike. A trace whose spans cannot be written is deleted again, so that
    ``spu runs log-traces`` adds it later.
    """
    from mlflow.store.artifact.artifact_repo import ArtifactRepository
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
    from mlflow.tracing.utils.artifact_utils import (
        TRACE_DATA_FILE_NAME,
        get_artifact_uri_for_trace,
    )

    logged = tracing.start_trace(info)
    try:
        repo = get_artifact_repository(get_artifact_uri_for_trace(logged),
                                       tracking_uri=tracking_uri)
        if type(repo).upload_trace_data is ArtifactRepository.upload_trace_data:
            put_artifact(repo, TRACE_DATA_FILE_NAME, data)  # what it does, without a copy
        else:  # a store with its own way (Databricks)
            repo.upload_trace_data(data)
    except BaseException:
        try:
            tracing.delete_traces(experiment_id, trace_ids=[info.trace_id])
        except Exception:  # noqa: BLE001 (the first failure is the one to report)
            log.debug("trace %s: not deleted after its spans failed", info.trace_id)
        raise


def write_beside(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in a run folder (``transcript.html`` beside ``run.json``).

    Through a hidden name and a rename: a reader never sees half a page, and a link
    planted at ``path`` is replaced, never followed.
    """
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    with open(partial, "x", encoding="utf-8") as out:
        out.write(text)
    os.replace(partial, path)


def put_artifact(repo: Any, name: str, text: str) -> None:
    """Log ``text`` as the artifact ``name`` at the root of ``repo``.

    Streamed where the repository takes a stream (the local one writes a hidden file beside
    the target and renames it), else through one scratch file: never a scratch folder and
    a copy per file where none is needed (on a busy disk, making and removing the folder
    cost as much as the write).
    """
    from mlflow.store.artifact import artifact_repo

    data = text.encode("utf-8")
    streams = getattr(artifact_repo, "StreamUploadMixin", None)  # MLflow 3.17's name
    if streams is not None and isinstance(repo, streams):
        repo.log_artifact_from_stream(io.BytesIO(data), name)
        return
    with tempfile.TemporaryDirectory(prefix="spu-artifact-") as scratch:
        path = Path(scratch) / name
        path.write_bytes(data)
        repo.log_artifact(str(path))


def _timed(steps: Iterator[Any], start: int) -> Iterator[tuple[Any, int]]:
    """Each step with its time, never before the previous step's (a step without one: that)."""
    last = start
    for step in steps:
        t = _ns(step.timestamp)
        last = max(last, t) if t is not None else last
        yield step, last


def _step_spans(w: _Writer, steps: Iterator[Any], start: int, end: int, *,
                usage_on_turns: bool) -> None:
    """A span per model turn and per tool call, sub-agents nested; read as a stream."""
    timed = _timed(steps, start)
    current = next(timed, None)
    before = start
    while current is not None:
        s, t = current
        following = next(timed, None)
        after = following[1] if following is not None else max(end, t)
        w.last_ns = max(w.last_ns, after)
        _one_step(w, s, before, t, after, usage_on_turns)
        before, current = t, following


def _one_step(w: _Writer, s: Any, before: int, t: int, after: int,
              usage_on_turns: bool) -> None:
    """The spans of one step: its model turn (or message), then its tool calls."""
    # every call is labelled, spans or not: a script written here is credited when it runs
    labels = [label_call(c.name, c.arguments, c.output, w.labels, c.is_error)
              for c in s.tool_calls]
    parent = w.agent(s.agent, before, after) if s.agent else None
    if s.agent and parent is None:
        w.left_out += 1 + len(s.tool_calls)
        return
    if s.role == "assistant" and (s.text or s.reasoning or s.usage is not None):
        attributes: dict[str, Any] = {"spu.step": s.index}
        if usage_on_turns and s.usage is not None:
            buckets = _buckets(s.usage)
            attributes["mlflow.chat.tokenUsage"] = token_usage(Usage(**buckets))
            attributes[USAGE_ATTRIBUTE] = buckets
        w.span(f"model turn {s.index}", "CHAT_MODEL", before, t, parent=parent,
               inputs={"step": s.index, "agent": s.agent},
               outputs={"text": w.text(s.text), "reasoning": w.text(s.reasoning)},
               attributes=attributes)
    elif s.text:
        w.span(f"{s.role} message {s.index}", "UNKNOWN", t, t, parent=parent,
               outputs={"text": w.text(s.text)}, attributes={"spu.step": s.index})
    max_chars = w.max_chars
    for call, label in zip(s.tool_calls, labels, strict=True):
        # the arguments are encoded once: to measure them, and as the span's inputs
        text_args = _encode(call.arguments)
        if len(text_args) > max_chars:
            text_args = _encode(inert(w.text(text_args) or ""))
        elif isinstance(call.arguments, str):
            text_args = _encode(inert(call.arguments))
        call_id = _encode(inert(call.id) if call.id is not None else None)
        # built here, not by ``add``: every text at its top level is inert already
        inputs = _JSON(f'{{"arguments": {text_args}, "call_id": {call_id}}}')
        w.span(call.name, "TOOL", t, after, parent=parent, inputs=inputs,
               outputs={"output": w.text(call.output), "is_error": call.is_error},
               attributes={"spu.step": s.index, "spu.tool": call.name,
                           "spu.duration_s": round((after - t) / 1e9, 3),
                           ACTIVITY_ATTRIBUTE: label.activity.value,
                           FAMILIES_ATTRIBUTE: list(label.families)},
               error=call.is_error)


def has_trace(client: MlflowClient, experiment_id: str, run_id: str) -> bool:
    """Whether the MLflow run has a trace already (so ``spu runs log-traces`` skips it)."""
    found = client.search_traces(locations=[experiment_id], run_id=run_id, max_results=1,
                                 include_spans=False)
    return len(found) > 0


def log_views(client: MlflowClient, experiment_id: str, run_id: str, artifact_uri: str,
              record: RunRecord, run_dir: Path, target: TrackingTarget,
              built: Callable[[], TraceViews] | None = None) -> bool:
    """Log a recorded run's trace and ``transcript.html``; a failure is one warning line.

    ``built`` gives the views built already (:func:`spu.tracking.builder.views_of`, where
    they are built beside the run's own record); None: they are built here.

    Returns:
        True when both were logged (or ``tracking.traces.enabled`` is false).
    """
    settings = settings_of(target.traces)
    if not settings.enabled:
        return True
    try:
        from spu.tracking.store import run_artifacts
        from spu.tracking.transcript import TRANSCRIPT_FILE

        views = built() if built is not None else build_views(record, run_dir, settings)
        put_artifact(run_artifacts(artifact_uri, target.uri), TRANSCRIPT_FILE,
                     views.transcript)
        write_beside(run_dir / TRANSCRIPT_FILE, views.transcript)
        write_trace(target.uri, experiment_id, run_id, views, settings)
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
