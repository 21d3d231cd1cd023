"""Progress of a sweep: counters, one line per finished run, and a live status line.

The counters (:class:`SweepProgress`) are plain numbers any launcher can keep; the
display (:class:`ProgressDisplay`) streams one line per run as it finishes and keeps
a status line current: a rich live line on a terminal, a printed line every
``every_s`` seconds otherwise (logs, CI).

What an agent may have chosen (its latest event, its CLI's error lines) reaches the
console as text: control characters escaped (:func:`spu.printable.printable`) and rich's
markup escaped wherever a line goes through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spu.harness.monitor import AgentStatus
from spu.launch.job import ResultStatus
from spu.printable import printable, printable_markup

MAX_RUN_LINES = 10
"""Running runs shown under the status line; the rest are counted."""


def _clock(seconds: float) -> str:
    total = int(seconds)
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


@dataclass(frozen=True)
class ProgressSnapshot:
    """The counters of a sweep at one moment."""

    total: int
    """Jobs in the sweep."""
    done: int
    """Runs that finished in this launch, whatever their outcome."""
    running: int
    """Runs launched and not finished."""
    failed: int
    """Finished runs that ended ``infra_error`` after their retries, or whose job raised."""
    retried: int
    """Retries made (an ``infra_error`` attempt or an attempt lost with its worker)."""
    skipped: int
    """Runs an earlier launch finished."""
    not_launched: int
    """Runs the budget kept from starting."""
    elapsed_s: float
    """Seconds since the sweep started."""
    cost_usd: float
    """Cost of finished runs, skipped ones included."""
    budget_usd: float | None = None
    """``budget.max_cost_usd``."""
    retired: tuple[str, ...] = ()
    """Devices taken out of the sweep as unhealthy (``placement=actors``), named."""

    @property
    def waiting(self) -> int:
        """Jobs not yet started or decided."""
        return self.total - self.done - self.running - self.skipped - self.not_launched

    def line(self) -> str:
        """The status line.

        Examples:
            >>> ProgressSnapshot(total=10, done=3, running=2, failed=1, retried=1, skipped=4,
            ...                  not_launched=0, elapsed_s=62.0, cost_usd=1.5,
            ...                  budget_usd=5.0).line()
            'done 3/10 · running 2 · waiting 1 · failed 1 · retried 1 · skipped 4 · elapsed 0:01:02 · cost $1.50 of $5.00'
        """  # noqa: E501
        parts = [f"done {self.done}/{self.total}", f"running {self.running}",
                 f"waiting {self.waiting}", f"failed {self.failed}",
                 f"retried {self.retried}", f"skipped {self.skipped}"]
        if self.not_launched:
            parts.append(f"not launched {self.not_launched}")
        if self.retired:
            parts.append(f"retired {len(self.retired)}: {', '.join(self.retired)}")
        cost = f"cost ${self.cost_usd:.2f}"
        if self.budget_usd is not None:
            cost += f" of ${self.budget_usd:.2f}"
        return " · ".join([*parts, f"elapsed {_clock(self.elapsed_s)}", cost])


class SweepProgress:
    """Counters of a running sweep, fed by the launcher as jobs start and end."""

    def __init__(self, total: int, budget_usd: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.budget_usd = budget_usd
        self._clock = clock
        self._start = clock()
        self.done = self.running = self.failed = self.retried = 0
        self.skipped = self.not_launched = 0
        self.cost_usd = 0.0
        self.retired: list[str] = []
        """Devices retired as unhealthy, each named with why."""

    def launched(self) -> None:
        """A run was handed to a worker."""
        self.running += 1

    def finished(self, result: dict[str, Any] | None) -> None:
        """A launched job ended with ``result`` (None when the job raised)."""
        self.running -= 1
        status = None if result is None else result.get("status", ResultStatus.ran)
        if status == ResultStatus.skipped:
            self.skipped_one(result)
            return
        if status == ResultStatus.not_launched:
            self.not_launched += 1
            return
        self.done += 1
        if result is None or result.get("outcome") == "infra_error":
            self.failed += 1
        if result is not None:
            self.retried += int(result.get("retries") or 0)
            self.cost_usd += float(result.get("cost_usd") or 0.0)

    def skipped_one(self, result: dict[str, Any] | None) -> None:
        """A job was skipped because an earlier launch finished it."""
        self.skipped += 1
        if result is not None:
            self.cost_usd += float(result.get("cost_usd") or 0.0)

    def lost(self, cost_usd: float | None = None) -> None:
        """A launched attempt ended early (lost with its node, or to be retried).

        Its cost, when known, counts: the attempt spent it even though it is not the
        run's last.
        """
        self.running -= 1
        self.retried += 1
        self.cost_usd += float(cost_usd or 0.0)

    def snapshot(self) -> ProgressSnapshot:
        """The counters now."""
        return ProgressSnapshot(
            total=self.total, done=self.done, running=self.running, failed=self.failed,
            retried=self.retried, skipped=self.skipped, not_launched=self.not_launched,
            elapsed_s=self._clock() - self._start, cost_usd=self.cost_usd,
            budget_usd=self.budget_usd, retired=tuple(self.retired),
        )


def result_line(result: dict[str, Any]) -> str:
    """One streamed line for a finished job.

    It ends with the run's key, cut to twelve characters (``spu show`` takes any unique
    prefix of a key).

    Examples:
        >>> result_line({"task": "spu-a", "model": "random", "effort": "none", "repeat": 1,
        ...              "config": "random-none", "harness": "baseline",
        ...              "outcome": "valid", "score": 0.25, "cost_usd": 0.0,
        ...              "runtime_s": 3.04, "attempt": 2, "run_key": "0123456789abcdef"})
        'spu-a · random-none (baseline) r1 · valid · score 0.250 · $0.00 · 3.0 s · attempt 2 · run 0123456789ab'

        A run an earlier launch finished says so, with its stored result:

        >>> result_line({"task": "spu-a", "config": "random-none", "repeat": 0,
        ...              "status": "skipped", "outcome": "valid", "score": 0.25,
        ...              "run_key": "0123456789abcdef"})
        'spu-a · random-none r0 · skipped · valid · score 0.250 · run 0123456789ab'
    """  # noqa: E501
    from spu.launch.results import config_of, run_status

    if result.get("status", "ran") not in ("ran",):
        return " · ".join([str(result.get("task")),
                           f"{config_of(result)} r{result.get('repeat')}", run_status(result),
                           str(result.get("outcome")),
                           "score -" if result.get("score") is None
                           else f"score {result['score']:.3f}", *_key_part(result)])
    score = result.get("score")
    harness = f" ({result['harness']})" if result.get("harness") else ""
    parts = [str(result.get("task")), f"{config_of(result)}{harness} r{result.get('repeat')}",
             str(result.get("outcome"))]
    parts.append("score -" if score is None else f"score {score:.3f}")
    parts.append(f"${float(result.get('cost_usd') or 0.0):.2f}")
    if result.get("runtime_s") is not None:
        parts.append(f"{float(result['runtime_s']):.1f} s")
    if int(result.get("attempt") or 1) > 1:
        parts.append(f"attempt {result['attempt']}")
    return " · ".join([*parts, *_key_part(result)])


def _key_part(result: dict[str, Any]) -> list[str]:
    from spu.launch.results import RUN_KEY_CHARS

    key = result.get("run_key")
    return [f"run {str(key)[:RUN_KEY_CHARS]}"] if key else []


class ProgressDisplay:
    """Streams finished runs and keeps the status line current.

    Args:
        progress: the counters to show.
        mode: ``live`` (a rich live line), ``lines`` (a status line every ``every_s``
            seconds), ``off``, or ``auto`` (live on a terminal, else lines).
        every_s: seconds between status lines in ``lines`` mode.
    """

    def __init__(self, progress: SweepProgress, mode: str = "auto", every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 running: Callable[[], list[AgentStatus]] | None = None) -> None:
        from rich.console import Console

        if mode not in ("auto", "live", "lines", "off"):
            raise ValueError(f"hydra.launcher.progress={mode!r}: not auto, live, lines or off")
        self.console = Console()
        self.mode = ("live" if self.console.is_terminal else "lines") if mode == "auto" else mode
        self.progress = progress
        self.every_s = every_s
        self._clock = clock
        self._last_line = clock()
        self._live: Any = None
        self.running = running
        """The status of each running run (:func:`spu.harness.monitor.read_status`)."""
        self._errors_said: dict[tuple[str, str], tuple[float, int]] = {}

    def __enter__(self) -> ProgressDisplay:
        if self.mode == "live":
            from rich.live import Live

            self._live = Live(self._renderable(self.progress.snapshot().line(), []),
                              console=self.console, refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self.refresh()
            self._live.__exit__(*exc)
            self._live = None
        elif self.mode == "lines":
            line = printable(self.progress.snapshot().line(), newlines=False)
            self.console.print(f"SPU sweep · {line}", highlight=False, soft_wrap=True,
                               markup=False)

    def say(self, message: str) -> None:
        """Print a message above the status line.

        ``message`` is rich markup: text an agent may have chosen goes in through
        :func:`~spu.printable.printable_markup`.
        """
        if self.mode != "off":
            self.console.print(message, highlight=False, soft_wrap=True)

    def result(self, result: dict[str, Any]) -> None:
        """Stream one finished job."""
        self.say(printable_markup(result_line(result), newlines=False))
        self.refresh()

    def refresh(self) -> None:
        """Update the status line (in ``lines`` mode, print it when it is due).

        Under the counters, each running run shows its elapsed time and the agent's
        latest event; an API error that repeats is said at once, then at most every
        ``every_s`` seconds per run and status.
        """
        line = printable(self.progress.snapshot().line(), newlines=False)
        statuses = self.running() if self.running is not None else []
        self._say_api_errors(statuses)
        runs = [printable(s.line(), newlines=False) for s in statuses]
        if self._live is not None:
            self._live.update(self._renderable(line, runs))
        elif self.mode == "lines" and self._clock() - self._last_line >= self.every_s:
            self._last_line = self._clock()
            self.console.print(f"SPU sweep · {line}", highlight=False, soft_wrap=True,
                               markup=False)
            for run in runs[:MAX_RUN_LINES]:
                self.console.print(f"  running: {run}", highlight=False, soft_wrap=True,
                                   markup=False)
            if len(runs) > MAX_RUN_LINES:
                self.console.print(f"  ... and {len(runs) - MAX_RUN_LINES} more running",
                                   highlight=False)

    @staticmethod
    def _renderable(line: str, runs: list[str]) -> Any:
        from rich.console import Group
        from rich.text import Text

        shown = [Text(f"  {r}", overflow="ellipsis", no_wrap=True) for r in runs[:MAX_RUN_LINES]]
        if len(runs) > MAX_RUN_LINES:
            shown.append(Text(f"  ... and {len(runs) - MAX_RUN_LINES} more running"))
        return Group(Text(line), *shown)

    def _say_api_errors(self, statuses: list[AgentStatus]) -> None:
        now = self._clock()
        for s in statuses:
            for status, count in s.api_errors.items():
                said = self._errors_said.get((s.run_key, status))
                if count < 2 or (said is not None and (said[1] == count
                                                       or now - said[0] < self.every_s)):
                    continue
                self._errors_said[(s.run_key, status)] = (now, count)
                line = printable_markup(f"run {s.run_key} ({s.label}): API error {status}, "
                                        f"{count} times so far: {s.last_api_error}",
                                        newlines=False)
                self.say(f"[red]{line}[/red]")
