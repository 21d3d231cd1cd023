"""Task packages (SPEC section 1): loading, discovery and the public/hidden split."""

from spu.tasks.package import (
    PUBLIC_PATHS,
    TaskLoadError,
    TaskPackage,
    discover_tasks,
    load_answers,
    load_task,
    stage_public_files,
)

__all__ = [
    "PUBLIC_PATHS",
    "TaskLoadError",
    "TaskPackage",
    "discover_tasks",
    "load_answers",
    "load_task",
    "stage_public_files",
]
