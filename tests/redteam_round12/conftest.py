"""Each test starts with every stand-in provider's record of what it was sent empty."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redteam_round12._parsers import Keeps


def _stand_ins(cls: type) -> Iterator[type]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _stand_ins(sub)


@pytest.fixture(autouse=True)
def nothing_seen_yet() -> None:
    """``Keeps.seen`` (and each subclass's own) emptied: a test of another file run before
    on the same worker (``--dist loadfile``) left what its provider was sent there, which a
    later test's "nothing reached the provider" read as its own (CI, stop 37)."""
    for cls in _stand_ins(Keeps):
        if "seen" in vars(cls):  # its own list (a subclass without one shares Keeps')
            vars(cls)["seen"].clear()
