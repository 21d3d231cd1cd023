"""Plugin options: every extension checks its own settings (``<kind>.options``).

A harness, a sandbox backend and a tools provider each name a pydantic model in their
``options_model``; the mapping ``harness.options``, ``sandbox.options`` or
``tools.options`` of the configuration is checked against it before anything starts,
as Harbor hands keyword arguments to its environments. A typo fails in one line that
names the key and the plugin's options; a new plugin adds its own model, never a field
of the shared configuration (:mod:`spu.config`).

What a model declares besides its fields:

- :attr:`PluginOptions.result_neutral`: options that cannot change a result (a log
  level), left out of the run identity (:func:`spu.identity.identity_options`); every
  other option is part of it, so that changing it runs again;
- :attr:`PluginOptions.content_options`: options naming a file or folder whose contents
  count, not its path: the identity holds a digest of the contents.

Settings that predate ``options`` (``sandbox.image``, ``tools.corpus``...) are still read
from their flat keys for the plugins whose model has them (:func:`merge_flat`); a value
under ``options`` wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError


class OptionsError(ValueError):
    """Options do not suit the plugin; the message is one line."""


class PluginOptions(BaseModel):
    """The options of a plugin: unknown keys are refused, values checked by type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    result_neutral: ClassVar[frozenset[str]] = frozenset()
    """Options that cannot change what the agent sees or does (a log level): left out of
    the run identity, so changing them never runs a finished run again."""
    content_options: ClassVar[frozenset[str]] = frozenset()
    """Options naming a file or folder: the run identity holds a digest of its contents."""


def check_options(key: str, selector: str, model: type[BaseModel], values: Mapping[str, Any],
                  error: type[Exception] = OptionsError) -> dict[str, Any]:
    """``values`` checked by ``model``, as a plain mapping with every option set.

    Args:
        key: where the options are set (``harness.options``).
        selector: the plugin, as it is chosen (``harness=example``).
        model: the plugin's options model.
        values: the options given.
        error: the exception raised (a subclass of the caller's kind).

    Raises:
        OptionsError: (or ``error``) an unknown key or a wrong value, in one line that
            names the key and the plugin's options.

    Examples:
        >>> class Probe(PluginOptions):
        ...     probe: str = "source"
        >>> check_options("harness.options", "harness=recall", Probe, {})
        {'probe': 'source'}
        >>> check_options("harness.options", "harness=recall", Probe, {"prob": "x"})
        Traceback (most recent call last):
        ...
        spu.options.OptionsError: harness.options.prob: not an option of harness=recall \
(its options: probe)
    """
    try:
        return model.model_validate(dict(values)).model_dump()
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        if problem["type"] == "extra_forbidden":
            why = f"not an option of {selector}"
        else:
            why = f"{problem['msg']} (got {problem.get('input')!r}; {selector})"
        raise error(f"{key}.{where}: {why} ({options_said(model)})") from None


def options_said(model: type[BaseModel]) -> str:
    """``its options: a, b`` or ``it takes no options``, for a one-line message."""
    names = sorted(model.model_fields)
    return f"its options: {', '.join(names)}" if names else "it takes no options"


def merge_flat(model: type[BaseModel], flat: Mapping[str, Any], options: Mapping[str, Any],
               names: Iterable[str]) -> dict[str, Any]:
    """The flat keys ``names`` of ``flat`` that ``model`` has (where set), then ``options``.

    Examples:
        >>> class Corpus(PluginOptions):
        ...     corpus: str | None = None
        >>> merge_flat(Corpus, {"corpus": "a.jsonl", "policy": "record"}, {}, ["corpus"])
        {'corpus': 'a.jsonl'}
        >>> merge_flat(Corpus, {"corpus": "a.jsonl"}, {"corpus": "b"}, ["corpus"])
        {'corpus': 'b'}
    """
    given = {name: flat[name] for name in names
             if name in model.model_fields and flat.get(name) is not None}
    return {**given, **dict(options)}


def option_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Each option's default, for the options that have one (JSON values)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if not field.is_required():
            out[name] = field.get_default(call_default_factory=True)
    return out
