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
from spu.grading.chance import chance_threshold
from spu.grading.isolated import grade_isolated
from spu.grading.submission import read_submission
from spu.harness.base import AgentContext, AgentResult, HarnessError, get_harness
from spu.sandbox.base import RunLimits, Sandbox, SandboxError, SandboxRequest, get_sandbox
from spu.schema import (
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


def run_one(spec: RunSpec) -> RunRecord:
    """Run one agent on one task in a sandbox, grade it in isolation, write ``run.json``.

    Raises
    ------
    RunConfigError
        When the configuration cannot run at all (nothing is written then).
    spu.tasks.TaskLoadError
        When the task package or its answer key cannot be read.
    """
    task = load_task(spec.task_dir)
    answers = load_answers(task.answers_path(spec.answers_root))
    key = spec_run_key(spec, task)
    try:
        harness = get_harness(spec.harness.name)(spec.harness, spec.model, spec.effort)
        harness.check()
    except (KeyError, HarnessError) as exc:
        raise RunConfigError(f"harness={spec.harness.name}: {exc}") from None

    run_dir = (spec.output_root / "runs" / key).resolve()
    _archive_previous_attempt(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    staged = stage_public_files(task, run_dir / "task")
    limits = RunLimits(
        time_s=_task_limit(task, "time_s", spec.limits.time_s),
        memory_gb=_task_limit(task, "memory_gb", spec.limits.memory_gb),
        cpus=int(_task_limit(task, "cpus", spec.limits.cpus)),
        gpus=int(_task_limit(task, "gpus", spec.limits.gpus)),
        grace_s=spec.limits.grace_s,
    )
    started = _now()
    notes: list[str] = []
    sandbox_info = SandboxInfo(backend=spec.sandbox.name)
    result = AgentResult()
    evidence = ProcessEvidence()
    try:
        sandbox, notes = _open_sandbox(spec)
        paths = sandbox.prepare(
            SandboxRequest(
                task_dir=staged,
                run_dir=run_dir,
                limits=limits,
                gpu_ids=list(spec.gpu_ids),
                network=spec.sandbox.network,
                extra_ro_binds=harness.sandbox_binds(),
                # Hidden from the agent even where a system folder would show them.
                masked_paths=[task.path, task.answers_path(spec.answers_root).parent,
                              spec.output_root.resolve()],
            )
        )
        ctx = AgentContext(
            task=task,
            paths=paths,
            run_dir=run_dir,
            run_key=key,
            limits=limits,
            seed=int(key[:8], 16),
            gpu_ids=list(spec.gpu_ids),
        )
        try:
            harness.prepare(ctx, sandbox)
            command = harness.command(ctx)
            evidence = sandbox.exec(
                command.argv,
                command.env,
                stdout=ctx.log_dir / "agent.stdout",
                stderr=ctx.log_dir / "agent.stderr",
            )
            result = harness.parse(ctx, evidence)
        finally:
            harness.cleanup()
            sandbox_info = sandbox.info()
            sandbox.cleanup()
    except (SandboxError, HarnessError, OSError) as exc:
        log.error("run %s could not start: %s", key, exc)
        evidence = ProcessEvidence(error=f"{type(exc).__name__}: {exc}")

    output = run_dir / "output"
    # read_submission never follows a link the agent may have planted.
    submission = read_submission(output) if output.is_dir() else None
    try:
        grades = grade_isolated(task.contract, answers, submission,
                                isolation=spec.sandbox.grader_isolation)
    except (RuntimeError, OSError) as exc:
        # Without a trustworthy grade the run cannot count: record why and retry it.
        log.error("grading of run %s failed: %s", key, exc)
        from spu.grading.rules import grade_submission

        strict = grade_submission(task.contract, answers, None)
        grades_strict, grades_recovered = strict, strict
        evidence = evidence.model_copy(update={"error": f"grading failed: {exc}"})
        isolation_note = None
    else:
        grades_strict, grades_recovered = grades.strict, grades.recovered
        isolation_note = grades.warning
    if isolation_note:
        notes.append(isolation_note)
    if result.infra_error:
        notes.append(f"infra error: {result.infra_error}")

    outcome = decide_outcome(evidence, result, submission is not None, grades_recovered)
    scored = is_scored(outcome, grades_recovered)
    usage = result.trajectory.usage if result.trajectory is not None else result.usage
    steps = result.trajectory.steps if result.trajectory is not None else []
    cost = run_cost(spec.model.prices, usage, request_usages(steps), result.cli_cost_usd)
    exposure = detect_exposure(answers.source, steps)
    (run_dir / "grade.json").write_text(
        json.dumps({"strict": grades_strict.model_dump(mode="json"),
                    "recovered": grades_recovered.model_dump(mode="json")}, indent=1)
    )
    if result.trajectory is not None:
        write_trajectory(run_dir / TRAJECTORY_FILE, result.trajectory)
    record = RunRecord(
        run_key=key,
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
        scored=scored,
        score_strict=grades_strict.score,
        score_recovered=grades_recovered.score,
        grade=grades_recovered,
        threshold=chance_threshold(task.contract, answers),
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
        sandbox=sandbox_info,
        process=evidence,
        started_at=started,
        finished_at=_now(),
        attempt=spec.attempt,
        retried_from=spec.retried_from,
        notes=notes + list(sandbox_info.warnings) + list(cost.notes),
    )
    write_run_record(run_dir, record)
    return record


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
