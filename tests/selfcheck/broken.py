"""Plugins with faults, for the kit's own tests.

The provider answers every address with status 200 (a fault the kit must report) and its
``close`` fails when called twice (a fault it declares, with its reason); the backend
claims an isolation it does not have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spu.sandbox.subprocess import SubprocessSandbox
from spu.tools.providers import FetchResult, Provider, SearchResult


class BrokenProvider(Provider):
    """Answers everything, even what it does not have."""

    name = "broken"
    selfcheck_expected_failures = {
        "close_can_be_called_twice": "its connection pool cannot be closed twice (upstream "
                                     "bug 123)"}

    @classmethod
    def selfcheck_config(cls, scratch: Path) -> dict[str, Any]:
        """Nothing to set up."""
        return {}

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """One result for any query."""
        return [SearchResult("https://broken.example/a", "amine", "amine")][:max_results]

    def fetch(self, url: str) -> FetchResult:
        """Status 200 for any address: the fault."""
        return FetchResult(url, 200, "text/plain", "anything")

    def close(self) -> None:
        """Fails the second time: the declared fault."""
        if getattr(self, "_closed", False):
            raise RuntimeError("already closed")
        self._closed = True


class FixedProvider(BrokenProvider):
    """The same, its close fixed but still declared as failing: a stale declaration."""

    name = "fixed"

    def close(self) -> None:
        """Closes any number of times."""


class LeakySandbox(SubprocessSandbox):
    """A plain subprocess that claims isolation: the kit must catch it."""

    name = "leaky"
    isolates = True
