"""Run outcomes and the grader's scoring rules (paper 3.2, appendix E.1, Table 6).

Columns of Table 6, from the ``outcome`` and ``scored`` columns of the runs table:

- ``rejected``: files the strict grader rejected for their format, recovered or not
  (outcomes ``recovered`` and ``rejected``), Table 6 "Rejected".
- ``refusal``: safety refusals, whatever file they left (the paper's rule), unless
  ``spu stats --refusals-after-file=score`` scored those that left a file.
- ``refusal_after_file``: refusals that left a valid or recoverable file (the record's
  ``refusal_after_file``), counted apart whatever the rule: under the paper's rule they are
  among ``refusal`` (Table 6's note: "five runs wrote a valid file and then refused"), under
  ``score`` among the scored runs.
- ``no_file``: every other run that is not scored (no submission, policy stop, timeout,
  memory limit, infrastructure error), Table 6 "No file".
- ``mean_at_minus1``: mean of ``score_strict`` (every run without a valid file at -1);
  ``mean_after_recovery``: mean of ``score_recovered``; ``scored_mean``: mean of
  ``score_recovered`` over scored runs.

A count per outcome follows, so that every run of the table is accounted for.

Also here: the formatting-rejected files by departure type (:func:`departure_table`,
Figure 6a), recovered against valid files (:func:`recovered_vs_valid`, Figure 6c),
refusals by configuration and discipline (:func:`refusal_table`, Figure 7) and the two
scoring rules over public and private tasks (:func:`scoring_rules_table`, Figure 8).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spu.schema import Outcome
from spu.stats.within_config import WithinConfigResult, relative_scores, within_config_difference

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
    >>> outcome_table(runs, ["A"]).iloc[0, :9].to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'config': 'A', 'n_runs': 4, 'rejected': 1, 'refusal': 1, 'no_file': 1,
     'refusal_after_file': 0, 'mean_at_minus1': -0.6, 'mean_after_recovery': -0.3,
     'scored_mean': 0.4}
    """
    rows = []
    for config in order:
        own = runs[runs["config"] == config]
        outcome = own["outcome"]
        scored = own["scored"].to_numpy(dtype=bool)
        is_refusal = (outcome == Outcome.refusal.value).to_numpy() & ~scored
        after_file = (own["refusal_after_file"].to_numpy(dtype=bool)
                      if "refusal_after_file" in own else np.zeros(len(own), dtype=bool))
        is_rejected = outcome.isin(FORMAT_REJECTED).to_numpy()
        row = {
            "config": config,
            "n_runs": len(own),
            "rejected": int(is_rejected.sum()),
            "refusal": int(is_refusal.sum()),
            "no_file": int((~scored & ~is_refusal & ~is_rejected).sum()),
            "refusal_after_file": int(after_file.sum()),
            "mean_at_minus1": own["score_strict"].mean(),
            "mean_after_recovery": own["score_recovered"].mean(),
            "scored_mean": own.loc[scored, "score_recovered"].mean() if scored.any() else np.nan,
            "n_scored": int(scored.sum()),
        }
        for name in Outcome:
            row[f"outcome_{name.value}"] = int((outcome == name.value).sum())
        rows.append(row)
    columns = ["config", "n_runs", "rejected", "refusal", "no_file", "refusal_after_file",
               "mean_at_minus1",
               "mean_after_recovery", "scored_mean", "n_scored",
               *(f"outcome_{name.value}" for name in Outcome)]
    return pd.DataFrame(rows, columns=columns)


