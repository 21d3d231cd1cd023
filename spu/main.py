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

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from spu.config import register_configs
from spu.internals import run_hydra
from spu.launch.collector import set_launcher_policy
from spu.launch.spec import SelectionError, spec_from_config

log = logging.getLogger("spu")

register_configs()


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


def summary(record: Any, mlflow_run_id: str | None) -> dict[str, Any]:
    """The short result of one job that ran (what the results table shows)."""
    from spu.launch.job import ResultStatus, recorded_result
    from spu.tracking.query import recorded_run_from_record

    return recorded_result(recorded_run_from_record(record, mlflow_run_id), ResultStatus.ran, "")


def run_from_config(cfg: DictConfig) -> dict[str, Any]:
    """Run and track the job of one composed config; returns its summary.

    A run key that an earlier launch finished is skipped and its stored result
    returned; an ``infra_error`` is retried (``sweep.retries``); in a sweep, a job
    starting after ``budget.max_cost_usd`` is reached does not run
    (:func:`spu.launch.job.run_tracked`, the same under every launcher).
    """
    from spu.launch.console import quiet_library_logs
    from spu.launch.job import run_tracked, write_result
    from spu.launch.progress import result_line
    from spu.tasks.package import TaskLoadError

    quiet_library_logs(bool(cfg.get("verbose")))

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
        spec = dataclasses.replace(spec, launcher=hydra_cfg.runtime.choices.get("hydra/launcher"))
        out = Path(hydra_cfg.runtime.output_dir)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            sweep_dir = Path(hydra_cfg.sweep.dir)
    job = run_tracked(cfg, spec, sweep_dir)
    if job.attempts is not None:
        record = job.attempts.record
        result = summary(record, job.attempts.tracking_id)
        result.update(retries=job.attempts.retries, retried_from=record.retried_from)
    else:
        assert job.result is not None
        result = job.result
    log.info("%s", result_line(result))
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


def run_task(cfg: DictConfig) -> dict[str, Any]:
    """Hydra's task function: run one composed job; a configuration error is one line."""
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


def print_plan(argv: Sequence[str]) -> None:
    """Print the jobs the command line would run, with their expected cost (dry run)."""
    from rich.console import Console

    from spu.plan import plan_command, plan_summary, plan_table

    plan = plan_command(argv)
    console = Console(width=None if Console().is_terminal else 140)
    console.print(plan_table(plan))
    for line in plan_summary(plan):
        console.print(line, highlight=False, soft_wrap=True)


def single_run_args(line: Any, args: list[str]) -> list[str]:
    """Hydra's arguments: for a single run, its overrides with its model's default harness.

    A sweep is left as typed (its sweeper applies the same defaults to each job,
    :mod:`spu.launch.jobs`).

    Raises:
        NothingToRun: a single run selects no task.
    """
    from spu.launch.jobs import prepare_single_run

    if line.flags:
        return args  # -m: a sweep; Hydra's other flags (--cfg job ...) take values
    root = line.task_root or Path(os.environ.get("SPU_TASK_ROOT", "tasks")).resolve()
    prepared = prepare_single_run(args, (), str(root))
    return args if prepared is None else prepared


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m spu.main`` and ``spu run``.

    The command line is read once (:class:`~spu.overrides.CommandLine`); Hydra runs on
    it as given, ``sys.argv`` untouched.

    Args:
        argv: the command line after the program name (default ``sys.argv[1:]``).
    """
    from spu.launch.jobs import NothingToRun
    from spu.overrides import CommandLine, OverrideError, check_overrides, explain
    from spu.sandbox.limits import raise_open_files_limit

    raise_open_files_limit()  # a soft nofile of 1,024 is no driver's; each service has its own
    set_launcher_policy()
    line = CommandLine.parse(sys.argv[1:] if argv is None else argv)
    if "dataset" in line.values:  # a pulled dataset is the task root (SPEC 16)
        from spu.datasets import DatasetError
        from spu.datasets.store import with_dataset

        try:
            line = CommandLine.parse(with_dataset(list(line.args)))
        except DatasetError as exc:
            print(f"spu: {exc}", file=sys.stderr)
            sys.exit(2)
    args = list(line.args)
    if line.task_root is not None:
        # For the task config source, which Hydra's search path runs before composing.
        os.environ["SPU_TASK_ROOT"] = str(line.task_root)
    if not line.only_prints:
        try:
            check_overrides(args)
            if line.dry_run:
                print_plan(args)
                return
            args = single_run_args(line, args)
        except (OverrideError, NothingToRun) as exc:
            print(f"spu: {exc}", file=sys.stderr)
            sys.exit(2)
        except Exception as exc:  # Hydra's composition errors, met by the dry run
            message = explain(exc, args)
            if message is None:
                raise
            print(f"spu: {message}", file=sys.stderr)
            sys.exit(2)
        if not line.shows_config:
            full = disk_full(line.output_root)
            if full is not None:  # before Hydra writes its first file there
                print(f"spu: {no_space_message(full.filename, full.strerror)}",
                      file=sys.stderr)
                sys.exit(2)
    # Hydra prints its own errors (several lines, with advice to add keys with +) and
    # exits 1 unless HYDRA_FULL_ERROR is set; set, it raises them here instead.
    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    from spu.launch import interrupt
    from spu.project import CONFIG_MODULE, CONFIG_NAME

    interrupt.install()
    try:
        run_hydra(run_task, args, config_path=f"pkg://{CONFIG_MODULE}",
                  config_name=CONFIG_NAME, version_base="1.3")
    except KeyboardInterrupt:
        interrupt.exit_interrupted()
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
