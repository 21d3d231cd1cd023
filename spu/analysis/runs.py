"""One pass over a run folder: its calls labelled and timed, and the run's features.

A run folder (``<output_root>/runs/<run_key>/``) holds ``run.json``, the staged public
task (``task/contract.json``), the submission (``output/``), the trajectory
(``trajectory.jsonl.gz``, read one step at a time with
:func:`~spu.tracking.trajectories.iter_step_views`) and, where the audited tools served the
run, ``tools/audit.jsonl`` (SPEC section 7). :func:`read_run` reads them once and keeps
per call only its labels and time, so memory does not grow with the size of the tool
outputs: a 1 GB trajectory is read in the memory of its largest step.

Time (paper E.7): a call is credited with the time from its step to the next step,
divided evenly among the calls of the step; ``t_norm`` is the call's start (its step's
timestamp) and ``t_end_norm`` its end (the next step's) as shares of the trajectory's span
(first to last timestamp). A trajectory without timestamps counts one unit per step.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.activities import (
    METHOD_FAMILIES,
    CallLabel,
    RunContext,
    label_call,
    shell_command,
    split_tool_name,
)
from spu.analysis.detectors import discloses_recollection, typed_table
from spu.analysis.rankings import (
    SOURCES,
    RankingTracker,
    differs_from_draft,
    flip_shares,
    is_complete_ranking,
)
from spu.analysis.sources import search_operators, source_class
from spu.grading.rules import GradingKey
from spu.grading.submission import read_submission, read_submission_file
from spu.schema import ACTIVITY_CLASSES, Activity, Contract, ToolCall, TrajectoryStep
from spu.stats.submissions import orders_from_bytes
from spu.tasks.threshold import presented_orders
from spu.tracking.trajectories import (
    StepView,
    ToolCallView,
    TrajectoryFileError,
    find_trajectory,
    iter_step_views,
)

Step = TrajectoryStep | StepView
"""A trajectory step as read: the pydantic model or its fast view (the same fields)."""
Call = ToolCall | ToolCallView
"""A tool call of a :data:`Step`."""


if TYPE_CHECKING:
    import pandas as pd

AUDIT_LOG = Path("tools") / "audit.jsonl"
"""The audited tools' log inside a run folder (SPEC section 7)."""

CLASSES: tuple[str, ...] = tuple(dict.fromkeys(ACTIVITY_CLASSES.values()))
"""The eight activity classes of Figure 14a, in the order of the priority."""

_ACTIVITY_NAMES = {a: (a.value, ACTIVITY_CLASSES[a]) for a in Activity}
"""Each activity's name and class, as ``calls.csv`` writes them."""

MAX_AUDIT_LINES = 1_000_000
"""Lines read from one audit log (a bound against a runaway log)."""

_NUMBER_OR_RANGE = r"(-?\d?\.\d+)(?:\s*(?:-|–|to)\s*(-?\d?\.\d+))?"
# What a report states of its expected rho was one pattern, ``expect\w*...(spearman|rho|ρ)
# ...NUMBER`` or ``(spearman|rho|ρ)...expect\w*...NUMBER``: on a report of one long word
# each ``expect`` (or ``ρ``) in it walked the word to its end, quadratic. The two halves are
# read apart, each word's end once, and the leftmost wins, as in the alternation.
_EXPECT = re.compile(r"expect", re.IGNORECASE)
_REST_OF_WORD = re.compile(r"\w*+")
_AFTER_EXPECT = re.compile(r"[^\n.]{0,60}?(?:spearman|\brho\b|ρ|rank correlation)[^\n]{0,40}?"
                           + _NUMBER_OR_RANGE, re.IGNORECASE)
_RHO_AT = re.compile(r"(?=spearman|\brho\b|ρ)", re.IGNORECASE)
_RHO = re.compile(r"spearman|\brho\b|ρ", re.IGNORECASE)
_NUMBER_AFTER = re.compile(r"[^\n]{0,30}?" + _NUMBER_OR_RANGE, re.IGNORECASE)
_LAST_SPLITS = 120
r"""How far before its word's end ``expect\w*`` may stop and still reach a number: the
number's ``.`` is past the word (no ``\w``), so it is at most 2 + 40 + 16 (the longest
keyword) + 60 characters after the split."""


