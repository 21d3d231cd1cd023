"""Plugins written against the documented API from before options (issue 42, item 1).

A harness with effort levels and no ``options_model``, a tools provider that reads its
corpus from ``self.cfg.corpus`` and a sandbox backend subclass without options of its own,
as the README and ``docs/contributing.md`` described them: they must keep working,
selected by ``package.module:Class``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spu.harness.base import AgentContext, HarnessError
from spu.harness.baseline import AGENT_SCRIPT
from spu.harness.command import CommandHarness
from spu.sandbox.subprocess import SubprocessSandbox
from spu.tools.providers import FetchResult, Provider, ProviderConfigError, SearchResult


class OldHarness(CommandHarness):
    """The baseline agent at its effort's strategy (the example harness before options)."""

    name = "old"
    efforts = {"high": "monotone_prior"}

    def entrypoint(self) -> Path:
        """The baseline agent bundled with spu."""
        return AGENT_SCRIPT

    def args(self, ctx: AgentContext) -> list[str]:
        """The strategy of the effort and the seed."""
        return ["--strategy", self.effort_value() or "presented_order", "--seed", str(ctx.seed)]


class BindingHarness(OldHarness):
    """``OldHarness`` reading its run before it starts, with today's ``bind_run`` signature
    (a plugin wrote it before the hook was on the base class; the runner found it by name)."""

    name = "binding"

    def bind_run(self, spec: Any, identity: Any) -> None:
        """Keep the run's task; refuse repeat 7."""
        if spec.repeat == 7:
            raise HarnessError("repeat 7 is refused by this plugin")
        self.bound = (spec.repeat, identity.task.id)


class OldProvider(Provider):
    """Documents of a JSON Lines corpus, read from ``self.cfg.corpus``."""

    name = "old"

    def check(self) -> None:
        """The corpus file is there."""
        if not self.cfg.corpus or not Path(self.cfg.corpus).is_file():
            raise ProviderConfigError("tools.corpus: not a file")
        self.documents = [json.loads(line) for line in Path(self.cfg.corpus).read_text()
                          .splitlines() if line.strip()]

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Documents whose text holds the query."""
        return [SearchResult(d["url"], d["title"], d["text"][:100]) for d in self.documents
                if query in d["text"]][:max_results]

    def fetch(self, url: str) -> FetchResult:
        """A document's text, or status 404."""
        for d in self.documents:
            if d["url"] == url:
                return FetchResult(url, 200, "text/plain", d["text"])
        return FetchResult(url, 404, "text/plain", "not found")


class OldSandbox(SubprocessSandbox):
    """The subprocess backend under another name, without an options model of its own."""

    name = "old"
