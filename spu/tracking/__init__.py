"""Tracking: every run recorded in MLflow, and the runs table exported from it.

MLflow and pandas are imported inside the functions that use them: ``import spu``
stays light.
"""

from spu.tracking.export import runs_table, runs_table_from_records, write_runs_table
from spu.tracking.store import TrackingTarget, log_run, resolve_target

__all__ = [
    "TrackingTarget",
    "log_run",
    "resolve_target",
    "runs_table",
    "runs_table_from_records",
    "write_runs_table",
]
