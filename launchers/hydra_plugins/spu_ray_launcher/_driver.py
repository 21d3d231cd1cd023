"""The sweep driver of ``hydra/launcher=ray``: the grading side of a cluster sweep.

For a batch of jobs it:

1. composes each job's config (as Hydra's basic launcher does), with absolute paths;
2. decides each run key from tracking (:mod:`spu.launch.resume`): finished keys are
   skipped without asking Ray for anything, their stored results written to the
   sweep folder and counted in the budget;
3. sets up Ray's token authentication (:mod:`._security`), starts Ray (or joins the
   cluster), fits each run's request (CPUs, GPUs, memory and a ``sandbox_slot``) to
   the nodes, starts the sweep's tracking server when one is needed, and a grading
   service (one isolated grading process for the sweep);
4. orders the runs longest expected first (:mod:`spu.launch.schedule`) and keeps at
   most ``max_concurrent`` of them in flight. For each attempt it loads the trusted
   task and key *here*, stages the public files into ``runs/<run_key>/task/`` and
   ships them (Ray's object store) to an agent node, which runs only the agent
   (:func:`spu.launch.remote.run_agent_job`) and sends back the submission,
   trajectory and logs; grading, pricing, the exposure screen, ``run.json`` and
   tracking happen here, in a few threads (:func:`spu.launch.remote.settle_agent_return`).
   No storage is shared with the agent nodes, and no answer key ever leaves this side;
5. retries ``infra_error`` and ``memory_limit`` (``sweep.retries``), records an attempt
   lost with its node as ``infra_error`` with what it had spent (reported while it
   ran) and runs it again elsewhere, streams each result, keeps a progress line and
   stops launching once ``budget.max_cost_usd`` is spent;
6. stops what it started and returns one :class:`~hydra.core.utils.JobReturn` per job.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import ray
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra_plugins.spu_ray_launcher._worker import run_agent_on_node
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from ray.exceptions import RayError, RayTaskError

from spu.identity import settings_for
from spu.launch.actors import check_placement
from spu.launch.budget import CostLedger
from spu.launch.collector import set_launcher_policy
from spu.launch.interrupt import TALLY
from spu.launch.job import (
    ResultStatus,
    RunIdentity,
    lost_attempt_record,
    not_launched_result,
    recorded_result,
    say_settings_change,
    tracking_target,
    write_result,
)
from spu.launch.progress import ProgressDisplay, SweepProgress
from spu.launch.remote import FileBundle, agent_job, settle_agent_return
from spu.launch.resources import (
    SANDBOX_SLOT,
    RunRequest,
    capacity,
    check_feasible,
    fit_request,
    run_request,
)
from spu.launch.resume import RETRIED_OUTCOMES, ResumeMode, RunPlan, latest_recorded, plan_run
from spu.launch.server import TrackingServer, redact_uri
from spu.printable import printable_markup
from spu.tracking.query import recorded_run_from_record
from spu.tracking.store import TrackingTarget, client_for, experiment_id, log_run, sqlite_path

if TYPE_CHECKING:
    from hydra_plugins.spu_ray_launcher.ray_launcher import SPURayLauncher

    from spu.runner import PreparedRun, RunSpec

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
    spec: RunSpec | None = None
    """Its run spec (None until it is about to run: :meth:`JobComposer.spec`)."""
    plan: RunPlan = RunPlan(skip=False)
    """Its resume plan: which attempt comes first, how far retries go."""
    target: TrackingTarget | None = None
    """Where its attempts are tracked (None: tracking off)."""
    expected_s: float | None = None
    """Its expected run time, from tracking (None: unknown)."""


def _absolute(cfg: DictConfig, key: str) -> None:
    value = OmegaConf.select(cfg, key)
    if value:
        OmegaConf.update(cfg, key, str(Path(str(value)).expanduser().resolve()))


def compose_job(launcher: SPURayLauncher, overrides: Sequence[str], idx: int,
                sweep_dir: Path) -> SweepJob:
    """The config of one job, composed by Hydra, with absolute paths."""
    assert launcher.hydra_context is not None and launcher.config is not None
    cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config,
                                                                 list(overrides))
    return job_of(launcher, cfg, list(overrides), idx, sweep_dir)


def job_of(launcher: SPURayLauncher, cfg: DictConfig, overrides: list[str], idx: int,
           sweep_dir: Path) -> SweepJob:
    """A :class:`SweepJob` of a composed config."""
    with open_dict(cfg), read_write(cfg.hydra):
        cfg.hydra.job.id = idx
        cfg.hydra.job.num = idx
        # ``${now:...}`` would resolve again, later.
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
    return SweepJob(idx=idx, overrides=overrides, config=cfg, folder=folder,
                    identity=identity, request=request)


class JobComposer:
    """Composes a sweep's jobs, once per distinct configuration, not once per repeat.

    Hydra composes every job from scratch (about 50 ms each on an idle machine, seconds
    on a loaded one); the jobs of ``repeat=0,1,2,3,4`` differ in one number. A job whose
    overrides equal an earlier job's but for a plain ``repeat=N`` gets a copy of that
    job's config with ``repeat`` (and the override lists Hydra keeps) changed, that job's
    resource request, its identity with the repeat's run key, and a copy of its run spec.
    The copy is unpickled from the first job's config, pickled once: that takes a fifth
    of the time of a deep copy, which costs 15-30 ms a job. A sweep folder named after
    the overrides (``hydra.sweep.subdir=${hydra.job.override_dirname}``), or a config
    with another value interpolating ``${repeat}``, is composed in full.
    """

    def __init__(self, launcher: SPURayLauncher, sweep_dir: Path) -> None:
        self.launcher = launcher
        self.sweep_dir = sweep_dir
        self.configs: dict[tuple[str, ...], tuple[bytes, str, SweepJob]] = {}
        self.specs: dict[tuple[str, ...], RunSpec] = {}

    @staticmethod
    def split(overrides: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
        """The overrides but ``repeat=N``, and N (None without a plain integer repeat)."""
        rest, repeat = [], None
        for item in overrides:
            key, sep, value = item.partition("=")
            if key == "repeat" and sep and value.strip().lstrip("-").isdigit():
                repeat = value.strip()
            else:
                rest.append(item)
        return tuple(rest), repeat

    def compose(self, overrides: Sequence[str], idx: int) -> SweepJob:
        """The job of ``overrides``."""
        rest, repeat = self.split(overrides)
        held = self.configs.get(rest) if repeat is not None else None
        if held is None:
            job = compose_job(self.launcher, overrides, idx, self.sweep_dir)
            if repeat is not None and not self.names_its_repeat(job.config):
                self.configs[rest] = (pickle.dumps(job.config), repeat, job)
            return job
        base, base_repeat, first = held
        cfg = pickle.loads(base)  # noqa: S301 - this process's own config, pickled above
        with open_dict(cfg), read_write(cfg.hydra):
            cfg.repeat = int(repeat)  # type: ignore[arg-type]
            task_overrides = cfg.hydra.overrides.task
            for i, item in enumerate(task_overrides):  # in place: a new list costs 1 ms
                if item == f"repeat={base_repeat}":
                    task_overrides[i] = f"repeat={repeat}"
            cfg.hydra.job.override_dirname = str(cfg.hydra.job.override_dirname).replace(
                f"repeat={base_repeat}", f"repeat={repeat}")
            cfg.hydra.job.id = idx
            cfg.hydra.job.num = idx
        # The first job's paths are absolute and its sweep folder fixed already (job_of).
        folder = self.sweep_dir / str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
        identity = first.identity.again(int(repeat)) if first.identity else None
        return SweepJob(idx=idx, overrides=list(overrides), config=cfg, folder=folder,
                        identity=identity, request=first.request)

    @staticmethod
    def names_its_repeat(config: DictConfig) -> bool:
        """True when a value other than ``repeat`` itself may change with it.

        That is a sweep folder named after the overrides, or an interpolation of
        ``${repeat}``.
        """
        subdir = str(OmegaConf.select(config, "hydra.sweep.subdir", default=""))
        raw = OmegaConf.to_container(config.hydra.sweep, resolve=False)
        if "override_dirname" in str(raw) + subdir:
            return True
        return re.search(r"\$\{[^}]*\brepeat\b", OmegaConf.to_yaml(config)) is not None

    def spec(self, job: SweepJob) -> RunSpec:
        """The job's run spec, converted once per configuration."""
        from spu.launch.spec import spec_from_config

        rest, repeat = self.split(job.overrides)
        if repeat is None:
            return replace(spec_from_config(without_hydra(job.config)),
                           launcher=job_launcher(job.config))
        if rest not in self.specs:
            self.specs[rest] = replace(spec_from_config(without_hydra(job.config)),
                                       launcher=job_launcher(job.config))
        return replace(self.specs[rest], repeat=int(job.config.repeat))