def _word_end(report: str, at: int) -> int:
    return _REST_OF_WORD.match(report, at).end()  # type: ignore[union-attr]  # \w*+ always matches


def _expected_then_rho(report: str) -> tuple[int, re.Match[str]] | None:
    r"""The leftmost ``expect\w*[^\n.]{0,60}?(spearman|rho|ρ|...)[^\n]{0,40}?NUMBER``.

    Its start and the number's match. ``\w*`` is tried from the word's end back, as the
    pattern did, but only as far as a number can be reached; a start that fails fails for
    every later ``expect`` in its word (their choices are a part of its own).
    """
    start = _EXPECT.search(report)
    while start is not None:
        end = _word_end(report, start.end())
        for split in range(end, max(start.end(), end - _LAST_SPLITS) - 1, -1):
            if (number := _AFTER_EXPECT.match(report, split)) is not None:
                return start.start(), number
        start = _EXPECT.search(report, end)
    return None


def _rho_then_expected(report: str) -> tuple[int, re.Match[str]] | None:
    r"""The leftmost ``(spearman|rho|ρ)[^\n.]{0,40}?expect\w*[^\n]{0,30}?NUMBER``.

    Its start and the number's match. ``\w*`` always ends where its word does (a shorter
    word could only find a number the whole one finds first), so each word end is read
    once.
    """
    numbers: dict[int, re.Match[str] | None] = {}
    word = (0, 0)  # the last word read, from one of its positions to its end
    for at in _RHO_AT.finditer(report):
        rho = _RHO.match(report, at.start())
        assert rho is not None
        for expect in range(rho.end(), min(rho.end() + 41, len(report))):
            if expect > rho.end() and report[expect - 1] in "\n.":
                break
            if _EXPECT.match(report, expect):
                if not word[0] <= expect + 6 <= word[1]:  # each word walked once
                    word = (expect + 6, _word_end(report, expect + 6))
                word_end = word[1]
                if word_end not in numbers:
                    numbers[word_end] = _NUMBER_AFTER.match(report, word_end)
                if (number := numbers[word_end]) is not None:
                    return at.start(), number
    return None


_NO_CODE = frozenset((Activity.web_search, Activity.web_fetch, Activity.subagent))
"""Calls whose arguments are no code (a query, a URL, a prompt): not read for typed tables."""


def stated_expected_rho(report: str) -> float | None:
    """The expected Spearman correlation a report states (Figure 17b), or None.

    A range counts as its midpoint.

    Examples
    --------
    >>> stated_expected_rho("Expected Spearman correlation: ~0.45")
    0.45
    >>> stated_expected_rho("I expect a Spearman rho of 0.3-0.5 for G1.")
    0.4
    >>> stated_expected_rho("Spearman rho is the metric.") is None
    True
    """
    found = [m for m in (_expected_then_rho(report), _rho_then_expected(report)) if m]
    if not found:
        return None
    low, high = min(found, key=lambda m: m[0])[1].groups()
    value = float(low) if high is None else (float(low) + float(high)) / 2
    return round(value, 6) if -1 <= value <= 1 else None


@dataclass(slots=True)
class CallRow:
    """One labelled call (a row of ``calls.csv``)."""

    run_key: str
    step: int
    call_index: int
    tool: str
    activity: str
    activity_class: str
    time_s: float
    t_abs: float
    t_norm: float = 0.0
    families: str = ""
    t_end_abs: float = 0.0
    """The end of the call's step (the next step's timestamp), seconds from the first."""
    t_end_norm: float = 0.0
    """That end as a share of the run's span: the call spans ``[t_norm, t_end_norm]``."""

    def __reduce__(self) -> tuple[type[CallRow], tuple[Any, ...]]:
        # Pickled as its values: a worker process sends a run's calls back cheaply.
        return CallRow, (self.run_key, self.step, self.call_index, self.tool, self.activity,
                         self.activity_class, self.time_s, self.t_abs, self.t_norm,
                         self.families, self.t_end_abs, self.t_end_norm)


