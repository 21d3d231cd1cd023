"""What every analysis of ``spu stats`` reads: the runs table, the options, shared steps.

:class:`StatsInputs` holds the checked runs table and the :class:`StatsOptions`, and
computes once, when an analysis first asks, what several analyses share: the official
public runs, the configuration table and its order, the paired tests, the task packages,
the task statistics, the run-to-run SD and the submitted orders. Reading the task
packages and run folders happens here, so the analyses themselves stay pure; what that
reading left out is kept in :meth:`StatsInputs.take_notes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from spu.stats.agreement import AgreementResult, agreement_analysis
from spu.stats.design import DIFFERENCES
from spu.stats.disciplines import PERMUTATIONS
from spu.stats.gpu import GpuReader
from spu.stats.interaction import NULL_DRAWS
from spu.stats.means import config_table
from spu.stats.monotone import UNRELATED
from spu.stats.paired import paired_table
from spu.stats.private import NULL_DRAWS as PRIVATE_NULL_DRAWS
from spu.stats.repeats import DEFAULT_SIMULATIONS, pooled_within_sd
from spu.stats.resampling import DEFAULT_RESAMPLES
from spu.stats.runs_table import official, score_matrix
from spu.stats.submissions import Orders, TaskInfo, load_submitted_orders, load_task_set
from spu.stats.tasks import task_table

REFUSAL_RULE_TEXT = {
    "exclude": "refusals after a valid or recoverable file are excluded as refusals, their "
               "file's score kept for mean_at_minus1 (the paper's rule, 3.1 and Table 6)",
    "score": "refusals after a valid or recoverable file are scored from that file "
             "(--refusals-after-file=score; the paper excluded them)",
}
"""The manifest's words for each :data:`~spu.grading.outcome.REFUSALS_AFTER_FILE_RULES`."""

MAX_NOTES = 50
"""Notes about run folders kept in the manifest; the rest are counted."""


@dataclass(frozen=True)
class StatsOptions:
    """What ``spu stats`` computes and from which inputs beyond the runs table."""

    seed: int = 0
    """Seed of every random draw."""
    resamples: int = DEFAULT_RESAMPLES
    """Bootstrap resamples."""
    simulations: int = DEFAULT_SIMULATIONS
    """Simulated reruns of the rank-stability analysis."""
    null_draws: int | None = None
    """Draws of every null distribution, whatever ``resamples`` is: the simulated tables
    without interaction (default 2,000, paper E.9), the permutations of discipline labels
    and random splits (default 5,000, E.10) and the random submissions per private task of
    the exact null (default 40,000). ``None``: those defaults."""
    task_roots: tuple[Path, ...] = ()
    """Task roots holding the task packages (contracts, settings, answer keys)."""
    answers_root: Path | None = None
    """Answer keys kept apart from the task packages."""
    runs_dir: Path | None = None
    """Output root whose ``runs/<run_key>/`` folders hold the submitted files."""
    top_group_size: int | None = None
    """Size of the top group of the rank-stability analysis (default: widest gap)."""
    run_sd: float | None = None
    """Run-to-run SD of the simulated reruns (default: pooled SD of the repeats)."""
    design_differences: tuple[float, ...] = DIFFERENCES
    """Differences in mean score of the study-design table (``design.csv``)."""
    discipline_groups: str | None = None
    """The leading and trailing groups of the discipline comparison, ``"A,B;C,D"``
    (``--discipline-groups``); ``None``: the paper's rule
    (:data:`~spu.stats.disciplines.GROUP_RULE`)."""
    decomposition_configs: tuple[str, ...] | None = None
    """Configurations of the variance decomposition (``--decomposition-configs``);
    ``None``: the largest complete block (:func:`~spu.stats.interaction.largest_common_block`)."""
    unrelated_below: float = UNRELATED
    """Largest absolute Spearman of a measured order with the numeric settings at which it
    is "nearly unrelated" to them (``--unrelated-below``; 4.2 gives no number, the default
    :data:`~spu.stats.monotone.UNRELATED` is our reading)."""
    spread_ratio: str = "ms"
    """4.4's ratio of the configurations' spread to the repeats' (``--spread-ratio``):
    ``ms``, the paper's comparison (E.9: residual mean square over the repeats' mean
    square, the F of ``interaction_tasks.csv``), or ``sd`` (the standard deviations);
    :data:`~spu.stats.interaction.SPREAD_RATIOS`."""
    refusals_after_file: str = "exclude"
    """Refusals that left a valid or recoverable file (``--refusals-after-file``):
    ``exclude`` (the paper's rule, 3.1) or ``score`` (their file's grade counts);
    :data:`~spu.grading.outcome.REFUSALS_AFTER_FILE_RULES`."""
    gpu_rule: str = "executed"
    """Which runs used the GPU (``--gpu-rule``): ``executed``, the paper's (E.12: a GPU
    workload in executed code ran without failing, read from the trajectories under
    ``runs_dir``), or ``measured`` (the device sampled by NVML); :mod:`spu.stats.gpu`."""
    gpu_reader: GpuReader | None = None
    """Reads each run's GPU flag from its trajectory under ``runs_dir`` for the ``executed``
    rule (the stats command passes :func:`spu.analysis.runs.executed_gpu_use`)."""
    effort_repeat_tasks: str = "repeat-tasks"
    """Tasks on which the lower effort meets the mean of the higher one's repeats
    (``--effort-repeat-tasks``): ``repeat-tasks``, the paper's (4.10: every task of 3.6),
    or ``official-scored``; :data:`~spu.stats.effort.EFFORT_REPEAT_TASKS`."""
    top1_weights: str = "groups"
    """How appendix F's top-1 rate weights a run's groups (``--top1-weights``): ``groups``,
    the paper's (each group once), or ``weights``; :data:`~spu.stats.pair_order.TOP1_WEIGHTS`."""


