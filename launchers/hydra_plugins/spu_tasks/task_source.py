"""A Hydra config source that lists task packages as options of the ``task`` group.

The search path entry ``spu-tasks://auto`` (added by the search-path plugin below) resolves to the
task root: ``task_root=PATH`` on the command line (read by ``spu.main`` before Hydra
starts and passed on as ``SPU_TASK_ROOT``), else ``./tasks``. Each folder holding a
``task.yaml`` becomes ``task=<folder name>``, so ``task='glob(*)'`` sweeps them all.

One run is one task, so a subset (by discipline, visibility or subfield) is a sweep list,
not an option of this group: ``-m task=$(spu task list --discipline biology --format hydra)``.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

GROUP = "task"
ENV_TASK_ROOT = "SPU_TASK_ROOT"


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

    def _task_dirs(self) -> dict[str, Path]:
        root = self._root()
        if not root.is_dir():
            return {}
        return {
            p.name: p
            for p in sorted(root.iterdir())
            if p.is_dir() and (p / "task.yaml").is_file() and not p.name.startswith(".")
        }

    def _split(self, config_path: str) -> tuple[str, str]:
        path = config_path.strip("/")
        if path.endswith(".yaml"):
            path = path[: -len(".yaml")]
        group, _, name = path.partition("/")
        return group, name

    def load_config(self, config_path: str) -> ConfigResult:
        """Load ``task/<id>``: the task's ``task.yaml`` plus its absolute path."""
        group, name = self._split(config_path)
        task_dir = self._task_dirs().get(name) if group == GROUP else None
        if task_dir is None:
            raise ConfigLoadError(f"no task package {name!r} under {self._root()}")
        from spu.tasks.package import TaskLoadError, load_meta

        try:
            meta = load_meta(task_dir)
        except TaskLoadError as exc:
            raise ConfigLoadError(str(exc)) from None
        cfg = OmegaConf.create(
            {
                "id": meta.id,
                "version": meta.version,
                "path": str(task_dir),
                "title": meta.title,
                "discipline": meta.discipline.value,
                "subfield": meta.subfield,
                "visibility": meta.visibility.value,
            }
        )
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
        """``task/<id>`` is a config when the task folder exists."""
        group, name = self._split(config_path)
        return group == GROUP and name in self._task_dirs()

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        """Task ids under ``task``; the ``task`` group itself at the root."""
        path = config_path.strip("/")
        if path == "" and results_filter in (None, ObjectType.GROUP):
            return [GROUP]
        if path == GROUP and results_filter in (None, ObjectType.CONFIG):
            return sorted(self._task_dirs())
        return []


class SPUTaskSearchPathPlugin(SearchPathPlugin):
    """Adds ``spu-tasks://auto`` to every search path.

    A ``hydra.searchpath`` entry in ``config.yaml`` would not do: Hydra lists the options
    of a ``glob(*)`` sweep from the base search path, before the primary config is read.
    """

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """Append the task source after the application's own ``conf/``."""
        search_path.append(provider="spu-tasks", path="spu-tasks://auto")
