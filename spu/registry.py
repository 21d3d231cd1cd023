"""Extension by one file: classes selectable by name, found through entry points.

Harnesses, sandbox backends and tools providers each keep one :class:`Registry`,
filled from one entry point group of the installed distributions (spu's own built-in
classes are declared the same way, in its ``pyproject.toml``):

=========================  =====================================  ==================
group                      selects                                base class
=========================  =====================================  ==================
``spu.harnesses``          ``harness.name`` (``harness=<name>``)  ``Harness``
``spu.sandboxes``          ``sandbox.name`` (``sandbox=<name>``)  ``Sandbox``
``spu.tools_providers``    ``tools.provider``                     ``Provider``
=========================  =====================================  ==================

An entry point ``name = "package.module:Class"`` makes ``Class`` selectable as
``name``; only the module of the name asked for is imported, on first use. A class may
also be named ``package.module:Class`` directly, or registered in code with
:meth:`Registry.register` (tests). From a source checkout, spu's own
``pyproject.toml`` is read as well, so a built-in class added there is found before the
package is installed again.

``spu list harnesses|sandboxes|tools`` shows each name with the distribution that
declares it (:meth:`Registry.package`) and the label the class gives itself
(:func:`plugin_label`, the first line of its docstring).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points, packages_distributions
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

HARNESSES = "spu.harnesses"
"""Entry point group of harness classes."""
SANDBOXES = "spu.sandboxes"
"""Entry point group of sandbox backend classes."""
TOOLS_PROVIDERS = "spu.tools_providers"
"""Entry point group of tools provider classes."""
CONF = "spu.conf"
"""Entry point group of packages shipping Hydra config group files (``<package>/conf/``)."""

SOURCE_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
"""spu's own ``pyproject.toml``, present in a source checkout."""


class RegistryError(KeyError):
    """No class of that name, or its entry point does not load; the message is one line."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@cache
def _source_entry_points() -> dict[str, dict[str, str]]:
    """Group -> name -> value of spu's own ``pyproject.toml``, where this is a checkout."""
    try:
        data = tomllib.loads(SOURCE_PYPROJECT.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    project = data.get("project", {})
    if project.get("name") != "spu":
        return {}
    groups = project.get("entry-points", {})
    return {str(g): {str(k): str(v) for k, v in names.items()} for g, names in groups.items()
            if isinstance(names, dict)}


def group_entry_points(group: str) -> dict[str, EntryPoint]:
    """Name -> entry point of ``group`` over the installed distributions and spu's checkout.

    Raises:
        RegistryError: two distributions declare one name with different classes.
    """
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        known = found.get(ep.name)
        if known is not None and known.value != ep.value:
            raise RegistryError(f"entry point group {group}: {ep.name!r} is declared twice, "
                                f"as {known.value} and as {ep.value}; uninstall one of them")
        found[ep.name] = ep
    for name, value in _source_entry_points().get(group, {}).items():
        found[name] = EntryPoint(name=name, value=value, group=group)
    return found


@cache
def _distributions() -> Mapping[str, list[str]]:
    return packages_distributions()


def distribution_of(module: str) -> str:
    """The installed distribution holding ``module`` (its top-level package when none).

    Examples:
        >>> distribution_of("spu.harness.baseline")
        'spu'
    """
    top = module.partition(".")[0]
    found = _distributions().get(top)
    return found[0] if found else top


def plugin_label(obj: object) -> str:
    """The label a plugin gives itself: the first line of its docstring, markup removed.

    Examples:
        >>> class Notes:
        ...     '''Search over ``tools.corpus``, a folder.'''
        >>> plugin_label(Notes)
        'Search over tools.corpus, a folder.'
    """
    doc = (getattr(obj, "__doc__", None) or "").strip()
    first = doc.splitlines()[0] if doc else getattr(obj, "__name__", str(obj))
    return re.sub(r"``([^`]*)``|:\w+:`~?([^`]*)`", lambda m: m.group(1) or m.group(2), first)


class Registry(Generic[T]):
    """Classes of one kind by name, from one entry point group, imported on first use."""

    def __init__(self, kind: str, group: str, base: type) -> None:
        self.kind = kind
        self.group = group
        self.base = base
        self._classes: dict[str, type[T]] = {}
        self._by_path: dict[str, type[T]] = {}
        """Classes asked for as ``package.module:Class``: loaded once, never listed."""
        self._entry_points: dict[str, EntryPoint] | None = None

    def entry_points(self) -> Mapping[str, EntryPoint]:
        """Name -> entry point of this registry's group (read once)."""
        if self._entry_points is None:
            self._entry_points = group_entry_points(self.group)
        return self._entry_points

    def register(self, cls: type[T]) -> type[T]:
        """Class decorator: make ``cls`` selectable by its ``name`` attribute."""
        self._classes[cls.name] = cls  # type: ignore[attr-defined]
        return cls

    def names(self) -> list[str]:
        """Every name this registry knows, sorted (nothing is imported)."""
        return sorted(set(self.entry_points()) | set(self._classes))

    def unknown(self, name: str) -> RegistryError:
        """The one-line error for a name nobody declares, listing the known ones."""
        return RegistryError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())} "
                             f"(a class in another package is added by an entry point in "
                             f"group {self.group})")

    def package(self, name: str) -> str:
        """The distribution that provides ``name``.

        The one declaring its entry point, else the one holding its class's module
        (``spu`` for spu's own, in a checkout too).
        """
        ep = self.entry_points().get(name)
        if ep is not None and ep.dist is not None:
            return str(ep.dist.name)
        if ep is not None:
            return distribution_of(ep.value.partition(":")[0])
        cls = self._classes.get(name) or self._by_path.get(name)
        return distribution_of(cls.__module__ if cls is not None else name.partition(":")[0])

    def get(self, name: str) -> type[T]:
        """The class called ``name`` (or ``package.module:Class``), imported on first use.

        Raises:
            RegistryError: no such class, or its module does not import, or what the
                entry point names is not a subclass of the registry's base class; the
                message is one line (a :class:`KeyError`, as before entry points).
        """
        known = self._classes.get(name) or self._by_path.get(name)
        if known is not None:
            return known
        if ":" in name:
            cls = self._by_path[name] = self.load(EntryPoint(name=name, value=name,
                                                             group=self.group))
            return cls
        found = self.entry_points().get(name)
        if found is None:
            raise self.unknown(name)
        cls = self._classes[name] = self.load(found)
        return cls

    def load(self, ep: EntryPoint) -> type[T]:
        """The class entry point ``ep`` names, checked (see :meth:`get`)."""
        where = f"{self.kind} {ep.name!r} ({ep.value}, entry point group {self.group})"
        try:
            obj = ep.load()
        except (ImportError, AttributeError) as exc:
            raise RegistryError(f"{where} does not load: {type(exc).__name__}: {exc}") from None
        if not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise RegistryError(f"{where} is not a {self.base.__name__} subclass")
        declared = getattr(obj, "name", None)
        if ":" not in ep.name and declared != ep.name:
            raise RegistryError(f"{where}: the class says name = {declared!r}; set its "
                                f"name to {ep.name!r}, the entry point's")
        return obj  # type: ignore[return-value]
