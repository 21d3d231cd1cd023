"""One run: task -> sandbox + harness -> submission -> isolated grader -> run record.

``run_one(spec) -> RunRecord`` is what the Hydra entry point, the launchers and the
tests call. It writes everything under ``<output_root>/runs/<run_key>/``:

- ``task/``: the public files the agent saw (read-only at ``/task``);
- ``workspace/``, ``output/``: the agent's home and its submission folder;
- ``logs/``: stdout, stderr and the CLI's raw logs;
- ``tools/``: the audit log of the tools service (``audit.jsonl``, full texts under
  ``calls/``) and the egress log (``egress.jsonl``) (SPEC section 7);
- ``grade.json``, ``trajectory.jsonl.gz`` and ``run.json`` (SPEC section 4).

A retried run keeps its earlier attempts under ``attempts/<n>/``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spu.analysis.exposure import (
    ExposureDetector,
    detect_exposure,
    detect_exposure_in_audit,
    detect_in_sequence,
    detect_recall,
)
from spu.config import (
    ConsensusConfig,
    CostConfig,
    EffortConfig,
    HarnessConfig,
    LimitsConfig,
    ModelConfig,
    ModelGatewayConfig,
    SandboxConfig,
    ToolsConfig,
)
from spu.cost import request_usages, run_cost
from spu.cost.prices import RunCost
from spu.datasets.store import answer_key_places
from spu.gateway import MODEL_DIR
from spu.gateway.inputs import SentReader, read_calls
from spu.gateway.session import GatewayConfigError, GatewaySession
from spu.gateway.verdict import (
    files_at_refusals,
    gateway_verdict,
    iter_requests,
    key_rejected,
    read_requests,
)
from spu.grading.chance import chance_threshold, chance_threshold_without_ties
from spu.grading.isolated import GraderIsolationError, available_isolation, grade_shared
from spu.grading.outcome import (
    KEPT_AT_REFUSAL_NOTE,
    LIMIT_OUTCOMES,
    REFUSAL_AFTER_FILE_NOTE,
    RERUN_NOTE,
    RunEvidence,
    Verdict,
    counts_as_file,
    counts_without_key,
    is_scored,
    judge,
)
from spu.grading.rules import GRADER_VERSION, grade_submission
from spu.grading.submission import read_submission
from spu.harness.base import (
    AgentContext,
    AgentResult,
    Harness,
    HarnessError,
    HarnessOptionsError,
    get_harness,
)
from spu.harness.evidence import gateway_counts, gateway_evidence
from spu.harness.monitor import AgentMonitor, AgentStatus
from spu.harness.trajectory import count_tool_calls, count_web_fetches
from spu.identity import config_label, harness_label, identity_for, run_key, settings_for
from spu.sandbox.base import (
    RunLimits,
    Sandbox,
    SandboxError,
    SandboxPaths,
    SandboxRequest,
    get_sandbox,
)
from spu.sandbox.disk import release_stale as release_stale_disk
from spu.sandbox.disk import remove_tree
from spu.sandbox.gpu_usage import GpuSampler
from spu.sandbox.options import SandboxOptionsError, backend_options
from spu.schema import (
    AnswerKey,
    ExposureHit,
    GpuPlacement,
    GpuUsage,
    Grade,
    GradeStatus,
    Identity,
    ProcessEvidence,
    RunRecord,
    SandboxInfo,
)
from spu.seal.keys import SealKeyError
from spu.seal.seal import seal_run
from spu.tasks.freshness import published_before_cutoff
from spu.tasks.package import (
    TaskLoadError,
    TaskPackage,
    load_answers,
    load_task,
    stage_public_files,
)
from spu.tools.audit import AUDIT_FILE, TOOLS_DIR, read_audit
from spu.tools.egress import EgressProxyError, shell_downloads
from spu.tools.providers import Provider, ProviderConfigError
from spu.tools.session import ToolsSession, ToolsSummary, make_provider, trajectory_from_audit
from spu.tracking.trajectories import TRAJECTORY_FILE, record_json, write_trajectory

log = logging.getLogger(__name__)

SUBMISSION_FILE = "rankings.json"


class RunConfigError(ValueError):
    """The run cannot start as configured (unknown harness, missing key...): fix the config."""


@dataclass(frozen=True)
class RunSpec:
    """Everything one run needs, typed and resolved (built from the Hydra config)."""

    model: ModelConfig
    harness: HarnessConfig
    effort: EffortConfig
    task_dir: Path
    repeat: int = 0
    output_root: Path = Path("outputs")
    answers_root: Path | None = None
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    gpu_ids: tuple[str, ...] = ()
    cost: CostConfig = field(default_factory=CostConfig)
    model_gateway: ModelGatewayConfig = field(default_factory=ModelGatewayConfig)
    """The run's model gateway (``model_gateway``)."""
    consensus: ConsensusConfig = field(default_factory=ConsensusConfig)
    """The members of ``model=consensus`` (``consensus``)."""
    status_every_s: float = 30.0
    """Seconds between the running run's status lines (0: none)."""
    attempt: int = 1
    retried_from: str | None = None
    retry_limits_with_file: bool = False
    """``sweep.retry_limits_with_file``: exclude and rerun a run that hit a resource limit
    after writing a file (the paper's rule) instead of scoring that file."""
    launcher: str | None = None
    """The Hydra launcher that runs it (``basic``, ``ray_local``...), recorded in the run's
    settings; never part of its identity."""
    dataset: str | None = None
    """``NAME@VERSION`` of the dataset the task comes from (``dataset=``), recorded in
    ``run.json``; never part of its identity (the task's digest is)."""


def spec_identity(spec: RunSpec, task: TaskPackage) -> Identity:
    """What ``spec`` runs on ``task`` (:func:`spu.identity.identity_for`)."""
    return identity_for(spec.model, spec.harness, spec.effort, spec.tools, task.path, task.id,
                        task.version, spec.repeat, spec.consensus, spec.output_root,
                        spec.sandbox)


def spec_run_key(spec: RunSpec, task: TaskPackage) -> str:
    """The run key of ``spec`` on ``task``: a hash of its identity."""
    return run_key(spec_identity(spec, task))


