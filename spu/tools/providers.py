"""Search and fetch providers of the audited tools service (``tools.provider``).

A provider is one module holding one :class:`Provider` subclass, declared by an entry
point of group ``spu.tools_providers`` (:mod:`spu.registry`); ``tools.provider=<name>``
selects it (``offline``: a local corpus, ``web``: a search API and httpx), and its
:attr:`Provider.options_model` checks ``tools.options`` before the run starts (:mod:`spu.options`).
The service
calls :meth:`Provider.search` and :meth:`Provider.fetch` in a worker thread under the
configured timeouts; a provider raises :class:`ProviderError` with a message the agent
can read when it cannot answer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from spu.config import ToolsConfig
from spu.options import PluginOptions, check_options, merge_flat
from spu.registry import TOOLS_PROVIDERS, Registry

MAX_RESULTS_CAP = 50
"""No search returns more results than this, whatever the agent asks."""

FLAT_OPTIONS = ("corpus",)
"""Keys of the flat ``tools`` config handed to the providers whose options have them."""


class ProviderError(RuntimeError):
    """A provider could not answer; the message is what the agent is told."""


@dataclass(frozen=True)
class SearchResult:
    """One search result (SPEC section 7: ``{"url", "title", "snippet"}``)."""

    url: str
    title: str
    snippet: str
    published: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The result as the agent sees it (``published`` only where known)."""
        data = asdict(self)
        if self.published is None:
            data.pop("published")
        return data


@dataclass(frozen=True)
class FetchResult:
    """What a fetch returned (SPEC section 7: ``{"url", "status", "content_type", "text"}``)."""

    url: str
    status: int
    content_type: str
    text: str
    note: str | None = None
    """What the agent should know about the text (cut at the size limit, not decodable)."""

    def to_json(self, text: str | None = None) -> dict[str, Any]:
        """The result as the agent sees it, with ``text`` in place of the full text."""
        data: dict[str, Any] = {"url": self.url, "status": self.status,
                                "content_type": self.content_type,
                                "text": self.text if text is None else text}
        if self.note:
            data["note"] = self.note
        return data


class ProviderOptions(PluginOptions):
    """The options every provider takes (none); a provider's own model adds fields to it."""


class Provider(ABC):
    """Answers ``search`` and ``fetch`` for one run."""

    name: ClassVar[str]
    options_model: ClassVar[type[PluginOptions]] = ProviderOptions
    """This provider's options (``tools.options.<key>``), a pydantic model: checked when the
    provider is made, before the run starts; available as :attr:`options`. A model with a
    ``corpus`` field also gets ``tools.corpus``. Options that can change what the agent
    finds are part of the run identity, the others are declared
    :attr:`~spu.options.PluginOptions.result_neutral`."""
    selfcheck_expected_failures: ClassVar[Mapping[str, str]] = {}
    """Checks of ``spu selfcheck tools=<name>`` this provider is known to fail, each with
    its reason: reported as expected failures (:mod:`spu.selfcheck`)."""

    @classmethod
    def selfcheck_config(cls, scratch: Path) -> dict[str, Any]:
        """Settings of the ``tools`` config to check this provider with, offline.

        ``spu selfcheck tools=<name>`` calls it with a folder of its own; a provider
        writes there what it needs (a small corpus holding the word ``amine``) and
        returns the settings that name it (``{"corpus": ...}``, ``{"options": {...}}``).
        Settings given on the command line win. Default: none.
        """
        return {}

    def __init__(self, cfg: ToolsConfig) -> None:
        self.cfg = cfg
        self.options = provider_options(type(self), cfg)
        """Every option of :attr:`options_model`, checked (ProviderOptionsError if not)."""

    def check(self) -> None:  # noqa: B027 - optional hook
        """Raise :class:`ProviderConfigError` when the configuration cannot work.

        Called before the run starts: a corpus that does not parse, a missing API key.
        """

    @abstractmethod
    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Results for ``query``, best first, at most ``max_results``."""

    @abstractmethod
    def fetch(self, url: str) -> FetchResult:
        """The page at ``url`` as text."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; runs when the run ends."""


class ProviderConfigError(ValueError):
    """The provider's configuration cannot work; the message names the key to fix."""


class ProviderOptionsError(ProviderConfigError):
    """``tools.options`` does not suit the provider; the message is one line."""


def provider_options(cls: type[Provider], cfg: ToolsConfig) -> dict[str, Any]:
    """``tools.options`` (with the flat keys the model has) checked by provider ``cls``.

    Raises:
        ProviderOptionsError: an unknown key or a wrong value, in one line naming the key
            and the provider's options.
    """
    model = cls.options_model
    flat = {name: getattr(cfg, name, None) for name in FLAT_OPTIONS}
    values = merge_flat(model, flat, dict(getattr(cfg, "options", None) or {}), FLAT_OPTIONS)
    return check_options("tools.options", f"tools.provider={cls.name}", model, values,
                         ProviderOptionsError)


_REGISTRY: Registry[Provider] = Registry("tools provider", TOOLS_PROVIDERS, Provider)
PROVIDER_REGISTRY = _REGISTRY
"""Every tools provider by name (``spu list tools``)."""

register_provider = _REGISTRY.register
"""Class decorator: make a provider selectable by its ``name`` (without an entry point)."""

get_provider = _REGISTRY.get
"""The provider class called ``name`` (or ``package.module:Class``), imported on first use."""

provider_names = _REGISTRY.names
"""Every provider name declared (group ``spu.tools_providers``) or registered, sorted."""
