"""The sweep driver of ``hydra/launcher=ray``.

For a batch of jobs it:

1. composes each job's config (as Hydra's basic launcher does), with absolute paths
   and the sweep folder resolved here, so workers write where the driver reads;
2. decides each run key from tracking (:mod:`spu.launch.resume`): finished keys are
   skipped without asking Ray for anything, their stored results written to the
   sweep folder and counted in the budget;
3. starts Ray (or joins the cluster), fits each run's request (CPUs, GPUs, memory and
   a ``sandbox_slot``) to the nodes, and starts an MLflow server when parallel workers
   would otherwise share a SQLite file;
4. keeps at most ``max_concurrent`` runs (default: as many as the cluster holds) in
   flight as Ray tasks, streams each result as it arrives, keeps a progress line, stops
   launching once ``budget.max_cost_usd`` is spent, and relaunches a job whose worker
   died after recording the lost attempt (:func:`spu.launch.job.record_lost_attempt`);
5. stops the server, shuts Ray down if it started it, and returns one
   :class:`~hydra.core.utils.JobReturn` per job, in order.

Retries of ``infra_error`` within a worker, and the resume check repeated there,
come from ``spu.main.run_from_config`` as under any launcher.
"""

from __future__ import annotations

import copy
import logging
import os
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra_plugins.spu_ray_launcher._worker import run_job_on_worker
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from ray.exceptions import RayError, RayTaskError

from spu.launch.budget import CostLedger
from spu.launch.job import JobStatus as RunStatus
from spu.launch.job import (
    RunIdentity,
    not_launched_result,
    record_lost_attempt,
    recorded_result,
    tracking_target,
    write_result,
)
from spu.launch.progress import ProgressDisplay, SweepProgress
from spu.launch.resources import (
    SANDBOX_SLOT,
    RunRequest,
    capacity,
    check_feasible,
    fit_request,
    run_request,
)
from spu.launch.resume import ResumeMode, latest_attempts, plan_run
from spu.launch.server import TrackingServer

if TYPE_CHECKING:
    from hydra_plugins.spu_ray_launcher.ray_launcher import SPURayLauncher

log = logging.getLogger(__name__)


@dataclass
class SweepJob:
    """One job of the batch, as the driver tracks it."""

    idx: int
    overrides: list[str]
    config: DictConfig
    folder: Path
    identity: RunIdentity | None
    request: RunRequest
    lost: int = 0


def _absolute(cfg: DictConfig, key: str) -> None:
    value = OmegaConf.select(cfg, key)
    if value:
        OmegaConf.update(cfg, key, str(Path(str(value)).expanduser().resolve()))


def compose_job(launcher: SPURayLauncher, overrides: Sequence[str], idx: int,
                sweep_dir: Path) -> SweepJob:
    """The config of one job, ready to travel to a worker on this machine or another."""
    assert launcher.hydra_context is not None and launcher.config is not None
    cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config,
                                                                 list(overrides))
    with open_dict(cfg), read_write(cfg.hydra):
        cfg.hydra.job.id = idx
        cfg.hydra.job.num = idx
        # ``${now:...}`` would resolve again, later, in each worker.
        cfg.hydra.sweep.dir = str(sweep_dir)
        for key in ("output_root", "task_root", "answers_root"):
            _absolute(cfg, key)
    folder = sweep_dir / str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
    identity = RunIdentity.from_config(cfg)
    chosen = OmegaConf.to_container(launcher.resources, resolve=True)
    assert isinstance(chosen, dict)
    limits = OmegaConf.to_container(cfg.limits, resolve=True)
    assert isinstance(limits, dict)
    request = run_request(limits, str(identity.task_dir) if identity else None, chosen)
    return SweepJob(idx=idx, overrides=list(overrides), config=cfg, folder=folder,
                    identity=identity, request=request)


def job_return(job: SweepJob, value: Any, failed: bool = False) -> JobReturn:
    """The JobReturn of a job the driver settled without running it on a worker."""
    task_cfg = copy.deepcopy(job.config)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    ret = JobReturn(overrides=job.overrides, cfg=task_cfg,
                    hydra_cfg=OmegaConf.create({"hydra": job.config.hydra}),
                    working_dir=os.getcwd(), task_name=str(job.config.hydra.job.name))
    ret.status = JobStatus.FAILED if failed else JobStatus.COMPLETED
    ret.return_value = value
    return ret