def departure_table(runs: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``departures.csv``: formatting-rejected files by departure type and configuration.

    Parameters
    ----------
    runs
        Official runs (the ``departures`` column, ``;``-joined, from the grade).
    order
        Configurations in table order.

    Returns
    -------
    pandas.DataFrame
        ``config, departure, n_files``: one row per configuration and departure type of
        appendix E.1 that occurs, and ``unrecorded`` for rejected files whose departures
        the table does not hold. A file with two departures counts under both.

    References
    ----------
    Paper 3.2, appendix E.1 (five departure types) and Figure 6a.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A", "A", "B"],
    ...     "outcome": ["recovered", "recovered", "rejected"],
    ...     "departures": ["object_keyed_by_group", "object_keyed_by_group;renamed_identity",
    ...                    None]})
    >>> departure_table(runs, ["A", "B"]).values.tolist()
    [['A', 'object_keyed_by_group', 2], ['A', 'renamed_identity', 1], ['B', 'unrecorded', 1]]
    """
    from spu.grading.recovery import DEPARTURES

    rejected = runs[runs["outcome"].isin(FORMAT_REJECTED)]
    rows = []
    for config in order:
        own = rejected[rejected["config"] == config]
        counts = dict.fromkeys([*DEPARTURES, "unrecorded"], 0)
        for value in (own["departures"] if "departures" in own else pd.Series([None] * len(own))):
            names = [x for x in str(value).split(";") if x] if isinstance(value, str) else []
            for name in names or ["unrecorded"]:
                counts[name] = counts.get(name, 0) + 1
        rows += [{"config": config, "departure": k, "n_files": v} for k, v in counts.items() if v]
    return pd.DataFrame(rows, columns=["config", "departure", "n_files"])


def refusal_table(runs: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``refusals.csv``: share of tasks refused, by configuration, overall and by discipline.

    Parameters
    ----------
    runs
        Official runs of the public tasks.
    order
        Configurations in table order.

    Returns
    -------
    pandas.DataFrame
        ``config, discipline, n_tasks, refusals, share, labelled``: ``discipline`` is
        ``all`` for the configuration's whole row; ``labelled`` counts refusals that
        carry a provider label (``refusal_label``, e.g. ``[bio]``).

    References
    ----------
    Paper 3.2 ("Refusals"), Figure 7a-b, and 4.6 (refusals by discipline).

    Examples
    --------
    >>> runs = pd.DataFrame({"config": "A", "discipline": ["biology", "biology", "chemistry"],
    ...     "outcome": ["refusal", "valid", "refusal"], "refusal_label": ["[bio]", None, None]})
    >>> refusal_table(runs, ["A"])[["discipline", "refusals", "share", "labelled"]]
      discipline  refusals     share  labelled
    0        all         2  0.666667         1
    1    biology         1  0.500000         1
    2  chemistry         1  1.000000         0
    """
    rows = []
    label = runs["refusal_label"] if "refusal_label" in runs else pd.Series("", index=runs.index)
    labelled = label.fillna("").astype(str).str.strip().ne("") & label.notna()
    refused = runs["outcome"] == Outcome.refusal.value
    for config in order:
        own = runs["config"] == config
        parts = [("all", own)] + [(str(d), own & (runs["discipline"] == d))
                                  for d in sorted(runs.loc[own, "discipline"].unique())]
        for discipline, sel in parts:
            n = int(sel.sum())
            r = int((sel & refused).sum())
            rows.append({"config": config, "discipline": discipline, "n_tasks": n,
                         "refusals": r, "share": r / n if n else np.nan,
                         "labelled": int((sel & refused & labelled).sum())})
    return pd.DataFrame(rows, columns=["config", "discipline", "n_tasks", "refusals", "share",
                                       "labelled"])


