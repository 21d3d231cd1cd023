"""The self-check kit's harness checks, on every installed harness.

The same functions ``spu selfcheck harness=NAME`` runs (:mod:`spu.selfcheck.harness`):
each harness is made, asked for its command, and run end to end on the kit's task in
the strongest sandbox of the machine (the CLI harnesses against the scripted model).
"""

from __future__ import annotations

import pytest

from spu.harness.base import get_harness, harness_names
from spu.selfcheck import CheckSkipped, Status, checks, run_check
from spu.selfcheck.harness import HarnessTarget

CHECKS = checks("harness")
CLI_HARNESSES = ("claude_code", "codex")


def _param(name: str) -> object:
    marks = [pytest.mark.cli, pytest.mark.slow] if name in CLI_HARNESSES else \
        [pytest.mark.slow]
    return pytest.param(name, marks=marks)


@pytest.mark.parametrize("entry", CHECKS, ids=lambda entry: entry.name)
@pytest.mark.parametrize("name", [_param(name) for name in harness_names()])
def test_harness_passes_the_kits_check(name, entry, tmp_path) -> None:
    """The harness passes the kit's check (its docstring says what it checks); a check it
    declares an expected failure fails, for the reason it gives."""
    target = HarnessTarget(name, [], tmp_path / entry.name, task_home=tmp_path)
    reason = get_harness(name).selfcheck_expected_failures.get(entry.name)
    if reason:
        result = run_check(entry, target, {entry.name: reason})
        assert result.status is Status.expected_failure, result.line
        pytest.xfail(result.detail)
    try:
        entry(target)
    except CheckSkipped as exc:
        pytest.skip(str(exc))
