"""Tracking: every run recorded in MLflow (imported lazily: ``import spu`` stays light)."""

from spu.tracking.store import TrackingTarget, log_run, resolve_target

__all__ = ["TrackingTarget", "log_run", "resolve_target"]