def job_launcher(config: DictConfig) -> str | None:
    """The launcher a job's config chose (``hydra/launcher``), recorded in its settings."""
    choices = OmegaConf.select(config, "hydra.runtime.choices")
    value = choices.get("hydra/launcher") if choices is not None else None
    return str(value) if value is not None else None


def without_hydra(config: DictConfig) -> DictConfig:
    """The job's own config, as Hydra hands it to the task function."""
    task_cfg = copy.deepcopy(config)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    return task_cfg


def job_return(job: SweepJob, value: Any, failed: bool = False) -> JobReturn:
    """The JobReturn of a job, settled by the driver.

    Its ``cfg`` and ``hydra_cfg`` are the job's composed config itself (which holds both
    the job's keys and ``hydra``), not copies: a copy of a config costs 15-30 ms, more
    than the rest of settling a short run, and nothing reads them but to look.
    """
    ret = JobReturn(overrides=job.overrides, cfg=job.config, hydra_cfg=job.config,
                    working_dir=os.getcwd(), task_name=str(job.config.hydra.job.name))
    ret.status = JobStatus.FAILED if failed else JobStatus.COMPLETED
    ret.return_value = value
    return ret


def start_ray(launcher: SPURayLauncher) -> bool:
    """Start a local Ray or join a cluster; True when this call started it.

    Token authentication is set up first (:func:`._security.configure_ray_auth`).
    """
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
        if init.temp_dir:
            kwargs["_temp_dir"] = str(Path(str(init.temp_dir)).expanduser().resolve())
    # A local Ray's processes inherit this environment: the driver's own credentials
    # (its tracking token, the database password) stay out of the workers'.
    held = {name: os.environ.pop(name) for name in DRIVER_SECRETS if name in os.environ}
    try:
        ray.init(**kwargs)
    finally:
        os.environ.update(held)
    return True


