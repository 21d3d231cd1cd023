"""The MLflow UI of a store: where a sweep's experiment can be opened in a browser.

A sweep ends by printing its experiment's address when a UI answers there:
``tracking.ui_url`` when set (``spu ui`` or an ``mlflow ui`` started on the SQLite store),
else the server an ``http(s)://`` tracking URI points at (an ``mlflow server`` is its own UI).

Every SPU experiment is made to open on its scores: it is tagged as a run-tracking
experiment (MLflow 3 otherwise opens an experiment with traces on trace charts) and
carries a saved view, ``SPU``, of its runs table with the columns a comparison needs
(:func:`experiment_ui_tags`, set by :mod:`spu.tracking.store`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

HEALTH_TIMEOUT_S = 1.0
"""Seconds the UI has to answer ``/health`` before the sweep says how to start one."""


def ui_base(ui_url: str | None, tracking_uri: str) -> str | None:
    """The UI's base address: ``ui_url``, else an HTTP tracking URI, else None.

    Examples:
        >>> ui_base(None, "http://127.0.0.1:5000/"), ui_base(None, "sqlite:///x.db")
        ('http://127.0.0.1:5000', None)
        >>> ui_base("http://127.0.0.1:5001", "sqlite:///x.db")
        'http://127.0.0.1:5001'
    """
    base = ui_url or (tracking_uri if tracking_uri.startswith(("http://", "https://"))
                      else None)
    return base.rstrip("/") if base else None


def ui_is_up(base: str, token: str | None = None, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    """Whether an MLflow UI or server answers ``GET <base>/health`` with 200."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return httpx.get(f"{base}/health", headers=headers, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def experiment_url(base: str, experiment_id: str) -> str:
    """The UI's page of one experiment (its runs table).

    Examples:
        >>> experiment_url("http://127.0.0.1:5000", "3")
        'http://127.0.0.1:5000/#/experiments/3'
    """
    return f"{base}/#/experiments/{experiment_id}"


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
"""MLflow 3's experiment kind (an experiment tag): the UI opens a GenAI experiment on its
trace charts ("Overview") and a run-tracking one on its runs table."""

RUN_TRACKING_KIND = "custom_model_development"
"""The kind of a run-tracking experiment, as MLflow 3.17's UI names it."""

SAVED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."
"""MLflow 3.17 keeps each saved view of a runs table as an experiment tag
``mlflow.sharedViewState.<view id>``: ``{"name", "createdAt", "updatedAt", "state"}``,
``state`` the table's settings as JSON text (the UI merges them over its defaults)."""

SPU_VIEW_ID = "spu"
"""The id of SPU's saved view (its tag and its link: ``?viewStateShareKey=spu``)."""

SPU_VIEW_NAME = "SPU"
"""The name the UI's Views menu shows."""

SPU_VIEW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("params", "config"), ("params", "task"), ("params", "repeat"), ("tags", "outcome"),
    ("metrics", "score_strict"), ("metrics", "score_recovered"), ("metrics", "cost_usd"),
    ("metrics", "runtime_s"))
"""The columns of the SPU view: what a run is, how it ended, its scores, cost and time."""

SPU_VIEW_ORDER: tuple[str, ...] = ("metrics", "tags", "params")
"""The order of the view's column groups, left to right: the scores beside the run name
(which already says the configuration, task and repeat), then the outcome, then the params."""

RUN_NAME_COLUMN = "attributes.`Run Name`"
"""The UI's id of the run name column."""

RUN_NAME_SORT_KEY = "tags.`mlflow.runName`"
"""The UI's sort key of the run name (``<config> · <task> · r<repeat>``: by configuration)."""


def column_id(kind: str, key: str) -> str:
    """The UI's id of a params, metrics or tags column.

    Examples:
        >>> column_id("metrics", "score_strict")
        'metrics.`score_strict`'
    """
    return f"{kind}.`{key}`"


def text_width(characters: int, low: int = 80, high: int = 640) -> int:
    """Pixels of a column that shows texts of ``characters`` characters uncut.

    Examples:
        >>> text_width(0), text_width(36), text_width(500)
        (80, 300, 640)
    """
    return max(low, min(high, round(7.5 * characters + 30)))


TYPICAL_LENGTHS = {"name": 40, "config": 20, "task": 14}
"""Characters of a typical run name, configuration and task id (``presented_order-none ·
spu-2q2w · r0``), for a view made before any run is recorded."""


def spu_view_state(lengths: Mapping[str, int] | None = None) -> dict[str, object]:
    """The settings of the SPU view: its columns, names uncut, sorted by run name.

    Args:
        lengths: the longest run ``name``, ``config`` and ``task`` in characters (default:
            :data:`TYPICAL_LENGTHS`); the columns are made that wide.
    """
    found = {**TYPICAL_LENGTHS, **(lengths or {})}
    columns = [column_id(kind, key) for kind, key in SPU_VIEW_COLUMNS]
    widths = {RUN_NAME_COLUMN: text_width(found["name"], low=240),
              column_id("params", "config"): text_width(found["config"], low=100),
              column_id("params", "task"): text_width(found["task"], low=100),
              column_id("params", "repeat"): 70, column_id("tags", "outcome"): 100}
    widths.update({column_id("metrics", key): 120 for kind, key in SPU_VIEW_COLUMNS
                   if kind == "metrics"})
    return {
        "selectedColumns": columns,
        "columnOrder": [RUN_NAME_COLUMN, *(column_id(kind, key) for group in SPU_VIEW_ORDER
                                           for kind, key in SPU_VIEW_COLUMNS
                                           if kind == group)],
        "columnWidths": widths,
        "orderByKey": RUN_NAME_SORT_KEY,
        "orderByAsc": True,
        "runsHiddenMode": "SHOW_ALL",
    }


def spu_view_tag(created_ms: int,
                 lengths: Mapping[str, int] | None = None) -> tuple[str, str]:
    """The experiment tag (key, value) that holds the SPU view.

    Examples:
        >>> key, value = spu_view_tag(0)
        >>> key, json.loads(value)["name"], "selectedColumns" in json.loads(value)["state"]
        ('mlflow.sharedViewState.spu', 'SPU', True)
    """
    state = json.dumps(spu_view_state(lengths), separators=(",", ":"))
    envelope = {"name": SPU_VIEW_NAME, "createdAt": created_ms, "updatedAt": created_ms,
                "state": state}
    return SAVED_VIEW_TAG_PREFIX + SPU_VIEW_ID, json.dumps(envelope, separators=(",", ":"))


def experiment_ui_tags(created_ms: int) -> dict[str, str]:
    """The tags every SPU experiment carries: the run-tracking kind and the SPU view."""
    key, value = spu_view_tag(created_ms)
    return {EXPERIMENT_KIND_TAG: RUN_TRACKING_KIND, key: value}


WORKFLOW_PARAMETER = "workflowType=machine_learning"
"""MLflow 3.17's sidebar switch between "GenAI" (its default, which opens every experiment
on trace charts whatever its kind) and "Model training", set for one page by the link."""


def view_url(base: str, experiment_id: str) -> str:
    """The UI's runs table of one experiment, in model-training mode and the SPU view.

    Examples:
        >>> view_url("http://127.0.0.1:5000", "3")
        'http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey=spu'
    """
    return (f"{base}/#/experiments/{experiment_id}/runs?{WORKFLOW_PARAMETER}"
            f"&viewStateShareKey={SPU_VIEW_ID}")
