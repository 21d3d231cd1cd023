"""Agent harnesses: how an agent is started in a sandbox and how its run is read back."""

from spu.harness.base import (
    AgentCommand,
    AgentContext,
    AgentResult,
    Harness,
    HarnessError,
    get_harness,
    register_harness,
)

__all__ = [
    "AgentCommand",
    "AgentContext",
    "AgentResult",
    "Harness",
    "HarnessError",
    "get_harness",
    "register_harness",
]