def join_local_ray(launcher: SPURayLauncher, display: ProgressDisplay) -> None:
    """Point a local sweep at this user's Ray where one runs here; else say why not.

    A Ray found by :func:`spu.launch.local_ray.find_local_ray` (this user's, token
    authentication on, sandbox slots offered) is joined with the token it runs with, and
    left running at the end. Its token was checked in its own environment, so the probe
    for a cluster that lets a client in without one is not needed.
    """
    init = launcher.init
    if init.address or launcher.insecure:
        return
    if not launcher.join_local:
        display.say("SPU sweep: starting a Ray of its own (hydra.launcher.join_local=false)")
        return
    from spu.launch.local_ray import find_local_ray

    found = find_local_ray(str(init.temp_dir) if init.temp_dir else None)
    if found.address is None:
        display.say(f"SPU sweep: starting a Ray of its own ({found.why})")
        return
    with read_write(init), open_dict(init):
        init.address, init.auth_token_path, init.verify_auth = (
            found.address, found.token_path, False)
    display.say(f"SPU sweep: joining {found.why} ({found.slots:g} sandbox slots; it stays "
                f"up after the sweep)")


STATUS_EVERY_S = 5.0
"""Seconds between two asks of the monitor for the live status of the runs in flight."""

DRIVER_SECRETS = ("MLFLOW_TRACKING_TOKEN", "PGPASSWORD", "SPU_TRACKING_SERVER_TOKEN")
"""Variables only the grading side needs, kept out of the environment Ray's workers get."""


def alive_nodes() -> list[dict[str, float]]:
    """The resource totals of every alive node."""
    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def decide_from_tracking(jobs: list[SweepJob]) -> dict[int, dict[str, Any]]:
    """Plan every job from tracking; the stored result of each job to skip, by index."""
    groups: dict[tuple[Any, str], list[SweepJob]] = {}
    for job in jobs:
        if job.identity is None:
            continue
        root = Path(str(job.config.output_root))
        if job.target is None:
            job.target = tracking_target(job.config, root)
        retries = int(job.config.sweep.retries)
        job.plan = plan_run(None, str(job.config.sweep.resume), retries)
        if ResumeMode.parse(str(job.config.sweep.resume)) is ResumeMode.off:
            continue
        groups.setdefault((job.target, str(root)), []).append(job)
    skipped: dict[int, dict[str, Any]] = {}
    for (target, root), members in groups.items():
        assert all(j.identity for j in members)
        latest = latest_recorded(target, Path(root),
                                 {j.identity.run_key: j.identity.identity  # type: ignore[union-attr]
                                  for j in members})
        for job in members:
            assert job.identity is not None
            held = latest.get(job.identity.run_key)
            job.plan = plan_run(held, str(job.config.sweep.resume), int(job.config.sweep.retries))
            if job.plan.skip and held is not None:
                say_settings_change(Path(root) / "runs" / held.run_key, job.identity,
                                    settings_for(job.config.limits, str(job.config.sandbox.name),
                                                 job_launcher(job.config)))
                skipped[job.idx] = recorded_result(held, ResultStatus.skipped, job.plan.reason)
    return skipped


def order_longest_first(jobs: list[SweepJob]) -> list[SweepJob]:
    """The jobs longest expected first (:mod:`spu.launch.schedule`), from tracking's history.

    History is an optimization: a store that cannot be read keeps the given order.
    """
    from spu.launch.schedule import RuntimeHistory, longest_expected_first
    from spu.tracking.query import recorded_runs

    histories: dict[Any, RuntimeHistory] = {}
    for job in jobs:
        if job.target is None or job.identity is None:
            continue
        if job.target not in histories:
            try:
                held = recorded_runs(job.target).values()
            except Exception as exc:  # noqa: BLE001 - ordering must never stop a sweep
                log.warning("no run-time history from %s: %s", job.target.uri, exc)
                held = []
            histories[job.target] = RuntimeHistory.from_runs(
                (f"{r.model}/{r.harness}/{r.effort}", r.task_id, r.runtime_s)  # type: ignore[misc]
                for r in held if r.outcome not in RETRIED_OUTCOMES)
        ident = job.identity
        job.expected_s = histories[job.target].expected(
            f"{ident.model}/{ident.harness}/{ident.effort}", ident.task_id)
    return [jobs[i] for i in longest_expected_first([j.expected_s for j in jobs])]


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


