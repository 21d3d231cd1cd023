"""The built-in tables of ``spu analyze``, one registered function each (paper section 4).

Each function reads the run readings (:class:`~spu.analysis.trajectory_analysis.
TrajectoryInputs`) and returns an :class:`~spu.stats.registry.AnalysisResult`; the
tables themselves are computed in :mod:`spu.analysis.trajectory_analysis`. The SPEC
section 8 files and the classifier, which runs in other processes while these tables are
computed, are written by :func:`~spu.analysis.trajectory_analysis.build_tables` itself.
"""

from __future__ import annotations

import pandas as pd

from spu.analysis.trajectory_analysis import (
    ACTIVITY_TIME_RULE,
    AUDITED_RULE,
    REPEAT_METHODS_RULE,
    SELF_ASSESSMENT_RULE,
    TRAJECTORY_ANALYSES,
    TrajectoryInputs,
    activity_time,
    audited_tools,
    effort_pairs,
    family_jaccard,
    family_shares,
    fetched_sources,
    first_appearance,
    gpu_rules,
    gpu_tables,
    gpu_within_config,
    gpu_workloads,
    milestones,
    operator_shares,
    profiles,
    repeat_methods,
    revision_intervals,
    revision_rules,
    revisions,
    self_assessment,
    task_runs,
)
from spu.stats.registry import AnalysisResult, analysis


def _one(name: str, table: pd.DataFrame) -> AnalysisResult:
    return AnalysisResult(tables={name: table})


@analysis(files=("activity_time.csv",), section="Figure 14a", registry=TRAJECTORY_ANALYSES)
def activity_times(inputs: TrajectoryInputs) -> AnalysisResult:
    """Share of time in each activity class along normalized run time."""
    return AnalysisResult(tables={"activity_time.csv": activity_time(inputs.calls,
                                                                     inputs.scored)},
                          rules={"activity_time.csv": ACTIVITY_TIME_RULE})


@analysis(files=("milestones.csv",), section="Figure 14b", registry=TRAJECTORY_ANALYSES)
def milestone_times(inputs: TrajectoryInputs) -> AnalysisResult:
    """When each milestone of a run is first reached."""
    return _one("milestones.csv", milestones(inputs.scored))


@analysis(files=("families.csv",), section="Figure 15a-b", registry=TRAJECTORY_ANALYSES)
def families(inputs: TrajectoryInputs) -> AnalysisResult:
    """Share of runs using each method family."""
    return _one("families.csv", family_shares(inputs.scored))


@analysis(files=("jaccard.csv",), section="Figure 15", registry=TRAJECTORY_ANALYSES)
def jaccard(inputs: TrajectoryInputs) -> AnalysisResult:
    """Jaccard similarity of the method families of pairs of runs."""
    return _one("jaccard.csv", family_jaccard(inputs.scored))


@analysis(files=("sources.csv",), section="Figure 15c", registry=TRAJECTORY_ANALYSES)
def sources(inputs: TrajectoryInputs) -> AnalysisResult:
    """Classes of the sources fetched."""
    return _one("sources.csv", fetched_sources(inputs.readings))


@analysis(files=("search_operators.csv",), section="Figure 15d", registry=TRAJECTORY_ANALYSES)
def search_operators(inputs: TrajectoryInputs) -> AnalysisResult:
    """Share of queries using each search operator."""
    return _one("search_operators.csv", operator_shares(inputs.readings))


@analysis(files=("first_appearance.csv",), section="Figure 16a", registry=TRAJECTORY_ANALYSES)
def first_appearances(inputs: TrajectoryInputs) -> AnalysisResult:
    """Where each submitted group order first appears."""
    return _one("first_appearance.csv", first_appearance(inputs.readings))


@analysis(files={"revisions.csv": "Figures 17c, 21b, 24d-e",
                 "revision_intervals.csv": "Figures 17c, 24e (4.3)"},
          section="Figures 17c, 21b, 24d-e", registry=TRAJECTORY_ANALYSES)
def ranking_revisions(inputs: TrajectoryInputs) -> AnalysisResult:
    """Revisions of the ranking after the first complete draft, and their intervals."""
    table, opt = revisions(inputs.scored), inputs.options
    return AnalysisResult(tables={
        "revisions.csv": table,
        "revision_intervals.csv": revision_intervals(table, opt.seed, opt.resamples,
                                                     opt.flip_share, opt.revised_population)},
        rules=revision_rules(opt))


@analysis(files=("self_assessment.csv",), section="Figure 17b", registry=TRAJECTORY_ANALYSES)
def self_assessments(inputs: TrajectoryInputs) -> AnalysisResult:
    """Stated expected correlation against the score."""
    return AnalysisResult(tables={"self_assessment.csv": self_assessment(inputs.scored)},
                          rules={"self_assessment.csv": SELF_ASSESSMENT_RULE})


@analysis(files=("gpu.csv", "gpu_errors.csv", "gpu_workloads.csv", "gpu_within_config.csv"),
          section="Figure 22", registry=TRAJECTORY_ANALYSES)