def spec_config_label(spec: RunSpec) -> str:
    """The configuration label of ``spec``'s runs (:func:`spu.identity.config_label`)."""
    return config_label(spec.model.name, spec.effort.name, spec.harness.name,
                        spec.model.default_harness, harness_label(spec.harness, spec.consensus))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def holds_evidence(run_dir: Path) -> bool:
    """True when a run folder holds more than its staged task and its archived attempts.

    Anything more (the gateway's record ``model/requests.jsonl``, the tools' log, the
    agent's files and logs) is the evidence of an attempt that ran: what it cost, what
    the model was sent, what the agent saw.
    """
    try:
        with os.scandir(run_dir) as entries:
            return any(e.name not in ("task", "attempts") for e in entries)
    except OSError:
        return False


def _archive_previous_attempt(run_dir: Path) -> None:
    """Move the run folder's earlier attempt under ``attempts/<n>/``; never delete evidence.

    A recorded attempt (``run.json``) is archived, and so is a folder without a record
    that :func:`holds_evidence` (an attempt whose process stopped before its record:
    :func:`record_interrupted_attempt` records it first where the run is started again).
    A folder holding only the staged task is cleared, its ``attempts/`` kept. An archive
    a killed process left half done (the ``.previous`` folder) is finished first.
    """
    holding = run_dir.with_name(run_dir.name + ".previous")
    if holding.exists():
        _into_attempts(run_dir, holding)
    if not run_dir.exists():
        return
    if not (run_dir / "run.json").exists() and not holds_evidence(run_dir):
        for entry in list(run_dir.iterdir()):
            if entry.name != "attempts":
                remove_tree(entry)  # rm -rf: a tree may be deeper than shutil.rmtree goes
        return
    run_dir.rename(holding)
    _into_attempts(run_dir, holding)


