"""Task packages (SPEC section 1): loading, discovery and the public/hidden split.

Validation (:mod:`spu.tasks.validate`), chance thresholds (:mod:`spu.tasks.threshold`)
and the builder (:mod:`spu.tasks.builder`) are imported where they are used.
"""

from spu.tasks.package import (
    PUBLIC_PATHS,
    TaskLoadError,
    TaskPackage,
    discover_tasks,
    load_answers,
    load_protocol,
    load_targets,
    load_task,
    select_tasks,
    stage_public_files,
)

__all__ = [
    "PUBLIC_PATHS",
    "TaskLoadError",
    "TaskPackage",
    "discover_tasks",
    "load_answers",
    "load_protocol",
    "load_targets",
    "load_task",
    "select_tasks",
    "stage_public_files",
]
