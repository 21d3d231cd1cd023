"""The garbage-collection policy of a launching process, set once when it starts.

A sweep's driver keeps what it composes and records for the whole sweep (job configs of
a few hundred objects each, linked both ways; MLflow, Ray and SQLAlchemy modules), so
frequent collections walk the same long-lived objects again and again: composing 300
jobs took 3.7 s instead of 1.6 s, and the interpreter's last collection at exit cost
1-1.5 s of CPU. The policy, set here once and by nothing else: what the entry point has
imported is frozen (left out of every later collection), young collections are rare,
and what is alive at exit is frozen before the interpreter's final collection. Library
code never touches the collector; the one process with a policy of its own is the gateway
host (:mod:`spu.gateway.process`), which only forks runs' gateways and freezes what it
holds once warm, so that its forks share its pages.
"""

from __future__ import annotations

import atexit
import gc

YOUNG_THRESHOLD = 50_000
"""Allocations between young collections (Python's default is 700): a sweep's objects
live as long as the sweep, so collecting them young only walks them more often."""

_set = False


def set_launcher_policy() -> None:
    """Set the policy for this process (idempotent: the first call sets it).

    Registered at exit, the freeze runs after the handlers registered later (they run
    first), so files and logs are flushed and closed before (by their own code).
    """
    global _set
    if _set:
        return
    _set = True
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    atexit.register(gc.freeze)
