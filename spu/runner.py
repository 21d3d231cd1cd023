"""One run: task -> sandbox + harness -> submission -> isolated grader -> run record.

``run_one(spec) -> RunRecord`` is what the Hydra entry point, the launchers and the
tests call. It writes everything under ``<output_root>/runs/<run_key>/``:

- ``task/``: the public files the agent saw (read-only at ``/task``);
- ``workspace/``, ``output/``: the agent's home and its submission folder;
- ``logs/``: stdout, stderr and the CLI's raw logs;
- ``grade.json``, ``trajectory.jsonl.gz`` and ``run.json`` (SPEC section 4).

A retried run keeps its earlier attempts under ``attempts/<n>/``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from spu.analysis.exposure import detect_exposure
from spu.config import (
    EffortConfig,
    HarnessConfig,
    LimitsConfig,
    ModelConfig,
    SandboxConfig,
)
from spu.cost import request_usages, run_cost
from spu.cost.prices import RunCost
from spu.grading.chance import chance_threshold
from spu.grading.isolated import grade_isolated
from spu.grading.rules import grade_submission
from spu.grading.submission import read_submission
from spu.harness.base import AgentContext, AgentResult, Harness, HarnessError, get_harness
from spu.sandbox.base import RunLimits, Sandbox, SandboxError, SandboxRequest, get_sandbox
from spu.schema import (
    AnswerKey,
    ExposureHit,
    Grade,
    GradeStatus,
    Outcome,
    ProcessEvidence,
    RunRecord,
    SandboxInfo,
)
from spu.tasks.package import TaskPackage, load_answers, load_task, stage_public_files
from spu.tracking.trajectories import TRAJECTORY_FILE, write_trajectory

log = logging.getLogger(__name__)

SUBMISSION_FILE = "rankings.json"
EXCLUDED_OUTCOMES = frozenset({Outcome.refusal, Outcome.memory_limit, Outcome.infra_error})
"""Outcomes never scored, even with a valid file (paper 3.1, Table 6)."""


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
    gpu_ids: tuple[str, ...] = ()
    attempt: int = 1
    retried_from: str | None = None


def run_key(model: str, harness: str, effort: str, task_id: str, task_version: str,
            repeat: int) -> str:
    """Stable 16-hex-digit hash of what identifies a run.

    Examples
    --------
    >>> run_key("random", "baseline", "none", "spu-demo-a", "1.0", 0)
    '4181d89605e63c83'
    """
    ident = {
        "model": model,
        "harness": harness,
        "effort": effort,
        "task_id": task_id,
        "task_version": task_version,
        "repeat": int(repeat),
    }
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def config_label(
    model: str, effort: str, harness: str | None = None, default_harness: str | None = None
) -> str:
    """The configuration a run belongs to in the statistics: a model at an effort in a harness.

    The harness is named only when it is not the model's default, so the paper's
    configurations read ``opus5-max`` and ``astra-medium``.

    Examples
    --------
    >>> config_label("astra", "medium", "codex", "codex")
    'astra-medium'
    >>> config_label("opus5", "max", "command", "claude_code")
    'opus5-max-command'
    """
    label = f"{model}-{effort}"
    if harness and default_harness and harness != default_harness:
        label += f"-{harness}"
    return label


def spec_run_key(spec: RunSpec, task: TaskPackage) -> str:
    """The run key of ``spec`` on ``task``."""
    return run_key(spec.model.name, spec.harness.name, spec.effort.name, task.id,
                   task.version, spec.repeat)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _archive_previous_attempt(run_dir: Path) -> None:
    if not (run_dir / "run.json").exists():
        if run_dir.exists():
            shutil.rmtree(run_dir)
        return
    attempts = run_dir / "attempts"
    n = 1 + sum(1 for _ in attempts.iterdir()) if attempts.exists() else 1
    holding = run_dir.with_name(run_dir.name + ".previous")
    if holding.exists():
        shutil.rmtree(holding)
    run_dir.rename(holding)
    run_dir.mkdir(parents=True)
    if (holding / "attempts").exists():
        (holding / "attempts").rename(attempts)
    attempts.mkdir(exist_ok=True)
    holding.rename(attempts / str(n))


def decide_outcome(
    evidence: ProcessEvidence, result: AgentResult, submitted: bool, grade: Grade
) -> Outcome:
    """The outcome of a run, from facts in a fixed order of precedence (SPEC section 5)."""
    if evidence.error or result.infra_error:
        return Outcome.infra_error
    if result.refused:
        return Outcome.refusal
    if evidence.oom_killed:
        return Outcome.memory_limit
    if evidence.timed_out:
        return Outcome.timeout
    if result.policy_stop:
        return Outcome.policy_stop
    if not submitted or no_group_ranked(grade):
        return Outcome.no_file
    if grade.status is GradeStatus.valid:
        return Outcome.valid
    if grade.status is GradeStatus.recovered:
        return Outcome.recovered
    return Outcome.rejected


def no_group_ranked(grade: Grade) -> bool:
    """A file accepted but ranking no group (paper E.1: an empty list counts as no file)."""
    return grade.status is not GradeStatus.invalid and all(
        g.error == "group absent" for g in grade.groups
    )


def is_scored(outcome: Outcome, grade: Grade) -> bool:
    """Scored: a valid or recoverable file, not excluded by the outcome (paper 3.1)."""
    return (
        grade.status in (GradeStatus.valid, GradeStatus.recovered)
        and outcome not in EXCLUDED_OUTCOMES
        and not no_group_ranked(grade)
    )


def _open_sandbox(spec: RunSpec) -> tuple[Sandbox, list[str]]:
    notes: list[str] = []
    try:
        cls = get_sandbox(spec.sandbox.name)
    except KeyError as exc:
        raise RunConfigError(f"sandbox.name: {exc.args[0]}") from None
    ok, why = cls.available()
    if not ok and spec.sandbox.name == "local":
        note = f"sandbox=local unavailable ({why}); FALLING BACK to sandbox=subprocess"
        log.warning(note)
        notes.append(note)
        cls = get_sandbox("subprocess")
    elif not ok:
        raise SandboxError(f"sandbox={spec.sandbox.name} is not available: {why}")
    return cls(options=vars(spec.sandbox)), notes


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

    @property
    def run_dir(self) -> Path:
        """``<output_root>/runs/<run_key>``."""
        return (self.spec.output_root / "runs" / self.key).resolve()


@dataclass(frozen=True)
class PreparedRun(AgentRun):
    """A run about to start: its trusted task, answer key, key, harness and limits."""

    answers: AnswerKey


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
    node: str | None = None
    """The cluster node the agent ran on, where a launcher placed it elsewhere."""


@dataclass(frozen=True)
class RunGrades:
    """Step 5: the strict and the recovered grade of the submission."""

    strict: Grade
    recovered: Grade
    note: str | None = None
    """A warning about the grading (not isolated, or failed)."""
    error: str | None = None
    """Why grading failed; the run is then an infrastructure error."""


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


def _agent_run(spec: RunSpec, task: TaskPackage, check: bool) -> AgentRun:
    try:
        harness = get_harness(spec.harness.name)(spec.harness, spec.model, spec.effort)
        if check:
            harness.check()
    except (KeyError, HarnessError) as exc:
        raise RunConfigError(f"harness={spec.harness.name}: {exc}") from None
    limits = RunLimits(
        time_s=_task_limit(task, "time_s", spec.limits.time_s),
        memory_gb=_task_limit(task, "memory_gb", spec.limits.memory_gb),
        cpus=int(_task_limit(task, "cpus", spec.limits.cpus)),
        gpus=int(_task_limit(task, "gpus", spec.limits.gpus)),
        grace_s=spec.limits.grace_s,
    )
    return AgentRun(spec, task, spec_run_key(spec, task), harness, limits)


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
    answers = load_answers(task.answers_path(spec.answers_root))
    agent = _agent_run(spec, task, check)
    return PreparedRun(spec=agent.spec, task=agent.task, key=agent.key, harness=agent.harness,
                       limits=agent.limits, answers=answers)


def stage(run: AgentRun) -> Path:
    """Step 1: archive an earlier attempt and stage the task's public files."""
    _archive_previous_attempt(run.run_dir)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    return stage_public_files(run.task, run.run_dir / "task")