def scoring_rules_table(
    runs: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = 10_000
) -> pd.DataFrame:
    """``scoring_rules.csv``: means under the two rules of Figure 8, public and private tasks.

    Refusals are left out. Rule a scores formatting-rejected files and runs without a
    submission at -1 (``score_strict``); rule b scores the rejected files by their
    recovered rankings and keeps runs without a submission at -1 (``score_recovered``).
    Each mean has a percentile bootstrap interval over the configuration's tasks. The
    scored mean (Figure 1, solid bars) averages the scored runs.

    Parameters
    ----------
    runs
        Official runs of the public and the private tasks.
    order
        Configurations in table order.
    seed, resamples
        Bootstrap seed and resamples.

    References
    ----------
    Paper 3.2 ("Scoring rule"), Figure 8a-b and Figure 1.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": "A", "outcome": ["valid", "recovered", "no_file",
    ...     "refusal"], "scored": [True, True, False, False],
    ...     "score_strict": [0.6, -1.0, -1.0, -1.0], "score_recovered": [0.6, 0.4, -1.0, -1.0]})
    >>> t = scoring_rules_table(runs, ["A"], resamples=100)
    >>> t[["n_runs", "strict_mean", "recovered_mean", "scored_mean"]].round(4).values.tolist()
    [[3.0, -0.4667, 0.0, 0.5]]
    """
    from spu.stats.resampling import bootstrap_mean, rng_for

    # Refusals are left out (paper 3.2), save those --refusals-after-file=score scored.
    kept = runs[(runs["outcome"] != Outcome.refusal.value) | runs["scored"].astype(bool)]
    rows = []
    for config in order:
        own = kept[kept["config"] == config]
        row: dict[str, object] = {"config": config, "n_runs": len(own),
                                  "n_scored": int(own["scored"].sum())}
        for name, column, sel in (("strict", "score_strict", None),
                                  ("recovered", "score_recovered", None),
                                  ("scored", "score_recovered", own["scored"].to_numpy(bool))):
            values = own[column].to_numpy(dtype=float)
            values = values if sel is None else values[sel]
            iv = bootstrap_mean(values, rng_for(seed, "scoring-rules", name, config), resamples)
            row[f"{name}_mean"], row[f"{name}_ci_low"], row[f"{name}_ci_high"] = (
                iv.estimate, iv.low, iv.high)
        rows.append(row)
    columns = ["config", "n_runs", "n_scored"] + [
        f"{name}_{part}" for name in ("strict", "recovered", "scored")
        for part in ("mean", "ci_low", "ci_high")]
    return pd.DataFrame(rows, columns=columns)


def recovered_vs_valid(
    runs: pd.DataFrame, order: list[str], seed: int = 0, resamples: int = 10_000,
    draws: int = 10_000,
) -> WithinConfigResult:
    """Recovered files against valid submissions of the same configuration (Figure 6c).

    Each scored official public run is taken relative to the mean of the other
    configurations on its task; within every configuration with recovered files, the
    recovered mean minus the valid mean, with a bootstrap interval and a permutation p;
    pooled, weighted by the recovered files
    (:func:`spu.stats.within_config.within_config_difference`).

    Parameters
    ----------
    runs
        Official runs of the public tasks.
    order
        Configurations in table order.
    seed, resamples, draws
        Seed, bootstrap resamples and permutation draws.

    References
    ----------
    Paper 3.2 ("weighted by the number of recovered files, recovered files average 0.032
    higher (95% CI -0.033 to 0.097; permutation P=0.36)") and Figure 6b-c.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A"] * 4 + ["B"] * 4,
    ...     "task_id": ["t1", "t2", "t3", "t4"] * 2, "scored": True,
    ...     "outcome": ["recovered", "valid", "valid", "recovered"] + ["valid"] * 4,
    ...     "score_recovered": [0.9, 0.5, 0.4, 0.8, 0.5, 0.5, 0.5, 0.5]})
    >>> r = recovered_vs_valid(runs, ["A", "B"], resamples=100, draws=100)
    >>> round(float(r.table["diff"].iloc[0]), 3)  # (0.4 + 0.3) / 2 - (0.0 - 0.1) / 2
    0.4
    """
    frame = relative_frame(runs, order)
    frame["marked"] = (frame["outcome"] == Outcome.recovered.value).to_numpy()
    return within_config_difference(frame, order, "recovered-vs-valid", seed, resamples, draws)


def relative_frame(runs: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """The scored official runs with ``relative``: score minus the other configurations' mean.

    Examples
    --------
    >>> runs = pd.DataFrame({"config": ["A", "B"], "task_id": "t", "scored": True,
    ...                      "score_recovered": [0.6, 0.2]})
    >>> relative_frame(runs, ["A", "B"])["relative"].round(3).tolist()
    [0.4, -0.4]
    """
    from spu.stats.runs_table import score_matrix

    scored = runs[runs["scored"]].copy()
    relative = relative_scores(score_matrix(scored, order)).stack(future_stack=True)
    key = pd.MultiIndex.from_arrays([scored["task_id"], scored["config"]])
    scored["relative"] = relative.reindex(key).to_numpy()
    return scored.reset_index(drop=True)
