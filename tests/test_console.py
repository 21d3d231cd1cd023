"""What a sweep prints (issue 24, the console): one line per run, a summary per configuration.

Each test runs the real entry point in a subprocess, as a user types it, and reads what
the console shows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, run_module

BASELINES = ["-m", "model=random,presented_order", f"task={EXAMPLE_TASK.name}"]
"""Two baselines on one task: the shortest sweep with two configurations."""


@pytest.fixture
def one_task_root(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    shutil.copytree(EXAMPLE_TASK, root / EXAMPLE_TASK.name)
    return root


def _sweep(task_root: Path, out: Path, *extra: str) -> str:
    # The width of a console that is not a terminal (pytest-xdist's workers set COLUMNS=80,
    # where the summary's headers wrap onto two lines).
    proc = run_module(["spu.main", *BASELINES, f"task_root={task_root}", f"output_root={out}",
                       *extra], env={"COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def _run_lines(console: str, config: str) -> list[str]:
    """The streamed lines of one configuration's runs (not the table rows)."""
    return [line for line in console.splitlines() if f"{EXAMPLE_TASK.name} · {config} " in line]


@pytest.mark.slow  # a real sandbox (spu.main, sandbox=local)
def test_a_sweep_prints_one_line_per_run_and_a_summary_per_configuration(one_task_root,
                                                                         tmp_path) -> None:
    """Each run is one line (Hydra's line per job launched is off), and the sweep ends
    with a row per configuration: runs, scored, mean score (its interval over tasks, none
    for one task), above chance, cost."""
    console = _sweep(one_task_root, tmp_path / "out")
    for config in ("random-none", "presented_order-none"):
        (line,) = _run_lines(console, config)
        assert "valid · score " in line
    assert "\t#0 : " not in console and "Launching 2 jobs" not in console
    summary = console[console.index("per configuration"):]
    header = next(line for line in summary.splitlines() if "mean score" in line)
    for column in ("runs", "scored", "mean score", "above chance", "cost"):
        assert column in header
    row = next(line for line in summary.splitlines() if "presented_order-none" in line)
    # presented order scores 0.619 on this task, its chance threshold exactly: not above it.
    assert [c.strip() for c in row.strip("│┃ ").split("│")][1:] == \
        ["1", "1", "0.619 (1 task)", "0/1", "$0.00"]


@pytest.mark.slow  # a real sandbox (spu.main, sandbox=local)
def test_a_skipped_run_is_printed_once(one_task_root, tmp_path) -> None:
    """Relaunched, each finished run is one ``skipped`` line (it was two: the job's and
    the launcher's)."""
    out = tmp_path / "out"
    _sweep(one_task_root, out)
    console = _sweep(one_task_root, out)
    for config in ("random-none", "presented_order-none"):
        (line,) = _run_lines(console, config)
        assert " · skipped · valid · score " in line
    assert "skipped, finished earlier" not in console


@pytest.mark.slow  # a real sandbox (spu.main, sandbox=local)
def test_verbose_brings_back_hydras_launch_lines(one_task_root, tmp_path) -> None:
    console = _sweep(one_task_root, tmp_path / "out", "verbose=true")
    assert "\t#0 : " in console


@pytest.mark.slow
@pytest.mark.cli
def test_library_info_logs_only_with_verbose(one_task_root, tmp_path) -> None:
    """A scripted Claude Code run logs no MCP session, StreamableHTTP or httpx line unless
    ``verbose=true``."""
    from tests.harness.test_cli_runs import PAPER_VERSION, cli_installed

    cli_installed("claude_code", PAPER_VERSION["claude_code"])
    noise = ("StreamableHTTP", "Terminating session", "HTTP Request:")
    args = ["spu.main", "harness=claude_code", "model=scripted", f"task={EXAMPLE_TASK.name}",
            f"task_root={one_task_root}"]
    quiet = run_module([*args, f"output_root={tmp_path / 'quiet'}"], timeout=600)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert not [n for n in noise if n in quiet.stdout + quiet.stderr]
    (line,) = _run_lines(quiet.stdout + quiet.stderr, "scripted-none")
    assert "(claude_code)" in line
    loud = run_module([*args, f"output_root={tmp_path / 'loud'}", "verbose=true"], timeout=600)
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert "HTTP Request:" in loud.stdout + loud.stderr


def test_every_log_line_reaches_the_console_as_text() -> None:
    """Invariant (issue 41, V3): a log line that carries what an agent chose (its CLI's
    error line, a session file's name, an exception's message) reaches each handler of the
    root logger with its control characters escaped: message, arguments and traceback."""
    import io
    import logging

    from spu.launch.console import quiet_library_logs

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        quiet_library_logs(verbose=False)
        quiet_library_logs(verbose=False)  # once per handler, however often it is called
        assert len(handler.filters) == 1
        log = logging.getLogger("spu.test.console")
        log.warning("session files: %s", "name\x1b]0;pwned\x07.jsonl\x1b[2J")
        try:
            raise ValueError("\x1b]52;c;cm0gLXJmIH4=\x07")
        except ValueError:
            log.exception("the agent's side failed")
    finally:
        root.removeHandler(handler)
    text = stream.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "name\\x1b]0;pwned\\x07.jsonl\\x1b[2J" in text
    assert "ValueError: \\x1b]52;c;cm0gLXJmIH4=\\x07" in text and "Traceback" in text
