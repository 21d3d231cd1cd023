"""``spu show RUN_KEY`` and ``spu compare RUN_KEY RUN_KEY``: a run read in the terminal.

``show`` prints what ``transcript.html`` shows (SPEC 13): a summary of the run, then its
steps, each model message and tool call (long texts cut with a note), optionally one step
(``--step N``) or the steps that mention a text (``--grep TEXT``). ``compare`` puts two
runs of one task side by side: each group's submitted order and rho, the scores, usage
and cost, and each run's activity time shares (paper appendix E.7). Both read the run
folders (``OUTPUT_ROOT/runs/<run_key>/``), never the tracking store.

Every line goes through :func:`spu.printable.printable` on its way to the terminal: the
steps, group ids and items are the agent's, and a control sequence in them would act on
the operator's terminal (clear it, set its title, write its clipboard, hide a link).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.printable import printable

if TYPE_CHECKING:  # ``spu --help`` registers this module: its imports wait for a command
    from spu.schema import RunRecord
    from spu.tracking.trajectories import StepView

SHOW_CHARS = 2000
"""Characters of each text ``spu show`` prints (a note says how much more there is)."""


class ShowError(ValueError):
    """A run cannot be shown; the message names the folder or file."""


def run_key_of(output_root: Path, prefix: str) -> str:
    """The run key under ``output_root/runs`` that ``prefix`` starts.

    ``prefix`` is the console's first characters of a key, or the whole key.

    Raises:
        ShowError: no run key starts so, or more than one does (a few are named).
    """
    runs = Path(output_root) / "runs"
    if (runs / prefix / "run.json").is_file() or not re.fullmatch(r"\w[\w.-]*", prefix):
        return prefix  # a whole key, or no key's beginning (no path, no glob)
    found = sorted(d.name for d in runs.glob(f"{prefix}*") if (d / "run.json").is_file()) \
        if runs.is_dir() else []
    if len(found) > 1:
        raise ShowError(f"{len(found)} runs under {runs} start with {prefix!r} "
                        f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}): "
                        f"give more characters")
    return found[0] if found else prefix


def load_run(output_root: Path, run_key: str) -> tuple[RunRecord, Path]:
    """The record and folder of run ``run_key`` (or a unique prefix of it) under ``output_root``.

    Raises:
        ShowError: no such run folder, or its ``run.json`` cannot be read.
    """
    from spu.schema import RunRecord

    run_dir = Path(output_root) / "runs" / run_key_of(output_root, run_key)
    path = run_dir / "run.json"
    if not path.is_file():
        raise ShowError(f"{path}: no such run (is --output-root right?)")
    try:
        return RunRecord.model_validate_json(path.read_bytes()), run_dir
    except ValueError as exc:
        raise ShowError(f"{path}: not a run record ({str(exc).splitlines()[0]})") from None


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters in trajectory.jsonl.gz]"


def summary_lines(record: RunRecord) -> list[str]:
    """The run's summary: identity, outcome, score, usage, cost and time."""
    from spu.identity import official_score

    u = record.usage
    score = official_score(record.scored, record.score_strict, record.score_recovered)
    cost = f"{record.cost_usd:.4f} USD" if record.cost_usd is not None else "n/a"
    return [
        f"run {record.run_key}: {record.task_id} / {record.config} / repeat {record.repeat}",
        f"  outcome {record.outcome.value}, score {score:.4f} "
        f"(strict {record.score_strict:.4f}, recovered {record.score_recovered:.4f})",
        f"  model {record.model}, harness {record.harness}, effort {record.effort}",
        f"  tokens: input {u.input}, cache read {u.cache_read}, cache write {u.cache_write}, "
        f"output {u.output}; cost {cost}",
        f"  {record.tool_calls} tool calls, {record.runtime_s:.0f} s "
        f"({record.started_at or '?'} to {record.finished_at or '?'})",
    ]


def _step_texts(step: StepView) -> Iterator[str]:
    for value in (step.text, step.reasoning):
        if value:
            yield value
    for call in step.tool_calls:
        yield call.name
        if call.arguments is not None:
            yield json.dumps(call.arguments, default=str)
        if call.output:
            yield call.output


