"""The quick tier's guard (``make test-quick``, ``-p tests.quick_tier``).

The quick tier runs the tests marked neither ``slow``, ``docker`` nor ``cli``: those that
need no agent sandbox, Docker engine, Ray, PostgreSQL or agent CLI. This plugin makes
that a checked promise: a test of the tier that starts one of them anyway fails at its
teardown, naming what it started, so that it gets its mark. It watches

- programs run through ``PATH``, in this process and in every process it starts
  (``python -m spu.main`` included): bubblewrap holding an agent (``--args``, which the
  agent sandbox uses and the grader's and the availability probe's do not), ``pasta``,
  ``dockerd``, ``node`` and the agent CLIs, each through a shim that notes the call and
  runs the real program;
- servers left among this process's descendants: PostgreSQL, Ray, Docker.

It changes nothing a test sees but ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

WATCHED = ("bwrap", "pasta", "dockerd", "node", "claude", "codex")
"""Programs noted when run through ``PATH`` (bwrap only when it holds an agent)."""

SERVERS = ("postgres", "raylet", "gcs_server", "dockerd", "containerd")
"""Process names of servers a quick test must not start."""

EXEMPT_MARKS = ("slow", "docker", "cli")
"""A test with one of these marks is not of the quick tier (it may start them)."""

_SHIM = """#!/bin/bash
if [[ {name} != bwrap || " $* " == *" --args "* ]]; then
  echo {name} >> {log} 2>/dev/null
fi
exec -a {name} {real} "$@"
"""
"""Notes the call, then runs the real program under its own name (argv[0] as before)."""


def _install_shims(folder: Path, log: Path) -> None:
    """A shim per watched program found on ``PATH``, in ``folder``, put first on ``PATH``.

    The log's path is written into each shim: a sandbox clears its programs' environment.
    """
    if shutil.which("bash") is None:
        return  # the guard then sees only the servers
    for name in WATCHED:
        real = shutil.which(name)
        if real is None:
            continue
        shim = folder / name
        shim.write_text(_SHIM.format(name=name, real=real, log=log))
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


def pytest_configure(config: pytest.Config) -> None:
    """Shims and a log of their calls for this process (an xdist worker has its own)."""
    folder = Path(tempfile.mkdtemp(prefix="spu-quick-tier-"))
    log = folder / "calls.log"
    log.touch()
    log.chmod(0o666)  # programs a sandbox runs as another user note their calls too
    _install_shims(folder, log)
    os.environ["SPU_QUICK_TIER_LOG"] = str(log)


def _servers() -> set[tuple[int, str]]:
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            name = child.name()
        except psutil.Error:
            continue
        if name in SERVERS:
            found.add((child.pid, name))
    return found


@pytest.fixture(autouse=True)
def _quick_tier_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test of the quick tier that started what the tier promises it does not."""
    if any(request.node.get_closest_marker(mark) for mark in EXEMPT_MARKS):
        yield
        return
    log = Path(os.environ["SPU_QUICK_TIER_LOG"])
    offset = log.stat().st_size
    before = _servers()
    yield
    with log.open() as f:
        f.seek(offset)
        calls = f.read().split()
    started = sorted({*calls, *(name for _, name in _servers() - before)})
    if started:
        pytest.fail(f"quick tier: this test started {', '.join(started)}; mark it "
                    f"@pytest.mark.slow (or docker, or cli)", pytrace=False)