def gpu(inputs: TrajectoryInputs) -> AnalysisResult:
    """GPU use, errors, main workload by discipline (22b) and within configurations (22e)."""
    table, errors = gpu_tables(inputs.readings, inputs.scored)
    options = inputs.options
    tables = {"gpu.csv": table, "gpu_errors.csv": errors,
              "gpu_workloads.csv": gpu_workloads(inputs.scored),
              "gpu_within_config.csv": gpu_within_config(inputs.scored, options.seed,
                                                         options.resamples, options.gpu_tasks)}
    return AnalysisResult(tables=tables, rules=gpu_rules(options, tables))


@analysis(files=("audited_tools.csv",), section="3.7, 4.1", registry=TRAJECTORY_ANALYSES)
def audited_service(inputs: TrajectoryInputs) -> AnalysisResult:
    """The audited service's errors and refusals; runs that never used it; first web access."""
    return AnalysisResult(tables={"audited_tools.csv": audited_tools(inputs.scored)},
                          rules={"audited_tools.csv": AUDITED_RULE})


@analysis(files=("repeat_methods.csv",), section="Figure 19c", registry=TRAJECTORY_ANALYSES)
def repeats_methods(inputs: TrajectoryInputs) -> AnalysisResult:
    """Method families used by some but not all repeats of a task, and the score gap."""
    table = repeat_methods(inputs.scored, inputs.options.seed, inputs.options.resamples)
    notes = (["repeat_methods: no task with two scored runs of one configuration (official "
              "runs only; --all-repeats reads the repeats)"]
             if table.empty and inputs.options.official_only else [])
    return AnalysisResult(tables={"repeat_methods.csv": table}, notes=notes,
                          rules={"repeat_methods.csv": REPEAT_METHODS_RULE})


@analysis(files=("task_runs.csv",), section="Figure 21a", registry=TRAJECTORY_ANALYSES)
def detail_task_runs(inputs: TrajectoryInputs) -> AnalysisResult:
    """Every scored run on the tasks named by ``--task ID`` (Figure 21a)."""
    wanted = inputs.options.detail_tasks
    if not wanted:
        return AnalysisResult(tables={})
    table = task_runs(inputs.scored, wanted)
    missing = sorted(set(wanted) - set(table["task_id"].astype(str)))
    notes = [f"task_runs: no scored run on {', '.join(missing)}"] if missing else []
    return AnalysisResult(tables={"task_runs.csv": table}, notes=notes)


@analysis(files={"task_settings.csv": "Figure 18e", "task_repeat_orders.csv": "Figure 19b"},
          section="Figures 18e, 19b", registry=TRAJECTORY_ANALYSES)
def detail_task_orders(inputs: TrajectoryInputs) -> AnalysisResult:
    """Orders on the tasks named by ``--task ID``: against settings (18e), repeats (19b)."""
    from spu.analysis.detail_tasks import (
        REPEAT_ORDERS_RULE,
        SETTINGS_RULE,
        task_repeat_orders,
        task_settings,
    )
    from spu.stats.submissions import load_task_set

    wanted = inputs.options.detail_tasks
    if not wanted:
        return AnalysisResult(tables={})
    if not inputs.options.task_roots:
        return AnalysisResult(tables={}, notes=[
            "task_settings, task_repeat_orders: need the task packages (--tasks)"])
    tasks = load_task_set(list(inputs.options.task_roots), inputs.options.answers_root,
                          set(wanted))
    runs = [{**{k: r.features.get(k) for k in ("run_key", "task_id", "config", "repeat",
                                               "score")}, "submitted": r.submitted}
            for r in inputs.readings if r.features.get("scored")
            and str(r.features.get("task_id")) in set(wanted)]
    settings = task_settings(runs, tasks, wanted)
    repeats = task_repeat_orders(runs, tasks, wanted)
    notes = []
    if repeats.empty:
        notes.append("task_repeat_orders: no named task has two scored runs of one "
                     "configuration (--all-repeats reads the repeats)")
    return AnalysisResult(tables={"task_settings.csv": settings,
                                  "task_repeat_orders.csv": repeats}, notes=notes,
                          rules={"task_settings.csv": SETTINGS_RULE,
                                 "task_repeat_orders.csv": REPEAT_ORDERS_RULE})


@analysis(files=("profiles.csv",), section="Figure 23a", registry=TRAJECTORY_ANALYSES)
def configuration_profiles(inputs: TrajectoryInputs) -> AnalysisResult:
    """Each configuration's profile of behaviour features."""
    return _one("profiles.csv", profiles(inputs.scored))


@analysis(files=("efforts.csv",), section="Figure 24c-d", registry=TRAJECTORY_ANALYSES)
def efforts(inputs: TrajectoryInputs) -> AnalysisResult:
    """Behaviour of one model at two reasoning efforts."""
    return _one("efforts.csv", effort_pairs(inputs.scored, inputs.options.seed,
                                            inputs.options.resamples))