@dataclass
class RunReading:
    """Everything read from one run folder."""

    calls: list[CallRow]
    features: dict[str, Any]
    group_sources: dict[str, str] = field(default_factory=dict)
    """Where each submitted group order first appears (Figure 16a)."""
    fetched: list[tuple[str, str]] = field(default_factory=list)
    """(url, source class) of each fetch, from the audit log where present."""
    operators: dict[str, float] = field(default_factory=dict)
    """Share of the run's queries using each search operator."""
    gpu_errors: Counter[str] = field(default_factory=Counter)
    """GPU errors by kind."""
    gpu_families: Counter[str] = field(default_factory=Counter)
    """Method families of the calls that ran a GPU workload."""
    notes: list[str] = field(default_factory=list)
    submitted: dict[str, list[str]] | None = None
    """The submitted group orders (``output/rankings.json``), where readable."""


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def call_texts(call: Call) -> str:
    """The code and arguments of a call as text (a shell command as it ran)."""
    command = shell_command(split_tool_name(call.name)[1], call.arguments)
    if command is not None:
        return command
    args = call.arguments
    if isinstance(args, str):
        text = args
    elif isinstance(args, dict):
        text = "\n".join(v if isinstance(v, str) else json.dumps(v) for v in args.values())
    else:
        text = json.dumps(args)
    if call.name == "apply_patch":
        text = "\n".join(ln[1:] if ln.startswith("+") else ln for ln in text.splitlines())
    return text


def read_audit_log(path: Path, notes: list[str]) -> Iterator[dict[str, Any]]:
    """Entries of an audit log (SPEC 7); unreadable lines are noted and skipped."""
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError as exc:
        notes.append(f"{path}: not readable ({exc.strerror})")
        return
    with f:
        for number, line in enumerate(f, start=1):
            if number > MAX_AUDIT_LINES:
                notes.append(f"{path}: more than {MAX_AUDIT_LINES:,} lines, rest skipped")
                return
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                notes.append(f"{path}: line {number}: not JSON ({exc.msg}), skipped")
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("tool"), str):
                notes.append(f"{path}: line {number}: no key 'tool', skipped")
                continue
            yield entry


@dataclass
class _PendingStep:
    index: int
    start: float
    calls: list[tuple[Call, CallLabel]]


def _features_base(record: Mapping[str, Any]) -> dict[str, Any]:
    scored = bool(record.get("scored"))
    score = record.get("score_recovered")
    return {
        "run_key": record.get("run_key"),
        "config": record.get("config") or f"{record.get('model')}-{record.get('effort')}",
        "model": record.get("model"), "harness": record.get("harness"),
        "effort": record.get("effort"), "task_id": record.get("task_id"),
        "discipline": record.get("discipline"), "visibility": record.get("visibility"),
        "repeat": int(record.get("repeat") or 0), "outcome": record.get("outcome"),
        "scored": scored,
        "score": float(score) if scored and isinstance(score, (int, float)) else math.nan,
        "runtime_s": float(record.get("runtime_s") or 0.0),
        "output_tokens": int((record.get("usage") or {}).get("output") or 0),
        "gpu_seconds": record.get("gpu_seconds"),
    }