@dataclass
class Attempt:
    """One attempt of a job, in flight on an agent node or being settled here."""

    job: SweepJob
    run: PreparedRun
    """The run it prepared here (trusted task and answer key: never shipped)."""
    staged: Path
    number: int
    last: int
    """The highest attempt number this launch may reach."""
    retried_from: str | None = None
    held: Any = None
    """The actor it was placed on (``placement=actors``; None: a task of its own)."""


@dataclass(frozen=True)
class PendingAttempt:
    """An attempt of a job waiting for a place in the window."""

    job: SweepJob
    number: int
    """Its attempt number."""
    last: int
    """The highest attempt number this launch may reach."""
    retried_from: str | None = None
    """The tracking id of the attempt it runs again (None: none)."""


class Placement(Protocol):
    """Where the driver places its attempts: a strategy handed to :class:`Driver`.

    :class:`TaskPlacement` runs each attempt as a Ray task of its own;
    :class:`~._actors.ActorPlacement` on long-lived actors (``placement=actors``).
    """

    def attach(self, driver: Driver) -> None:
        """Take the driver it places for (its window, pending runs, display)."""

    def can_submit(self) -> bool:
        """Whether one more attempt can be placed now."""

    def tend(self) -> None:
        """Called once a turn of the driver's loop."""

    def dispatch(self, att: Attempt, options: dict[str, Any], job: Any, task_files: Any) -> Any:
        """Hand an attempt's agent side to Ray; the ref of its result."""

    def collect(self, ref: Any, att: Attempt) -> Any:
        """What the attempt's agent side returned; None when its failure was handled here."""

    def placement_of(self, att: Attempt) -> Any:
        """The :class:`~spu.schema.GpuPlacement` of an attempt (None: placed as a task)."""

    def finish(self) -> None:
        """After the sweep: say what was placed where, stop what it started."""


class TaskPlacement:
    """Each attempt as a Ray task of its own, asking for the run's request."""

    def attach(self, driver: Driver) -> None:
        """Place for ``driver``."""
        self.driver = driver

    def can_submit(self) -> bool:
        """Whether the window has room for one more attempt now."""
        return self.driver.busy() < self.driver.window

    def tend(self) -> None:
        """Nothing to tend: Ray schedules each task."""

    def dispatch(self, att: Attempt, options: dict[str, Any], job: Any, task_files: Any) -> Any:
        """Hand an attempt's agent side to Ray as a task of its own; its result's ref."""
        del att
        return self.driver.remote.options(**options).remote(job, task_files,
                                                            self.driver.monitor)

    def collect(self, ref: Any, att: Attempt) -> Any:
        """The task's return; a failure on the node fails the job, a lost node the attempt."""
        driver = self.driver
        try:
            return ray.get(ref, timeout=driver.launcher.get_timeout_s)
        except RayTaskError as exc:
            driver.progress.finished(None)
            driver.display.say(f"[red]job #{att.job.idx} failed on its agent node: "
                               f"{printable_markup(str(exc))}[/red]")
            driver.returns[att.job.idx] = job_return(att.job, exc, failed=True)
        except (RayError, TimeoutError) as exc:
            driver.lost(att, exc)
        return None

    def placement_of(self, att: Attempt) -> Any:
        """None: a task has no placement of its own to record."""
        del att
        return None

    def finish(self) -> None:
        """Nothing to stop: every task has ended."""


