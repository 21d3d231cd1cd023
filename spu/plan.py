"""What a command line would run, without running anything: ``dry_run=true``.

``python -m spu.main <overrides> [-m] dry_run=true`` expands the sweep exactly as
the sweeper does (the experiment's ``hydra.sweeper.params``, then the command line, globs
over the config groups, then each model's default harness and the experiment's model
sweep as :mod:`spu.launch.jobs` applies them), and lists every job: its task, configuration,
repeat, run key, whether it would run or is skipped (finished earlier, read from
tracking and the run folders without writing to either), and its expected cost
(:mod:`spu.cost.reference`). No launcher, Ray, tracking server, sandbox or agent starts.

Composing a config through Hydra takes about half a second, so a sweep is composed once
per distinct set of overrides other than ``task`` (the thirteen configurations of
``experiment=paper``, not its 1,508 jobs); each task's identity comes from its
``task.yaml``. A sweep of a thousand jobs is listed in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spu.overrides import OverrideError, parse, task_problem
from spu.project import CONFIG_MODULE, CONFIG_NAME

MULTIRUN = "MULTIRUN"


@dataclass(frozen=True)
class PlannedJob:
    """One job of a sweep, as it would run."""

    index: int
    """Hydra's job number."""
    overrides: tuple[str, ...]
    """The job's overrides."""
    task: str
    """The task option (its folder name)."""
    task_id: str
    task_version: str
    model: str
    harness: str
    effort: str
    config: str
    """Configuration label (``opus5-max``)."""
    repeat: int
    run_key: str
    status: str
    """``run``, ``retry`` (a new attempt of a key with an unfinished record) or ``skip``."""
    reason: str
    """Why, in words."""
    cost_usd: float | None
    """Expected cost of the run (None: no reference usage)."""
    cost_basis: str
    """Where the expected cost comes from."""


@dataclass
class SweepPlan:
    """Every job a command line would launch."""

    jobs: list[PlannedJob] = field(default_factory=list)
    multirun: bool = False
    launcher: str = "basic"
    budget_usd: float | None = None
    composed: int = 0
    """Configs composed through Hydra to list the jobs."""

    @property
    def to_run(self) -> list[PlannedJob]:
        """Jobs that would start a run."""
        return [j for j in self.jobs if j.status != "skip"]

    @property
    def expected_cost_usd(self) -> float:
        """Expected cost of the jobs that would run, where an estimate exists."""
        return math.fsum(j.cost_usd for j in self.to_run if j.cost_usd is not None)

    @property
    def without_estimate(self) -> int:
        """Jobs that would run and have no expected cost."""
        return sum(1 for j in self.to_run if j.cost_usd is None)


def _split(argv: Sequence[str]) -> tuple[bool, list[str]]:
    multirun = any(a in ("-m", "--multirun") for a in argv)
    return multirun, [a for a in argv if not a.startswith("-")]


def job_overrides(cfg: Any, overrides: list[str], loader: Any, multirun: bool) -> list[list[str]]:
    """The override list of every job, as the sweeper builds them (:mod:`spu.launch.jobs`)."""
    from spu.launch.jobs import single_job, sweep_jobs

    if not multirun:
        return [single_job(overrides, loader)]
    params = cfg.hydra.sweeper.get("params") or {}
    return [job for batch in sweep_jobs(dict(params), overrides, loader) for job in batch]


