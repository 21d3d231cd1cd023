"""The sweep's monitor: a small actor on the driver's node that agent nodes report to.

Each attempt tells it where it started and, while the agent runs, what it has spent
so far. When a node dies its attempts cannot say anything more: the driver asks the
monitor where they ran and what they last reported, and records the lost attempts
with that spending, so the budget counts it.
"""

from __future__ import annotations

from typing import Any


class SweepMonitor:
    """Where each attempt runs and what it has spent, by (run key, attempt)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int], dict[str, Any]] = {}

    def started(self, run_key: str, attempt: int, node: str, at: float) -> None:
        """An attempt started on ``node``."""
        self.seen.setdefault((run_key, attempt), {}).update(node=node, started=at)

    def spent(self, run_key: str, attempt: int, usage: dict[str, int],
              cost_usd: float | None, status: dict[str, Any] | None = None) -> None:
        """An attempt's usage so far, its cost and its agent's live status."""
        seen = self.seen.setdefault((run_key, attempt), {})
        seen.update(usage=usage, cost_usd=cost_usd)
        if status is not None:
            seen["status"] = status

    def statuses(self) -> list[dict[str, Any]]:
        """The live status of every attempt whose agent has not ended."""
        return [seen["status"] for seen in self.seen.values()
                if "status" in seen and "ended" not in seen]

    def ended(self, run_key: str, attempt: int, at: float) -> None:
        """An attempt's agent side ended."""
        self.seen.setdefault((run_key, attempt), {}).update(ended=at)

    def lookup(self, run_key: str, attempt: int) -> dict[str, Any]:
        """What is known of one attempt."""
        return dict(self.seen.get((run_key, attempt), {}))


def start_monitor() -> Any:
    """Start the monitor on this (the driver's) node; it takes no CPU from runs."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    actor = ray.remote(num_cpus=0)(SweepMonitor)
    return actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
                         max_restarts=0).remote()
