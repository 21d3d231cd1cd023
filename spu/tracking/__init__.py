"""Tracking: every run recorded in MLflow, and the runs table exported from it.

MLflow and pandas are imported inside the functions that use them: ``import spu``
stays light.

MLflow's usage telemetry (on by default since MLflow 3) is turned off for SPU's
processes and the servers they start, unless the environment says otherwise: a
benchmark's tracking sends nothing anywhere, and each logging call saves its work.
"""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

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
