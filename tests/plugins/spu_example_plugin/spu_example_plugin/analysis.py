"""An analysis kept outside ``spu``: official runs of each configuration by outcome.

The whole of a new statistic is this one function in this one file. The package's entry
point names the module (``[project.entry-points."spu.analyses"] example =
"spu_example_plugin.analysis"``); ``spu stats`` imports it, which registers
:func:`example_counts`, and then writes ``example_counts.csv`` beside its own files, with
the manifest naming the analysis and its paper section.
"""

from __future__ import annotations

import pandas as pd

from spu.stats.inputs import StatsInputs
from spu.stats.registry import AnalysisResult, analysis

COLUMNS = ("config", "outcome", "n_runs", "share")
"""Columns of ``example_counts.csv``."""


@analysis(files=("example_counts.csv",), section="Table 6 (3.2), per outcome",
          needs=("column:outcome",))
def example_counts(inputs: StatsInputs) -> AnalysisResult:
    """Official public runs of each configuration by outcome, and their share.

    Examples
    --------
    Two runs of A (one valid, one timed out) and one of B: A's shares are 1/2 each.

    >>> runs = pd.DataFrame({"config": ["A", "A", "B"], "task_id": ["t1", "t2", "t1"],
    ...     "outcome": ["valid", "timeout", "valid"], "repeat": 0, "visibility": "public"})
    >>> table = example_counts(StatsInputs(runs)).tables["example_counts.csv"]
    >>> table.to_dict("records")  # doctest: +NORMALIZE_WHITESPACE
    [{'config': 'A', 'outcome': 'timeout', 'n_runs': 1, 'share': 0.5},
     {'config': 'A', 'outcome': 'valid', 'n_runs': 1, 'share': 0.5},
     {'config': 'B', 'outcome': 'valid', 'n_runs': 1, 'share': 1.0}]
    """
    public = inputs.public
    counts = (public.groupby(["config", "outcome"]).size().rename("n_runs").reset_index()
              if len(public) else pd.DataFrame(columns=list(COLUMNS[:3])))
    totals = counts.groupby("config")["n_runs"].transform("sum")
    counts["share"] = (counts["n_runs"] / totals).astype(float)
    return AnalysisResult(tables={"example_counts.csv": counts[list(COLUMNS)]})