class Driver:
    """Runs the jobs left after the resume check, on Ray, until done or out of budget."""

    def __init__(self, launcher: SPURayLauncher, jobs: list[SweepJob], window: int,
                 ledger: CostLedger, progress: SweepProgress, display: ProgressDisplay,
                 grader: Any, notes: list[str],
                 tracking_turn: threading.Lock | None = None,
                 placement: Placement | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from hydra_plugins.spu_ray_launcher._monitor import start_monitor

        self.launcher = launcher
        self.pending: deque[PendingAttempt] = deque(
            PendingAttempt(job, job.plan.first_attempt, job.plan.last_attempt,
                           job.plan.retried_from)
            for job in jobs)
        self.window = window
        self.ledger = ledger
        self.progress = progress
        self.display = display
        self.grader = grader
        self.notes = notes
        self.returns: dict[int, JobReturn] = {}
        self.in_flight: dict[Any, Attempt] = {}
        self.settling: dict[Any, Attempt] = {}
        self.task_refs: dict[tuple[str, str], Any] = {}
        self.remote = ray.remote(run_agent_on_node)
        self.monitor = start_monitor()
        self.pool = ThreadPoolExecutor(max_workers=max(1, int(launcher.settle_threads)),
                                       thread_name_prefix="spu-settle")
        # Settling threads grade in parallel and take turns at a SQLite store (a server
        # store takes writers at once): SQLite would make the others wait and retry.
        self.tracking_turn = tracking_turn or threading.Lock()
        self._statuses: tuple[float, list[Any]] = (-STATUS_EVERY_S, [])
        display.running = self.running_status
        self.placement: Placement = placement or TaskPlacement()
        """Where attempts run (:class:`TaskPlacement` unless another is given)."""
        self.placement.attach(self)

    def running_status(self) -> list[Any]:
        """Elapsed time and latest event of each run in flight, as its node last reported.

        The monitor is asked at most every :data:`STATUS_EVERY_S` seconds.
        """
        from spu.harness.monitor import AgentStatus

        asked, found = self._statuses
        if time.monotonic() - asked >= STATUS_EVERY_S:
            try:
                found = [AgentStatus(**status) for status in
                         ray.get(self.monitor.statuses.remote(), timeout=5)]
            except Exception:  # noqa: BLE001 - the status line is best effort
                pass
            self._statuses = (time.monotonic(), found)
        return found

    # -- launching ---------------------------------------------------------------------

    def task_ref(self, run: Any, staged: Path) -> Any:
        """The public files of the run's task in the object store, put once per task."""
        key = (str(run.task.path), run.task.version)
        if key not in self.task_refs:
            self.task_refs[key] = ray.put(FileBundle.of(staged))
        return self.task_refs[key]

    def submit(self, pending: PendingAttempt) -> None:
        """Stage the pending attempt here and hand its agent side to Ray."""
        from spu.runner import prepare_run, record_interrupted_attempt, stage

        job, number, last, retried_from = (pending.job, pending.number, pending.last,
                                           pending.retried_from)
        assert job.spec is not None  # run_on_ray builds every spec first
        spec = replace(job.spec, attempt=number, retried_from=retried_from)
        try:
            run = record_interrupted_attempt(prepare_run(spec, check=False))
            spec, number = run.spec, run.spec.attempt  # after an interrupted attempt
            staged = stage(run)
        except Exception as exc:  # noqa: BLE001 - a job that cannot start fails alone
            self.display.say(f"[red]job #{job.idx} cannot start: {type(exc).__name__}: "
                             f"{printable_markup(str(exc))}[/red]")
            self.progress.launched()
            self.progress.finished(None)
            self.returns[job.idx] = job_return(job, exc, failed=True)
            return
        req = job.request
        options: dict[str, Any] = {"num_cpus": req.cpus, "num_gpus": req.gpus,
                                   "max_retries": 0, "retry_exceptions": False,
                                   "name": f"spu-{run.key}-a{number}"}
        if req.memory_bytes:
            options["memory"] = req.memory_bytes
        if req.sandbox_slots:
            options["resources"] = {SANDBOX_SLOT: req.sandbox_slots}
        shipped = replace(spec, answers_root=None, task_dir=Path(run.task.path.name),
                          output_root=Path("."))
        job_for_node = agent_job(shipped, run.key, self.launcher.report_every_s)
        att = Attempt(job, run, staged, number, last, retried_from)
        ref = self.placement.dispatch(att, options, job_for_node, self.task_ref(run, staged))
        self.in_flight[ref] = att
        self.progress.launched()
        if number == job.plan.first_attempt:
            log.info("#%d: %s", job.idx,
                     " ".join(redact_uri(o) for o in filter_overrides(job.overrides)))

    def stop_for_budget(self) -> None:
        """Settle every job not launched yet as not launched, and say why."""
        settle_not_launched([p.job for p in self.pending], self.ledger, self.progress,
                            self.display, self.returns)
        self.pending.clear()

    # -- results -----------------------------------------------------------------------

    def collect(self, ref: Any) -> None:
        """An agent side ended: settle it in a thread, or handle its loss."""
        att = self.in_flight.pop(ref)
        returned = self.placement.collect(ref, att)
        if returned is None:
            return
        future = self.pool.submit(self.settle, att, returned)
        self.settling[future] = att

    def settle(self, att: Attempt, returned: Any) -> tuple[Any, str | None]:
        """Grade, price, screen and record one attempt here; track it (a worker thread)."""
        record = settle_agent_return(att.run, att.staged, returned, self.grader, self.notes)
        return record, self.track(record, att)

    def track(self, record: Any, att: Attempt) -> str | None:
        """Log ``record`` to the job's tracking target; its MLflow run id (None: no tracking)."""
        target = att.job.target
        if target is None:
            return None
        if sqlite_path(target.uri) is None:
            return log_run(record, att.run.run_dir, target)
        with self.tracking_turn:
            return log_run(record, att.run.run_dir, target)

    def settled(self, future: Any) -> None:
        """A settled attempt: retry it, or stream the job's result."""
        att = self.settling.pop(future)
        try:
            record, tracking_id = future.result()
        except Exception as exc:  # noqa: BLE001 - recording one run must not end the sweep
            self.progress.finished(None)
            self.display.say(f"[red]job #{att.job.idx}: recording failed: "
                             f"{type(exc).__name__}: {printable_markup(str(exc))}[/red]")
            self.returns[att.job.idx] = job_return(att.job, exc, failed=True)
            return
        TALLY.recorded += 1
        if record.outcome.value in RETRIED_OUTCOMES and att.number < att.last:
            log.warning("run %s: attempt %d ended %s (%s); retrying as attempt %d",
                        record.run_key, att.number, record.outcome.value,
                        record.process.error or "no error message", att.number + 1)
            self.ledger.spend(record.cost_usd)
            self.progress.lost(record.cost_usd)
            self.pending.appendleft(PendingAttempt(att.job, att.number + 1, att.last, tracking_id))
            return
        self.final(att, record, tracking_id)

    def final(self, att: Attempt, record: Any, tracking_id: str | None, note: str = "") -> None:
        """Stream and write the job's result: its last attempt."""
        result = recorded_result(recorded_run_from_record(record, tracking_id), ResultStatus.ran,
                                 note)
        result.update(retries=att.number - att.job.plan.first_attempt,
                      retried_from=record.retried_from, node=record.node)
        write_result(att.job.folder, result)
        self.ledger.add(result.get("cost_usd"))
        # Each retry was counted as it happened (progress.lost).
        self.progress.finished({**result, "retries": 0})
        self.display.result(result)
        self.returns[att.job.idx] = job_return(att.job, result)

    def lost(self, att: Attempt, exc: BaseException) -> None:
        """The node running the attempt died: record what it spent, maybe run it again."""
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        record = self.lost_record(att, reason)
        tracking_id = self.track(record, att)
        log.warning("run %s: attempt %d lost with its node %s (%s)", record.run_key,
                    att.number, record.node or "?", reason)
        if att.number < att.last:
            self.ledger.spend(record.cost_usd)
            self.progress.lost(record.cost_usd)
            self.display.say(f"[yellow]job #{att.job.idx}: worker lost "
                             f"({printable_markup(reason)}); "
                             f"launching it again[/yellow]")
            self.pending.appendleft(PendingAttempt(att.job, att.number + 1, att.last, tracking_id))
            return
        self.final(att, record, tracking_id, note=reason)

    def lost_record(self, att: Attempt, reason: str) -> Any:
        """The record of a lost attempt, with the usage its node last reported."""
        from spu.cost import run_cost
        from spu.runner import seal_record, write_run_record
        from spu.schema import Usage

        job = att.job
        assert job.identity is not None
        record = lost_attempt_record(job.identity, str(job.config.sandbox.name), att.number,
                                     att.retried_from, reason)
        seen = self.monitor_lookup(att)
        update: dict[str, Any] = {"node": seen.get("node"), "gpu": self.placement.placement_of(att),
                                  "notes": [*record.notes, *self.notes]}
        if seen.get("usage"):
            usage = Usage(**seen["usage"])
            assert job.spec is not None
            cost = run_cost(job.spec.model.prices, usage, [], None)
            update.update(usage=usage, cost_usd=cost.estimate.total,
                          cost_full_input_usd=cost.full_input_price.total)
            update["notes"].append("usage as last reported by the agent node before it was "
                                   "lost")
        record = record.model_copy(update=update)
        att.run.run_dir.mkdir(parents=True, exist_ok=True)
        write_run_record(att.run.run_dir, record)
        seal_record(att.run.spec.output_root, att.run.run_dir, record)
        return record

    def monitor_lookup(self, att: Attempt) -> dict[str, Any]:
        """What the monitor heard from the attempt's node: where it ran, what it spent."""
        try:
            seen = ray.get(self.monitor.lookup.remote(att.run.key, att.number), timeout=30)
        except (RayError, TimeoutError) as exc:
            log.warning("sweep monitor unreachable: %s", exc)
            return {}
        return dict(seen or {})

    # -- the loop ----------------------------------------------------------------------

    def busy(self) -> int:
        """Places of the window taken: runs in flight, and under a budget runs being recorded.

        With ``budget.max_cost_usd`` a run holds its place until its cost is counted, so
        the sweep never launches past the cap on costs it has not counted yet.
        """
        held = len(self.in_flight)
        return held + (len(self.settling) if self.ledger.limit_usd is not None else 0)

    def run(self) -> None:
        """Launch, collect, settle and refresh until every job is settled."""
        from concurrent.futures import FIRST_COMPLETED
        from concurrent.futures import wait as wait_futures

        try:
            while self.pending or self.in_flight or self.settling:
                self.placement.tend()
                while (self.pending and self.placement.can_submit()
                       and not self.ledger.reached):
                    self.submit(self.pending.popleft())
                if self.pending and self.ledger.reached:
                    self.stop_for_budget()
                if self.in_flight:
                    # Both kinds of waiting: check each often; one kind: wait on it.
                    # Back at the first run that ends (all would wait for the slowest),
                    # then every run ended by then.
                    timeout = 0.05 if self.settling else self.launcher.poll_s
                    refs = list(self.in_flight)
                    ready, _ = ray.wait(refs, num_returns=1, timeout=timeout,
                                        fetch_local=False)
                    if ready and len(refs) > 1:
                        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0,
                                            fetch_local=False)
                    for ref in ready:
                        self.collect(ref)
                if self.settling:
                    done, _ = wait_futures(list(self.settling),
                                           timeout=0.0 if self.in_flight else self.launcher.poll_s,
                                           return_when=FIRST_COMPLETED)
                    for future in done:
                        self.settled(future)
                self.display.refresh()
        except KeyboardInterrupt:
            # Ctrl-C: the agents in flight are cut off (their runs write no run.json and
            # run again on relaunch); runs being settled here finish their record.
            TALLY.cut_off += len(self.in_flight)
            for ref in list(self.in_flight):
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - best effort; Ray's shutdown ends them too
                    pass
            raise
        finally:
            self.pool.shutdown(wait=True)
            self.placement.finish()


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
    set_launcher_policy()  # the GC policy (spu.launch.collector); a no-op after spu.main's
    assert launcher.config is not None and launcher.hydra_context is not None
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    from spu.launch.console import quiet_library_logs

    # The driver serves tracking and grading: their libraries' INFO lines only with verbose.
    quiet_library_logs(bool(config.get("verbose")))
    # The MLflow client prints a link per run it ends on a server: one line per run here.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    composer = JobComposer(launcher, sweep_dir)
    jobs = [composer.compose(overrides, initial_job_idx + i)
            for i, overrides in enumerate(job_overrides)]
    limit = config.budget.max_cost_usd
    ledger = CostLedger(None if limit is None else float(limit))
    progress = SweepProgress(len(jobs), ledger.limit_usd)
    returns: dict[int, JobReturn] = {}
    # tracking=server: the sweep's own server first, so that resume reads from it alone.
    server = start_configured_server(launcher, jobs, sweep_dir)
    try:
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
                                          ledger, progress, display, server, composer))
            else:
                display.say(f"SPU sweep: {len(jobs)} jobs, none to launch on Ray "
                            f"({progress.skipped} skipped, {progress.not_launched} not launched)")
    finally:
        if server is not None:
            server.stop()
    return [returns[j.idx] for j in jobs]


