"""The project folder's ``conf/<group>/<name>.yaml`` as options of the config groups.

An installed ``spu`` runs in a project folder (SPEC section 16). The search-path plugin
below puts ``spu-project://<folder>/conf`` in front of the packaged config groups
(``pkg://spu.conf``), so a file there adds an option to its group or shadows the
packaged option of the same name; each shadow is said once per process, in one line on
stderr. Only group files are read: a project's ``conf/config.yaml`` would replace the
whole packaged primary config, so :class:`SPUProjectConfigSource` never serves a file
directly under ``conf/`` (an experiment, ``conf/experiment/<name>.yaml``, is where a
project sets its own defaults).

In a source checkout ``conf`` is the packaged folder itself: nothing is added.
"""

from __future__ import annotations

import os
import re
import sys

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

from spu.project import project_conf, shadowed_options

PROVIDER = "spu-project"
_SAID: set[str] = set()
"""The shadow lines this process has printed."""


def _is_group_file(config_path: str) -> bool:
    """``group/name`` (at any depth), not a file directly under ``conf/``."""
    return "/" in config_path.strip("/")


def _yaml_name(config_path: str) -> str:
    """``config_path`` with its ``.yaml`` (Hydra names a config without it)."""
    return config_path if config_path.endswith(".yaml") else f"{config_path}.yaml"


def header_of(text: str) -> dict[str, str | None]:
    r"""The ``# @key value`` lines at the top of a config file, as Hydra reads them.

    Examples:
        >>> header_of("# @package _global_\n# a comment\nexperiment: {}\n")
        {'package': '_global_'}
        >>> header_of("# a comment first\n# @package _global_\n")  # as Hydra: too late
        {'package': None}
        >>> header_of("model: x\n")
        {'package': None}
    """
    found: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        match = re.match(r"#\s*@(\S+)\s+(\S+)\s*$", line)
        if match is None:
            break
        found[match.group(1)] = match.group(2)
    found.setdefault("package", None)
    return found


class SPUProjectConfigSource(ConfigSource):
    """Serves ``<group>/<name>.yaml`` from a project's ``conf/`` folder."""

    @staticmethod
    def scheme() -> str:
        """The search-path scheme this source answers."""
        return PROVIDER

    def _full(self, config_path: str) -> str:
        return os.path.join(self.path, config_path)

    def load_config(self, config_path: str) -> ConfigResult:
        """Load one group file (its ``# @package`` header included)."""
        name = _yaml_name(config_path)
        if not _is_group_file(name) or not os.path.isfile(self._full(name)):
            raise ConfigLoadError(f"no config {config_path!r} in the project's {self.path}")
        with open(self._full(name), encoding="utf-8") as f:
            text = f.read(512)
            f.seek(0)
            cfg = OmegaConf.load(f)
        return ConfigResult(config=cfg, path=f"{self.scheme()}://{self.path}",
                            provider=self.provider, header=header_of(text))

    def available(self) -> bool:
        """True while the project's ``conf/`` exists."""
        return os.path.isdir(self.path)

    def is_group(self, config_path: str) -> bool:
        """A folder under ``conf/`` (or ``conf/`` itself) is a group."""
        return os.path.isdir(self._full(config_path))

    def is_config(self, config_path: str) -> bool:
        """A group file; never a file directly under ``conf/``."""
        name = _yaml_name(config_path)
        return _is_group_file(name) and os.path.isfile(self._full(name))

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        """The groups and group files under ``config_path``."""
        folder = self._full(config_path)
        if not os.path.isdir(folder):
            return []
        groups = results_filter in (None, ObjectType.GROUP)
        configs = results_filter in (None, ObjectType.CONFIG) and _is_group_file(
            f"{config_path}/x")
        found = set()
        for entry in os.listdir(folder):
            full = os.path.join(folder, entry)
            if groups and os.path.isdir(full) and not entry.startswith((".", "__")):
                found.add(entry)
            elif configs and entry.endswith(".yaml") and os.path.isfile(full):
                found.add(entry[: -len(".yaml")])
        return sorted(found)


class SPUProjectSearchPathPlugin(SearchPathPlugin):
    """Puts the project's ``conf/`` in front of the packaged config groups."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """Before the primary config's folder (first match wins), after Hydra's own."""
        conf = project_conf()
        if conf is None:
            return
        for shadow in shadowed_options(conf):
            line = shadow.line()
            if line not in _SAID:
                _SAID.add(line)
                print(line, file=sys.stderr)
        search_path.prepend(provider=PROVIDER, path=f"{PROVIDER}://{conf}",
                            anchor=SearchPathQuery(provider="main"))
