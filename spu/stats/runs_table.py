"""The runs table (SPEC section 5): read it, check it, and select the runs an analysis uses.

The table comes from ``spu runs export`` as CSV or parquet, one row per run. Only the
columns the statistics use are required; every check names the file, the column and
the row, and nothing is written before the whole table has passed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from spu.schema import Outcome

REQUIRED_COLUMNS: tuple[str, ...] = (
    "run_id",
    "config",
    "task_id",
    "discipline",
    "visibility",
    "repeat",
    "outcome",
    "score_strict",
    "score_recovered",
    "scored",
    "threshold",
)
"""Columns every analysis needs."""

USAGE_COLUMNS: tuple[str, ...] = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost_usd",
    "runtime_s",
)
"""Columns of the cost analysis (paper 3.5); filled with NaN when absent."""

OPTIONAL_TEXT: tuple[str, ...] = ("model", "harness", "effort", "subfield", "run_key",
                                  "departures", "refusal_label", "exposure_kinds",
                                  "published_before_cutoff")
"""Text columns used where present (matching run folders, labels, departures)."""

OPTIONAL_BOOL: tuple[str, ...] = ("flagged_exposure", "used_gpu", "retired",
                                  "refusal_after_file")
"""True/false columns of SPEC section 5 used by the exposure and effort analyses,
``retired`` (the run's task is retired, SPEC 15: out of the official statistics) and
``refusal_after_file`` (a refusal after a valid file, paper 3.1); false
where absent (the table's ``attrs["absent_columns"]`` says which were)."""

OPTIONAL_NUMBER: tuple[str, ...] = ("tool_calls", "web_fetches", "n_groups",
                                    "cost_full_input_usd", "requests_outside_tools",
                                    "gpu_seconds")
"""Numeric columns used where present; NaN where absent."""

FRESHNESS_VALUES = frozenset({"true", "false", "unknown", "", "1", "0", "1.0", "0.0", "yes",
                              "no"})
"""Spellings of ``published_before_cutoff`` (empty: unknown)."""

ROW = "__row__"
"""Position of each row in the file, kept while checking so messages name the right line."""

BOOLEAN_TEXT = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False,
                "1.0": True, "0.0": False}
OUTCOMES = frozenset(o.value for o in Outcome)
VISIBILITIES = frozenset({"public", "private"})


class RunsTableError(ValueError):
    """The runs table cannot be used; the message names the file, the column and the row."""


def _where(path: Path, frame: pd.DataFrame, index: int) -> str:
    run_id = frame.at[index, "run_id"] if "run_id" in frame.columns else "?"
    row = int(frame.at[index, ROW]) if ROW in frame.columns else index
    # CSV line numbers count the header as line 1.
    line = f"line {row + 2}" if path.suffix.lower() == ".csv" else f"row {row}"
    return f"{line} (run_id {run_id})"


def _as_bool(path: Path, frame: pd.DataFrame, column: str) -> pd.Series:
    values = []
    for i, raw in frame[column].items():
        if isinstance(raw, (bool, np.bool_)):
            values.append(bool(raw))
            continue
        text = str(raw).strip().lower()
        if text not in BOOLEAN_TEXT:
            raise RunsTableError(
                f"{path}: column {column!r}, {_where(path, frame, int(i))}: "
                f"{raw!r} is not true or false"
            )
        values.append(BOOLEAN_TEXT[text])
    return pd.Series(values, index=frame.index, dtype=bool)


def _as_float(path: Path, frame: pd.DataFrame, column: str) -> pd.Series:
    numbers = pd.to_numeric(frame[column], errors="coerce")
    bad = numbers.isna() & frame[column].notna() & (frame[column].astype(str).str.strip() != "")
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise RunsTableError(
            f"{path}: column {column!r}, {_where(path, frame, frame.index[i])}: "
            f"{frame[column].iloc[i]!r} is not a number"
        )
    return numbers.astype(float)


ALL_EXPERIMENTS = "all"
"""``--experiment all``: every experiment of the table together."""


def choose_experiment(frame: pd.DataFrame, experiment: str | None,
                      path: str | Path = "<runs table>") -> tuple[pd.DataFrame, str | None]:
    """The rows of one MLflow experiment, and the sentence that says which.

    ``experiment`` names it (``paper`` finds ``spu-paper``); None chooses the experiment
    of the most recent sweep, the one whose run finished last (``finished_at``, else
    ``started_at``); ``all`` keeps every row. A table without an ``experiment`` column
    (``spu runs export --runs-dir``) is kept whole, with no sentence.

    Raises
    ------
    RunsTableError
        ``experiment`` is not in the table (the message lists those that are).

    Examples
    --------
    >>> t = pd.DataFrame({"experiment": ["spu-a", "spu-b", "spu-b"],
    ...                   "finished_at": ["2026-01-02", "2026-01-01", "2026-01-03"]})
    >>> rows, said = choose_experiment(t, None)
    >>> len(rows), said
    (2, 'experiment spu-b (the most recent sweep; others in the table: spu-a; choose one with --experiment NAME, or --experiment all)')
    >>> len(choose_experiment(t, "a")[0])
    1
    """  # noqa: E501
    if "experiment" not in frame.columns or frame["experiment"].isna().all():
        return frame, None
    names = frame["experiment"].fillna("").astype(str)
    known = sorted(n for n in names.unique() if n)
    if experiment == ALL_EXPERIMENTS:
        return frame, f"experiments {', '.join(known)} (--experiment all)"
    if experiment is None:
        chosen = _most_recent(frame, names)
        others = [n for n in known if n != chosen]
        said = f"experiment {chosen}"
        said += (" (the most recent sweep; others in the table: " + ", ".join(others)
                 + "; choose one with --experiment NAME, or --experiment all)") if others \
            else " (the only one in the table)"
    else:
        from spu.config import EXPERIMENT_PREFIX

        candidates = (experiment, EXPERIMENT_PREFIX + experiment)
        found = [c for c in candidates if c in known]
        if not found:
            raise RunsTableError(f"{path}: --experiment {experiment}: no such experiment in the "
                                 f"table (it has {', '.join(known)}; or --experiment all)")
        chosen = found[0]
        said = f"experiment {chosen}"
    return frame[names == chosen].reset_index(drop=True), said


def _most_recent(frame: pd.DataFrame, names: pd.Series) -> str:
    """The experiment of the run that finished last (the last row's when no time is known)."""
    for column in ("finished_at", "started_at"):
        if column in frame.columns:
            times = pd.to_datetime(frame[column], errors="coerce", utc=True)
            if times.notna().any():
                return str(names[times.idxmax()])
    return str(names.iloc[-1])


def read_runs_table(path: str | Path, experiment: str | None = ALL_EXPERIMENTS
                    ) -> pd.DataFrame:
    """Read and check a runs table (``.csv`` or ``.parquet``).

    Returns a frame with typed columns: ``repeat`` int, ``scored`` bool, scores,
    thresholds and usage float (NaN where empty), text columns as str. ``experiment``
    keeps one experiment's rows (:func:`choose_experiment`; default all of them).

    Raises
    ------
    RunsTableError
        Missing file or column, a value of the wrong type, an unknown ``outcome`` or
        ``visibility``, a score outside [-1, 1], a scored run without a score, or two
        rows for the same configuration, task and repeat.
    """
    return read_experiment_table(path, experiment)[0]


def read_experiment_table(path: str | Path, experiment: str | None = None
                          ) -> tuple[pd.DataFrame, str | None]:
    """:func:`read_runs_table` of one experiment, and the sentence saying which.

    ``experiment`` None is the most recent sweep's (:func:`choose_experiment`).
    """
    path = Path(path)
    if path.is_dir():
        raise RunsTableError(f"{path}: a folder, not a runs table (spu runs export "
                             f"--output-root {path} --out runs.csv writes one; spu report "
                             "and spu leaderboard take an output root as it is)")
    if not path.is_file():
        raise RunsTableError(f"{path}: runs table does not exist")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except Exception as exc:  # pandas raises many types for unreadable files
        raise RunsTableError(f"{path}: cannot read the runs table ({exc})") from None
    frame, said = choose_experiment(frame, experiment, path)
    return check_runs_table(frame, path), said


def check_runs_table(frame: pd.DataFrame, path: str | Path = "<runs table>") -> pd.DataFrame:
    """Check and type a runs table already in memory (see :func:`read_runs_table`)."""
    path = Path(path)
    frame = _official_rows(path, frame)
    _text_columns(path, frame)
    _categories(path, frame)
    _numbers(path, frame)
    absent = _optional_columns(path, frame)
    _one_row_a_run(path, frame)
    frame = frame.drop(columns=[ROW])
    frame.attrs["absent_columns"] = absent
    return frame


def _first(bad: pd.Series) -> int | None:
    """The first row where ``bad`` holds, or None."""
    return int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else None


def _official_rows(path: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """The required columns checked, the official attempts kept, rows numbered."""
    frame = frame.reset_index(drop=True).copy()
    frame[ROW] = np.arange(len(frame))
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise RunsTableError(
            f"{path}: missing column(s) {', '.join(repr(c) for c in missing)} "
            "(SPEC section 5 lists the columns of the runs table)"
        )
    if "official" in frame.columns:
        # ``spu runs export --all-attempts`` keeps superseded attempts, marked not official.
        frame = frame[_as_bool(path, frame, "official").to_numpy()].reset_index(drop=True)
    return frame


def _text_columns(path: Path, frame: pd.DataFrame) -> None:
    """Text columns stripped; a required one never empty."""
    for column in ("run_id", "config", "task_id", "discipline", "visibility", "outcome",
                   *[c for c in OPTIONAL_TEXT if c in frame.columns]):
        frame[column] = frame[column].astype(object)
        empty = frame[column].isna() | (frame[column].astype(str).str.strip() == "")
        if column not in OPTIONAL_TEXT and (i := _first(empty)) is not None:
            raise RunsTableError(f"{path}: column {column!r}, {_where(path, frame, i)}: empty")
        frame[column] = frame[column].where(~empty, "").astype(str).str.strip()


def _categories(path: Path, frame: pd.DataFrame) -> None:
    """Outcome, visibility and freshness among their values (freshness spelled one way)."""
    for column, allowed in (("outcome", OUTCOMES), ("visibility", VISIBILITIES)):
        if (i := _first(~frame[column].isin(allowed))) is not None:
            raise RunsTableError(
                f"{path}: column {column!r}, {_where(path, frame, i)}: "
                f"{frame.at[i, column]!r} is not one of {', '.join(sorted(allowed))}"
            )
    if "published_before_cutoff" in frame.columns:
        fresh = frame["published_before_cutoff"].str.lower()
        if (i := _first(~fresh.isin(FRESHNESS_VALUES))) is not None:
            raise RunsTableError(
                f"{path}: column 'published_before_cutoff', {_where(path, frame, i)}: "
                f"{frame.at[i, 'published_before_cutoff']!r} is not true, false or unknown")
        frame["published_before_cutoff"] = fresh.where(fresh != "", "unknown").replace(
            {"1": "true", "1.0": "true", "yes": "true", "0": "false", "0.0": "false",
             "no": "false"})


def _numbers(path: Path, frame: pd.DataFrame) -> None:
    """The repeat a whole number, the scores within [-1, 1], a scored run with a score."""
    repeat = _as_float(path, frame, "repeat")
    if (i := _first(repeat.isna() | (repeat < 0) | (repeat != np.floor(repeat)))) is not None:
        raise RunsTableError(f"{path}: column 'repeat', {_where(path, frame, i)}: "
                             f"{frame.at[i, 'repeat']!r} is not a whole number >= 0")
    frame["repeat"] = repeat.astype(int)
    frame["scored"] = _as_bool(path, frame, "scored")
    for column in ("score_strict", "score_recovered", "threshold"):
        frame[column] = _as_float(path, frame, column)
    for column in ("score_strict", "score_recovered"):
        values = frame[column]
        outside = values.notna() & ((values < -1 - 1e-9) | (values > 1 + 1e-9))
        if (i := _first(outside)) is not None:
            raise RunsTableError(f"{path}: column {column!r}, {_where(path, frame, i)}: "
                                 f"{values.iloc[i]} is outside [-1, 1]")
    if (i := _first(frame["scored"] & ~np.isfinite(frame["score_recovered"]))) is not None:
        raise RunsTableError(f"{path}: column 'score_recovered', {_where(path, frame, i)}: "
                             "a scored run needs a score")


def _optional_columns(path: Path, frame: pd.DataFrame) -> list[str]:
    """Usage, flags and counts typed (NaN or false where absent); the columns absent.

    The cost is the paper's five-minute cache price where the table has it.
    """
    absent = [c for c in (*USAGE_COLUMNS, *OPTIONAL_BOOL, *OPTIONAL_NUMBER)
              if c not in frame.columns]
    for column in (*USAGE_COLUMNS, *OPTIONAL_NUMBER):
        frame[column] = _as_float(path, frame, column) if column in frame.columns else math.nan
    for column in OPTIONAL_BOOL:
        if column not in frame.columns:
            frame[column] = False
            continue
        # An empty cell (a run whose record lacks the flag) reads as false.
        filled = frame[column].where(frame[column].notna() & (frame[column].astype(str)
                                                              .str.strip() != ""), "false")
        frame[column] = _as_bool(path, frame.assign(**{column: filled}), column)
    if "cost_five_minute_usd" in frame.columns:
        # The paper's rule (E.6): every cache write at the five-minute price, whatever
        # rule priced cost_usd when the run was recorded.
        five = _as_float(path, frame, "cost_five_minute_usd")
        frame["cost_usd"] = five.where(five.notna(), frame["cost_usd"])
    if "n_items" in frame.columns:
        frame["n_items"] = _as_float(path, frame, "n_items")
    return absent


def _one_row_a_run(path: Path, frame: pd.DataFrame) -> None:
    """No two rows of one configuration, task and repeat."""
    key = ["config", "task_id", "repeat"]
    dup = frame.duplicated(key, keep=False)
    if dup.any():
        rows = np.flatnonzero(dup.to_numpy())
        first = frame.iloc[rows[0]]
        same = [int(r) for r in rows if (frame.iloc[r][key] == first[key]).all()]
        raise RunsTableError(
            f"{path}: {_where(path, frame, same[0])} and {_where(path, frame, same[1])} "
            f"are both config {first['config']!r}, task {first['task_id']!r}, "
            f"repeat {first['repeat']}"
        )


EMPTY_HINT = ("export the runs of a finished sweep (spu runs export --out runs.csv) or "
              "give its output root (spu report OUTPUT_ROOT)")
"""What to do about a runs table without official runs, as the commands say it."""


def nothing_to_analyse(frame: pd.DataFrame, left_out: int = 0) -> str | None:
    """Why ``frame`` has nothing to analyse (no official run), or ``None`` when it has.

    ``left_out`` counts the rows already left out (contamination probes, retired tasks).

    Examples
    --------
    >>> nothing_to_analyse(pd.DataFrame({"repeat": []}))
    'the table has no rows'
    >>> nothing_to_analyse(pd.DataFrame({"repeat": [1, 2]}), left_out=3)
    'no official run (repeat 0): 2 repeated runs, 3 rows left out (probes or retired tasks)'
    >>> nothing_to_analyse(pd.DataFrame({"repeat": [0]})) is None
    True
    """
    if int((frame["repeat"] == 0).sum()) if len(frame) else 0:
        return None
    if not len(frame) and not left_out:
        return "the table has no rows"
    parts = [f"{len(frame)} repeated runs"] if len(frame) else []
    if left_out:
        parts.append(f"{left_out} rows left out (probes or retired tasks)")
    return f"no official run (repeat 0): {', '.join(parts)}"


def official(frame: pd.DataFrame, visibility: str = "public") -> pd.DataFrame:
    """Official runs (``repeat`` 0) on tasks of one visibility (SPEC section 6)."""
    return frame[(frame["repeat"] == 0) & (frame["visibility"] == visibility)]


def score_matrix(runs: pd.DataFrame, configs: list[str]) -> pd.DataFrame:
    """Scores of scored runs as a task x configuration frame, NaN where not scored."""
    scored = runs[runs["scored"]]
    matrix = scored.pivot(index="task_id", columns="config", values="score_recovered")
    return matrix.reindex(columns=configs).sort_index()
