"""The MLflow UI of a store: where a sweep's experiment can be opened in a browser.

A sweep ends by printing its experiment's address when a UI answers there:
``tracking.ui_url`` when set (an ``mlflow ui`` started on the SQLite store), else the
server an ``http(s)://`` tracking URI points at (an ``mlflow server`` is its own UI).
"""

from __future__ import annotations

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