def read_run(run_dir: Path, answers: Mapping[str, GradingKey] | None = None, *,
             reader: Callable[[Path], Iterator[Step]] = iter_step_views) -> RunReading:
    """Label and time every call of one run and compute its features.

    Args:
        run_dir: The run folder.
        answers: Grading keys by task id, for the score of the first draft and the
            flipped pairs (optional: without one those stay empty).
        reader: Reads the steps of the trajectory file (default: the fast views;
            :func:`~spu.tracking.trajectories.iter_steps` gives the same reading).

    Raises:
        ValueError: ``run.json`` is missing or not a JSON object (the message names it).
    """
    run_dir = Path(run_dir)
    record = _read_record(run_dir)
    features = _features_base(record)
    notes: list[str] = []
    contract = _contract(run_dir, notes)
    presented = _presented(run_dir, contract, notes)
    submitted = orders_from_bytes(read_submission(run_dir / "output"))
    walk = _CallWalk(
        run_key=str(record["run_key"]),
        reading=RunReading(calls=[], features=features, notes=notes),
        tracker=(RankingTracker(contract, submitted, presented) if contract is not None
                 else None),
        ctx=RunContext.for_run(run_dir))
    trajectory = find_trajectory(run_dir)
    steps: Iterator[Step] = iter(())
    if trajectory is None:
        notes.append(f"{run_dir}: no trajectory")
    else:
        steps = reader(trajectory)
    try:
        for step in steps:
            walk.step(step)
    except TrajectoryFileError as exc:
        notes.append(str(exc))
    span = walk.finish()
    if walk.t0 is None and walk.n_steps:
        notes.append(f"{run_dir}: trajectory has no timestamps; one unit per step")
    reading = walk.reading
    reading.submitted = submitted
    _time_features(features, reading.calls, span)
    _call_features(features, reading, walk.flags, walk.families, record)
    # 4.8: a GPU probe within the first ten tool calls; the time of the GPU calls (E.12)
    features["gpu_probe_early"] = walk.gpu_probe_at is not None and walk.gpu_probe_at < 10
    features["gpu_call_s"] = walk.gpu_call_s
    features["gpu_call_share"] = walk.gpu_call_s / span if span > 0 else math.nan
    report = run_dir / "output" / "report.md"
    text = (read_submission_file(report) or b"")[:1_000_000].decode("utf-8", "replace")
    features["stated_expected_rho"] = stated_expected_rho(text)
    features["disclosed_recollection"] = discloses_recollection(text)
    _ranking_features(features, walk.tracker, contract, submitted, answers,
                      walk.first_rankings_write, span, reading, presented)
    _web_sources(run_dir, reading, walk.queries, walk.fetch_urls)
    return reading


def _read_record(run_dir: Path) -> dict[str, Any]:
    """``run.json`` of ``run_dir``, which must be an object with a ``run_key``."""
    try:
        record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{run_dir / 'run.json'}: not readable ({exc})") from None
    if not isinstance(record, dict) or "run_key" not in record:
        raise ValueError(f"{run_dir / 'run.json'}: no key 'run_key'")
    return record


@dataclass
class _CallWalk:
    """The walk over one trajectory's steps: calls labelled and timed, counts kept.

    A step's calls share the time until the next step starts, so each step is closed
    when the next one arrives (or at the end).
    """

    run_key: str
    reading: RunReading
    tracker: RankingTracker | None
    ctx: RunContext
    queries: list[str] = field(default_factory=list)
    fetch_urls: list[str] = field(default_factory=list)
    families: set[str] = field(default_factory=set)
    flags: Counter[str] = field(default_factory=Counter)
    first_rankings_write: tuple[int, float] | None = None
    gpu_probe_at: int | None = None
    """Position (from 0) among the run's tool calls of its first GPU probe."""
    gpu_call_s: float = 0.0
    """Time credited to the calls that ran a GPU workload (E.12)."""
    pending: _PendingStep | None = None
    t0: float | None = None
    last: float = 0.0
    n_steps: int = 0

    def _close(self, step: _PendingStep, end: float) -> None:
        share = max(end - step.start, 0.0) / len(step.calls)
        for k, (call, label) in enumerate(step.calls):
            if label.gpu_workload:
                self.gpu_call_s += share
            name, cls = _ACTIVITY_NAMES[label.activity]
            self.reading.calls.append(CallRow(self.run_key, step.index, k, call.name, name,
                                              cls, share, step.start,
                                              families=";".join(label.families),
                                              t_end_abs=max(end, step.start)))

    def _clock(self, step: Step) -> float:
        """Seconds since the first timestamp (one unit per step without timestamps)."""
        stamp = _seconds(step.timestamp)
        if self.t0 is None and stamp is not None:
            self.t0 = stamp
        now = (stamp - self.t0) if (stamp is not None and self.t0 is not None) else (
            self.last + (1.0 if self.t0 is None else 0.0))
        self.last = max(now, self.last)
        return self.last

    def step(self, step: Step) -> None:
        """Take one step: close the previous one, feed the tracker, label the calls."""
        self.n_steps += 1
        now = self._clock(step)
        if self.pending is not None:
            self._close(self.pending, now)
            self.pending = None
        tracker = self.tracker
        if tracker is not None:
            tracker.feed(step.index, now, "model_text", step.text)
            tracker.feed(step.index, now, "model_text", step.reasoning)
        if step.tool_calls:
            labelled = [(call, self._label(step.index, now, call)) for call in step.tool_calls]
            self.pending = _PendingStep(step.index, now, labelled)

    def _label(self, index: int, now: float, call: Call) -> CallLabel:
        label = label_call(call.name, call.arguments, call.output, self.ctx, call.is_error)
        if label.gpu_probe and self.gpu_probe_at is None:
            self.gpu_probe_at = self.flags["n_calls"]
        self.flags["n_calls"] += 1
        _count(label, call, self.flags, self.reading)
        self.families.update(label.families)
        if label.activity is Activity.web_search and label.query:
            self.queries.append(label.query)
        if label.activity is Activity.web_fetch and label.url:
            self.fetch_urls.append(label.url)
        tracker = self.tracker
        look = not self.flags["typed_table"] and label.activity not in _NO_CODE
        text = call_texts(call) if (tracker is not None or self.first_rankings_write is None
                                    or look) else ""
        if look and typed_table(text):
            self.flags["typed_table"] += 1
        if (self.first_rankings_write is None and "rankings.json" in text and
                label.activity in (Activity.submission_files, Activity.scientific_computation,
                                   Activity.other_python)):
            self.first_rankings_write = (index, now)
        if label.activity in (Activity.submission_files,) and "rankings.json" in text:
            self.flags["ranking_writes"] += 1
        if tracker is not None:
            tracker.feed(index, now, "tool_call", text)
            tracker.feed(index, now, "tool_output", call.output)
        return label

    def finish(self) -> float:
        """Close the last step and normalise the times; returns the run's span."""
        if self.pending is not None:
            self._close(self.pending, self.last)
            self.pending = None
        span = self.last if self.last > 0 else 1.0
        for row in self.reading.calls:
            row.t_norm = round(min(row.t_abs / span, 1.0), 6)
            row.t_end_norm = round(min(row.t_end_abs / span, 1.0), 6)
        return span