def plan_command(argv: Sequence[str]) -> SweepPlan:
    """Expand a command line into its jobs, composing one config per configuration.

    Raises:
        OverrideError: an override names no key or option, or a value no run can use.
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from spu.config import SPUConfig, config_problems, register_configs
    from spu.tasks.package import retired_task_names

    register_configs()
    multirun, overrides = _split(argv)
    parsed = parse(overrides)
    base = [o.input_line for o in parsed if not o.is_sweep_override()]
    GlobalHydra.instance().clear()
    plan = SweepPlan()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        cfg = compose(CONFIG_NAME, overrides=base, return_hydra_config=True)
        plan.multirun = multirun or str(cfg.hydra.mode) in (MULTIRUN, "RunMode.MULTIRUN")
        plan.launcher = str(cfg.hydra.runtime.choices.get("hydra/launcher", "basic"))
        plan.budget_usd = cfg.budget.max_cost_usd
        jobs = job_overrides(cfg, overrides, loader, plan.multirun)
        task_options = set(loader.get_group_options("task"))
        # Retired tasks are left out of the options (and so of a glob), not out of task=<id>.
        task_options |= retired_task_names(Path(str(cfg.task_root)).expanduser().resolve())
        composed: dict[tuple[str, ...], Any] = {}
        rows = []
        for index, job in enumerate(jobs):
            task = next((o.partition("=")[2] for o in job if o.lstrip("+").startswith("task=")),
                        None) or _default_task(cfg)
            if task is None:
                raise OverrideError("no task selected: pass task=<id> or -m task='glob(*)'")
            if task not in task_options:
                root = Path(str(cfg.task_root)).expanduser().resolve()
                raise OverrideError(task_problem(task, root, sorted(task_options)))
            shape = tuple(o for o in job if not o.lstrip("+").startswith("task="))
            if shape not in composed:
                c = compose(CONFIG_NAME, overrides=[*shape, f"task={task}"])
                conf: SPUConfig = OmegaConf.to_object(c)  # type: ignore[assignment]
                problems = config_problems(conf)
                if problems:
                    raise OverrideError(problems[0])
                composed[shape] = conf
                plan.composed += 1
            rows.append((index, tuple(job), task, composed[shape]))
    GlobalHydra.instance().clear()
    if not rows and plan.multirun:
        root = Path(str(cfg.task_root)).expanduser().resolve()
        raise OverrideError(task_problem("glob(*)", root, []))
    plan.jobs = _decide(rows, Path(str(cfg.task_root)).expanduser().resolve())
    return plan


def _default_task(cfg: Any) -> str | None:
    choice = cfg.hydra.runtime.choices.get("task")
    return None if choice in (None, "null") else str(choice)


def _decide(rows: list[tuple[int, tuple[str, ...], str, Any]], task_root: Path) -> list[PlannedJob]:
    """Identity, resume status and expected cost of each job."""
    from spu.cost.reference import expected_cost
    from spu.identity import config_label, harness_label, identity_for, run_key
    from spu.tasks.package import load_meta

    metas: dict[str, Any] = {}
    identities = []
    for index, job, task, conf in rows:
        if task not in metas:
            metas[task] = load_meta(task_root / task)
        meta = metas[task]
        label = config_label(conf.model.name, conf.effort.name, conf.harness.name,
                             conf.model.default_harness,
                             harness_label(conf.harness, conf.consensus))
        ident = identity_for(conf.model, conf.harness, conf.effort, conf.tools,
                             task_root / task, meta.id, meta.version, conf.repeat,
                             conf.consensus, conf.output_root, conf.sandbox)
        identities.append((index, job, task, conf, meta, label, run_key(ident), ident))
    decisions = _resume_decisions(identities)
    costs: dict[tuple[str, str], Any] = {}
    jobs = []
    for index, job, task, conf, meta, label, key, _ in identities:
        if (conf.model.name, label) not in costs:
            costs[(conf.model.name, label)] = expected_cost(conf.model, label,
                                                            _scripted_usage(conf))
        cost = costs[(conf.model.name, label)]
        status, reason = decisions.get(key, ("run", "new"))
        jobs.append(PlannedJob(
            index=index, overrides=job, task=task, task_id=meta.id,
            task_version=meta.version, model=conf.model.name, harness=conf.harness.name,
            effort=conf.effort.name, config=label, repeat=conf.repeat, run_key=key,
            status=status, reason=reason, cost_usd=cost.usd, cost_basis=cost.basis))
    return jobs


def _scripted_usage(conf: Any) -> Any:
    """The usage the scripted model reports over its script (None for other models)."""
    if conf.model.provider != "scripted":
        return None
    from spu.schema import Usage
    from spu.scripted.script import ScriptError, load_script, scripted_usage

    try:
        script = load_script(conf.model.api_model or "presented_order")
    except ScriptError:
        return None
    total = Usage()
    for turn in range(len(script.turns)):
        total = total + scripted_usage(turn)
    return total


def _resume_decisions(identities: list[Any]) -> dict[str, tuple[str, str]]:
    """Run, retry or skip for each run key, read from tracking and run folders only.

    A key with nothing recorded is looked up by its first-scheme key, as a launch does
    (:func:`spu.launch.resume.latest_recorded`), without repairing anything.
    """
    from spu.identity import identity_legacy_key
    from spu.launch.resume import ResumeMode, legacy_record_matches, plan_run
    from spu.tracking.query import recorded_runs
    from spu.tracking.store import resolve_target

    by_store: dict[tuple[Any, Path], list[Any]] = {}
    for ident in identities:
        conf = ident[3]
        if ResumeMode.parse(conf.sweep.resume) is ResumeMode.off:
            continue
        root = Path(conf.output_root).expanduser().resolve()
        target = resolve_target(conf.tracking, root, conf.experiment.name) \
            if conf.tracking.enabled else None
        by_store.setdefault((target, root), []).append(ident)
    decisions: dict[str, tuple[str, str]] = {}
    for (target, root), members in by_store.items():
        legacy = {m[6]: identity_legacy_key(m[7]) for m in members}
        keys = sorted({m[6] for m in members} | set(legacy.values()))
        tracked = recorded_runs(target, keys) if target is not None else {}

        for ident in members:
            conf, key = ident[3], ident[6]
            latest = _latest_of(key, tracked, root)
            if latest is None and legacy_record_matches(root / "runs" / legacy[key], ident[7]):
                latest = _latest_of(legacy[key], tracked, root)
            if latest is None:
                continue
            decided = plan_run(latest, conf.sweep.resume, conf.sweep.retries)
            status = "skip" if decided.skip else "retry"
            decisions[key] = (status, decided.reason)
    return decisions


def _latest_of(key: str, tracked: dict[str, Any], root: Path) -> Any:
    """The latest attempt of ``key``: tracked, or a newer ``run.json`` of its folder."""
    from spu.tracking.query import read_run_file, recorded_run_from_record

    latest = tracked.get(key)
    record = read_run_file(root / "runs" / key / "run.json") \
        if (root / "runs" / key).is_dir() else None
    if record is not None and (latest is None or record.attempt > latest.attempt):
        latest = recorded_run_from_record(record)
    return latest


def plan_table(plan: SweepPlan, limit: int | None = None) -> Any:
    """A rich table of the planned jobs (the first ``limit`` rows)."""
    from rich.table import Table

    table = Table(title=f"SPU dry run · {len(plan.jobs)} jobs · launcher {plan.launcher} "
                        f"(nothing started)")
    for name, justify in (("#", "right"), ("task", "left"), ("config", "left"),
                          ("harness", "left"), ("repeat", "right"), ("run key", "left"),
                          ("would", "left"), ("expected cost", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    shown = plan.jobs if limit is None else plan.jobs[:limit]
    for j in shown:
        would = {"run": "run", "retry": f"run ({j.reason})",
                 "skip": f"skip ({j.reason})"}[j.status]
        table.add_row(str(j.index), j.task, j.config, j.harness, str(j.repeat), j.run_key,
                      would, usd(j.cost_usd))
    return table


def usd(value: float | None) -> str:
    """A dollar amount: cents, or a tenth of a cent below one cent; ``-`` when unknown.

    Examples:
        >>> usd(37.3415), usd(0.0042), usd(0.0), usd(None)
        ('$37.34', '$0.004', '$0.00', '-')
    """
    if value is None:
        return "-"
    if 0 < abs(value) < 0.01:
        return f"${value:.3f}"
    return f"${value:,.2f}"


def plan_summary(plan: SweepPlan) -> list[str]:
    """The lines under the table: what would run, what it would cost, the budget."""
    run, skip = len(plan.to_run), len(plan.jobs) - len(plan.to_run)
    lines = [f"{run} of {len(plan.jobs)} jobs would run, {skip} skipped (finished earlier); "
             f"expected cost {usd(plan.expected_cost_usd)}"
             + (f" plus {plan.without_estimate} runs without a reference usage"
                if plan.without_estimate else "")
             + "; nothing was started (drop dry_run=true to launch)"]
    bases = sorted({j.cost_basis for j in plan.to_run if j.cost_usd is not None})
    if bases:
        lines.append(f"expected cost per run from: {', '.join(bases)} (spu.cost.reference)")
    if plan.budget_usd is not None:
        fits = 0
        spent = 0.0
        for job in plan.to_run:
            spent += job.cost_usd or 0.0
            if spent > plan.budget_usd + 1e-9:
                break
            fits += 1
        lines.append(f"budget.max_cost_usd={plan.budget_usd:g}: about {fits} of {run} runs "
                     f"fit in it at the expected costs")
    return lines
