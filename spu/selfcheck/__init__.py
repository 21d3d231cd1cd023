"""The self-check kit: the checks every sandbox backend, harness and tools provider must pass.

``spu selfcheck sandbox=NAME`` (or ``harness=NAME``, ``tools=NAME``) runs them against any
installed plugin and prints one line per check and a closing ``N passed, M failed``;
the repository's own suites (``tests/sandbox/test_conformance.py``, the red-team checks
of ``tests/sandbox/test_redteam.py``, ``tests/test_selfcheck.py``) run the same checks
from this package, so the kit and the tests cannot drift. The checks need no pytest.

A check is a plain function of a target (:mod:`spu.selfcheck.targets`), registered
with :func:`check`: it returns when it holds, raises :class:`CheckFailed` (through
:func:`expect`) when it does not, and :class:`CheckSkipped` when it cannot run here
(a missing program, no root), saying why. A plugin declares the checks it is known to
fail, each with its reason, in ``selfcheck_expected_failures`` (a class attribute of
:class:`~spu.sandbox.base.Sandbox`, :class:`~spu.harness.base.Harness` and
:class:`~spu.tools.providers.Provider`): such a failure is reported as expected, and a
check so declared that passes is a failure (the declaration is out of date).

The checks: :mod:`spu.selfcheck.sandbox` (conformance of every backend),
:mod:`spu.selfcheck.redteam` (attacks, for the backends that claim isolation),
:mod:`spu.selfcheck.harness` and :mod:`spu.selfcheck.tools`.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

AGENTS = Path(__file__).parent / "agents"
"""The small agents the checks run inside sandboxes (standard library only)."""

KINDS = ("sandbox", "harness", "tools")
"""The plugin kinds with checks: ``spu selfcheck <kind>=NAME``."""

_MODULES = {"sandbox": ("spu.selfcheck.sandbox", "spu.selfcheck.redteam"),
            "harness": ("spu.selfcheck.harness",), "tools": ("spu.selfcheck.tools",)}


class CheckFailed(Exception):
    """A check does not hold; the message says what was seen."""


class CheckSkipped(Exception):
    """A check cannot run here; the message says what is missing."""


def expect(condition: object, message: str) -> None:
    """Raise :class:`CheckFailed` with ``message`` unless ``condition`` holds.

    Examples:
        >>> expect(1 + 1 == 2, "arithmetic")
        >>> expect([], "the list is empty")
        Traceback (most recent call last):
        ...
        spu.selfcheck.CheckFailed: the list is empty
    """
    if not condition:
        raise CheckFailed(message)


@dataclass(frozen=True)
class Check:
    """One registered check."""

    name: str
    """Its name (the function's), as reported and as declared an expected failure."""
    kind: str
    """``sandbox``, ``harness`` or ``tools``."""
    suite: str
    """``conformance`` or ``red-team``."""
    function: Callable[[Any], object]
    """The check: a function of the target; its return value is not used by the kit."""
    isolating: bool = False
    """Runs only on a backend that claims isolation (``Sandbox.isolates``)."""
    unisolated: bool = False
    """Runs only on a backend that claims none."""
    root: bool = False
    """Needs root (skipped, saying so, otherwise)."""

    @property
    def doc(self) -> str:
        """The first line of its docstring: what it checks."""
        text = (self.function.__doc__ or self.name).strip()
        return text.splitlines()[0]

    def __call__(self, target: Any) -> object:
        """Run the check on ``target`` (CheckFailed, CheckSkipped or its value)."""
        return self.function(target)


CHECKS: dict[str, dict[str, Check]] = {kind: {} for kind in KINDS}
"""Kind -> name -> check, in the order they were registered."""


def check(kind: str, suite: str = "conformance", *, isolating: bool = False,
          unisolated: bool = False, root: bool = False
          ) -> Callable[[Callable[[Any], object]], Callable[[Any], object]]:
    """Register a function of a target as a check of ``kind``; returns it unchanged."""
    def register(function: Callable[[Any], object]) -> Callable[[Any], object]:
        CHECKS[kind][function.__name__] = Check(function.__name__, kind, suite, function,
                                                isolating, unisolated, root)
        return function
    return register


def checks(kind: str) -> list[Check]:
    """Every check of ``kind``, in order (their modules imported on first use)."""
    for module in _MODULES[kind]:
        importlib.import_module(module)
    return list(CHECKS[kind].values())


class Status(StrEnum):
    """How a check ended."""

    passed = "passed"
    failed = "failed"
    expected_failure = "expected failure"
    skipped = "skipped"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one plugin."""

    name: str
    status: Status
    detail: str = ""
    """Why it failed, was skipped or is expected to fail (one line)."""

    @property
    def line(self) -> str:
        """``PASSED name``, ``FAILED name: why`` and so on: one line."""
        word = self.status.value.upper()
        return f"{word:<16} {self.name}" + (f": {self.detail}" if self.detail else "")


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def run_check(entry: Check, target: Any, expected: Mapping[str, str] | None = None
              ) -> CheckResult:
    """Run one check on ``target`` and say how it ended.

    A failure declared in ``expected`` (check name -> reason) is reported as expected;
    an unexpected exception is a failure naming where it was raised.
    """
    reason = (expected or {}).get(entry.name)
    try:
        entry(target)
    except CheckSkipped as exc:
        return CheckResult(entry.name, Status.skipped, _one_line(str(exc)))
    except Exception as exc:  # noqa: BLE001 - a check that raises failed, whatever it raised
        said = str(exc) if isinstance(exc, CheckFailed) else \
            f"{type(exc).__name__}: {exc} ({_where(exc)})"
        if reason is not None:
            return CheckResult(entry.name, Status.expected_failure,
                               _one_line(f"{reason} (seen: {said})"))
        return CheckResult(entry.name, Status.failed, _one_line(said))
    if reason is not None:
        return CheckResult(entry.name, Status.failed,
                           f"declared an expected failure ({reason}) but it passed: remove it "
                           f"from selfcheck_expected_failures")
    return CheckResult(entry.name, Status.passed)


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    return f"{Path(last.filename).name}:{last.lineno}" if last else "?"


def summary(results: Iterable[CheckResult]) -> str:
    """The closing line: ``N passed, M failed`` and what else happened.

    Examples:
        >>> summary([CheckResult("a", Status.passed), CheckResult("b", Status.skipped)])
        '1 passed, 0 failed, 1 skipped'
    """
    counts = {status: 0 for status in Status}
    for result in results:
        counts[result.status] += 1
    line = f"{counts[Status.passed]} passed, {counts[Status.failed]} failed"
    for status in (Status.expected_failure, Status.skipped):
        if counts[status]:
            line += f", {counts[status]} {status.value}" + ("s" if status is
                                                           Status.expected_failure and
                                                           counts[status] > 1 else "")
    return line