def _call_features(features: dict[str, Any], reading: RunReading, flags: Counter[str],
                   families: set[str], record: Mapping[str, Any]) -> None:
    """Counts, method families and the GPU level of the labelled calls."""
    calls = reading.calls
    features["n_calls"] = len(calls)
    features["method_families"] = ";".join(sorted(families))
    features["n_families"] = len(families)
    for family in METHOD_FAMILIES:
        features[f"family_{family}"] = family in families
    features["n_searches"] = flags["search"]
    features["n_fetches"] = flags["fetch"]
    features["subagent"] = flags["subagent"] > 0
    features["background_jobs"] = flags["background"] > 0
    features["ranking_writes"] = flags["ranking_writes"]
    features["code_chars"] = flags["code_chars"]
    features["gpu_probe"] = flags["gpu_probe"] > 0
    features["gpu_workload"] = flags["gpu_workload"] > 0
    features["gpu_confirmed"] = flags["gpu_confirmed"] > 0
    features["gpu_errors"] = ";".join(sorted(reading.gpu_errors))
    ran = flags["gpu_workload_ok"] > 0
    features["gpu_level"] = (
        "device named" if features["gpu_confirmed"] else "workload ran" if ran
        else "workload failed" if features["gpu_workload"] else "probed only"
        if features["gpu_probe"] else "no GPU probe")
    # E.12: used the GPU = a GPU workload in executed code ran without failing; the
    # sampled device (run.json's used_gpu, gpu_seconds) stays beside it.
    features["used_gpu"] = ran
    features["gpu_measured"] = bool(record.get("used_gpu"))
    main = sorted(reading.gpu_families.items(), key=lambda kv: (-kv[1], kv[0]))
    features["gpu_workload_main"] = main[0][0] if ran and main else None
    features["typed_table"] = flags["typed_table"] > 0


