"""Where configuration is read from: the packaged config groups and the project folder.

Every module that reads a config group reads it through here, in one order:

1. the project folder's ``conf/`` (the folder ``spu`` runs in, SPEC section 16): its
   ``conf/<group>/<name>.yaml`` adds an option to a group, or shadows the packaged option
   of the same name (said in one line, :func:`shadowed_options`);
2. the packaged config groups, ``spu/conf`` inside the installed package (Hydra reads
   them as ``pkg://spu.conf``, :data:`CONFIG_MODULE`);
3. the ``conf/`` folder of each plugin package (entry point group ``spu.conf``), which
   adds options and never replaces one.

A source checkout is a project folder too: its ``conf`` is a link to ``spu/conf``, so
there the project's conf and the packaged one are the same folder, read once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

CONFIG_MODULE = "spu.conf"
"""The package holding spu's own config groups (Hydra's ``pkg://spu.conf``)."""

PACKAGED_CONF = Path(__file__).resolve().parent / "conf"
"""The packaged config groups on disk (the package is installed unzipped)."""

PROJECT_CONF = "conf"
"""The folder of a project that holds its own config group files."""

CONFIG_NAME = "config"
"""The primary config (``conf/config.yaml``); a project's own is never read."""


def project_conf(folder: str | Path | None = None) -> Path | None:
    """The project's ``conf/`` folder: ``folder`` (default: the current one) / ``conf``.

    None when there is none, or when it is the packaged folder itself (a checkout).
    """
    try:
        conf = Path(folder if folder is not None else os.getcwd()) / PROJECT_CONF
    except OSError:  # the current folder was removed: no project
        return None
    if not conf.is_dir():
        return None
    if conf.resolve() == PACKAGED_CONF:
        return None
    return conf.resolve()


@dataclass(frozen=True)
class PluginConf:
    """The ``conf/`` folder of a plugin package declared in entry point group ``spu.conf``."""

    name: str
    """The entry point's name."""
    package: str
    """The package holding ``conf/``."""
    folder: Path | None
    """The folder on disk; None when the package can only be read as a resource (zipped)."""


@cache
def plugin_confs() -> tuple[PluginConf, ...]:
    """Each ``spu.conf`` entry point's ``conf/`` folder, by entry point name.

    Packages that do not import, or have no such folder, are left out.
    """
    from spu.registry import CONF, group_entry_points

    out = []
    for name, ep in sorted(group_entry_points(CONF).items()):
        package = ep.value.partition(":")[0]
        try:
            folder = resources.files(package) / PROJECT_CONF
        except (ImportError, TypeError, ValueError):
            continue
        if isinstance(folder, Path):
            if folder.is_dir():
                out.append(PluginConf(name, package, folder))
        elif folder.is_dir():
            out.append(PluginConf(name, package, None))
    return tuple(out)


def conf_dirs(folder: str | Path | None = None) -> tuple[Path, ...]:
    """The config folders on disk in the order a name is looked up: project, packaged, plugins."""
    project = project_conf(folder)
    plugins = tuple(p.folder for p in plugin_confs() if p.folder is not None)
    return (*([project] if project is not None else []), PACKAGED_CONF, *plugins)


def option_file(group: str, name: str, folder: str | Path | None = None) -> Path | None:
    """The file of option ``name`` of ``group`` that composition uses (the first found).

    Examples:
        >>> option_file("model", "opus5").relative_to(PACKAGED_CONF).as_posix()
        'model/opus5.yaml'
        >>> option_file("model", "no-such-model") is None
        True
    """
    for conf in conf_dirs(folder):
        path = conf / group / f"{name}.yaml"
        if path.is_file():
            return path
    return None


def group_options(group: str, folder: str | Path | None = None) -> list[str]:
    """The names of the options of ``group`` over every config folder."""
    return sorted({p.stem for conf in conf_dirs(folder) for p in (conf / group).glob("*.yaml")})


def is_group(name: str, folder: str | Path | None = None) -> bool:
    """True when ``name`` is a config group folder of some config folder."""
    return any((conf / name).is_dir() for conf in conf_dirs(folder))


@dataclass(frozen=True)
class Shadow:
    """A project's option that replaces an option of the same name elsewhere."""

    group: str
    name: str
    path: Path
    """The project's file."""
    shadowed: Path
    """The file it replaces (packaged, or a plugin's)."""

    def line(self) -> str:
        """What the console says about it, in one line."""
        return (f"spu: {PROJECT_CONF}/{self.group}/{self.name}.yaml of this project shadows "
                f"the packaged {self.group}={self.name}")


def project_options(project: Path) -> list[tuple[str, str, Path]]:
    """(group, name, file) of every option file under a project's ``conf/``.

    Group files at any depth (``hydra/launcher/x.yaml``); files directly under ``conf/``
    are not options (a project's ``config.yaml`` is never read).
    """
    found = []
    for path in sorted(project.rglob("*.yaml")):
        rel = path.relative_to(project)
        if len(rel.parts) < 2:
            continue
        found.append((rel.parent.as_posix(), rel.stem, path))
    return found


def shadowed_options(project: Path) -> list[Shadow]:
    """The project's options that replace a packaged (or plugin) option of the same name."""
    others = [PACKAGED_CONF, *(p.folder for p in plugin_confs() if p.folder is not None)]
    shadows = []
    for group, name, path in project_options(project):
        for conf in others:
            theirs = conf / group / f"{name}.yaml"
            if theirs.is_file():
                shadows.append(Shadow(group, name, path, theirs))
                break
    return shadows
