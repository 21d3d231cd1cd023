"""What the tests ask of this machine's processes, through psutil."""

from __future__ import annotations

import psutil


def running(pid: int) -> bool:
    """Whether process ``pid`` runs: not gone, and not a zombie waiting for its parent to
    reap it (a signal does nothing to one, so nothing need wait for it to go)."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False