def _into_attempts(run_dir: Path, holding: Path) -> None:
    """Make ``holding`` (a run folder moved aside) attempt ``n`` under ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    attempts = run_dir / "attempts"
    if (holding / "attempts").exists() and not attempts.exists():
        (holding / "attempts").rename(attempts)
    attempts.mkdir(exist_ok=True)
    n = 1 + sum(1 for _ in attempts.iterdir())
    while (attempts / str(n)).exists():
        n += 1
    holding.rename(attempts / str(n))


def sandbox_class(spec: RunSpec) -> tuple[type[Sandbox], dict[str, Any]]:
    """The backend ``sandbox.name`` selects and its options, checked by the backend.

    Raises:
        RunConfigError: no such backend, or options it does not take (one line).
    """
    try:
        cls = get_sandbox(spec.sandbox.name)
        return cls, backend_options(cls.name, cls.options_model, spec.sandbox)
    except KeyError as exc:
        raise RunConfigError(f"sandbox.name: {exc}") from None
    except SandboxOptionsError as exc:
        raise RunConfigError(str(exc)) from None


def unisolated_parts(spec: RunSpec, *, grader: bool) -> list[str]:
    """What of the run would run without isolation: the sandbox (after its fallback), the grader.

    An unknown backend is left to :func:`sandbox_class`; a grader isolation this machine
    cannot give, to the grading (which says so).
    """
    cls = get_sandbox(spec.sandbox.name)
    chosen = cls if cls.fallback is None or cls.available()[0] else get_sandbox(cls.fallback)
    parts = [] if chosen.isolates else [f"the agent (sandbox={chosen.name}" + (
        ")" if chosen is cls else f", the fallback of sandbox={cls.name})")]
    if grader:
        try:
            if available_isolation(spec.sandbox.grader_isolation) == "none":
                parts.append("the grader (sandbox.grader_isolation resolves to none)")
        except GraderIsolationError:
            pass
    return parts


def check_isolation(spec: RunSpec, harness: Harness, *, grader: bool) -> None:
    """Refuse an agent run that would run unisolated, unless ``sandbox.allow_unisolated``.

    Raises:
        RunConfigError: the run (not a baseline's) would run without isolation.
    """
    if harness.reference_agent or spec.sandbox.allow_unisolated:
        return
    parts = unisolated_parts(spec, grader=grader)
    if parts:
        raise RunConfigError(
            f"sandbox.allow_unisolated: {' and '.join(parts)} would run without isolation, "
            f"and an agent is an adversary; use sandbox=local or sandbox=docker, or set "
            f"sandbox.allow_unisolated=true to run anyway (the record says so)")


def _state_unisolated(run: AgentRun, info: SandboxInfo) -> SandboxInfo:
    """``info`` with ``unisolated_allowed`` and a warning, where the run is unisolated."""
    parts = unisolated_parts(run.spec, grader=isinstance(run, PreparedRun))
    if not parts or run.harness.reference_agent or not run.spec.sandbox.allow_unisolated:
        return info
    warning = (f"UNISOLATED RUN: {' and '.join(parts)} ran without isolation, allowed by "
               f"sandbox.allow_unisolated=true")
    log.warning(warning)
    return info.model_copy(update={"unisolated_allowed": True,
                                   "warnings": [*info.warnings, warning]})


def _open_sandbox(spec: RunSpec) -> tuple[Sandbox, list[str]]:
    notes: list[str] = []
    cls, options = sandbox_class(spec)
    ok, why = cls.available()
    if not ok and cls.fallback is not None:
        note = (f"sandbox={spec.sandbox.name} unavailable ({why}); "
                f"FALLING BACK to sandbox={cls.fallback}")
        log.warning(note)
        notes.append(note)
        cls = get_sandbox(cls.fallback)
        options = backend_options(cls.name, cls.options_model, spec.sandbox)
    elif not ok:
        raise SandboxError(f"sandbox={spec.sandbox.name} is not available: {why}")
    return cls(options=options), notes


@dataclass(frozen=True)
class AgentRun:
    """The agent's side of a run: its public task, key, harness and limits, and no answer key.

    This is all a machine that runs agents gets: a launcher that grades elsewhere builds
    it from the public files alone (:func:`prepare_agent`).
    """

    spec: RunSpec
    task: TaskPackage
    key: str
    harness: Harness
    limits: RunLimits
    provider: Provider | None = None
    """The audited tools' provider, checked; None when the run has no tools service."""
    identity: Identity | None = None
    """What runs (the fields ``key`` is hashed from)."""

    @property
    def run_dir(self) -> Path:
        """``<output_root>/runs/<run_key>``."""
        return (self.spec.output_root / "runs" / self.key).resolve()


@dataclass(frozen=True)
class PreparedRun(AgentRun):
    """A run about to start: its trusted task, answer key, key, harness and limits."""

    answers: AnswerKey | None = field(kw_only=True)
    """The trusted answer key; None for a task without one yet (the run ends ``sealed``)."""


@dataclass
class AgentPhase:
    """What the agent's side of a run produced (steps 1-4), before grading."""

    staged: Path
    """The staged public files the agent saw."""
    started: str
    """ISO-8601 start time (UTC)."""
    result: AgentResult = field(default_factory=AgentResult)
    """What the harness read from the agent's session."""
    evidence: ProcessEvidence = field(default_factory=ProcessEvidence)
    """How the agent's process ended."""
    sandbox_info: SandboxInfo = field(default_factory=lambda: SandboxInfo(backend="none"))
    """The backend and the isolation in force."""
    notes: list[str] = field(default_factory=list)
    """Loud warnings for the run record."""
    submission: bytes | None = None
    """The submitted ``rankings.json`` (None: no file)."""
    tools: ToolsSummary | None = None
    """What the audited tools service and the egress proxy recorded (None: no service)."""
    gpu: GpuUsage | None = None
    """What sampling the run's GPUs measured (None: no GPU, or not measurable)."""
    node: str | None = None
    """The cluster node the agent ran on, where a launcher placed it elsewhere."""
    placement: GpuPlacement | None = None
    """The actor and device that ran the agent, where a launcher placed it on an actor."""
    gateway: dict[str, Any] | None = None
    """The run's model gateway: endpoint, upstream, policy (None: the agent called no model)."""


@dataclass(frozen=True)
class RunGrades:
    """Step 5: the strict and the recovered grade of the submission."""

    strict: Grade
    recovered: Grade
    note: str | None = None
    """A warning about the grading (not isolated, or failed)."""
    error: str | None = None
    """Why grading failed; the run is then an infrastructure error."""
    sealed: bool = False
    """No answer key: nothing was graded, ``strict`` and ``recovered`` are placeholders."""


def prepare_agent(spec: RunSpec, check: bool = True) -> AgentRun:
    """Load the public task, build the harness and the limits: what the agent's side needs.

    Args:
        spec: the run.
        check: check that the harness can start here (its CLI is installed...); a
            grading-side caller that never starts the agent passes False.

    Raises
    ------
    RunConfigError
        When the configuration cannot run at all (nothing is written then).
    spu.tasks.TaskLoadError
        When the task package cannot be read.
    """
    task = load_task(spec.task_dir)
    return _agent_run(spec, task, check)


def _agent_run(spec: RunSpec, task: TaskPackage, check: bool, grader: bool = False) -> AgentRun:
    try:
        harness = get_harness(spec.harness.name)(spec.harness, spec.model, spec.effort)
        if check:
            harness.check()
    except HarnessOptionsError as exc:  # names the key already
        raise RunConfigError(str(exc)) from None
    except (KeyError, HarnessError) as exc:
        raise RunConfigError(f"harness={spec.harness.name}: {exc}") from None
    if check:
        sandbox_class(spec)  # an unknown backend or option stops the run before it starts
        check_isolation(spec, harness, grader=grader)
    limits = RunLimits(
        time_s=_task_limit(task, "time_s", spec.limits.time_s),
        memory_gb=_task_limit(task, "memory_gb", spec.limits.memory_gb),
        cpus=int(_task_limit(task, "cpus", spec.limits.cpus)),
        gpus=int(_task_limit(task, "gpus", spec.limits.gpus)),
        grace_s=spec.limits.grace_s,
        disk_gb=spec.limits.disk_gb,
        log_mb=spec.limits.log_mb,
    )
    provider = None
    if spec.tools.enabled and harness.uses_tools:
        try:
            provider = make_provider(spec.tools)
        except ProviderConfigError as exc:
            raise RunConfigError(str(exc)) from None
    identity = spec_identity(spec, task)
    try:
        harness.bind_run(spec, identity)
    except HarnessError as exc:
        raise RunConfigError(f"harness={spec.harness.name}: {exc}") from None
    return AgentRun(spec, task, run_key(identity), harness, limits, provider, identity)


def prepare_run(spec: RunSpec, check: bool = True) -> PreparedRun:
    """Load the trusted task and key, build the harness and the limits (before step 1).

    Raises
    ------
    RunConfigError
        When the configuration cannot run at all (nothing is written then).
    spu.tasks.TaskLoadError
        When the task package or its answer key cannot be read.
    """
    task = load_task(spec.task_dir)
    answers = answer_key(task, spec.answers_root)
    agent = _agent_run(spec, task, check, grader=True)
    return PreparedRun(spec=agent.spec, task=agent.task, key=agent.key, harness=agent.harness,
                       limits=agent.limits, provider=agent.provider,
                       identity=agent.identity, answers=answers)


def answer_key(task: TaskPackage, answers_root: Path | None) -> AnswerKey | None:
    """The task's answer key; None when it is pending or absent (the run ends ``sealed``)."""
    path = task.answers_path(answers_root)
    if task.meta.answers == "pending":
        return None
    if not os.path.lexists(path):
        log.warning("task %s has no answer key at %s: its runs end sealed (mark "
                    "answers: pending in task.yaml to say so)", task.id, path)
        return None
    return load_answers(path)


def stage(run: PreparedRun) -> Path:
    """Step 1: stage the task's public files, check the copy, then move it into the run folder.

    The copy is made and validated (:func:`spu.tasks.validate.staged_package_errors`:
    regular files only, ids one-to-one with the trusted contract and answer key) in a
    scratch folder beside the run folders; only then is an earlier attempt archived
    and the copy moved in. A package that fails, or a disk that fills up, leaves the
    run folder as it was: no half-staged folder, no finished ``run.json`` lost.

    Raises
    ------
    spu.tasks.TaskLoadError
        When the package holds a link, a device or a FIFO, is over a size limit, or
        its staged copy fails validation (no agent runs then).
    OSError
        When the disk is full (nothing is left behind).
    """
    from spu.tasks.validate import staged_package_errors

    # A run killed with its driver may have left its disk mounted in the run folder: its
    # files are put back first, so that the archived attempt keeps them.
    release_stale_disk(run.run_dir)
    # One scratch folder per key, found by its name (a glob of runs/ grows with the root):
    # what is there was left by a process killed while staging this key (the caller holds
    # the key's lock).
    scratch = run.run_dir.with_name(f".{run.key}.staging")
    if scratch.exists():
        shutil.rmtree(scratch, ignore_errors=True)
    try:
        staged = stage_public_files(run.task, scratch / "task")
        errors = staged_package_errors(staged, run.task.contract, run.answers)
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise TaskLoadError(f"task {run.task.id} ({run.task.path}): the staged package "
                                f"fails validation: {errors[0].file}: {errors[0].message}"
                                f"{more}; run spu task validate on it")
        _archive_previous_attempt(run.run_dir)
        run.run_dir.mkdir(parents=True, exist_ok=True)
        staged.rename(run.run_dir / "task")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return run.run_dir / "task"


def sandbox_request(run: AgentRun, staged: Path,
                    host_ports: Sequence[int] = ()) -> SandboxRequest:
    """Step 2's request: the staged files, limits, network and what the agent must not see.

    ``host_ports`` are the host-loopback TCP ports of the services started for this run
    (the harness's :meth:`~spu.harness.base.Harness.start_services`, the tools service,
    the egress proxy); with ``sandbox.host_ports`` they are the only host ports the
    agent can reach, at ``SandboxPaths.host_address`` and the same port.
    """
    spec = run.spec
    return SandboxRequest(
        task_dir=staged,
        run_dir=run.run_dir,
        limits=run.limits,
        gpu_ids=list(spec.gpu_ids),
        network=spec.sandbox.network,
        host_ports=sorted({*spec.sandbox.host_ports, *host_ports}),
        allowed_networks=list(spec.sandbox.allowed_networks),
        extra_ro_binds=run.harness.sandbox_binds(),
        # Hidden from the agent even where a system folder would show them: every task
        # of the task root and every key of the answer root, not only this run's.
        # So are spu's own: every pulled dataset, the package's examples, the project's tasks/.
        masked_paths=[run.task.path, run.task.answers_path(spec.answers_root).parent,
                      spec.task_dir.resolve().parent, spec.output_root.resolve(),
                      *([Path(spec.answers_root).resolve()] if spec.answers_root else []),
                      *answer_key_places()],
    )


def run_agent(run: AgentRun, staged: Path,
              started: Callable[[AgentContext], None] | None = None) -> AgentPhase:
    """Steps 2-3: open the sandbox and run the agent in it until it ends or is stopped.

    A sandbox or harness that cannot start is recorded as evidence (an ``infra_error``),
    never raised: the run still gets its record. ``started``, when given, is called with
    the agent's context just before the agent starts (a launcher watches the run's
    spending through it).
    """
    phase = AgentPhase(staged=staged, started=_now(),
                       sandbox_info=SandboxInfo(backend=run.spec.sandbox.name))
    services = RunServices()
    # Undone in reverse: the harness's services, the sandbox's state, the sandbox, then a
    # failure to start recorded, and last the tools and the gateway (their records are
    # read below).
    with ExitStack() as stack:
        stack.callback(services.close)
        stack.enter_context(_start_failure_recorded(run, phase))
        sandbox, phase.notes = _open_sandbox(run.spec)
        tools = services.tools = open_tools(run)
        gateway = services.gateway = open_gateway(
            run, tools, on_death=lambda _: sandbox.request_stop())
        if tools is not None and gateway is not None:  # the model only through the gateway
            tools.refuse_hosts(gateway.provider_hosts())
        prepared: list[SandboxPaths] = []
        stack.callback(sandbox.cleanup)
        stack.callback(_record_sandbox_state, run, sandbox, phase, prepared)
        stack.callback(run.harness.cleanup)
        # The run's host services first: their ports are part of the sandbox request.
        host_ports = [*run.harness.start_services(run.run_dir / "logs"),
                      *(tools.host_ports() if tools is not None else []),
                      *(gateway.host_ports() if gateway is not None else [])]
        paths = sandbox.prepare(sandbox_request(run, staged, host_ports))
        prepared.append(paths)
        ctx = _agent_context(run, paths, services)
        run.harness.prepare(ctx, sandbox)
        command = run.harness.command(ctx)
        if started is not None:
            started(ctx)
        with _gpus_sampled(sandbox, phase), \
                watch_agent(run, sandbox, ctx.log_dir / "agent.stdout") as monitor:
            phase.evidence = sandbox.exec(command.argv, command.env,
                                          stdout=ctx.log_dir / "agent.stdout",
                                          stderr=ctx.log_dir / "agent.stderr")
        phase.result = run.harness.parse(ctx, phase.evidence)
        if monitor.rejected:
            phase.result.infra_error = monitor.rejected
    if services.tools is not None:
        read_tools(run, phase, services.tools)
    if services.gateway is not None:
        read_gateway(phase, services.gateway)
    return phase


@dataclass
class RunServices:
    """The run's audited tools service and model gateway, while its agent runs."""

    tools: ToolsSession | None = None
    gateway: GatewaySession | None = None

    def close(self) -> None:
        """Stop both (the gateway first); their records stay to be read."""
        if self.gateway is not None:  # first: it is in the tools' service group, which ends
            self.gateway.close()
        if self.tools is not None:
            self.tools.close()


@contextmanager
def _start_failure_recorded(run: AgentRun, phase: AgentPhase) -> Iterator[None]:
    """A sandbox or harness that cannot start, recorded in ``phase`` instead of raised."""
    try:
        yield
    except (SandboxError, HarnessError, EgressProxyError, GatewayConfigError, OSError,
            RuntimeError) as exc:
        log.error("run %s could not start: %s", run.key, exc)
        phase.evidence = ProcessEvidence(error=f"{type(exc).__name__}: {exc}")


def _record_sandbox_state(run: AgentRun, sandbox: Sandbox, phase: AgentPhase,
                          prepared: list[SandboxPaths]) -> None:
    """The sandbox's state into ``phase``, once it was prepared (before its cleanup)."""
    if prepared:
        phase.sandbox_info = _state_unisolated(run, sandbox.info())


@contextmanager
def _gpus_sampled(sandbox: Sandbox, phase: AgentPhase) -> Iterator[None]:
    """Sample the sandbox's GPUs while the agent runs; their use into ``phase.gpu``."""
    limits = sandbox.info().limits
    sampler = GpuSampler(limits.gpus if limits is not None else [])
    sampler.start()
    try:
        yield
    finally:
        phase.gpu = sampler.stop()


def _agent_context(run: AgentRun, paths: SandboxPaths, services: RunServices) -> AgentContext:
    """What the harness may know about the run, the sandbox's layout included."""
    tools, gateway = services.tools, services.gateway
    return AgentContext(
        task=run.task,
        paths=paths,
        run_dir=run.run_dir,
        run_key=run.key,
        limits=run.limits,
        seed=int(run.key[:8], 16),
        gpu_ids=list(run.spec.gpu_ids),
        tools=tools.open_endpoints(paths.host_address) if tools is not None else None,
        model=gateway.open_endpoint(paths.host_address) if gateway is not None else None,
    )


def open_gateway(run: AgentRun, tools: ToolsSession | None = None,
                 on_death: Callable[[str], None] | None = None) -> GatewaySession | None:
    """The run's model gateway, started (None for an agent that calls no model).

    Its process joins the run's service group (the tools service's, else one of its own).
    ``on_death(why)`` runs if it dies while the agent runs (the run then ends as an
    ``infra_error`` naming why, :func:`read_gateway`).
    """
    api = run.harness.model_api()
    if api is None:
        return None
    spec = run.spec
    gateway = GatewaySession(spec.model, api, run.run_dir, spec.model_gateway,
                             max_cost_usd=spec.limits.max_cost_usd,
                             cache_write_rate=spec.cost.cache_write_rate,
                             # called in the gateway's process: functions it can be sent
                             read_submission=functools.partial(read_submission,
                                                               run.run_dir / "output"),
                             submission_counts=functools.partial(counts_without_key,
                                                                 run.task.contract),
                             limits=run.limits,
                             group=tools.group if tools is not None else None).start()
    if on_death is not None:
        gateway.on_death(on_death)
    return gateway


def read_gateway(phase: AgentPhase, gateway: GatewaySession) -> None:
    """Usage, refusal and infra error from the gateway's record (SPEC 11).

    The provider side wins over the agent's session files, which the agent can write;
    where they disagree, ``evidence_disagreement`` says how. A gateway whose process
    died while the agent ran makes the run an ``infra_error`` that says why, or
    ``memory_limit`` where its service group's memory limit killed it.
    """
    phase.gateway = gateway.info()
    phase.result = gateway_evidence(phase.result, gateway.summary().verdict)
    phase.result = gateway_counts(phase.result, read_calls(gateway.run_dir / MODEL_DIR))
    phase.notes = [*phase.notes, *gateway.notes()]
    if gateway.died is not None and gateway.memory_killed:
        # The agent's requests took the memory: the run's limit, as if the agent had
        # allocated it (an infra_error would let it exclude its run at will).
        phase.evidence = phase.evidence.model_copy(update={"oom_killed": True})
        phase.notes.append(f"the model gateway was killed at the run's memory limit (its "
                           f"service group's), by what the agent sent it: {gateway.died}")
    elif gateway.died is not None:
        phase.result.infra_error = gateway.died


def open_tools(run: AgentRun) -> ToolsSession | None:
    """Start the run's audited tools service and egress proxy (None: the run has none).

    The service screens every answer for the source study's identifiers as it goes, so
    that ``tools.policy=stop`` can stop at the first flag. An agent node of a cluster
    (an :class:`AgentRun`, no answer key) has no identifiers to screen with: its calls are
    screened after the run, on the grading side (:func:`screen`).
    """
    if run.provider is None:
        return None
    source = (run.answers.source if isinstance(run, PreparedRun) and run.answers is not None
              else None)
    detector = ExposureDetector.for_source(source) if source is not None else None

    def screen(text: str) -> list[tuple[str, str]]:
        if detector is None or detector.empty:
            return []
        return [(m.kind, m.matched) for m in detector.scan(text)]

    return ToolsSession(run.spec.tools, run.run_dir, run.provider, screen,
                        limits=run.limits).start()


def read_tools(run: AgentRun, phase: AgentPhase, tools: ToolsSession) -> None:
    """After the agent: read the tools summary into ``phase``.

    An agent that left no trajectory of its own gets one of its audited calls; a policy
    stop makes the outcome ``policy_stop``.
    """
    phase.tools = tools.summary(run.harness.api_hosts())
    result = phase.result
    if result.trajectory is None and phase.tools.audited_calls:
        result.trajectory = trajectory_from_audit(tools.folder, run.spec.harness.name)
        result.trajectory_from_audit = True
        result.tool_calls = count_tool_calls(result.trajectory)
        result.web_fetches = count_web_fetches(result.trajectory)
    if phase.tools.policy_stop is not None:
        result.policy_stop = True


def watch_agent(run: AgentRun, sandbox: Sandbox, stdout: Path) -> AgentMonitor:
    """The monitor of step 3: status file and lines, API errors, a rejected key.

    When the gateway's record shows the provider rejecting the key twice in a row, or the
    agent's output shows it and the provider confirms it, the sandbox stops the agent
    and the run ends as ``infra_error`` with the provider's message; a rejection the
    provider does not confirm stops nothing.
    """
    label = f"{run.task.id} · " + spec_config_label(run.spec)

    def rejected(seen: str) -> str | None:
        # Ask the provider (through the run's gateway) before stopping anything: the
        # agent's output is the agent's to write.
        return run.harness.rejected_key_reason(seen) or key_rejected(
            iter_requests(run.run_dir / "model" / "requests.jsonl"))

    return AgentMonitor(run.run_dir, stdout,
                        AgentStatus(run_key=run.key, label=label, started=time.time(),
                                  updated=time.time()),
                        parse=run.harness.live_event, on_rejected_key=rejected,
                        every_s=run.spec.status_every_s,
                        record=run.run_dir / "model" / "requests.jsonl",
                        on_stop=sandbox.request_stop)


def collect(run_dir: Path) -> bytes | None:
    """Step 4: the submitted ``rankings.json`` (never through a link the agent planted)."""
    output = run_dir / "output"
    return read_submission(output) if output.is_dir() else None


def grade(run: PreparedRun, submission: bytes | None) -> RunGrades:
    """Step 5: grade the submission strictly and with recovery, in an isolated process.

    The process is this process's grading service, shared by the runs of a sweep.

    Without a trustworthy grade the run cannot count: a grading failure gives the
    strict grade of no file and an error, so the run is recorded and retried. Without
    an answer key nothing is graded: the run is ``sealed`` (SPEC 13).
    """
    if run.answers is None:
        pending = Grade(task_id=run.task.id, score=-1.0, status=GradeStatus.invalid,
                        errors=["sealed: the task has no answer key yet"], score_strict=-1.0,
                        grader_version=GRADER_VERSION)
        return RunGrades(pending, pending, sealed=True)
    try:
        grades = grade_shared(run.task.contract, run.answers, submission,
                              isolation=run.spec.sandbox.grader_isolation)
    except (RuntimeError, OSError) as exc:
        log.error("grading of run %s failed: %s", run.key, exc)
        strict = grade_submission(run.task.contract, run.answers, None)
        return RunGrades(strict, strict, error=f"grading failed: {exc}")
    return RunGrades(grades.strict, grades.recovered, note=grades.warning)


def grade_kept_at_refusal(run: PreparedRun, phase: AgentPhase, grades: RunGrades) -> RunGrades:
    """Step 5b: a refusal whose run ends without a valid file, graded on the file it had.

    The model gateway keeps ``rankings.json`` as each refused request found it
    (:func:`~spu.gateway.verdict.files_at_refusals`). When the final file does not count
    (removed, spoiled), the latest kept one that is valid or recoverable is graded
    instead, so that :func:`~spu.grading.outcome.refused_after_file` holds as it held
    when the model refused: the outcome stays ``refusal``, and the record says which file
    was graded. Otherwise the grades are the final file's.
    """
    if (not phase.result.refused or grades.sealed or grades.error
            or counts_as_file(grades.recovered)):
        return grades
    for kept in files_at_refusals(run.run_dir / MODEL_DIR):
        at_refusal = grade(run, kept)
        if at_refusal.error is None and counts_as_file(at_refusal.recovered):
            note = KEPT_AT_REFUSAL_NOTE.format(final=grades.recovered.status.value)
            return replace(at_refusal, note="; ".join(
                n for n in (at_refusal.note, note) if n))
    return grades


_THRESHOLDS: dict[tuple[str, str, str], float] = {}


def task_threshold(task: TaskPackage, answers: AnswerKey | None) -> float:
    """The task's chance threshold, drawn once per task and key in this process.

    The 4,000 seeded draws give the same number every time; a sweep of many runs on one
    task needs them once. Without a key, the threshold assumes no measured ties.
    """
    cache_key = (task.id, task.version, answers.model_dump_json() if answers else "")
    if cache_key not in _THRESHOLDS:
        _THRESHOLDS[cache_key] = (chance_threshold(task.contract, answers) if answers
                                  else chance_threshold_without_ties(task.contract))
    return _THRESHOLDS[cache_key]


def price(run: AgentRun, result: AgentResult) -> RunCost:
    """Step 6: the run's cost at the model's list prices, request by request."""
    if result.model_requests is not None:  # the gateway's record
        return run_cost(run.spec.model.prices, result.usage, result.model_requests,
                        result.cli_cost_usd, cache_write_rate=run.spec.cost.cache_write_rate)
    usage = result.trajectory.usage if result.trajectory is not None else result.usage
    steps = result.trajectory.steps if result.trajectory is not None else []
    return run_cost(run.spec.model.prices, usage, request_usages(steps), result.cli_cost_usd,
                    cache_write_rate=run.spec.cost.cache_write_rate)


def screen(run: PreparedRun, result: AgentResult) -> list[ExposureHit]:
    """Step 7: tool outputs that show an identifier of the source study (never scored).

    Every tool output of the trajectory (shell output included), the full answers of
    the audited calls, which a CLI may have shortened in its own record, and everything
    the model gateway saw sent to the model (:class:`~spu.gateway.inputs.SentReader`:
    tool results, user and system text, documents, PDFs as text, each boundary between
    two texts); for a harness that :attr:`~spu.harness.base.Harness.screens_answers` (a
    recall probe), the model's answers too. What kept the screen from reading all the
    model was sent (a cap) goes to ``result.screen_notes`` (``run.json``'s
    ``screen_incomplete`` and its notes). The hits of the run key's earlier attempts
    count too (:func:`earlier_exposure`).
    """
    if run.answers is None:  # no key, no source to look for: screened when graded
        return []
    steps = result.trajectory.steps if result.trajectory is not None else []
    hits = detect_exposure(run.answers.source, steps)
    if run.harness.screens_answers:  # a recall probe: the model's answer is the finding
        hits += detect_recall(run.answers.source, steps)
    tools_dir = run.run_dir / TOOLS_DIR
    if (tools_dir / AUDIT_FILE).is_file():
        hits += detect_exposure_in_audit(run.answers.source, tools_dir,
                                         read_audit(tools_dir / AUDIT_FILE), steps, hits)
    # What the model was sent, from the gateway's record: a hit the session files no
    # longer show (the agent deleted them) still flags the run.
    known = {h.kind for h in hits}
    sent = SentReader(run.run_dir / MODEL_DIR)
    try:
        hits += [h for h in detect_in_sequence(run.answers.source, (
            (t.label, t.text, t.after_gap) for t in sent.texts())) if h.kind not in known]
    finally:
        sent.close()
    result.screen_notes = sent.notes
    return hits + earlier_exposure(run.run_dir)


@dataclass(frozen=True)
class _Judgement:
    """How the run ended, as its record says it: the verdict, the evidence and the notes."""

    verdict: Verdict
    evidence: ProcessEvidence
    notes: list[str]
    excluded_for_rerun: bool


def _judged(run: PreparedRun, phase: AgentPhase, grades: RunGrades) -> _Judgement:
    """The outcome decided from the agent's end, the gateway's verdict and the grade."""
    spec, result = run.spec, phase.result
    evidence = phase.evidence
    if grades.error:
        evidence = evidence.model_copy(update={"error": grades.error})
    notes = list(phase.notes)
    if grades.note:
        notes.append(grades.note)
    if result.infra_error:
        notes.append(f"infra error: {result.infra_error}")
    notes += [f"model gateway: {said}" for said in result.agent_caused]
    notes += [f"exposure screen incomplete: {said}" for said in result.screen_notes]
    verdict = judge(RunEvidence.from_process(
        evidence, submitted=phase.submission is not None, infra_error=result.infra_error,
        refused=result.refused, policy_stop=result.policy_stop, cost_limit=result.cost_limit),
        None if grades.sealed else grades.recovered,
        score_limits=not spec.retry_limits_with_file)
    if verdict.refusal_after_file:
        notes.append(REFUSAL_AFTER_FILE_NOTE.format(status=grades.recovered.status.value))
    excluded_for_rerun = (verdict.outcome in LIMIT_OUTCOMES and spec.retry_limits_with_file
                          and is_scored(verdict.outcome, grades.recovered))
    if excluded_for_rerun:
        notes.append(RERUN_NOTE.format(outcome=verdict.outcome.value))
    return _Judgement(verdict, evidence, notes, excluded_for_rerun)


def _what_ran(run: PreparedRun) -> dict[str, Any]:
    """The record's fields of what ran: the run's identity, the task, the configuration."""
    spec, task = run.spec, run.task
    published = task_published(run.answers)
    return {
        "run_key": run.key, "identity": run.identity,
        "settings": settings_for(spec.limits, spec.sandbox.name, spec.launcher),
        "task_id": task.id, "task_version": task.version,
        "discipline": task.meta.discipline.value, "subfield": task.meta.subfield,
        "visibility": task.meta.visibility.value, "dataset": spec.dataset,
        "model": spec.model.name, "harness": spec.harness.name, "effort": spec.effort.name,
        "repeat": spec.repeat, "config": spec_config_label(spec),
        "threshold": task_threshold(task, run.answers), "n_items": task.n_items,
        "training_cutoff": spec.model.training_cutoff, "task_published": published,
        "published_before_cutoff": published_before_cutoff(published,
                                                           spec.model.training_cutoff),
        "attempt": spec.attempt, "retried_from": spec.retried_from,
    }


def _what_it_cost(result: AgentResult, cost: RunCost) -> dict[str, Any]:
    """The record's fields of usage and cost."""
    # The gateway's record, where there is one, is the run's usage (SPEC 11).
    usage = (result.usage if result.model_requests is not None or result.trajectory is None
             else result.trajectory.usage)
    return {
        "usage": usage, "cost_usd": cost.estimate.total,
        "cache_write_rate": cost.cache_write_rate,
        "cost_by_cache_write_rate": cost.by_cache_write_rate,
        "cli_cost_usd": result.cli_cost_usd, "cost_disagreement": cost.disagreement,
        "cost_full_input_usd": cost.full_input_price.total,
        "long_context_requests": cost.estimate.long_context_requests,
    }


def _what_it_reached(phase: AgentPhase, exposure: list[ExposureHit]) -> dict[str, Any]:
    """The record's fields of what the agent reached: tools, exposure, the web, GPUs."""
    result, tools, gpu = phase.result, phase.tools, phase.gpu
    return {
        "flagged_exposure": bool(exposure), "exposure_hits": exposure,
        "screen_incomplete": bool(result.screen_notes),
        "audited_calls": tools.audited_calls if tools is not None else None,
        "policy_stopped": result.policy_stop,
        "policy_stop": tools.policy_stop if tools is not None else None,
        "requests_outside_tools": tools.requests_outside_tools if tools is not None else None,
        "outside_destinations": tools.outside_destinations if tools is not None else [],
        "shell_downloads": (result.shell_downloads if result.shell_downloads is not None
                            else shell_downloads(result.trajectory.steps)
                            if result.trajectory is not None else None),
        "tool_calls": result.tool_calls, "web_fetches": result.web_fetches,
        "used_gpu": result.used_gpu or bool(gpu and gpu.used_gpu),
        "gpu_seconds": gpu.gpu_seconds if gpu is not None else None, "gpu_usage": gpu,
    }


def record(run: PreparedRun, phase: AgentPhase, grades: RunGrades, cost: RunCost,
           exposure: list[ExposureHit]) -> RunRecord:
    """Step 8: decide the outcome and write ``grade.json``, the trajectory and ``run.json``.

    A trajectory that cannot be written costs the run its trajectory file, never its
    record: the record says why in a note (the session files stay in the run folder).
    """
    result, run_dir = phase.result, run.run_dir
    judged = _judged(run, phase, grades)
    (run_dir / "grade.json").write_text(
        json.dumps({"strict": grades.strict.model_dump(mode="json"),
                    "recovered": grades.recovered.model_dump(mode="json")}, indent=1)
    )
    if result.trajectory is not None:
        written = _write_trajectory(run, result)
        if written is not None:
            judged.notes.append(written)
    run_record = RunRecord(
        **_what_ran(run),
        outcome=judged.verdict.outcome,
        scored=judged.verdict.scored,
        refusal_after_file=judged.verdict.refusal_after_file,
        excluded_for_rerun=judged.excluded_for_rerun,
        score_strict=grades.strict.score,
        score_recovered=grades.recovered.score,
        grade=None if grades.sealed else grades.recovered,
        **_what_it_cost(result, cost),
        **_what_it_reached(phase, exposure),
        cli_version=result.cli_version
        or (result.trajectory.cli_version if result.trajectory is not None else None),
        refusal_label=result.refusal_label,
        sandbox=phase.sandbox_info,
        process=judged.evidence,
        runtime_s=judged.evidence.duration_s,
        started_at=phase.started,
        finished_at=_now(),
        node=phase.node,
        gpu=phase.placement,
        evidence_disagreement=result.evidence_disagreement,
        gateway=phase.gateway,
        notes=judged.notes + list(phase.sandbox_info.warnings) + list(cost.notes),
    )
    write_run_record(run_dir, run_record)
    seal(run, run_record)
    return run_record


TRAJECTORY_NOT_WRITTEN = ("trajectory not written ({error}); the agent's session files "
                          "are in the run folder")
"""The note of a run whose trajectory could not be written."""


def _write_trajectory(run: AgentRun, result: AgentResult) -> str | None:
    """Write the run's trajectory; the note to record when it cannot be written (else None)."""
    assert result.trajectory is not None
    try:
        write_trajectory(run.run_dir / TRAJECTORY_FILE, result.trajectory)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the run keeps its record
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        log.error("run %s: %s", run.key, TRAJECTORY_NOT_WRITTEN.format(error=error))
        return TRAJECTORY_NOT_WRITTEN.format(error=error)
    return None


def task_published(answers: AnswerKey | None) -> str | None:
    """When the task's source was published, from its answer key (None: unknown or no key)."""
    if answers is None or answers.source is None:
        return None
    return answers.source.published


def seal(run: AgentRun, run_record: RunRecord) -> None:
    """Seal the finished run's submission, trajectory and gateway record (SPEC section 13)."""
    seal_record(run.spec.output_root, run.run_dir, run_record)


def seal_record(output_root: Path, run_dir: Path, run_record: RunRecord) -> None:
    """Seal the run folder of a just-written ``run.json`` (a lost attempt's too).

    A seal that cannot be made (the key unreadable) is logged and leaves the run without
    ``seal.json``, which ``spu seal verify`` then names; the run itself stands.
    """
    try:
        seal_run(output_root, run_dir, run_key=run_record.run_key, attempt=run_record.attempt,
                 identity=run_record.identity, outcome=run_record.outcome)
    except (SealKeyError, OSError) as exc:
        log.error("run %s could not be sealed: %s", run_record.run_key, exc)


def run_one(spec: RunSpec) -> RunRecord:
    """Run one agent on one task in a sandbox, grade it in isolation, write ``run.json``.

    The paper's run in eight steps, each a function of this module: stage, open the
    sandbox and run the agent (:func:`run_agent`), collect, grade, price, screen, record.

    Raises
    ------
    RunConfigError
        When the configuration cannot run at all (nothing is written then).
    spu.tasks.TaskLoadError
        When the task package or its answer key cannot be read.
    """
    run = record_interrupted_attempt(prepare_run(spec))
    staged = stage(run)
    try:
        phase = run_agent(run, staged)
    except Exception as exc:  # noqa: BLE001 - the agent's side failed: still a record
        phase = failed_agent_phase(run, staged, exc)
    if run.spec.attempt > spec.attempt:
        phase.notes.append(INTERRUPTED_BEFORE_NOTE.format(attempt=spec.attempt))
    phase.submission = collect(run.run_dir)
    grades = grade_kept_at_refusal(run, phase, grade(run, phase.submission))
    return record(run, phase, grades, price(run, phase.result), screen(run, phase.result))


def earlier_exposure(run_dir: Path) -> list[ExposureHit]:
    """The exposure hits of the run key's earlier attempts, each labelled with its attempt.

    An attempt that saw the source study counts toward the exposure of its run (SPEC 11:
    its gateway record stays with the run), so a retry or a relaunch after an interrupted
    attempt cannot leave the run reading ``flagged_exposure: false``. The hits come from
    each archived attempt's own record (``attempts/<n>/run.json``, written by the host);
    a record that cannot be read adds nothing.
    """
    hits: list[ExposureHit] = []
    attempts = run_dir / "attempts"
    if not attempts.is_dir():
        return hits
    for folder in sorted((p for p in attempts.iterdir() if p.name.isdigit()),
                         key=lambda p: int(p.name)):
        try:
            earlier = RunRecord.model_validate_json((folder / "run.json").read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("attempt %s of %s: its exposure not read: %s", folder.name,
                        run_dir.name, exc)
            continue
        label = f"attempt {earlier.attempt}"
        hits += [hit.model_copy(update={"tool": f"{label}: {hit.tool}" if hit.tool else label})
                 for hit in earlier.exposure_hits if not (hit.tool or "").startswith("attempt ")]
    return hits


INTERRUPTED_NOTE = ("attempt {attempt} ended without its record (the process running it "
                    "stopped); recorded when its run was started again, from what its folder "
                    "holds: the gateway's record (usage, cost, what the model was sent) and "
                    "the audited tools' log")
"""The note (and process error) of an attempt :func:`record_interrupted_attempt` recorded."""

INTERRUPTED_BEFORE_NOTE = ("attempt {attempt} ended without its record before this one; it "
                           "is recorded under attempts/ (infra_error, with its cost and "
                           "exposure)")
"""The note of the attempt that follows an interrupted one."""


def gateway_record_evidence(run: AgentRun) -> AgentResult:
    """What the run folder's gateway record (``model/requests.jsonl``) says, as a result.

    For an attempt whose agent phase left no result of its own: usage, per-request usage
    (its cost), refusal and infra error as the provider side saw them.
    """
    path = run.run_dir / MODEL_DIR / "requests.jsonl"
    if not path.is_file():
        return AgentResult()
    return gateway_evidence(AgentResult(), gateway_verdict(read_requests(path)))


def failed_agent_phase(run: AgentRun, staged: Path, exc: Exception) -> AgentPhase:
    """The agent phase of a run whose agent's side raised: an error, the gateway's record.

    :func:`run_agent` records what it expects to fail (a sandbox or harness that cannot
    start); anything else (a session file shaped to break its reader) ends here, so the
    run is recorded as ``infra_error`` with the error and what its gateway recorded.
    """
    error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:500] if str(exc) else ''}"
    log.error("run %s: the agent's side failed: %s", run.key, error)
    return AgentPhase(staged=staged, started=_now(), result=gateway_record_evidence(run),
                      evidence=ProcessEvidence(error=f"the agent's side failed: {error}"),
                      sandbox_info=SandboxInfo(backend=run.spec.sandbox.name))


