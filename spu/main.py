"""The Hydra application: ``python -m spu.main [overrides] [-m sweep]`` (also ``spu run``).

It only composes and runs: the config becomes a typed :class:`~spu.runner.RunSpec`,
``run_one`` runs and grades it, and the record goes to tracking. Each job also
leaves ``result.json`` in its Hydra output folder, which the results table of
:mod:`spu.callbacks` reads when the sweep ends (whatever launcher ran the jobs).

Before Hydra sees the command line, :mod:`spu.overrides` moves ``-m`` to the front
(it may be typed anywhere) and refuses what Hydra would run wrongly; an error Hydra
raises becomes one line naming the override and the nearest valid spelling, exit 2.
``dry_run=true`` lists the jobs with their expected cost and runs none (:mod:`spu.plan`).
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from spu.config import SPUConfig, config_problems, register_configs

log = logging.getLogger("spu")

register_configs()


class SelectionError(ValueError):
    """The configuration selects nothing runnable (for example, no task)."""


MIN_FREE_BYTES = 16 << 20
"""Free space needed under ``output_root`` to start a run (Hydra's files, staging, logs)."""


def disk_full(output_root: Path | str) -> OSError | None:
    """An ``ENOSPC`` error when ``output_root``'s disk has under :data:`MIN_FREE_BYTES` free.

    Checked before Hydra writes anything and before each run, so that a full disk is
    one line, not a traceback from the first file that does not fit.
    """
    import errno

    path = Path(output_root).expanduser().resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= MIN_FREE_BYTES:
        return None
    return OSError(errno.ENOSPC, f"only {free} bytes free, {MIN_FREE_BYTES} needed to start "
                                 f"a run", str(path))


def spec_from_config(cfg: DictConfig) -> Any:
    """Turn a composed config into a :class:`~spu.runner.RunSpec`."""
    from spu.runner import RunSpec

    if OmegaConf.is_missing(cfg, "task"):
        root = Path(cfg.task_root).resolve()
        raise SelectionError(
            f"no task selected: pass task=<id> or -m task='glob(*)' "
            f"(task packages are read from task_root={root})"
        )
    conf: SPUConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    problems = config_problems(conf)
    if problems:
        raise SelectionError(problems[0])
    return RunSpec(
        model=conf.model,
        harness=conf.harness,
        effort=conf.effort,
        task_dir=Path(conf.task.path),
        repeat=conf.repeat,
        output_root=Path(conf.output_root).resolve(),
        answers_root=Path(conf.answers_root).resolve() if conf.answers_root else None,
        sandbox=conf.sandbox,
        limits=conf.limits,
        # A relative corpus is the launching directory's, wherever the run executes.
        tools=dataclasses.replace(conf.tools, corpus=str(Path(conf.tools.corpus).resolve()))
        if conf.tools.corpus else conf.tools,
        gpu_ids=tuple(conf.sandbox.gpu_ids),
        cost=conf.cost,
        model_gateway=conf.model_gateway,
        status_every_s=conf.sweep.status_every_s,
    )


def summary(record: Any, mlflow_run_id: str | None) -> dict[str, Any]:
    """The short result of one job that ran (what the results table shows)."""
    from spu.launch.job import JobStatus, recorded_result
    from spu.tracking.query import recorded_run_from_record

    return recorded_result(recorded_run_from_record(record, mlflow_run_id), JobStatus.ran, "")


def run_from_config(cfg: DictConfig) -> dict[str, Any]:
    """Run and track the job of one composed config; returns its summary.

    A run key that an earlier launch finished is skipped and its stored result
    returned; an ``infra_error`` is retried (``sweep.retries``); in a sweep, a job
    starting after ``budget.max_cost_usd`` is reached does not run
    (:func:`spu.launch.job.run_tracked`, the same under every launcher).
    """
    from spu.launch.job import run_tracked, write_result
    from spu.tasks.package import TaskLoadError

    if cfg.get("dry_run"):
        raise SelectionError("dry_run=true: a job was about to start; dry runs are planned "
                             "from the command line (python -m spu.main ... dry_run=true)")
    selected = not OmegaConf.is_missing(cfg, "task") and cfg.task is not None
    if selected and cfg.task.get("broken"):  # a broken package selected by name
        raise TaskLoadError(f"task={cfg.task.id}: {cfg.task.broken}")
    spec = spec_from_config(cfg)
    full = disk_full(spec.output_root)
    if full is not None:
        raise full
    out = sweep_dir = None
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        out = Path(hydra_cfg.runtime.output_dir)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            sweep_dir = Path(hydra_cfg.sweep.dir)
    job = run_tracked(cfg, spec, sweep_dir)
    if job.attempts is not None:
        record = job.attempts.record
        result = summary(record, job.attempts.tracking_id)
        result.update(retries=job.attempts.retries, retried_from=record.retried_from)
        log.info(
            "%s %s/%s: %s, score %.3f", record.run_key, record.task_id, record.config,
            record.outcome.value, result["score"],
        )
    else:
        assert job.result is not None
        result = job.result
        log.info("%s %s/%s-%s: %s (%s)", result["run_key"], result["task"], result["model"],
                 result["effort"], job.status, result["note"])
    if out is not None:
        write_result(out, result)
    return result


def skip_broken_task(cfg: DictConfig, exc: Exception) -> dict[str, Any]:
    """In a sweep, a task that cannot run is reported in one line and recorded; the rest go on."""
    from spu.callbacks import broken_task_result
    from spu.launch.job import write_result

    name = str(OmegaConf.select(cfg, "task.id", default="?"))
    log.warning("broken task %r skipped: %s", name, exc)
    result = broken_task_result(name, str(exc))
    result.update(model=str(cfg.model.name), harness=str(cfg.harness.name),
                  effort=str(cfg.effort.name), repeat=int(cfg.repeat))
    if HydraConfig.initialized():
        write_result(Path(HydraConfig.get().runtime.output_dir), result)
    return result


def operator_fault(cfg: DictConfig, exc: BaseException) -> str | None:
    """One line for a fault of the machine or the store (what to do included), else None.

    A corrupted, locked or full tracking store (:func:`spu.tracking.store.store_fault`),
    and a full disk. Finished runs are safe in every case: ``run.json`` is written
    atomically, and a relaunch skips them.
    """
    import errno

    from spu.tracking.store import TrackingStoreError, resolve_target, store_fault

    if isinstance(exc, TrackingStoreError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return no_space_message(exc.filename or Path(str(cfg.output_root)).resolve(),
                                exc.strerror)
    if cfg.tracking.enabled and isinstance(exc, Exception):
        target = resolve_target(cfg.tracking, Path(str(cfg.output_root)),
                                str(cfg.experiment.name))
        fault = store_fault(exc, target.uri)
        if fault is not None:
            return str(fault)
    return None


def no_space_message(where: object, detail: str | None = None) -> str:
    """What to do about a full disk, in one line."""
    why = f" ({detail})" if detail and detail != "No space left on device" else ""
    return (f"{where}: no space left on the device{why}: free space there (or set "
            f"output_root= to a larger disk) and relaunch; finished runs are kept and "
            f"skipped, the interrupted one runs again")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> dict[str, Any]:
    from spu.runner import RunConfigError
    from spu.tasks.package import TaskLoadError

    try:
        return run_from_config(cfg)
    except (RunConfigError, SelectionError) as exc:
        # A configuration that cannot run: say what to fix, without a traceback.
        print(f"spu: {exc}", file=sys.stderr)
        sys.exit(2)
    except TaskLoadError as exc:
        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            return skip_broken_task(cfg, exc)
        print(f"spu: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:
        message = operator_fault(cfg, exc)
        if message is None:
            raise
        print(f"spu: {message}", file=sys.stderr)
        sys.exit(2)


def _export_task_root(argv: Sequence[str]) -> None:
    """Pass ``task_root=PATH`` to the task config source before Hydra composes anything."""
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == "task_root":
            os.environ["SPU_TASK_ROOT"] = str(Path(value).expanduser().resolve())


def _output_root(argv: Sequence[str]) -> str:
    """``output_root=PATH`` from the command line (what Hydra will use), else the default."""
    root = "outputs"
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == "output_root":
            root = value
    return root


HELP_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
              "--version")
"""Hydra's flags that only print something: no check is made before them."""

TRUE = ("true", "yes", "on", "1")


def dry_run_requested(argv: Sequence[str]) -> bool:
    """True when the command line sets ``dry_run=true``.

    Examples:
        >>> dry_run_requested(["-m", "task=glob(*)", "dry_run=true"])
        True
        >>> dry_run_requested(["dry_run=false"])
        False
    """
    value = None
    for arg in argv:
        key, sep, text = arg.lstrip("+").partition("=")
        if sep and key == "dry_run":
            value = text.strip().lower()
    return value in TRUE


def print_plan(argv: Sequence[str]) -> None:
    """Print the jobs the command line would run, with their expected cost (dry run)."""
    from rich.console import Console

    from spu.plan import plan_command, plan_summary, plan_table

    plan = plan_command(argv)
    console = Console(width=None if Console().is_terminal else 140)
    console.print(plan_table(plan))
    for line in plan_summary(plan):
        console.print(line, highlight=False, soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m spu.main`` and ``spu run``.

    Args:
        argv: the command line after the program name (default ``sys.argv[1:]``).
    """
    from spu.overrides import OverrideError, check_overrides, explain, normalize_argv

    # Registered first, so run last: what is alive at exit is left out of the collection
    # the interpreter makes while it shuts down, which walks every object (MLflow, Ray,
    # SQLAlchemy: 1-1.5 s of CPU at the end of each sweep). Files and logs are closed
    # and flushed before (by their own code and logging's handler at exit).
    atexit.register(gc.freeze)
    args = normalize_argv(sys.argv[1:] if argv is None else argv)
    _export_task_root(args)
    if not any(a in HELP_FLAGS for a in args):
        try:
            check_overrides(args)
            if dry_run_requested(args):
                print_plan(args)
                return
        except OverrideError as exc:
            print(f"spu: {exc}", file=sys.stderr)
            sys.exit(2)
        except Exception as exc:  # Hydra's composition errors, met by the dry run
            message = explain(exc, args)
            if message is None:
                raise
            print(f"spu: {message}", file=sys.stderr)
            sys.exit(2)
        if not any(a in ("--cfg", "-c") for a in args):
            full = disk_full(_output_root(args))
            if full is not None:  # before Hydra writes its first file there
                print(f"spu: {no_space_message(full.filename, full.strerror)}",
                      file=sys.stderr)
                sys.exit(2)
    sys.argv = [sys.argv[0], *args]
    # Hydra prints its own errors (several lines, with advice to add keys with +) and
    # exits 1 unless HYDRA_FULL_ERROR is set; set, it raises them here instead.
    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _hydra_main()
    except Exception as exc:
        message = None if user_full_error else explain(exc, args)
        if message is None:
            raise
        print(f"spu: {message}", file=sys.stderr)
        sys.exit(2)
    finally:
        if user_full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)


if __name__ == "__main__":
    main()
