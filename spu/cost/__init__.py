"""API cost of a run from its token usage and the model's list prices (paper 3.5, E.6)."""

from spu.cost.prices import (
    CostBreakdown,
    RunCost,
    costs_disagree,
    estimate_cost,
    request_cost,
    request_usages,
    run_cost,
)

__all__ = [
    "CostBreakdown",
    "RunCost",
    "costs_disagree",
    "estimate_cost",
    "request_cost",
    "request_usages",
    "run_cost",
]