def record_interrupted_attempt(run: PreparedRun) -> PreparedRun:
    """Record the attempt a stopped process left in the run folder; the run to start next.

    A run folder without ``run.json`` that :func:`holds_evidence` is an attempt whose
    process stopped before its record (killed, or a launch that exited). Its gateway's
    record counts toward its cost and its exposure (SPEC 11), so it is recorded now as
    ``infra_error`` (sealed, in the ledger), its usage and cost from that record and its
    exposure screened from what the model was sent and the audited tools answered; then
    staging archives it like any recorded attempt. The returned run is the attempt after
    it; ``run`` itself when there is no such folder.
    """
    run_dir = run.run_dir
    if (run_dir / "run.json").exists() or not run_dir.is_dir() or not holds_evidence(run_dir):
        return run
    release_stale_disk(run_dir)  # a disk left mounted holds the attempt's files
    result = gateway_record_evidence(run)
    note = INTERRUPTED_NOTE.format(attempt=run.spec.attempt)
    phase = AgentPhase(staged=run_dir / "task", started=_folder_time(run_dir), result=result,
                       evidence=ProcessEvidence(error=note),
                       sandbox_info=SandboxInfo(backend=run.spec.sandbox.name))
    lost = record(run, phase, grade(run, None), price(run, result), screen(run, result))
    log.warning("run %s: attempt %d ended without its record; recorded now (%s, cost %s, "
                "exposure %s); this run is attempt %d", run.key, lost.attempt,
                lost.outcome.value, lost.cost_usd, lost.flagged_exposure, lost.attempt + 1)
    return replace(run, spec=replace(run.spec, attempt=lost.attempt + 1, retried_from=None))


def _folder_time(run_dir: Path) -> str:
    """When the staged task of ``run_dir`` was put there (ISO-8601, UTC): the run's start."""
    try:
        stamp = (run_dir / "task").stat().st_mtime
    except OSError:
        return _now()
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def write_run_record(run_dir: Path, record: RunRecord) -> Path:
    """Write ``run.json`` atomically: a process killed meanwhile leaves the old file or none.

    A relaunched sweep reads ``run.json`` to tell finished runs from interrupted ones.
    """
    path = run_dir / "run.json"
    partial = path.with_name("run.json.partial")
    try:
        partial.write_bytes(record_json(record, indent=1))  # any text the agent chose
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)  # a full disk: no truncated record left behind
        raise
    return path


def _task_limit(task: TaskPackage, name: str, default: float) -> float:
    override = getattr(task.meta.limits, name, None) if task.meta.limits else None
    return default if override is None else override