def _count(label: CallLabel, call: Call, flags: Counter[str], reading: RunReading) -> None:
    activity = label.activity
    flags["search"] += activity is Activity.web_search
    flags["fetch"] += activity is Activity.web_fetch
    flags["subagent"] += activity is Activity.subagent
    flags["background"] += label.background
    flags["gpu_probe"] += label.gpu_probe
    if label.gpu_workload:
        flags["gpu_workload"] += 1
        flags["gpu_confirmed"] += label.gpu_confirmed
        if not label.gpu_errors and not call.is_error:
            flags["gpu_workload_ok"] += 1
        reading.gpu_families.update(label.families or ("other",))
    if label.gpu_errors:
        reading.gpu_errors.update(label.gpu_errors)
    if activity is Activity.code_writing:
        args = call.arguments
        if isinstance(args, dict):
            flags["code_chars"] += sum(len(v) for k, v in args.items()
                                       if isinstance(v, str) and k in (
                                           "content", "new_string", "input", "patch"))
        elif isinstance(args, str):
            flags["code_chars"] += len(args)


def _time_features(features: dict[str, Any], calls: list[CallRow], span: float) -> None:
    total = sum(r.time_s for r in calls)
    by_class: dict[str, float] = {}
    first: dict[str, float] = {}
    for r in calls:
        by_class[r.activity_class] = by_class.get(r.activity_class, 0.0) + r.time_s
        first.setdefault(r.activity, r.t_norm)
    for name in CLASSES:
        features[f"share_{_slug(name)}"] = by_class.get(name, 0.0) / total if total > 0 \
            else math.nan
    features["web_share"] = features["share_web_search_and_fetch"]
    features["compute_share"] = features["share_scientific_computation"]
    web = [first[a] for a in ("web_search", "web_fetch") if a in first]
    features["first_web_t"] = min(web) if web else math.nan
    features["first_compute_t"] = first.get("scientific_computation", math.nan)
    features["first_install_t"] = first.get("software_install", math.nan)
    features["first_submission_t"] = first.get("submission_files", math.nan)
    features["first_input_t"] = first.get("reading_inputs", math.nan)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _contract(run_dir: Path, notes: list[str]) -> Contract | None:
    path = run_dir / "task" / "contract.json"
    try:
        return Contract.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        notes.append(f"{path}: no readable contract ({type(exc).__name__}); rankings not traced")
        return None


