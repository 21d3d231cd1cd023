"""The order a sweep submits its runs in: longest expected first.

A cluster runs a sweep's runs on a fixed set of GPUs; the sweep ends when the last run
does. Submitting in task order leaves a long run for the end now and then, and the
cluster waits for it with most GPUs idle. Submitting the longest expected runs first
(the LPT rule of list scheduling) puts the short runs last, where they fill the gaps.

Expected run times come from what tracking holds (:func:`expected_runtimes`): the
median of earlier runs of the same configuration on the same task, else the median of
the configuration's runs, else the median of every run; with no history at all, the
submission order is kept.

:func:`list_schedule` replays a submission order on a number of identical machines
(each run goes to the first machine free) and :func:`makespan_lower_bound` gives the
bound no order can beat, ``max(total / machines, longest run)``: the benchmark
``benchmarks/makespan.py`` compares the two on a sweep shaped like the paper's.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeHistory:
    """Run times tracking holds, grouped for lookups."""

    by_config_task: Mapping[tuple[str, str], float]
    """Median run time of each (configuration, task id)."""
    by_config: Mapping[str, float]
    """Median run time of each configuration."""
    overall: float | None
    """Median of every run time, or None with no history."""

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[str, str, float]]) -> RuntimeHistory:
        """Build from ``(config, task_id, runtime_s)`` of earlier runs (None times skipped).

        Examples:
            >>> h = RuntimeHistory.from_runs([("a", "t1", 10.0), ("a", "t1", 20.0),
            ...                               ("a", "t2", 100.0), ("b", "t1", 1.0)])
            >>> h.by_config_task[("a", "t1")], h.by_config["a"], h.overall
            (15.0, 20.0, 15.0)
        """
        pairs: dict[tuple[str, str], list[float]] = {}
        configs: dict[str, list[float]] = {}
        every: list[float] = []
        for config, task, seconds in runs:
            if seconds is None or seconds != seconds or seconds < 0:
                continue
            pairs.setdefault((config, task), []).append(float(seconds))
            configs.setdefault(config, []).append(float(seconds))
            every.append(float(seconds))
        return cls({k: statistics.median(v) for k, v in pairs.items()},
                   {k: statistics.median(v) for k, v in configs.items()},
                   statistics.median(every) if every else None)

    def expected(self, config: str, task_id: str) -> float | None:
        """The expected run time of ``config`` on ``task_id`` (None: nothing known)."""
        if (config, task_id) in self.by_config_task:
            return self.by_config_task[(config, task_id)]
        if config in self.by_config:
            return self.by_config[config]
        return self.overall


def expected_runtimes(history: RuntimeHistory,
                      runs: Sequence[tuple[str, str]]) -> list[float | None]:
    """The expected run time of each ``(config, task_id)``, in order."""
    return [history.expected(config, task) for config, task in runs]


def longest_expected_first(expected: Sequence[float | None]) -> list[int]:
    """Indices of the runs in submission order: longest expected first, ties in given order.

    A run with no expectation goes after those with one (it is most likely new, so
    nothing says it is long) and keeps its place among its peers.

    Examples:
        >>> longest_expected_first([1.0, None, 3.0, 1.0, 2.0])
        [2, 4, 0, 3, 1]
    """
    return sorted(range(len(expected)),
                  key=lambda i: (expected[i] is None, -(expected[i] or 0.0), i))


def list_schedule(durations: Sequence[float], machines: int,
                  order: Sequence[int] | None = None, start_s: float = 0.0,
                  per_run_s: float = 0.0) -> float:
    """The makespan of running ``durations`` in ``order`` on identical ``machines``.

    Each run starts on the first machine to become free, as a cluster hands out GPUs.
    ``start_s``: time each machine takes before its first run (an actor warming up);
    ``per_run_s``: time each run adds (a task's worker start and warm-up, or an actor's
    health check between runs), in the units of ``durations``.

    Examples:
        >>> list_schedule([3, 3, 2, 2, 2], machines=2)  # task order
        7.0
        >>> list_schedule([3, 3, 2, 2, 2], 2, order=longest_expected_first([3, 3, 2, 2, 2]))
        7.0
        >>> list_schedule([1, 1, 1, 1, 4], 2), list_schedule([1, 1, 1, 1, 4], 2, [4, 0, 1, 2, 3])
        (6.0, 4.0)
        >>> durations = [1, 1, 1, 1]
        >>> list_schedule(durations, 2, per_run_s=0.5), list_schedule(durations, 2, start_s=0.5)
        (3.0, 2.5)
    """
    if machines < 1:
        raise ValueError(f"machines={machines}: must be at least 1")
    free = [float(start_s)] * min(machines, max(1, len(durations)))
    heapq.heapify(free)
    end = 0.0
    for i in order if order is not None else range(len(durations)):
        start = heapq.heappop(free)
        finish = start + float(durations[i]) + float(per_run_s)
        end = max(end, finish)
        heapq.heappush(free, finish)
    return end


def makespan_lower_bound(durations: Sequence[float], machines: int) -> float:
    """``max(total / machines, longest)``: no order finishes sooner.

    Examples:
        >>> makespan_lower_bound([1, 1, 1, 1, 4], 2)
        4.0
    """
    if not durations:
        return 0.0
    return max(sum(durations) / machines, float(max(durations)))


def group_key(config: str, task_id: str) -> Hashable:
    """The key runs share an expected time under (configuration, task)."""
    return (config, task_id)