def sandbox_request(run: AgentRun, staged: Path) -> SandboxRequest:
    """Step 2's request: the staged files, the limits and what the agent must not see."""
    spec = run.spec
    return SandboxRequest(
        task_dir=staged,
        run_dir=run.run_dir,
        limits=run.limits,
        gpu_ids=list(spec.gpu_ids),
        network=spec.sandbox.network,
        extra_ro_binds=run.harness.sandbox_binds(),
        # Hidden from the agent even where a system folder would show them.
        masked_paths=[run.task.path, run.task.answers_path(spec.answers_root).parent,
                      spec.output_root.resolve()],
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
    try:
        sandbox, phase.notes = _open_sandbox(run.spec)
        paths = sandbox.prepare(sandbox_request(run, staged))
        ctx = AgentContext(
            task=run.task,
            paths=paths,
            run_dir=run.run_dir,
            run_key=run.key,
            limits=run.limits,
            seed=int(run.key[:8], 16),
            gpu_ids=list(run.spec.gpu_ids),
        )
        try:
            run.harness.prepare(ctx, sandbox)
            command = run.harness.command(ctx)
            if started is not None:
                started(ctx)
            phase.evidence = sandbox.exec(
                command.argv,
                command.env,
                stdout=ctx.log_dir / "agent.stdout",
                stderr=ctx.log_dir / "agent.stderr",
            )
            phase.result = run.harness.parse(ctx, phase.evidence)
        finally:
            run.harness.cleanup()
            phase.sandbox_info = sandbox.info()
            sandbox.cleanup()
    except (SandboxError, HarnessError, OSError) as exc:
        log.error("run %s could not start: %s", run.key, exc)
        phase.evidence = ProcessEvidence(error=f"{type(exc).__name__}: {exc}")
    return phase


def collect(run_dir: Path) -> bytes | None:
    """Step 4: the submitted ``rankings.json`` (never through a link the agent planted)."""
    output = run_dir / "output"
    return read_submission(output) if output.is_dir() else None


def grade(run: PreparedRun, submission: bytes | None) -> RunGrades:
    """Step 5: grade the submission strictly and with recovery, in an isolated process.

    Without a trustworthy grade the run cannot count: a grading failure gives the
    strict grade of no file and an error, so the run is recorded and retried.
    """
    try:
        grades = grade_isolated(run.task.contract, run.answers, submission,
                                isolation=run.spec.sandbox.grader_isolation)
    except (RuntimeError, OSError) as exc:
        log.error("grading of run %s failed: %s", run.key, exc)
        strict = grade_submission(run.task.contract, run.answers, None)
        return RunGrades(strict, strict, error=f"grading failed: {exc}")
    return RunGrades(grades.strict, grades.recovered, note=grades.warning)


_THRESHOLDS: dict[tuple[str, str, str], float] = {}


def task_threshold(task: TaskPackage, answers: AnswerKey) -> float:
    """The task's chance threshold, drawn once per task and key in this process.

    The 4,000 seeded draws give the same number every time; a sweep of many runs on one
    task needs them once.
    """
    cache_key = (task.id, task.version, answers.model_dump_json())
    if cache_key not in _THRESHOLDS:
        _THRESHOLDS[cache_key] = chance_threshold(task.contract, answers)
    return _THRESHOLDS[cache_key]


def price(run: AgentRun, result: AgentResult) -> RunCost:
    """Step 6: the run's cost at the model's list prices, request by request."""
    usage = result.trajectory.usage if result.trajectory is not None else result.usage
    steps = result.trajectory.steps if result.trajectory is not None else []
    return run_cost(run.spec.model.prices, usage, request_usages(steps), result.cli_cost_usd)


def screen(run: PreparedRun, result: AgentResult) -> list[ExposureHit]:
    """Step 7: tool outputs that show an identifier of the source study (never scored)."""
    steps = result.trajectory.steps if result.trajectory is not None else []
    return detect_exposure(run.answers.source, steps)


def record(run: PreparedRun, phase: AgentPhase, grades: RunGrades, cost: RunCost,
           exposure: list[ExposureHit]) -> RunRecord:
    """Step 8: decide the outcome and write ``grade.json``, the trajectory and ``run.json``."""
    spec, task, result, run_dir = run.spec, run.task, phase.result, run.run_dir
    evidence = phase.evidence
    if grades.error:
        evidence = evidence.model_copy(update={"error": grades.error})
    notes = list(phase.notes)
    if grades.note:
        notes.append(grades.note)
    if result.infra_error:
        notes.append(f"infra error: {result.infra_error}")
    outcome = decide_outcome(evidence, result, phase.submission is not None, grades.recovered)
    usage = result.trajectory.usage if result.trajectory is not None else result.usage
    (run_dir / "grade.json").write_text(
        json.dumps({"strict": grades.strict.model_dump(mode="json"),
                    "recovered": grades.recovered.model_dump(mode="json")}, indent=1)
    )
    if result.trajectory is not None:
        write_trajectory(run_dir / TRAJECTORY_FILE, result.trajectory)
    run_record = RunRecord(
        run_key=run.key,
        task_id=task.id,
        task_version=task.version,
        discipline=task.meta.discipline.value,
        subfield=task.meta.subfield,
        visibility=task.meta.visibility.value,
        model=spec.model.name,
        harness=spec.harness.name,
        effort=spec.effort.name,
        repeat=spec.repeat,
        config=config_label(spec.model.name, spec.effort.name, spec.harness.name,
                            spec.model.default_harness),
        outcome=outcome,
        scored=is_scored(outcome, grades.recovered),
        score_strict=grades.strict.score,
        score_recovered=grades.recovered.score,
        grade=grades.recovered,
        threshold=task_threshold(task, run.answers),
        n_items=task.n_items,
        usage=usage,
        cost_usd=cost.estimate.total,
        cli_cost_usd=result.cli_cost_usd,
        cost_disagreement=cost.disagreement,
        cost_full_input_usd=cost.full_input_price.total,
        long_context_requests=cost.estimate.long_context_requests,
        cli_version=result.cli_version
        or (result.trajectory.cli_version if result.trajectory is not None else None),
        flagged_exposure=bool(exposure),
        exposure_hits=exposure,
        runtime_s=evidence.duration_s,
        tool_calls=result.tool_calls,
        web_fetches=result.web_fetches,
        used_gpu=result.used_gpu,
        refusal_label=result.refusal_label,
        sandbox=phase.sandbox_info,
        process=evidence,
        started_at=phase.started,
        finished_at=_now(),
        attempt=spec.attempt,
        retried_from=spec.retried_from,
        node=phase.node,
        notes=notes + list(phase.sandbox_info.warnings) + list(cost.notes),
    )
    write_run_record(run_dir, run_record)
    return run_record


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
    run = prepare_run(spec)
    phase = run_agent(run, stage(run))
    phase.submission = collect(run.run_dir)
    return record(run, phase, grade(run, phase.submission), price(run, phase.result),
                  screen(run, phase.result))


def write_run_record(run_dir: Path, record: RunRecord) -> Path:
    """Write ``run.json`` atomically: a process killed meanwhile leaves the old file or none.

    A relaunched sweep reads ``run.json`` to tell finished runs from interrupted ones.
    """
    path = run_dir / "run.json"
    partial = path.with_name("run.json.partial")
    partial.write_text(record.model_dump_json(indent=1))
    os.replace(partial, path)
    return path


def _task_limit(task: TaskPackage, name: str, default: float) -> float:
    override = getattr(task.meta.limits, name, None) if task.meta.limits else None
    return default if override is None else override
