"""Conformance checks of a tools provider (``tools.provider``, SPEC section 7).

The provider is made from its own options (``tools.options``, and ``tools.corpus`` where
its model has ``corpus``); a provider may write what it needs to be checked offline
(a small corpus) in :meth:`~spu.tools.providers.Provider.selfcheck_config`. The checks
call it as the audited tools service does, then through the service itself (MCP over
HTTP on the loopback), and read the audit it leaves.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spu.selfcheck import CheckSkipped, check, expect

QUERY = "amine"
"""What the checks search for (a provider's own ``selfcheck_config`` corpus holds it)."""

UNKNOWN_URL = "https://selfcheck.invalid/nothing-here"
"""An address no provider knows (``.invalid`` never resolves)."""


@dataclass
class ToolsTarget:
    """One tools provider with its settings, checked in ``scratch``."""

    name: str
    """``tools.provider``."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Fields of the ``tools`` config (``corpus``, ``allow_local_fetch``...); ``options``
    among them are the provider's own."""
    scratch: Path = Path(".")

    @property
    def cls(self) -> Any:
        """The provider's class."""
        from spu.tools.providers import get_provider

        return get_provider(self.name)

    def config(self) -> Any:
        """The ``tools`` config: the provider's own offline settings, then the given ones."""
        from spu.config import ToolsConfig

        self.scratch.mkdir(parents=True, exist_ok=True)
        own = dict(self.cls.selfcheck_config(self.scratch))
        given = dict(self.settings)
        options = {**own.pop("options", {}), **given.pop("options", {})}
        return ToolsConfig(provider=self.name, **{**own, **given}, options=options)

    def provider(self) -> Any:
        """The provider, made and checked (CheckSkipped when its check refuses the config)."""
        from spu.tools.providers import ProviderConfigError

        provider = self.cls(self.config())
        try:
            provider.check()
        except ProviderConfigError as exc:
            raise CheckSkipped(f"its configuration cannot work here: {exc}") from None
        return provider


@check("tools")
def loads_and_checks_its_options(target: ToolsTarget) -> None:
    """The provider loads, takes its options, and refuses an unknown one in one line."""
    from spu.config import ToolsConfig
    from spu.tools.providers import Provider, ProviderConfigError

    expect(issubclass(target.cls, Provider), "not a Provider")
    target.cls(target.config())
    try:
        target.cls(ToolsConfig(provider=target.name, options={"selfcheck_unknown": 1}))
    except ProviderConfigError as exc:
        said = str(exc)
        expect("\n" not in said and said.startswith("tools.options.selfcheck_unknown: "),
               f"the refusal does not name the key in one line: {said!r}")
        return
    raise CheckSkipped("it takes any option (its options_model allows extra keys)")


@check("tools")
def check_accepts_its_configuration(target: ToolsTarget) -> None:
    """``check()`` accepts the configuration it is given (the run would start)."""
    from spu.tools.providers import ProviderConfigError

    provider = target.cls(target.config())
    try:
        provider.check()
    except ProviderConfigError as exc:
        expect(False, f"check() refused: {exc}")
    finally:
        provider.close()


@check("tools")
def search_answers_in_shape(target: ToolsTarget) -> None:
    """``search`` gives at most ``max_results`` results of url, title and snippet texts."""
    from spu.tools.providers import ProviderError, SearchResult

    provider = target.provider()
    try:
        for query, most in ((QUERY, 3), ("", 2), ("the of and", 5)):
            try:
                results = provider.search(query, most)
            except ProviderError:
                continue  # an answer the agent can read
            expect(isinstance(results, list) and len(results) <= most,
                   f"search({query!r}, {most}) gave {type(results).__name__} of "
                   f"{len(results) if isinstance(results, list) else '?'}")
            for result in results:
                expect(isinstance(result, SearchResult), f"a result is {type(result)}")
                shown = result.to_json()
                expect(all(isinstance(shown[k], str) for k in ("url", "title", "snippet")),
                       f"a result is not texts: {shown}")
                json.dumps(shown)
    finally:
        provider.close()


@check("tools")
def fetch_of_an_unknown_address_is_an_answer(target: ToolsTarget) -> None:
    """``fetch`` of an address it does not know answers (a status, or ProviderError)."""
    from spu.tools.providers import FetchResult, ProviderError

    provider = target.provider()
    try:
        page = provider.fetch(UNKNOWN_URL)
    except ProviderError:
        return
    finally:
        provider.close()
    expect(isinstance(page, FetchResult) and isinstance(page.status, int)
           and isinstance(page.text, str), f"fetch gave {page!r}")
    expect(page.status != 200, f"an address nobody has answered 200: {page.text[:200]!r}")


@check("tools")
def a_found_address_can_be_fetched(target: ToolsTarget) -> None:
    """The address of a search result fetches with status 200 and a text."""
    from spu.tools.providers import ProviderError

    provider = target.provider()
    try:
        try:
            results = provider.search(QUERY, 3)
        except ProviderError as exc:
            raise CheckSkipped(f"search({QUERY!r}) answered an error: {exc}") from None
        if not results:
            raise CheckSkipped(f"search({QUERY!r}) found nothing to fetch")
        page = provider.fetch(results[0].url)
    finally:
        provider.close()
    expect(page.status == 200 and page.text, f"fetch({results[0].url}) gave {page.status}")


def _call(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        result: dict[str, Any] = json.loads(answer.read())["result"]
    return result


@check("tools")
def through_the_audited_service(target: ToolsTarget) -> None:
    """Under the real audited tools service, search and fetch answer the agent.

    Each call is one audit line with the fields of SPEC section 7.
    """
    from spu.tools.audit import AuditLog
    from spu.tools.service import ToolsService

    provider = target.provider()
    folder = target.scratch / "tools"
    service = ToolsService(provider, AuditLog(folder), target.config()).start()
    try:
        for tool, arguments in (("search", {"query": QUERY, "max_results": 2}),
                                ("fetch", {"url": UNKNOWN_URL})):
            result = _call(service.url(), tool, arguments)
            expect(result.get("content"), f"{tool} gave no content: {result}")
    finally:
        service.stop()  # closes the provider
    lines = [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()]
    expect([line["tool"] for line in lines] == ["search", "fetch"], f"audit: {lines}")
    fields = {"time", "tool", "args", "status", "latency_s", "text_sha256", "chars"}
    expect(all(fields <= set(line) for line in lines), f"audit fields: {lines}")


@check("tools")
def close_can_be_called_twice(target: ToolsTarget) -> None:
    """``close`` releases the provider and may be called again (the run always calls it)."""
    provider = target.cls(target.config())
    provider.close()
    provider.close()
