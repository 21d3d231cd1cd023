"""One conformance suite for every sandbox backend of the machine (STYLE: Inspect AI self_check).

The checks are the self-check kit's (:mod:`spu.selfcheck.sandbox`), the very functions
``spu selfcheck sandbox=NAME`` runs against an installed backend, so the kit and this
suite cannot drift: each test runs one check on one backend. Backends that cannot run
here are skipped with the reason; ``subprocess`` promises no isolation, so the isolation
checks run on the isolating backends and the unisolated one is checked for saying so.
"""

from __future__ import annotations

import pytest

from spu.sandbox.subprocess import WARNING as NO_SANDBOX
from spu.selfcheck import checks
from spu.selfcheck.targets import SandboxTarget
from tests.sandbox.conftest import BACKENDS, kit_check, require_backend

pytestmark = pytest.mark.slow

CONFORMANCE = [entry for entry in checks("sandbox") if entry.suite == "conformance"]
"""The kit's conformance checks of a backend."""


@pytest.mark.parametrize("entry", CONFORMANCE, ids=lambda entry: entry.name)
@pytest.mark.parametrize("backend", BACKENDS)
def test_conformance(backend, entry, request, tmp_path) -> None:
    """The backend passes the kit's check (its docstring says what it checks)."""
    kit_check(entry, backend, request, tmp_path)


def test_subprocess_names_what_it_lacks(request, tmp_path) -> None:
    """The fallback's record carries its own warning, word for word (the kit checks that
    a warning is there, for any backend that claims no isolation)."""
    target = SandboxTarget("subprocess", require_backend(request, "subprocess"), tmp_path)
    try:
        info = target.open().sandbox.info()
    finally:
        target.close()
    assert info.isolation == ["network:host"] and NO_SANDBOX in info.warnings