def run_on_ray(launcher: SPURayLauncher, jobs: list[SweepJob], sweep_dir: Path, settled: int,
               ledger: CostLedger, progress: SweepProgress, display: ProgressDisplay,
               server: TrackingServer | None, composer: JobComposer) -> dict[int, JobReturn]:
    """Start Ray (and a tracking server if needed), run the jobs, stop what was started."""
    from hydra_plugins.spu_ray_launcher._security import configure_ray_auth

    from spu.grading.isolated import GradingService
    from spu.launch.reaper import Reaper

    for job in jobs:
        job.spec = composer.spec(job)
    # Spawned before Ray starts, so that both start up at the same time.
    local_server = None if server is not None else spawn_tracking_server(launcher, jobs,
                                                                         sweep_dir)
    join_local_ray(launcher, display)
    auth = configure_ray_auth(launcher.init, bool(launcher.insecure))
    tracking_turn = threading.Lock()
    if local_server is None:  # else the runs track through it, once it answers
        open_tracking_early(jobs, tracking_turn)
    started = False
    reaper = None
    grader = None
    try:
        started = start_ray(launcher)
        if started:
            reaper = Reaper.for_ray()
        auth.check_joined()
        for note in auth.notes:
            log.warning(note)
            display.say(f"[bold red]{note}[/bold red]")
        window = fit_to_nodes(launcher, jobs)
        if local_server is not None:
            use_tracking_server(local_server, jobs, len(alive_nodes()) if not launcher.init.address
                                else 2)
        assert jobs[0].spec is not None  # built above
        grader = GradingService(str(jobs[0].spec.sandbox.grader_isolation))
        jobs = order_longest_first(jobs)
        known = sum(j.expected_s is not None for j in jobs)
        shown = server or local_server
        display.say(f"SPU sweep on Ray: {settled + len(jobs)} jobs, {settled} skipped (finished "
                    f"earlier), {len(jobs)} to run, {window} at a time, each "
                    f"{jobs[0].request.describe()}, placed on {launcher.placement}; longest "
                    f"expected first ({known} with a run-time history); grading here "
                    f"({grader.mode})"
                    + (f"; tracking through {shown.uri}" if shown else ""))
        if check_placement(str(launcher.placement)) == "actors":
            from hydra_plugins.spu_ray_launcher._actors import ActorPlacement

            placement: Placement = ActorPlacement(nodes=alive_nodes())
        else:
            placement = TaskPlacement()
        driver = Driver(launcher, jobs, window, ledger, progress, display, grader,
                        auth.notes, tracking_turn, placement)
        driver.run()
        return driver.returns
    finally:
        if grader is not None:
            grader.close()
        if local_server is not None:
            local_server.stop()
        if started and launcher.shutdown:
            ray.shutdown()
            if reaper is not None:
                reaper.disarm()
        elif reaper is not None:
            reaper.disarm()
        auth.cleanup()