@dataclass(frozen=True)
class StatsInputs:
    """The runs table, the options, and the steps several analyses share (computed once)."""

    runs: pd.DataFrame
    """The checked runs table (:func:`~spu.stats.runs_table.read_runs_table`)."""
    options: StatsOptions = field(default_factory=StatsOptions)
    """Seed, resamples and the optional inputs."""
    gpu_rule_text: str = ""
    """What ``used_gpu`` means in :attr:`runs` (:data:`spu.stats.gpu.GPU_RULE_TEXT`)."""
    _notes: list[str] = field(default_factory=list, repr=False, compare=False)

    # Seeds and draw counts.
    @property
    def seed(self) -> int:
        """Seed of every random draw."""
        return self.options.seed

    @property
    def resamples(self) -> int:
        """Bootstrap resamples."""
        return self.options.resamples

    @property
    def draws(self) -> int:
        """Permutation draws (as many as the bootstrap resamples)."""
        return self.options.resamples

    @property
    def null_draws(self) -> int:
        """Tables simulated without interaction (E.9: 2,000; ``--null-draws``).

        Separate from the bootstrap resamples, so ``--resamples`` does not shrink them.
        """
        return NULL_DRAWS if self.options.null_draws is None else self.options.null_draws

    @property
    def permutations(self) -> int:
        """Permutations of the discipline tests (E.10: 5,000; ``--null-draws``)."""
        return PERMUTATIONS if self.options.null_draws is None else self.options.null_draws

    @property
    def private_null_draws(self) -> int:
        """Random submissions per private task of the exact null (``--null-draws``)."""
        return (PRIVATE_NULL_DRAWS if self.options.null_draws is None
                else self.options.null_draws)

    # Selections of the runs table.
    @cached_property
    def absent(self) -> list[str]:
        """Columns the runs table lacked and that were filled with defaults."""
        return list(self.runs.attrs.get("absent_columns", []))

    @cached_property
    def public(self) -> pd.DataFrame:
        """Official runs (``repeat`` 0) of public tasks."""
        return official(self.runs, "public")

    @cached_property
    def official_all(self) -> pd.DataFrame:
        """Official runs of every task, public and private."""
        return self.runs[self.runs["repeat"] == 0]

    @cached_property
    def public_all(self) -> pd.DataFrame:
        """Every run of a public task, repeats included."""
        return self.runs[self.runs["visibility"] == "public"]

    @cached_property
    def private(self) -> pd.DataFrame:
        """Official runs of private tasks."""
        return official(self.runs, "private")

    @cached_property
    def scored_public(self) -> pd.DataFrame:
        """Scored official runs of public tasks."""
        return self.public[self.public["scored"]]

    @cached_property
    def has_repeats(self) -> bool:
        """Whether any public task has a repeated run (``repeat >= 1``)."""
        return bool((self.public_all["repeat"] >= 1).any())

    # Shared steps.
    @cached_property
    def configs(self) -> pd.DataFrame:
        """The configuration table (``configs.csv``), in ranking order."""
        return config_table(self.public, self.seed, self.resamples)

    @cached_property
    def order(self) -> list[str]:
        """Configurations in the order of ``configs.csv``."""
        return list(self.configs["config"])

    @cached_property
    def order_all(self) -> list[str]:
        """:attr:`order`, then configurations that ran only private tasks."""
        return self.order + sorted(set(self.official_all["config"]) - set(self.order))

    @cached_property
    def adjusted(self) -> pd.Series:
        """Task-adjusted mean of each configuration."""
        return self.configs.set_index("config")["adjusted_mean"]

    @cached_property
    def matrix(self) -> pd.DataFrame:
        """Official public scores, tasks x configurations."""
        return score_matrix(self.public, self.order)

    @cached_property
    def pairs(self) -> pd.DataFrame:
        """The paired tests (``pairs.csv``)."""
        return paired_table(self.matrix, self.order)

    @cached_property
    def tasks(self) -> dict[str, TaskInfo]:
        """Task packages of the table's tasks (empty without ``--tasks``)."""
        opt = self.options
        if not opt.task_roots:
            return {}
        wanted = set(self.runs["task_id"])
        tasks = load_task_set(list(opt.task_roots), opt.answers_root, wanted)
        missing = sorted(wanted - set(tasks))
        if missing:
            self._notes.append(f"{len(missing)} task(s) of the table have no task package: "
                               + ", ".join(missing[:10]) + (" ..." if len(missing) > 10
                                                            else ""))
        return tasks

    @cached_property
    def task_stats(self) -> pd.DataFrame:
        """The task table (``tasks.csv``)."""
        return task_table(self.runs, self.tasks)

    @cached_property
    def run_sd(self) -> float:
        """Run-to-run SD: ``--run-sd``, else the pooled within-task SD of the repeats."""
        if self.options.run_sd is not None:
            return self.options.run_sd
        return pooled_within_sd(self.public_all)

    @cached_property
    def orders(self) -> dict[str, Orders] | None:
        """Submitted orders by ``run_id``; ``None`` without ``--runs-dir`` and ``--tasks``."""
        if self.options.runs_dir is None or not self.tasks:
            return None
        submitted = load_submitted_orders(self.options.runs_dir,
                                          self.public_all[self.public_all["scored"]])
        self._notes.extend(submitted.notes[:MAX_NOTES])
        if len(submitted.notes) > MAX_NOTES:
            self._notes.append(f"... and {len(submitted.notes) - MAX_NOTES} more run folder "
                               "notes")
        return submitted.orders

    @cached_property
    def agreement(self) -> AgreementResult | None:
        """Agreement and consensus of the submitted orders (E.8), when there are orders."""
        if self.orders is None:
            return None
        return agreement_analysis(self.scored_public, self.orders, self.tasks, self.order,
                                  self.seed, self.resamples)

    def take_notes(self) -> list[str]:
        """Notes from reading task packages and run folders since the last call."""
        notes = list(self._notes)
        self._notes.clear()
        return notes

    def manifest(self) -> dict[str, Any]:
        """The options and inputs, as the manifest records them."""
        opt = self.options
        return {
            "spu_version": _version(),
            "seed": opt.seed, "resamples": opt.resamples, "simulations": opt.simulations,
            "null_draws": opt.null_draws, "private_null_draws": self.private_null_draws,
            "permutation_draws": self.draws,
            "simulated_null_draws": self.null_draws,
            "discipline_permutations": self.permutations,
            "task_roots": [str(p) for p in opt.task_roots],
            "answers_root": None if opt.answers_root is None else str(opt.answers_root),
            "runs_dir": None if opt.runs_dir is None else str(opt.runs_dir),
            "decomposition_configs": (None if opt.decomposition_configs is None
                                      else list(opt.decomposition_configs)),
            "discipline_groups": opt.discipline_groups,
            "unrelated_below": opt.unrelated_below,
            "spread_ratio": opt.spread_ratio,
            "refusals_after_file": opt.refusals_after_file,
            "refusals_after_file_rule": REFUSAL_RULE_TEXT[opt.refusals_after_file],
            "rows": len(self.runs), "configs": self.order, "absent_columns": self.absent,
        }


def _version() -> str:
    import spu

    return spu.__version__
