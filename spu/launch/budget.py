"""The spending cap of a sweep: ``budget.max_cost_usd``.

Costs are the estimated API costs of finished runs (``cost_usd`` of their records,
paper 3.5). Runs a relaunched sweep skips because an earlier launch finished them
count too, so restarting a sweep never resets what it has spent. Once the finished
runs' cost reaches the cap no new run is launched; runs already going finish.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COST_TOLERANCE_USD = 1e-9
"""Costs this close to the cap count as reaching it."""


@dataclass
class CostLedger:
    """Running total of a sweep's cost against its cap (mutable: one per sweep)."""

    limit_usd: float | None
    """``budget.max_cost_usd``; None for no cap."""
    spent_usd: float = 0.0
    """Cost of the finished runs counted so far."""
    runs: int = 0
    """Finished runs counted so far."""

    def __post_init__(self) -> None:
        if self.limit_usd is not None and (math.isnan(self.limit_usd) or self.limit_usd < 0):
            raise ValueError(f"budget.max_cost_usd={self.limit_usd}: must be 0 or more")

    def add(self, cost_usd: float | None) -> None:
        """Count one finished run; an unknown cost counts as zero."""
        self.runs += 1
        if cost_usd is not None and not math.isnan(cost_usd):
            self.spent_usd += cost_usd

    def spend(self, cost_usd: float | None) -> None:
        """Count the cost of an attempt that is not the run's last (retried, or lost)."""
        if cost_usd is not None and not math.isnan(cost_usd):
            self.spent_usd += cost_usd

    @property
    def reached(self) -> bool:
        """True once the counted cost has reached the cap (to a billionth of a dollar).

        Costs are sums of token counts times prices per million, which binary floats
        carry with rounding errors (100,000 tokens at $5 per million is 0.49999999999999994).
        """
        return self.limit_usd is not None and self.spent_usd >= self.limit_usd - COST_TOLERANCE_USD

    def reached_message(self) -> str:
        """The cap and what reached it, in words."""
        return (f"budget.max_cost_usd={self.limit_usd:g} reached: ${self.spent_usd:.2f} spent "
                f"by {self.runs} finished runs")

    def stop_message(self, not_launched: int) -> str:
        """What the sweep says when the cap stops it."""
        return (f"{self.reached_message()}; {not_launched} runs not launched "
                f"(relaunch with a higher budget.max_cost_usd to run them)")


def ledger_of(results: Iterable[Mapping[str, Any]], limit_usd: float | None) -> CostLedger:
    """A ledger holding every finished job result (``status`` ran or skipped).

    Examples:
        >>> ledger = ledger_of([{"status": "ran", "cost_usd": 1.25},
        ...                     {"status": "skipped", "cost_usd": 2.5},
        ...                     {"status": "not_launched", "cost_usd": None}], 3.0)
        >>> ledger.spent_usd, ledger.runs, ledger.reached
        (3.75, 2, True)
    """
    ledger = CostLedger(limit_usd)
    for result in results:
        if result.get("status", "ran") in ("ran", "skipped"):
            ledger.add(result.get("cost_usd"))
    return ledger


def sweep_ledger(sweep_dir: Path, limit_usd: float | None) -> CostLedger:
    """The ledger of the job results already written under a sweep folder."""
    from spu.launch.results import collect_results

    return ledger_of(collect_results(Path(sweep_dir)), limit_usd)
