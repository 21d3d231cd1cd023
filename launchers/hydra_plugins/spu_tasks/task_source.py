"""A Hydra config source that lists task packages as options of the ``task`` group.

The search path entry ``spu-tasks://auto`` (added by the search-path plugin below) resolves to the
task root: ``task_root=PATH`` on the command line (read by ``spu.main`` before Hydra
starts and passed on as ``SPU_TASK_ROOT``), else ``./tasks``. Each folder holding a
``task.yaml`` becomes ``task=<folder name>``, so ``task='glob(*)'`` sweeps them all, but
for the retired ones (``retired:`` in ``task.yaml``, SPEC 15), which only ``task=<id>`` selects.

One run is one task, so a subset (by discipline, visibility or subfield) is a sweep list,
not an option of this group: ``-m task=$(spu task list --discipline biology --format hydra)``.

Task packages are data, never configuration: only folders that pass
:func:`spu.tasks.package.check_task_folder` (a safe folder name, no link, a ``task.yaml``
that reads into a valid record with a safe id) are options, so one broken package never
stops ``task='glob(*)'`` for the others (the results table lists it as skipped, with
its reason: :func:`spu.callbacks.broken_tasks_of_sweep`); and every text taken from a
task is escaped, so that OmegaConf never resolves a ``${...}`` written in a task file:
the run key the sweep computes is the run key of the run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

from spu.tasks.package import TaskRootScan, scan_task_root

GROUP = "task"
ENV_TASK_ROOT = "SPU_TASK_ROOT"


def escape_interpolation(value: str) -> str:
    r"""``value`` as an OmegaConf string that reads back as itself, ``${...}`` included.

    OmegaConf reads ``\${`` as a literal ``${`` and ``\\`` before ``${`` as one
    backslash, so each run of backslashes before ``${`` is doubled and one is added.

    Examples
    --------
    >>> from omegaconf import OmegaConf
    >>> OmegaConf.create({"v": escape_interpolation("${oc.env:HOME}")}).v
    '${oc.env:HOME}'
    >>> OmegaConf.create({"v": escape_interpolation(r"a\${x}")}).v == r"a\${x}"
    True
    """
    return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)


def task_root(path: str) -> Path:
    """The task root for a source path: ``auto`` means the environment, then ``./tasks``."""
    if path and path != "auto":
        return Path(path).expanduser().resolve()
    return Path(os.environ.get(ENV_TASK_ROOT, "tasks")).expanduser().resolve()


class SPUTaskConfigSource(ConfigSource):
    """Serves ``task/<id>`` from ``<task_root>/<id>/task.yaml``."""

    @staticmethod
    def scheme() -> str:
        """The search-path scheme this source answers."""
        return "spu-tasks"

    def _root(self) -> Path:
        return task_root(self.path)

    def _scan(self) -> TaskRootScan:
        return scan_task_root(self._root())

    def _split(self, config_path: str) -> tuple[str, str]:
        path = config_path.strip("/")
        if path.endswith(".yaml"):
            path = path[: -len(".yaml")]
        group, _, name = path.partition("/")
        return group, name

    def load_config(self, config_path: str) -> ConfigResult:
        """Load ``task/<id>``: the task's ``task.yaml`` plus its absolute path.

        A broken package selected by name loads as its name and the reason (``broken``),
        so that its job reports it and runs nothing, while the other jobs of the sweep run.
        """
        group, name = self._split(config_path)
        scan = self._scan()
        meta = scan.tasks.get(name) if group == GROUP else None
        broken = next((b for b in scan.broken if b.name == name), None)
        if meta is None and broken is not None and group == GROUP:
            values = {"id": name, "version": "", "path": str(scan.root / name),
                      "broken": broken.reason}
        elif meta is None:
            raise ConfigLoadError(f"no task package {name!r} under {self._root()}")
        else:
            values = {
                "id": meta.id,
                "version": meta.version,
                "path": str(scan.root / name),
                "title": meta.title,
                "discipline": meta.discipline.value,
                "subfield": meta.subfield,
                "visibility": meta.visibility.value,
            }
        cfg = OmegaConf.create({k: escape_interpolation(v) for k, v in values.items()})
        return ConfigResult(
            config=cfg,
            path=f"{self.scheme()}://{self._root()}",
            provider=self.provider,
            header={"package": None},
        )

    def available(self) -> bool:
        """Always available; an empty or missing root simply lists no task."""
        return True

    def is_group(self, config_path: str) -> bool:
        """Only ``task`` (and the root) are groups here."""
        return config_path.strip("/") in ("", GROUP)

    def is_config(self, config_path: str) -> bool:
        """``task/<id>`` is a config when the task folder exists (broken: its load fails)."""
        group, name = self._split(config_path)
        if group != GROUP:
            return False
        scan = self._scan()
        return name in scan.tasks or any(b.name == name for b in scan.broken)

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        """Task ids under ``task``; the ``task`` group itself at the root."""
        path = config_path.strip("/")
        if path == "" and results_filter in (None, ObjectType.GROUP):
            return [GROUP]
        if path == GROUP and results_filter in (None, ObjectType.CONFIG):
            # A retired task (SPEC 15) is no option a glob can match; ``task=<id>`` still
            # loads it (is_config), so its runs can be repeated or inspected.
            return sorted(name for name, meta in self._scan().tasks.items()
                          if meta.retired is None)
        return []


class SPUTaskSearchPathPlugin(SearchPathPlugin):
    """Adds ``spu-tasks://auto`` to every search path.

    A ``hydra.searchpath`` entry in ``config.yaml`` would not do: Hydra lists the options
    of a ``glob(*)`` sweep from the base search path, before the primary config is read.
    """

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """Append the task source after the application's own ``conf/``."""
        search_path.append(provider="spu-tasks", path="spu-tasks://auto")