def start_ray(launcher: SPURayLauncher) -> bool:
    """Start a local Ray or join a cluster; True when this call started it."""
    if ray.is_initialized():
        return False
    init = launcher.init
    kwargs: dict[str, Any] = {"namespace": init.namespace, "log_to_driver": init.log_to_driver}
    if init.runtime_env:
        kwargs["runtime_env"] = OmegaConf.to_container(init.runtime_env, resolve=True)
    if init.address:
        kwargs["address"] = init.address
    else:
        cpus = init.num_cpus or os.cpu_count() or 1
        kwargs.update(num_cpus=cpus, include_dashboard=init.include_dashboard,
                      resources={SANDBOX_SLOT: float(init.sandbox_slots or cpus)})
        if init.num_gpus is not None:
            kwargs["num_gpus"] = init.num_gpus
        if init.object_store_memory:
            kwargs["object_store_memory"] = int(init.object_store_memory)
    ray.init(**kwargs)
    return True


def alive_nodes() -> list[dict[str, float]]:
    """The resource totals of every alive node."""
    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def decide_from_tracking(jobs: list[SweepJob]) -> dict[int, dict[str, Any]]:
    """The stored result of every job an earlier launch finished, by job index."""
    groups: dict[tuple[Any, str], list[SweepJob]] = {}
    for job in jobs:
        if job.identity is None:
            continue
        mode = ResumeMode.parse(str(job.config.sweep.resume))
        if mode is ResumeMode.off:
            continue
        root = Path(str(job.config.output_root))
        target = tracking_target(job.config, root)
        groups.setdefault((target, str(root)), []).append(job)
    skipped: dict[int, dict[str, Any]] = {}
    for (target, root), members in groups.items():
        assert all(j.identity for j in members)
        latest = latest_attempts(target, Path(root), [j.identity.run_key  # type: ignore[union-attr]
                                                      for j in members])
        for job in members:
            assert job.identity is not None
            held = latest.get(job.identity.run_key)
            plan = plan_run(held, str(job.config.sweep.resume), int(job.config.sweep.retries))
            if plan.skip and held is not None:
                skipped[job.idx] = recorded_result(held, RunStatus.skipped, plan.reason)
    return skipped


def shared_sqlite_target(jobs: list[SweepJob]) -> Any:
    """The local SQLite tracking target of the jobs to run, or None (one store at most)."""
    targets = {tracking_target(j.config, Path(str(j.config.output_root))) for j in jobs}
    targets.discard(None)
    sqlite = sorted((t for t in targets if t.uri.startswith("sqlite:///")), key=str)
    if not sqlite:
        return None
    uris = {t.uri for t in targets}
    if len(uris) > 1:
        stores = ", ".join(sorted(uris))
        raise ValueError(f"the jobs of this sweep track to several stores ({stores}); a "
                         "parallel sweep on SQLite needs one: give every job the same "
                         "tracking.uri and output_root")
    return sqlite[0]