def step_lines(step: StepView, limit: int = SHOW_CHARS) -> list[str]:
    """One step as text: its head line, the message, reasoning and each tool call."""
    head = f"#{step.index} {step.role}" + (f" (sub-agent {step.agent})" if step.agent else "")
    lines = [head + (f"  {step.timestamp}" if step.timestamp else "")]
    if step.reasoning:
        lines.append("  reasoning: " + _cut(step.reasoning, limit).replace("\n", "\n    "))
    if step.text:
        lines.append("  " + _cut(step.text, limit).replace("\n", "\n  "))
    for call in step.tool_calls:
        args = call.arguments if isinstance(call.arguments, str) else json.dumps(
            call.arguments, default=str)
        lines.append(f"  -> {call.name}{' (error)' if call.is_error else ''}: "
                     + _cut(args or "", limit).replace("\n", "\n     "))
        if call.output:
            lines.append("     " + _cut(call.output, limit).replace("\n", "\n     "))
    return lines


def _steps(run_dir: Path) -> Iterator[StepView]:
    from spu.tracking.trajectories import find_trajectory, iter_step_views

    path = find_trajectory(run_dir)
    if path is not None:
        yield from iter_step_views(path)


def show_lines(record: RunRecord, run_dir: Path, step: int | None = None,
               grep: str | None = None, limit: int = SHOW_CHARS) -> Iterator[str]:
    """What ``spu show`` prints: the summary, then the steps asked for."""
    yield from summary_lines(record)
    if record.grade is not None:
        yield "  groups: " + ", ".join(f"{g.group_id} rho {g.rho:.3f}"
                                       for g in record.grade.groups)
    yield ""
    needle = grep.lower() if grep else None
    shown = 0
    for s in _steps(run_dir):
        if step is not None and s.index != step:
            continue
        if needle is not None and not any(needle in t.lower() for t in _step_texts(s)):
            continue
        shown += 1
        yield from step_lines(s, limit if step is None else max(limit, 200_000))
    if shown == 0 and step is not None:
        yield f"no step {step}" + (f" mentions {grep!r}" if grep else "")
    elif shown == 0 and grep:
        yield f"no step mentions {grep!r}"


def _ns(timestamp: str | None) -> float | None:
    if not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def activity_shares(steps: Iterable[StepView]) -> dict[str, float]:
    """Share of tool-call time per activity (paper E.7): a call lasts until the next step.

    Examples
    --------
    >>> from spu.tracking.trajectories import StepView, ToolCallView
    >>> steps = [StepView(index=0, timestamp="2026-01-01T00:00:00+00:00",
    ...                   tool_calls=[ToolCallView(name="WebSearch", arguments={"query": "x"})]),
    ...          StepView(index=1, timestamp="2026-01-01T00:00:30+00:00",
    ...                   tool_calls=[ToolCallView(name="Read", arguments={"file_path": "/a"})]),
    ...          StepView(index=2, timestamp="2026-01-01T00:01:00+00:00")]
    >>> sorted(activity_shares(steps).items())
    [('viewing_files', 0.5), ('web_search', 0.5)]
    """
    from spu.activities import RunContext, label_call

    ctx = RunContext()
    seconds: dict[str, float] = defaultdict(float)
    pending: list[tuple[float, list[str]]] = []
    for s in steps:
        t = _ns(s.timestamp)
        if t is not None and pending:
            start, labels = pending.pop()
            for label in labels:
                seconds[label] += max(0.0, t - start) / len(labels)
        labels = [label_call(c.name, c.arguments, c.output, ctx, c.is_error).activity.value
                  for c in s.tool_calls]
        if labels and t is not None:
            pending = [(t, labels)]
    total = sum(seconds.values())
    return {k: v / total for k, v in seconds.items()} if total > 0 else {}


def _orders(run_dir: Path) -> dict[str, list[str]]:
    from spu.grading.submission import read_submission

    # The agent's file: never through a link, never blocking on a FIFO, at most 1 MiB read.
    try:
        data = json.loads(read_submission(run_dir / "output") or b"")
        return {str(r["group_id"]): [str(x) for x in r["order"]] for r in data["rankings"]}
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return {}


