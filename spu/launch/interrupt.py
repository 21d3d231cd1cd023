"""Ctrl-C of a sweep: one line, exit status 130, nothing left running.

The first Ctrl-C (SIGINT) raises :class:`KeyboardInterrupt` where the sweep is: the run
in flight unwinds through its ``finally`` blocks (the sandbox stops the agent, the tools
service and the egress proxy close) and writes no ``run.json``, so the next launch runs
it again; a tracking record being written is closed as KILLED. ``python -m spu.main``
then prints :func:`interrupted_line` and exits 130 (:func:`exit_interrupted`). A second
Ctrl-C while that cleanup runs stops at once: every process this one started is killed
and the process exits 130 without waiting.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import NoReturn

INTERRUPTED_EXIT = 130
"""Exit status of an interrupted sweep (128 + SIGINT, as a shell reports it)."""


@dataclass
class SweepTally:
    """What this process's launch has done so far, for the line an interrupt prints."""

    recorded: int = 0
    """Run attempts recorded (``run.json`` written, tracked where tracking is on)."""
    cut_off: int = 0
    """Runs started and not recorded when the interrupt came (in flight, or cut off)."""
    interrupted: bool = False
    """True once the first Ctrl-C arrived."""


TALLY = SweepTally()


@contextmanager
def run_in_flight() -> Iterator[None]:
    """Around one run: counted as cut off until it returns, or fails other than by Ctrl-C.

    Counted from its start, so that a second Ctrl-C during the run's cleanup (before the
    first has unwound through here) still counts it.
    """
    TALLY.cut_off += 1
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException:
        TALLY.cut_off -= 1
        raise
    TALLY.cut_off -= 1


def interrupted_line(tally: SweepTally = TALLY) -> str:
    """The one line an interrupted sweep ends with.

    Examples
    --------
    >>> interrupted_line(SweepTally(recorded=3, cut_off=1))
    'interrupted: 3 runs recorded, 1 cut off; run the same command to resume'
    """
    runs = "run" if tally.recorded == 1 else "runs"
    return (f"interrupted: {tally.recorded} {runs} recorded, {tally.cut_off} cut off; "
            f"run the same command to resume")


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if not TALLY.interrupted:
        TALLY.interrupted = True
        raise KeyboardInterrupt
    stop_now()


def stop_now() -> NoReturn:
    """Kill every process this one started, say so in one line, and exit 130 at once."""
    from spu.sandbox.process import descendants

    for pid in reversed(descendants(os.getpid())):  # children before their descendants
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    sys.stderr.write(interrupted_line() + " (stopped at once)\n")
    sys.stderr.flush()
    os._exit(INTERRUPTED_EXIT)


def install() -> None:
    """Take over SIGINT in the main thread: the first raises, the second stops at once.

    A SIGINT that the parent set to be ignored (a background job of a script) stays
    ignored.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    signal.signal(signal.SIGINT, _on_sigint)


def exit_interrupted() -> NoReturn:
    """After the first Ctrl-C has unwound: the line, and exit 130 (no traceback).

    Nothing is left to stop once the line is written, so a second Ctrl-C from then on is
    ignored: Python's finalization puts back the default SIGINT (which would end the
    process by the signal, not with 130) for any handler but "ignore".
    """
    sys.stderr.write(interrupted_line() + "\n")
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(INTERRUPTED_EXIT)
