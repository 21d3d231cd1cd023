"""Extension by one file: a registry of classes selectable by name from the config.

Harnesses and sandbox backends each keep one :class:`Registry`. A built-in class is
found by importing its module on first use (so nothing heavy loads before it is
needed); a class outside spu is named ``package.module:Class``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Classes of one kind, by name, with their built-in modules imported lazily."""

    def __init__(self, kind: str, builtin_modules: Mapping[str, str]) -> None:
        self.kind = kind
        self.builtin_modules = dict(builtin_modules)
        self._classes: dict[str, type[T]] = {}

    def register(self, cls: type[T]) -> type[T]:
        """Class decorator: make ``cls`` selectable by its ``name`` attribute."""
        self._classes[cls.name] = cls  # type: ignore[attr-defined]
        return cls

    def names(self) -> list[str]:
        """Every name selectable without a module path: the built-in and registered ones."""
        return sorted(set(self.builtin_modules) | set(self._classes))

    def get(self, name: str) -> type[T]:
        """The class called ``name`` (or ``package.module:Class``), imported on first use.

        Raises
        ------
        KeyError
            When no such class exists; the message lists the known names.
        """
        if name in self._classes:
            return self._classes[name]
        if ":" in name:
            module, _, attr = name.partition(":")
            cls: type[T] = getattr(importlib.import_module(module), attr)
            self._classes[name] = cls
            return cls
        builtin = self.builtin_modules.get(name)
        if builtin is None:
            known = ", ".join(sorted(set(self.builtin_modules) | set(self._classes)))
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}")
        importlib.import_module(builtin)
        return self._classes[name]