def open_tracking_early(jobs: list[SweepJob], turn: threading.Lock) -> threading.Thread:
    """Open the jobs' tracking stores in a thread of their own, while Ray starts.

    The first run to settle would otherwise import MLflow and open its store (3-5 s of
    CPU, schema checks included) while the runs after it wait for their turn. A store
    that cannot be opened here is left to the first run to report.
    """
    targets = {job.target for job in jobs if job.target is not None}

    def open_all() -> None:
        for target in sorted(targets, key=str):
            try:
                with turn:
                    experiment_id(client_for(target), target)
            except Exception as exc:  # noqa: BLE001 - the first run reports it
                log.debug("tracking store %s not opened early: %s", target.uri, exc)

    thread = threading.Thread(target=open_all, name="spu-open-tracking", daemon=True)
    thread.start()
    return thread


def start_configured_server(launcher: SPURayLauncher, jobs: list[SweepJob],
                            sweep_dir: Path) -> TrackingServer | None:
    """``tracking=server``: start ``mlflow server`` on the configured store, for this sweep.

    It serves one store (``tracking.server.backend_store_uri``, PostgreSQL in a real
    sweep) and proxies artifacts into ``tracking.server.artifacts_destination`` (default
    ``<output_root>/mlartifacts``); only this driver talks to it, on 127.0.0.1, with a
    token drawn for the sweep.
    """
    configured = {str(uri) for j in jobs if j.config.tracking.enabled
                  and (uri := OmegaConf.select(j.config, "tracking.server.backend_store_uri"))}
    if not configured:
        return None
    if len(configured) > 1:
        raise ValueError("the jobs of this sweep name several tracking.server.backend_store_uri "
                         "values; one sweep serves one store")
    first = next(j for j in jobs
                 if OmegaConf.select(j.config, "tracking.server.backend_store_uri"))
    cfg = first.config.tracking.server
    dest = cfg.artifacts_destination or (
        Path(str(first.config.output_root)) / "mlartifacts").resolve().as_uri()
    server = TrackingServer(configured.pop(), dest, sweep_dir / "mlflow-server.log",
                            workers=int(cfg.workers), artifacts_destination=str(dest))
    server.start()
    os.environ.update(server.client_env())
    for job in jobs:
        if job.config.tracking.enabled:
            experiment = job.config.tracking.experiment or str(job.config.experiment.name)
            job.target = TrackingTarget(uri=server.uri, artifact_root=server.client_artifact_root,
                                        experiment=str(experiment),
                                        traces=job.config.tracking.get("traces"))
            with open_dict(job.config):
                job.config.tracking.uri = server.uri
                job.config.tracking.artifact_root = server.client_artifact_root
    return server


