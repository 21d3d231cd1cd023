"""Adds the ``conf/`` folder of every package declared in entry point group ``spu.conf``.

A plugin package declares, in its ``pyproject.toml``::

    [project.entry-points."spu.conf"]
    my_plugin = "my_plugin"          # the package whose conf/ folder holds group files

and ships ``my_plugin/conf/harness/myharness.yaml`` (or ``sandbox/``, ``effort/``,
``model/``...): ``harness=myharness`` then composes like a built-in option. The folders
are searched after spu's own ``conf/``, so a plugin adds options and never replaces one.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from spu.project import PROJECT_CONF, plugin_confs


def plugin_conf_paths() -> tuple[tuple[str, str], ...]:
    """(provider, search path) of each ``spu.conf`` entry point's ``conf/`` folder.

    A package on disk gives ``file://<folder>``; one Hydra can only read as a resource
    (a zipped install) gives ``pkg://<package>.conf``, whose folder then needs an
    ``__init__.py``. Packages that do not import, or have no such folder, are skipped
    (:func:`spu.project.plugin_confs`).
    """
    return tuple((f"spu-plugin-{p.name}",
                  f"file://{p.folder}" if p.folder is not None
                  else f"pkg://{p.package}.{PROJECT_CONF}")
                 for p in plugin_confs())


class SPUPluginConfSearchPathPlugin(SearchPathPlugin):
    """Appends each plugin package's ``conf/`` to every search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """After spu's own ``conf/`` (first match wins): plugins add, never replace."""
        for provider, path in plugin_conf_paths():
            search_path.append(provider=provider, path=path)
