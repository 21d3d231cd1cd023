"""Run outcomes and the grader's scoring rules (paper 3.2, appendix E.1, Table 6).

Columns of Table 6, from the ``outcome`` and ``scored`` columns of the runs table:

- ``rejected``: files the strict grader rejected for their format, recovered or not
  (outcomes ``recovered`` and ``rejected``), Table 6 "Rejected".
- ``refusal``: safety refusals, whatever file they left.
- ``no_file``: every other run that is not scored (no submission, policy stop, timeout,
  memory limit, infrastructure error), Table 6 "No file".
- ``mean_at_minus1``: mean of ``score_strict`` (every run without a valid file at -1);
  ``mean_after_recovery``: mean of ``score_recovered``; ``scored_mean``: mean of
  ``score_recovered`` over scored runs.

A count per outcome follows, so that every run of the table is accounted for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spu.schema import Outcome

FORMAT_REJECTED = (Outcome.recovered.value, Outcome.rejected.value)


def outcome_table(runs: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``outcomes.csv``: outcomes and means under the three scoring rules, per configuration.

    Parameters
    ----------
    runs
        Every official run of the public tasks.
    order
        Configurations in table order.

    References
    ----------
    Paper section 3.2 and appendix E.1, Table 6.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A"] * 4,
    ...     "outcome": ["valid", "recovered", "refusal", "no_file"],
    ...     "scored": [True, True, False, False],
    ...     "score_strict": [0.6, -1.0, -1.0, -1.0], "score_recovered": [0.6, 0.2, -1.0, -1.0]})
    >>> outcome_table(runs, ["A"]).iloc[0, :8].to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'config': 'A', 'n_runs': 4, 'rejected': 1, 'refusal': 1, 'no_file': 1,
     'mean_at_minus1': -0.6, 'mean_after_recovery': -0.3, 'scored_mean': 0.4}
    """
    rows = []
    for config in order:
        own = runs[runs["config"] == config]
        outcome = own["outcome"]
        scored = own["scored"].to_numpy(dtype=bool)
        is_refusal = (outcome == Outcome.refusal.value).to_numpy()
        is_rejected = outcome.isin(FORMAT_REJECTED).to_numpy()
        row = {
            "config": config,
            "n_runs": len(own),
            "rejected": int(is_rejected.sum()),
            "refusal": int(is_refusal.sum()),
            "no_file": int((~scored & ~is_refusal & ~is_rejected).sum()),
            "mean_at_minus1": own["score_strict"].mean(),
            "mean_after_recovery": own["score_recovered"].mean(),
            "scored_mean": own.loc[scored, "score_recovered"].mean() if scored.any() else np.nan,
            "n_scored": int(scored.sum()),
        }
        for name in Outcome:
            row[f"outcome_{name.value}"] = int((outcome == name.value).sum())
        rows.append(row)
    columns = ["config", "n_runs", "rejected", "refusal", "no_file", "mean_at_minus1",
               "mean_after_recovery", "scored_mean", "n_scored",
               *(f"outcome_{name.value}" for name in Outcome)]
    return pd.DataFrame(rows, columns=columns)
