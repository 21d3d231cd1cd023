"""Adds the ``conf/`` folder of every package declared in entry point group ``spu.conf``.

A plugin package declares, in its ``pyproject.toml``::

    [project.entry-points."spu.conf"]
    my_plugin = "my_plugin"          # the package whose conf/ folder holds group files

and ships ``my_plugin/conf/harness/myharness.yaml`` (or ``sandbox/``, ``effort/``,
``model/``...): ``harness=myharness`` then composes like a built-in option. The folders
are searched after spu's own ``conf/``, so a plugin adds options and never replaces one.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from spu.registry import CONF, group_entry_points

CONF_FOLDER = "conf"
"""The folder of a plugin package that holds its config groups."""


@cache
def plugin_conf_paths() -> tuple[tuple[str, str], ...]:
    """(provider, search path) of each ``spu.conf`` entry point's ``conf/`` folder.

    A package on disk gives ``file://<folder>``; one Hydra can only read as a resource
    (a zipped install) gives ``pkg://<package>.conf``, whose folder then needs an
    ``__init__.py``. Packages that do not import, or have no such folder, are skipped.
    """
    out = []
    for name, ep in sorted(group_entry_points(CONF).items()):
        package = ep.value.partition(":")[0]
        try:
            folder = resources.files(package) / CONF_FOLDER
        except (ImportError, TypeError, ValueError):
            continue
        if isinstance(folder, Path):
            if folder.is_dir():
                out.append((f"spu-plugin-{name}", f"file://{folder}"))
        elif folder.is_dir():
            out.append((f"spu-plugin-{name}", f"pkg://{package}.{CONF_FOLDER}"))
    return tuple(out)


class SPUPluginConfSearchPathPlugin(SearchPathPlugin):
    """Appends each plugin package's ``conf/`` to every search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """After spu's own ``conf/`` (first match wins): plugins add, never replace."""
        for provider, path in plugin_conf_paths():
            search_path.append(provider=provider, path=path)
