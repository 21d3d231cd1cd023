"""No Ray process outlives the sweep driver that started it, even one killed with SIGKILL.

A local Ray (``hydra/launcher=ray_local``) is a set of processes the driver starts (GCS,
raylet, dashboard agents, workers) in sessions of their own: a driver killed with
``kill -9`` cannot stop them, and they ran on, sandboxes and all. The launcher therefore
starts a reaper next to its Ray: a small process that holds the read end of a pipe
whose write end only the driver has. When the driver exits, however it exits, the
kernel closes that end; the reaper reads end-of-file and kills every process whose
command line names the Ray session (``session_<date>_<pid>``), until none is left. A
driver that stops Ray itself disarms the reaper first.
"""

from __future__ import annotations

import os
import subprocess
import sys

REAPER_CODE = r"""
import os, signal, sys, time
import psutil
marker, fd = sys.argv[1], int(sys.argv[2])
try:
    said = os.read(fd, 16)
except OSError:
    said = b""
if said.startswith(b"disarm"):
    sys.exit(0)
me = os.getpid()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    found = [p.info["pid"] for p in psutil.process_iter(["pid", "cmdline"])
             if p.info["pid"] != me and any(marker in a for a in p.info["cmdline"] or ())]
    if not found:
        break
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.5)
"""


class Reaper:
    """Kills the processes naming ``marker`` once this process is gone (unless disarmed)."""

    def __init__(self, marker: str) -> None:
        if len(marker) < 8:
            raise ValueError(f"reaper marker {marker!r} is too short to name one Ray session")
        self.marker = marker
        read_end, self._write_end = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-c", REAPER_CODE, marker, str(read_end)],
                pass_fds=(read_end,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        finally:
            os.close(read_end)
        os.set_inheritable(self._write_end, False)

    @classmethod
    def for_ray(cls) -> Reaper:
        """A reaper for the local Ray this process started (``ray.init`` done)."""
        from spu.internals import ray_session_dir

        session_dir = ray_session_dir()
        return cls(os.path.basename(os.path.realpath(session_dir)))

    def disarm(self) -> None:
        """This process stopped Ray itself: let the reaper go without killing anything."""
        if self._write_end < 0:
            return
        try:
            os.write(self._write_end, b"disarm")
        finally:
            os.close(self._write_end)
            self._write_end = -1
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
