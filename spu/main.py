"""The Hydra application: ``python -m spu.main [overrides] [-m sweep]``.

It only composes and runs: the config becomes a typed :class:`~spu.runner.RunSpec`,
``run_one`` runs and grades it, and the record goes to tracking. Each job also
leaves ``result.json`` in its Hydra output folder, which the results table of
:mod:`spu.callbacks` reads when the sweep ends (whatever launcher ran the jobs).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from spu.config import SPUConfig, register_configs

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
        gpu_ids=tuple(conf.sandbox.gpu_ids),
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


def _export_task_root(argv: list[str]) -> None:
    """Pass ``task_root=PATH`` to the task config source before Hydra composes anything."""
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == "task_root":
            os.environ["SPU_TASK_ROOT"] = str(Path(value).expanduser().resolve())


def _output_root(argv: list[str]) -> str:
    """``output_root=PATH`` from the command line (what Hydra will use), else the default."""
    root = "outputs"
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == "output_root":
            root = value
    return root


def main() -> None:
    """Entry point of ``python -m spu.main``."""
    argv = sys.argv[1:]
    _export_task_root(argv)
    if not any(a in ("--help", "-h", "--cfg", "-c", "--info", "--hydra-help") for a in argv):
        full = disk_full(_output_root(argv))
        if full is not None:  # before Hydra writes its first file there
            print(f"spu: {no_space_message(full.filename, full.strerror)}", file=sys.stderr)
            sys.exit(2)
    _hydra_main()


if __name__ == "__main__":
    main()
