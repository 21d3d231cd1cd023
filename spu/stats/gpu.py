"""Which runs used the GPU: the paper's rule (executed code, E.12) or the sampled device.

The runs table's ``used_gpu`` is what ``run.json`` records: the run's GPUs sampled through
NVML while the agent ran (:mod:`spu.sandbox.gpu_usage`). The paper counts a run as having
used the GPU when a GPU workload in its executed code ran without failing (E.12, 4.8: 255
of 1,155 runs), which is what ``spu analyze`` writes as ``used_gpu`` in
``runs_features.csv``. :func:`apply_gpu_rule` gives ``spu stats`` that definition by
default: with ``--runs-dir``, each scored run's trajectory is read with the analysis's own
labels (:func:`spu.analysis.runs.read_run`), ``used_gpu`` becomes the executed-code flag
and the table's value moves to ``gpu_measured`` beside it. ``--gpu-rule measured`` keeps
the sampled device. ``manifest.json`` says which rule produced ``used_gpu`` and from how
many trajectories (``gpu_rule``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

GPU_RULES: tuple[str, ...] = ("executed", "measured")
"""The rules ``--gpu-rule`` takes; the first is the default (the paper's)."""

GPU_RULE_TEXT = {
    "executed": "E.12: a run used the GPU when a GPU workload in its executed code (a CUDA "
                "tensor or array, a GPU build of a chemistry or dynamics package, a program "
                "given a CUDA device) ran without failing, read from its trajectory; the "
                "device sampled by NVML (run.json's used_gpu) is gpu_measured beside it",
    "measured": "the device sampled by NVML while the agent ran (run.json's used_gpu), "
                "--gpu-rule measured; not the paper's definition (E.12)",
}
"""What ``used_gpu`` means under each rule, as ``manifest.json`` states it."""


@dataclass(frozen=True)
class GpuRuleResult:
    """The runs table under a GPU rule and what the manifest records of it."""

    runs: pd.DataFrame
    """The table: ``used_gpu`` under the rule, ``gpu_measured`` the sampled device."""
    rule: str
    """The rule in force: ``executed`` or ``measured`` (``measured`` also when the paper's
    rule was asked for and no trajectory could be read)."""
    asked: str
    """The rule asked for (``--gpu-rule``)."""
    from_trajectories: int
    """Scored runs whose ``used_gpu`` came from their trajectory."""
    measured_only: int
    """Scored runs that kept the sampled value (no trajectory found) under ``executed``."""
    notes: tuple[str, ...] = ()
    """Why the rule in force differs from the one asked for, or runs kept the sampled one."""

    def manifest(self) -> dict[str, Any]:
        """The ``gpu_rule`` entry of ``manifest.json``."""
        return {"asked": self.asked, "rule": self.rule, "text": GPU_RULE_TEXT[self.rule],
                "runs_from_trajectories": self.from_trajectories,
                "runs_measured_only": self.measured_only}


GpuReader = Callable[[Path, pd.DataFrame], dict[str, bool]]
"""Reads the paper's GPU flag of each run with a trajectory under a runs folder, by
``run_id`` (:func:`spu.analysis.runs.executed_gpu_use`, which the stats command passes:
the trajectories are the analysis's to read)."""


def apply_gpu_rule(runs: pd.DataFrame, rule: str = "executed",
                   runs_dir: Path | None = None,
                   reader: GpuReader | None = None) -> GpuRuleResult:
    """The runs table with ``used_gpu`` under ``rule`` and ``gpu_measured`` beside it.

    ``executed`` (the paper's, E.12): each scored run's ``used_gpu`` from its trajectory
    under ``runs_dir``; a scored run without one keeps the sampled value (counted in
    ``measured_only``, with a note), and without ``runs_dir`` or any trajectory the rule
    in force is ``measured``, said in a note. ``measured``: the table's ``used_gpu``.

    Raises:
        ValueError: ``rule`` is not one of :data:`GPU_RULES`.

    Examples
    --------
    >>> runs = pd.DataFrame({"run_id": ["a", "b"], "scored": True, "used_gpu": [True, False]})
    >>> result = apply_gpu_rule(runs, "measured")
    >>> result.rule, result.runs["gpu_measured"].tolist()
    ('measured', [True, False])
    """
    if rule not in GPU_RULES:
        raise ValueError(f"--gpu-rule: {rule!r} is not one of {', '.join(GPU_RULES)}")
    measured = (runs["used_gpu"].fillna(False).astype(bool) if "used_gpu" in runs
                else pd.Series(False, index=runs.index))
    table = runs.assign(gpu_measured=measured, used_gpu=measured)
    if rule == "measured":
        return GpuRuleResult(table, "measured", rule, 0, 0)
    scored = table[table["scored"].astype(bool)]
    executed = {} if runs_dir is None or reader is None else reader(runs_dir, scored)
    if not executed:
        why = ("no --runs-dir (pass it with the run folders)" if runs_dir is None
               else "no trajectory reader given" if reader is None
               else f"no scored run under {runs_dir} has a trajectory (baselines record "
                    "none)")
        return GpuRuleResult(table, "measured", rule, 0, 0, (
            f"GPU use: {why}, so used_gpu is the device sampled by NVML, not the paper's "
            "executed-code rule (E.12)",))
    ids = table["run_id"].astype(str)
    from_code = ids.map(executed)
    table["used_gpu"] = from_code.where(from_code.notna(), measured).astype(bool)
    missing = int(len(scored) - scored["run_id"].astype(str).isin(executed.keys()).sum())
    notes = (f"GPU use: {missing} scored run(s) have no trajectory under {runs_dir}; their "
             "used_gpu is the device sampled by NVML",) if missing else ()
    return GpuRuleResult(table, "executed", rule, len(executed), missing, notes)