class Driver:
    """Runs the jobs left after the resume check, on Ray, until done or out of budget."""

    def __init__(self, launcher: SPURayLauncher, jobs: list[SweepJob], window: int,
                 ledger: CostLedger, progress: SweepProgress, display: ProgressDisplay) -> None:
        self.launcher = launcher
        self.pending: deque[SweepJob] = deque(jobs)
        self.window = window
        self.ledger = ledger
        self.progress = progress
        self.display = display
        self.returns: dict[int, JobReturn] = {}
        self.in_flight: dict[Any, SweepJob] = {}
        assert launcher.hydra_context is not None
        self.remote = ray.remote(run_job_on_worker)
        # Put once: every task then carries references, not copies.
        self.shared = (ray.put(launcher.hydra_context), ray.put(launcher.task_function),
                       ray.put(Singleton.get_state()))
        display.running = self.running_status

    def running_status(self) -> list[Any]:
        """Elapsed time and latest event of each run in flight (their ``status.json``)."""
        from spu.harness.monitor import read_status

        found = []
        for job in self.in_flight.values():
            if job.identity is None:
                continue
            run_dir = Path(str(job.config.output_root)) / "runs" / job.identity.run_key
            status = read_status(run_dir)
            if status is not None:
                found.append(status)
        return found

    def submit(self, job: SweepJob) -> None:
        """Hand one job to Ray as a task with its resources."""
        req = job.request
        options: dict[str, Any] = {"num_cpus": req.cpus, "num_gpus": req.gpus,
                                   "max_retries": 0, "retry_exceptions": False,
                                   "name": f"spu-job-{job.idx}"}
        if req.memory_bytes:
            options["memory"] = req.memory_bytes
        if req.sandbox_slots:
            options["resources"] = {SANDBOX_SLOT: req.sandbox_slots}
        ctx, task_function, state = self.shared
        ref = self.remote.options(**options).remote(ctx, job.config, task_function, state)
        self.in_flight[ref] = job
        self.progress.launched()
        log.info("#%d: %s", job.idx, " ".join(filter_overrides(job.overrides)))

    def stop_for_budget(self) -> None:
        """Settle every job not launched yet as not launched, and say why."""
        settle_not_launched(list(self.pending), self.ledger, self.progress, self.display,
                            self.returns)
        self.pending.clear()

    def finish(self, ref: Any) -> None:
        """Collect one finished task: stream its result, or relaunch a lost attempt."""
        job = self.in_flight.pop(ref)
        try:
            ret: JobReturn = ray.get(ref, timeout=self.launcher.get_timeout_s)
        except RayTaskError as exc:
            self.progress.finished(None)
            self.display.say(f"[red]job #{job.idx} failed on its worker: {exc}[/red]")
            self.returns[job.idx] = job_return(job, exc, failed=True)
            return
        except RayError as exc:
            self.lost(job, exc)
            return
        if ret.status is not JobStatus.COMPLETED:
            self.progress.finished(None)
            error = ret._return_value
            self.display.say(f"[red]job #{job.idx} failed: {type(error).__name__}: "
                             f"{error}[/red]")
        else:
            result = ret.return_value
            self.progress.finished(result)
            if result.get("status") in (RunStatus.ran, RunStatus.skipped):
                self.ledger.add(result.get("cost_usd"))
            self.display.result(result)
        self.returns[job.idx] = ret

    def lost(self, job: SweepJob, exc: RayError) -> None:
        """The worker (or node) running ``job`` died: record the attempt, maybe relaunch."""
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        retries = int(job.config.sweep.retries)
        lost = record_lost_attempt(job.config, reason, retries_left=job.lost < retries)
        job.lost += 1
        if lost.retry:
            self.progress.lost()
            self.display.say(f"[yellow]job #{job.idx}: worker lost ({reason}); "
                             f"launching it again[/yellow]")
            self.pending.appendleft(job)
            return
        self.progress.finished(lost.result)
        if lost.result is None:
            self.display.say(f"[red]job #{job.idx}: worker lost ({reason})[/red]")
            self.returns[job.idx] = job_return(job, exc, failed=True)
            return
        write_result(job.folder, lost.result)
        self.ledger.add(lost.result.get("cost_usd"))
        self.display.result(lost.result)
        self.returns[job.idx] = job_return(job, lost.result)

    def run(self) -> None:
        """Launch, collect and refresh until every job is settled."""
        while self.pending or self.in_flight:
            while self.pending and len(self.in_flight) < self.window and not self.ledger.reached:
                self.submit(self.pending.popleft())
            if self.pending and self.ledger.reached:
                self.stop_for_budget()
            if not self.in_flight:
                continue
            ready, _ = ray.wait(list(self.in_flight), num_returns=1,
                                timeout=self.launcher.poll_s)
            for ref in ready:
                self.finish(ref)
            self.display.refresh()


def settle_not_launched(jobs: list[SweepJob], ledger: CostLedger, progress: SweepProgress,
                        display: ProgressDisplay, returns: dict[int, JobReturn]) -> None:
    """Settle jobs the budget keeps from starting: say so, write their result rows."""
    message = ledger.stop_message(len(jobs))
    # Said once: the display is the console (a log record too would print it twice).
    display.say(f"[bold yellow]{message}[/bold yellow]")
    for job in jobs:
        assert job.identity is not None
        result = not_launched_result(job.identity, "budget")
        write_result(job.folder, result)
        returns[job.idx] = job_return(job, result)
        progress.not_launched += 1


def settle_duplicates(jobs: list[SweepJob], progress: SweepProgress, display: ProgressDisplay,
                      returns: dict[int, JobReturn]) -> list[SweepJob]:
    """Keep one job per run key: two at once would share a run folder."""
    first: dict[str, int] = {}
    kept = []
    for job in jobs:
        key = job.identity.run_key if job.identity else None
        if key is None or key not in first:
            if key is not None:
                first[key] = job.idx
            kept.append(job)
            continue
        assert job.identity is not None
        display.say(f"job #{job.idx} is the same run as job #{first[key]} ({key}): not launched")
        result = not_launched_result(job.identity, f"same run as job #{first[key]}")
        write_result(job.folder, result)
        returns[job.idx] = job_return(job, result)
        progress.not_launched += 1
    return kept


