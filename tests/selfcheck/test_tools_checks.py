"""The self-check kit's tools provider checks, on every installed provider.

The same functions ``spu selfcheck tools=NAME`` runs (:mod:`spu.selfcheck.tools`); the
web provider is checked against a local search site on the loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spu.selfcheck import CheckSkipped, checks
from spu.selfcheck.tools import ToolsTarget
from spu.tools.providers import get_provider, provider_names
from tests.tools.pages import LocalSite

CHECKS = checks("tools")


@pytest.fixture
def site() -> Iterator[LocalSite]:
    served = LocalSite()
    yield served
    served.kill()


def _settings(name: str, site: LocalSite) -> dict[str, Any]:
    if name != "web":
        return {}
    return {"allow_local_fetch": True, "search_timeout_s": 3.0, "fetch_timeout_s": 3.0,
            "options": {"search_url": site.url}}


@pytest.mark.parametrize("entry", CHECKS, ids=lambda entry: entry.name)
@pytest.mark.parametrize("name", provider_names())
def test_provider_passes_the_kits_check(name, entry, site, tmp_path) -> None:
    """The provider passes the kit's check (its docstring says what it checks)."""
    if name == "web" and entry.name == "a_found_address_can_be_fetched":
        pytest.skip("the local search site's results point at site.test, which does not "
                    "resolve offline")
    reason = get_provider(name).selfcheck_expected_failures.get(entry.name)
    if reason:
        pytest.xfail(reason)
    try:
        entry(ToolsTarget(name, _settings(name, site), tmp_path))
    except CheckSkipped as exc:
        pytest.skip(str(exc))
