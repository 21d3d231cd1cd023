"""Fresh against not-fresh runs: tasks published before the model's training cutoff.

A run's task is **not fresh** when its source was published before the model's training
cutoff (``published_before_cutoff`` true: the measurements may be in the training data),
**fresh** when it was published after (false); runs where either date is unknown are
left out (:mod:`spu.tasks.freshness` states the rule). Each configuration's not-fresh
runs are compared with its fresh runs exactly as flagged runs are with unflagged ones
(paper 3.7, :mod:`spu.stats.within_config`): each run measured against the other
configurations on its task, the difference of means with a bootstrap interval and a
permutation p, Holm over the configurations, and a pooled difference weighted by the
not-fresh runs.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spu.stats.named_tests import named_test
from spu.stats.outcomes import relative_frame
from spu.stats.permutation import DRAWS
from spu.stats.resampling import DEFAULT_RESAMPLES
from spu.stats.within_config import within_config_difference
from spu.tasks.freshness import RULE

FRESHNESS_COLUMNS: tuple[str, ...] = (
    "config", "n_before_cutoff", "n_fresh", "diff", "ci_low", "ci_high", "p_perm", "p_holm",
    "before_cutoff_mean", "fresh_mean", "exact",
)
"""Columns of ``freshness.csv``: ``diff`` is the not-fresh mean minus the fresh mean."""

FRESHNESS_RULE = (f"{RULE}; diff = mean relative score (each run minus the other "
                  "configurations' mean on its task) of the runs on tasks published before "
                  "the cutoff minus that of the fresh runs, within each configuration, as "
                  "exposure.csv compares flagged and unflagged runs (3.7); runs with "
                  "unknown freshness are left out")
"""The manifest's rule of ``freshness.csv``."""


def freshness_marks(values: pd.Series) -> pd.Series:
    """``published_before_cutoff`` as True, False or None (unknown), whatever its spelling.

    Examples
    --------
    >>> freshness_marks(pd.Series(["true", "false", "unknown", None, True])).tolist()
    [True, False, None, None, True]
    """
    def one(value: Any) -> bool | None:
        text = str(value).strip().lower() if value is not None else ""
        if text in ("true", "1", "1.0", "yes"):
            return True
        if text in ("false", "0", "0.0", "no"):
            return False
        return None

    return pd.Series([one(v) for v in values], index=values.index, dtype=object)


def freshness_table(
    runs: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
    draws: int = DRAWS,
) -> tuple[pd.DataFrame, dict[str, Any], int]:
    """``freshness.csv``: runs on tasks published before the cutoff minus fresh runs.

    Parameters
    ----------
    runs
        Official runs (``published_before_cutoff``: true, false or unknown).
    order
        Configurations in table order.
    seed, resamples, draws
        Seed, bootstrap resamples and permutation draws.

    Returns
    -------
    tuple
        The table (:data:`FRESHNESS_COLUMNS`), a ``tests.csv`` row of the pooled
        difference, and the number of scored runs of unknown freshness left out.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A"] * 3 + ["B"] * 3, "scored": True,
    ...     "task_id": ["t1", "t2", "t3"] * 2,
    ...     "published_before_cutoff": ["true", "false", "unknown"] * 2,
    ...     "score_recovered": [0.9, 0.3, 0.4, 0.5, 0.3, 0.4]})
    >>> t, pooled, unknown = freshness_table(runs, ["A", "B"], resamples=50, draws=50)
    >>> t["diff"].round(3).tolist(), t["n_before_cutoff"].tolist(), unknown
    ([0.4, -0.4], [1, 1], 2)
    """
    frame = relative_frame(runs, order)
    marks = freshness_marks(frame["published_before_cutoff"])
    known = marks.notna().to_numpy()
    unknown = int((~known).sum())
    frame = frame[known].copy()
    frame["marked"] = marks[known].astype(bool).to_numpy()
    result = within_config_difference(frame, order, "freshness", seed, resamples, draws)
    table = result.table.rename(columns={"n_marked": "n_before_cutoff", "n_unmarked": "n_fresh",
                                         "marked_mean": "before_cutoff_mean",
                                         "unmarked_mean": "fresh_mean"})
    table = table[list(FRESHNESS_COLUMNS)]
    pooled = result.pooled
    test = named_test("freshness_pooled_difference", pooled["diff"], pooled["p_perm"], "3.7",
                      n=pooled["n_marked"], method="exact" if pooled["exact"] else
                      "monte-carlo")
    test.update({"ci_low": pooled["ci_low"], "ci_high": pooled["ci_high"]})
    return table, test, unknown