def fit_to_nodes(launcher: SPURayLauncher, jobs: list[SweepJob]) -> int:
    """Fit each job's request to the alive nodes; returns how many run at once."""
    nodes = alive_nodes()
    notes: Counter[str] = Counter()
    for job in jobs:
        if launcher.resources.fit_to_cluster:
            job.request, reduced = fit_request(job.request, nodes)
            notes.update(reduced)
        if not launcher.init.address or launcher.resources.fit_to_cluster:
            check_feasible(job.request, nodes)
    for note in notes:
        log.warning(note)
    held = capacity(jobs[0].request, nodes)
    return min(len(jobs), launcher.max_concurrent or held) or 1


def launch(launcher: SPURayLauncher, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int) -> list[JobReturn]:
    """Run a batch of jobs on Ray (see the module docstring)."""
    setup_globals()
    assert launcher.config is not None and launcher.hydra_context is not None
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    # The MLflow client prints a link per run it ends on a server: one line per run here.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    jobs = [compose_job(launcher, overrides, initial_job_idx + i, sweep_dir)
            for i, overrides in enumerate(job_overrides)]
    limit = config.budget.max_cost_usd
    ledger = CostLedger(None if limit is None else float(limit))
    progress = SweepProgress(len(jobs), ledger.limit_usd)
    returns: dict[int, JobReturn] = {}
    for idx, result in decide_from_tracking(jobs).items():
        job = next(j for j in jobs if j.idx == idx)
        write_result(job.folder, result)
        returns[idx] = job_return(job, result)
        ledger.add(result.get("cost_usd"))
        progress.skipped_one(result)
    to_run = [j for j in jobs if j.idx not in returns]
    with ProgressDisplay(progress, launcher.progress, launcher.progress_every_s) as display:
        to_run = settle_duplicates(to_run, progress, display, returns)
        if to_run and ledger.reached:
            settle_not_launched(to_run, ledger, progress, display, returns)
            to_run = []
        if to_run:
            returns.update(run_on_ray(launcher, to_run, sweep_dir, len(jobs) - len(to_run),
                                      ledger, progress, display))
        else:
            display.say(f"SPU sweep: {len(jobs)} jobs, none to launch on Ray "
                        f"({progress.skipped} skipped, {progress.not_launched} not launched)")
    return [returns[j.idx] for j in jobs]


def run_on_ray(launcher: SPURayLauncher, jobs: list[SweepJob], sweep_dir: Path, settled: int,
               ledger: CostLedger, progress: SweepProgress,
               display: ProgressDisplay) -> dict[int, JobReturn]:
    """Start Ray (and a tracking server if needed), run the jobs, stop what was started."""
    # Spawned before Ray starts, so that both start up at the same time.
    server = spawn_tracking_server(launcher, jobs, sweep_dir)
    started = False
    try:
        started = start_ray(launcher)
        window = fit_to_nodes(launcher, jobs)
        if server is not None:
            use_tracking_server(server, jobs, len(alive_nodes()))
        display.say(f"SPU sweep on Ray: {settled + len(jobs)} jobs, {settled} skipped (finished "
                    f"earlier), {len(jobs)} to run, {window} at a time, each "
                    f"{jobs[0].request.describe()}"
                    + (f"; tracking through {server.uri}" if server else ""))
        driver = Driver(launcher, jobs, window, ledger, progress, display)
        driver.run()
        return driver.returns
    finally:
        if server is not None:
            server.stop()
        if started and launcher.shutdown:
            ray.shutdown()


def spawn_tracking_server(launcher: SPURayLauncher, jobs: list[SweepJob],
                          sweep_dir: Path) -> TrackingServer | None:
    """Spawn an MLflow server when parallel workers would share a SQLite file.

    ``tracking_server``: ``auto`` (when more than one run may go at once), ``always``
    or ``never``. The server is waited for in :func:`use_tracking_server`.
    """
    mode = launcher.tracking_server
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"hydra.launcher.tracking_server={mode!r}: not auto, always or never")
    target = shared_sqlite_target(jobs)
    parallel = len(jobs) > 1 and launcher.max_concurrent != 1
    if target is None or mode == "never" or (mode == "auto" and not parallel):
        return None
    server = TrackingServer(target.uri, target.artifact_root, sweep_dir / "mlflow-server.log",
                            workers=launcher.tracking_server_workers)
    server.spawn()
    return server


def use_tracking_server(server: TrackingServer, jobs: list[SweepJob], n_nodes: int) -> None:
    """Wait for the server and point every job's ``tracking.uri`` at it."""
    if n_nodes > 1:
        raise ValueError(f"tracking.uri is {server.backend_uri}, a file on this machine that "
                         f"workers on the cluster's other nodes cannot reach: set tracking.uri "
                         f"to a shared tracking server (README, 'Sweeps on Ray')")
    server.wait_ready()
    for job in jobs:
        with open_dict(job.config):
            job.config.tracking.uri = server.uri