def compare_lines(a: tuple[RunRecord, Path], b: tuple[RunRecord, Path]) -> Iterator[str]:
    """What ``spu compare`` prints: two runs of one task, side by side.

    Raises:
        ShowError: the runs are of different tasks.
    """
    from spu.identity import official_score

    (ra, da), (rb, db) = a, b
    if ra.task_id != rb.task_id:
        raise ShowError(f"runs {ra.run_key} and {rb.run_key} are of different tasks "
                        f"({ra.task_id}, {rb.task_id}): compare runs of one task")
    yield f"task {ra.task_id}: A = {ra.run_key} ({ra.config}), B = {rb.run_key} ({rb.config})"
    for name, ra_val, rb_val in (
            ("outcome", ra.outcome.value, rb.outcome.value),
            ("score", f"{official_score(ra.scored, ra.score_strict, ra.score_recovered):.4f}",
             f"{official_score(rb.scored, rb.score_strict, rb.score_recovered):.4f}"),
            ("cost_usd", f"{ra.cost_usd or 0:.4f}", f"{rb.cost_usd or 0:.4f}"),
            ("output tokens", str(ra.usage.output), str(rb.usage.output)),
            ("input tokens (all)", str(ra.usage.input + ra.usage.cache_read + ra.usage.cache_write),
             str(rb.usage.input + rb.usage.cache_read + rb.usage.cache_write)),
            ("tool calls", str(ra.tool_calls), str(rb.tool_calls)),
            ("runtime_s", f"{ra.runtime_s:.0f}", f"{rb.runtime_s:.0f}")):
        yield f"  {name:<20} A {ra_val:<14} B {rb_val}"
    rho_a = {g.group_id: g.rho for g in (ra.grade.groups if ra.grade else [])}
    rho_b = {g.group_id: g.rho for g in (rb.grade.groups if rb.grade else [])}
    oa, ob = _orders(da), _orders(db)
    for group in sorted(set(rho_a) | set(rho_b) | set(oa) | set(ob)):
        yield f"group {group}:"
        for side, rho, orders in (("A", rho_a, oa), ("B", rho_b, ob)):
            shown = f"{rho[group]:.3f}" if group in rho else "n/a"
            # Submitted lowest first (SPEC 2): the arrows read upwards.
            yield f"  {side} rho {shown}  {' < '.join(orders.get(group, [])) or '(no order)'}"
    sa, sb = activity_shares(_steps(da)), activity_shares(_steps(db))
    yield "activity time shares:"
    for activity in sorted(set(sa) | set(sb), key=lambda k: -(sa.get(k, 0) + sb.get(k, 0))):
        yield f"  {activity:<24} A {sa.get(activity, 0):6.1%}  B {sb.get(activity, 0):6.1%}"


def register(sub: Any) -> None:
    """Add ``show`` and ``compare`` to the ``spu`` parser."""
    p = sub.add_parser("show", help="print a run: its summary, then its steps",
                       description="Print a recorded run from its run folder: a summary, "
                       "then each model message and tool call.")
    p.add_argument("run_key", metavar="RUN_KEY", help="a run key, or its first characters")
    p.add_argument("--output-root", type=Path, default=Path("outputs"),
                   help="output_root of the run (default: outputs)")
    p.add_argument("--step", type=int, default=None, help="print only step N, in full")
    p.add_argument("--grep", default=None, help="print only the steps that mention TEXT")
    p.set_defaults(handler=show_command)
    c = sub.add_parser("compare", help="two runs of one task side by side",
                       description="Each group's submitted order and rho, the scores, usage, "
                       "cost and activity time shares of two runs of one task.")
    c.add_argument("run_keys", nargs=2, metavar="RUN_KEY")
    c.add_argument("--output-root", type=Path, default=Path("outputs"),
                   help="output_root of the runs (default: outputs)")
    c.set_defaults(handler=compare_command)


def show_command(args: argparse.Namespace) -> int:
    """Print a run; exit 2 when it cannot be read."""
    from spu.tracking.trajectories import TrajectoryFileError

    try:
        record, run_dir = load_run(args.output_root, args.run_key)
        for line in show_lines(record, run_dir, args.step, args.grep):
            print(printable(line))
    except (ShowError, TrajectoryFileError) as exc:
        print(printable(f"spu show: {exc}"), file=sys.stderr)
        return 2
    return 0


def compare_command(args: argparse.Namespace) -> int:
    """Print two runs side by side; exit 2 when one cannot be read or the tasks differ."""
    from spu.tracking.trajectories import TrajectoryFileError

    try:
        a, b = (load_run(args.output_root, key) for key in args.run_keys)
        for line in compare_lines(a, b):
            print(printable(line))
    except (ShowError, TrajectoryFileError) as exc:
        print(printable(f"spu compare: {exc}"), file=sys.stderr)
        return 2
    return 0