def spawn_tracking_server(launcher: SPURayLauncher, jobs: list[SweepJob],
                          sweep_dir: Path) -> TrackingServer | None:
    """Spawn an MLflow server for a SQLite store when asked to.

    ``tracking_server``: ``always``, or ``auto`` and ``never``: none, the driver's settling
    threads take turns at the file (:meth:`Driver.track`). A server costs a few seconds
    to start and more CPU per run than the file (every call goes through HTTP and the
    server's own store). The server is waited for in :func:`use_tracking_server`.
    """
    mode = launcher.tracking_server
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"hydra.launcher.tracking_server={mode!r}: not auto, always or never")
    target = shared_sqlite_target(jobs)
    if target is None or mode != "always":
        return None
    server = TrackingServer(target.uri, target.artifact_root, sweep_dir / "mlflow-server.log",
                            workers=launcher.tracking_server_workers)
    server.spawn()
    return server


def use_tracking_server(server: TrackingServer, jobs: list[SweepJob], n_nodes: int) -> None:
    """Wait for the server and point every job's tracking at it."""
    del n_nodes  # only this driver writes: the store's place no longer matters
    server.wait_ready()
    os.environ.update(server.client_env())
    for job in jobs:
        if job.target is not None:
            job.target = replace(job.target, uri=server.uri)
        with open_dict(job.config):
            job.config.tracking.uri = server.uri