def _presented(run_dir: Path, contract: Contract | None,
               notes: list[str]) -> dict[str, list[str]] | None:
    """The task's input order: its ``targets.csv`` rows (one definition, E.4 and E.7)."""
    if contract is None:
        return None
    path = run_dir / "task" / "targets.csv"
    try:
        with path.open(newline="", encoding="utf-8") as f:
            ids = [row.get("experiment_id") or "" for row in csv.DictReader(f)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        notes.append(f"{path}: not readable ({type(exc).__name__}); the input order is the "
                     f"contract's item order")
        return None
    return presented_orders(contract, ids)


def _ranking_features(features: dict[str, Any], tracker: RankingTracker | None,
                      contract: Contract | None, submitted: dict[str, list[str]] | None,
                      answers: Mapping[str, GradingKey] | None,
                      first_write: tuple[int, float] | None, span: float,
                      reading: RunReading,
                      presented: dict[str, list[str]] | None = None) -> None:
    for name in ("first_complete_step", "first_complete_t", "first_draft_score",
                 "submission_differs", "flipped_into_measured", "flipped_expected_share",
                 "flips_scored", "flips_into_measured"):
        features[name] = math.nan
    features.update(first_complete_source=None, revisions=0, pairs_flipped=0,
                    submission_ranked=False)
    if tracker is None or contract is None:
        return
    found = tracker.finish()
    reading.group_sources = dict(found.group_sources)
    draft = found.first_draft
    complete_file = submitted is not None and is_complete_ranking(submitted, contract,
                                                                  presented)
    if draft is None and complete_file and submitted is not None:
        # Only in the file: a program wrote it and nothing printed it (paper 4.2).
        draft = submitted
        features["first_complete_source"] = "file_only"
        features["submission_differs"] = False
        if first_write is not None:
            features["first_complete_step"] = first_write[0]
            features["first_complete_t"] = min(first_write[1] / span, 1.0)
    elif draft is not None:
        features["first_complete_source"] = found.first_source
        features["first_complete_step"] = found.first_step
        features["first_complete_t"] = min((found.first_t or 0.0) / span, 1.0)
        features["revisions"] = found.revisions
        features["pairs_flipped"] = found.pairs_flipped
        features["submission_differs"] = differs_from_draft(submitted, draft, contract)
    # A submission that went back to the input order is no draft but still a revision
    # (4.3); --revised-population ranked leaves such runs out of 4.3 and 24e alike.
    features["submission_ranked"] = bool(complete_file)
    key = (answers or {}).get(contract.task_id)
    if draft is not None and key is not None:
        features["first_draft_score"] = key.score_orders(draft)
        if submitted is not None and submitted != draft:
            measured = {g.group_id: _measured(g) for g in key.groups}
            shares = flip_shares(draft, submitted, measured)
            # The counts pool the flipped pairs over runs (Figure 24e, 21b's numbers).
            features["flips_scored"] = shares.flipped
            features["flips_into_measured"] = shares.into_measured
            if shares.flipped:
                features["flipped_into_measured"] = shares.into_measured / shares.flipped
                features["flipped_expected_share"] = shares.expected_share
    for source in SOURCES:
        features[f"groups_{source}"] = sum(1 for s in found.group_sources.values()
                                           if s == source)


def _measured(group: Any) -> dict[str, float]:
    # The grading key keeps twice the average rank of each item: ordering by it is
    # ordering by the measured value, ties kept.
    return {item: float(rank) for item, rank in group.twice_rank.items()}


def _web_sources(run_dir: Path, reading: RunReading, queries: list[str],
                 fetch_urls: list[str]) -> None:
    log = run_dir / AUDIT_LOG
    features = reading.features
    features.update(audited_calls=math.nan, audited_errors=math.nan,
                    audited_refused=math.nan)
    if log.is_file():
        audited_queries, audited_urls = [], []
        status: Counter[str] = Counter()
        for entry in read_audit_log(log, reading.notes):
            status[str(entry.get("status"))] += 1
            raw = entry.get("args")
            args: dict[str, Any] = raw if isinstance(raw, dict) else {}
            if entry["tool"] == "search" and isinstance(args.get("query"), str):
                audited_queries.append(args["query"])
            elif entry["tool"] == "fetch" and isinstance(args.get("url"), str):
                audited_urls.append(args["url"])
        queries, fetch_urls = audited_queries, audited_urls
        features["web_source"] = "audit_log"
        features.update(audited_calls=sum(status.values()), audited_errors=status["error"],
                        audited_refused=status["refused"])
    else:
        features["web_source"] = "trajectory"
    reading.fetched = [(url, source_class(url)) for url in fetch_urls]
    classes = {cls for _, cls in reading.fetched}
    features["fetched_literature"] = bool(classes & {"literature", "preprint"})
    features["fetched_database"] = "database" in classes
    if queries:
        reading.operators = search_operators(queries)
    features["n_queries"] = len(queries)
    features["n_fetched_urls"] = len(fetch_urls)
    # 4.1: a run that never used the audited tools (its log, else its search and fetch calls)
    used = (features["audited_calls"] > 0 if log.is_file()
            else bool(queries or fetch_urls))
    features["used_audited_tools"] = bool(used)


def _run_folder(base: Path, row: Any) -> Path | None:
    names = [getattr(row, "run_key", None), getattr(row, "run_id", None)]
    return next((base / n for n in names
                 if isinstance(n, str) and n and (base / n / "run.json").is_file()), None)


def executed_gpu_use(runs_dir: Path, runs: pd.DataFrame) -> dict[str, bool]:
    """The paper's GPU flag (E.12) of each run with a readable trajectory, by ``run_id``.

    Reads ``<runs_dir>/runs/<run_key>/`` (or the folder named by ``run_id``) with
    :func:`read_run`: true when a GPU workload in executed code ran
    without failing. Runs without a folder, a readable ``run.json`` or a trajectory are
    left out.
    """
    from spu.tracking.trajectories import find_trajectory

    base = runs_dir / "runs" if (runs_dir / "runs").is_dir() else runs_dir
    found: dict[str, bool] = {}
    for row in runs.itertuples(index=False):
        folder = _run_folder(base, row)
        if folder is None or find_trajectory(folder) is None:
            continue
        try:
            reading = read_run(folder)
        except ValueError:
            continue
        found[str(row.run_id)] = bool(reading.features.get("used_gpu"))
    return found
