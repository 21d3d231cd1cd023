"""``spu selfcheck``: one line per check, the closing count, the exit status, the plugin's
declared failures, and no pytest needed at run time."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from spu.selfcheck import CHECKS, CheckFailed, CheckSkipped, Status, run_check
from spu.selfcheck.tools import ToolsTarget
from tests.conftest import REPO

BROKEN = "tests.selfcheck.broken"


def selfcheck(*args: str) -> subprocess.CompletedProcess[str]:
    """``spu selfcheck ARGS`` in a fresh interpreter where ``import pytest`` fails."""
    code = ("import sys; sys.modules['pytest'] = None; from spu.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, "selfcheck", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_every_check_is_one_line_then_the_count_without_pytest() -> None:
    """Invariant: the kit runs without pytest; a provider that holds passes every check,
    one line each, and the closing line counts them; exit 0."""
    proc = selfcheck("tools=offline")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    names = list(CHECKS["tools"])
    assert lines[0].startswith("spu selfcheck tools=offline: spu.tools.offline:OfflineProvider "
                               f"(package spu), {len(names)} checks")
    assert [line.split()[0] for line in lines[1:-1]] == ["PASSED"] * len(names)
    assert [line.split()[1] for line in lines[1:-1]] == names
    assert lines[-1] == f"{len(names)} passed, 0 failed"


def test_a_fault_fails_and_a_declared_one_is_expected_with_its_reason() -> None:
    """A check that does not hold is FAILED with what was seen, exit 1; a failure the
    plugin declares is EXPECTED FAILURE with its reason, and not counted as failed."""
    proc = selfcheck(f"tools={BROKEN}:BrokenProvider")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert "FAILED           fetch_of_an_unknown_address_is_an_answer: an address nobody " \
           "has answered 200: 'anything'" in lines
    declared = [line for line in lines if line.startswith("EXPECTED FAILURE")]
    assert len(declared) == 1 and re.fullmatch(
        r"EXPECTED FAILURE close_can_be_called_twice: its connection pool cannot be closed "
        r"twice \(upstream bug 123\) \(seen: RuntimeError: already closed "
        r"\(broken.py:\d+\)\)", declared[0]), declared
    assert lines[-1] == "5 passed, 1 failed, 1 expected failure"


def test_a_declared_failure_that_passes_fails() -> None:
    """A declaration that no longer holds is reported, so that it cannot go stale."""
    entry = CHECKS["tools"]["close_can_be_called_twice"]
    from tests.selfcheck.broken import FixedProvider

    result = run_check(entry, ToolsTarget(f"{BROKEN}:FixedProvider", {}),
                       FixedProvider.selfcheck_expected_failures)
    assert result.status is Status.failed
    assert "but it passed: remove it from selfcheck_expected_failures" in result.detail


def test_skips_and_errors_are_said_in_one_line(tmp_path) -> None:
    """A check that cannot run says why; one that raises anything else fails, naming
    the exception and where it was raised."""
    from spu.selfcheck import Check

    def cannot(target: object) -> None:
        raise CheckSkipped("no such program\non this machine")

    def crashes(target: object) -> None:
        {}["missing"]  # noqa: B018

    def wrong(target: object) -> None:
        raise CheckFailed("saw 2, not 1")

    results = [run_check(Check(f.__name__, "tools", "conformance", f), None)
               for f in (cannot, crashes, wrong)]
    lines = [r.line for r in results]
    assert lines[0] == "SKIPPED          cannot: no such program on this machine"
    assert re.fullmatch(r"FAILED           crashes: KeyError: 'missing' \(test_kit.py:\d+\)",
                        lines[1]), lines[1]
    assert lines[2] == "FAILED           wrong: saw 2, not 1"


@pytest.mark.parametrize(("args", "said"), [
    (["sandbox=nope"], "spu selfcheck: unknown sandbox 'nope'; known: "),
    (["tools=offline", "--only", "nope"], "spu selfcheck: --only nope: no such check of "
                                          "tools (its checks: loads_and_checks_its_options, "),
    (["sandbox=local", "sandbox.options.pids=1"], "spu selfcheck: sandbox.options.pids: not "
                                                  "an option of sandbox=local (its options: "
                                                  "agent_uid, pids_limit)"),
    (["plugin=x"], "spu selfcheck: 'plugin=x': expected sandbox=NAME, harness=NAME or "
                   "tools=NAME"),
])
def test_an_unusable_plugin_or_setting_is_one_line_and_exit_2(args, said) -> None:
    proc = selfcheck(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(said), proc.stderr


@pytest.mark.slow
def test_a_backend_without_isolation_gets_the_checks_that_apply() -> None:
    """``subprocess`` claims no isolation: the header says so, the isolation and red-team
    checks are left out, and it is checked for saying so in its record."""
    proc = selfcheck("sandbox=subprocess", "--only", "layout_files_and_logs", "--only",
                     "an_unisolated_backend_says_so", "--only",
                     "task_is_read_only_and_host_processes_invisible")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("2 checks (it claims no isolation: no isolation or red-team "
                             "checks)")
    assert lines[1:] == ["PASSED           layout_files_and_logs",
                         "PASSED           an_unisolated_backend_says_so", "2 passed, 0 failed"]


@pytest.mark.slow
def test_a_backend_that_claims_isolation_it_lacks_fails() -> None:
    """A plain subprocess that says it isolates fails the isolation checks, exit 1."""
    proc = selfcheck(f"sandbox={BROKEN}:LeakySandbox", "--only",
                     "task_is_read_only_and_host_processes_invisible")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("FAILED           task_is_read_only_and_host_processes_"
                               "invisible: "), lines
    assert lines[-1] == "0 passed, 1 failed"
