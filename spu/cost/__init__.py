"""API cost of a run from its token usage and the model's list prices (paper 3.5, E.6)."""

from spu.cost.prices import CostBreakdown, estimate_cost

__all__ = ["CostBreakdown", "estimate_cost"]
