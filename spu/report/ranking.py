"""The leaderboard's ranking: Figure 1's far-right column, with a coverage threshold.

The paper's Figure 1 gives each configuration two bars: its mean over its own scored
tasks (solid) and its mean over the tasks every configuration has scored (hatched), and
orders the configurations by the second, "free of any coverage difference" (3.3, "The
tasks every configuration completed"). A configuration scored on a handful of tasks would
make that set of shared tasks tiny, or, ranked by its own mean, lead on one lucky task. So
the leaderboard ranks the configurations whose coverage (scored public tasks over the
public tasks of the table) reaches a threshold, by their mean over the public tasks every
one of them has scored, with 95% bootstrap intervals over those tasks (the same resampled
tasks for all); the others are listed below, unranked, beside their mean over their own
scored tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy and pandas where a ranking is made: ``spu --help`` stays fast
    import pandas as pd

MIN_COVERAGE = 0.25
"""Default least coverage of a ranked configuration: a quarter of the public tasks. The
paper ranks all thirteen of its configurations, the least covered scored on 30 of 100."""


def ranking_rule(threshold: float, n_shared: int, n_ranked: int) -> str:
    """The rule the page states, with the numbers of this table.

    >>> ranking_rule(0.25, 27, 13)[:60]
    'Ranked as the paper ranks the hatched bars of its Figure 1: '
    """
    shared = (f"by the mean over the {n_shared} public tasks all {n_ranked} ranked "
              "configurations have scored" if n_shared else
              "by nothing: no public task is scored by every configuration that reaches the "
              "threshold, so none is ranked")
    return (f"Ranked as the paper ranks the hatched bars of its Figure 1: {shared}, with 95% "
            "bootstrap intervals over those tasks (the same resampled tasks for all). A "
            f"configuration scored on fewer than {threshold:.0%} of the public tasks "
            "(coverage; spu leaderboard --min-coverage) is listed below, unranked, beside "
            "its mean over its own scored tasks (Figure 1's solid bars).")


@dataclass(frozen=True)
class Ranking:
    """Each configuration's place under the rule of :func:`rank_on_shared_tasks`."""

    table: pd.DataFrame
    """``config, ranked, rank, n_shared_tasks, shared_mean, shared_ci_low, shared_ci_high,
    n_scored, raw_mean, raw_ci_low, raw_ci_high``: ranked configurations first by rank,
    then the others by their own mean."""
    n_shared: int
    """Public tasks every ranked configuration has scored."""
    threshold: float
    """The least coverage of a ranked configuration."""

    @property
    def rule(self) -> str:
        """The rule in words (:func:`ranking_rule`)."""
        return ranking_rule(self.threshold, self.n_shared, int(self.table["ranked"].sum()))


def rank_on_shared_tasks(public: pd.DataFrame, coverage: dict[str, float],
                         threshold: float = MIN_COVERAGE, seed: int = 0,
                         resamples: int = 10_000) -> Ranking:
    """Rank the configurations reaching ``threshold`` on the tasks they all scored.

    Parameters
    ----------
    public
        Official runs of the public tasks.
    coverage
        Each configuration's scored public tasks over the table's public tasks.
    threshold, seed, resamples
        The least coverage ranked; the bootstrap's seed and resamples.

    References
    ----------
    Paper Figure 1 ("hatched bars, the tasks all configurations completed") and 3.3 ("On
    the 28 tasks that all thirteen configurations completed ... the ranking is free of any
    coverage difference").

    Examples
    --------
    ``C`` is scored on one task of four (coverage 0.25 < 0.5): unranked, though its one
    score is the highest. ``A`` and ``B`` share t1-t3: means 0.5 and 0.3.

    >>> import pandas as pd
    >>> runs = pd.DataFrame({"config": list("AAAABBBC"), "task_id": ["t1", "t2", "t3", "t4",
    ...     "t1", "t2", "t3", "t1"], "scored": True,
    ...     "score_recovered": [0.4, 0.5, 0.6, 0.9, 0.2, 0.3, 0.4, 1.0]})
    >>> r = rank_on_shared_tasks(runs, {"A": 1.0, "B": 0.75, "C": 0.25}, 0.5, resamples=50)
    >>> r.table[["config", "rank", "shared_mean", "raw_mean"]].round(3).values.tolist()
    [['A', 1.0, 0.5, 0.6], ['B', 2.0, 0.3, 0.3], ['C', nan, nan, 1.0]]
    """
    import numpy as np
    import pandas as pd

    from spu.stats.resampling import (
        bootstrap_mean,
        percentile_interval,
        resample_counts,
        rng_for,
    )
    from spu.stats.runs_table import score_matrix
    from spu.stats.ties import exact

    configs = sorted(coverage, key=str)
    ranked = [c for c in configs if coverage[c] >= threshold]
    matrix = score_matrix(public, configs)
    shared = matrix[ranked].dropna() if ranked else matrix.iloc[0:0]
    if not len(shared):
        ranked = []
    rows = []
    if ranked:
        counts = resample_counts(len(shared), resamples, rng_for(seed, "leaderboard-shared"))
        values = shared.to_numpy(dtype=float)
        means = values.mean(axis=0)
        draws = counts @ values / len(shared)
        order = np.lexsort((np.array(ranked, dtype=object), -exact(means)))
        for place, j in enumerate(order, start=1):
            low, high = percentile_interval(draws[:, j])
            rows.append({"config": ranked[j], "ranked": True, "rank": float(place),
                         "n_shared_tasks": len(shared), "shared_mean": float(means[j]),
                         "shared_ci_low": float(low), "shared_ci_high": float(high)})
    unranked = []
    for config in configs:
        own = matrix[config].dropna().to_numpy(dtype=float)
        iv = bootstrap_mean(own, rng_for(seed, "leaderboard-own", config), resamples)
        unranked.append({"config": config, "n_scored": int(own.size), "raw_mean": iv.estimate,
                         "raw_ci_low": iv.low, "raw_ci_high": iv.high})
    own_means = pd.DataFrame(unranked).set_index("config")
    table = pd.DataFrame(rows, columns=["config", "ranked", "rank", "n_shared_tasks",
                                        "shared_mean", "shared_ci_low", "shared_ci_high"])
    rest = sorted((c for c in configs if c not in set(table["config"])),
                  key=lambda c: (-np.nan_to_num(own_means.loc[c, "raw_mean"], nan=-9), str(c)))
    table = pd.concat([table, pd.DataFrame({"config": rest, "ranked": False})],
                      ignore_index=True)
    table["ranked"] = table["ranked"].astype(bool)
    table = table.join(own_means, on="config")
    return Ranking(table.reset_index(drop=True), len(shared) if ranked else 0, threshold)
