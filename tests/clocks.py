"""Sleeps a test can see: whether code waits on a clock instead of an event."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

CLOCK_WAIT_S = 0.01
"""A sleep this long or longer is waiting for a clock (uvicorn's own are 0.1 s)."""


def record_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every ``time.sleep`` and ``asyncio.sleep`` of the process from now on, in seconds."""
    slept: list[float] = []
    real_sleep, real_async_sleep = time.sleep, asyncio.sleep

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    async def async_sleep(seconds: float, *args: Any, **kwargs: Any) -> Any:
        slept.append(seconds)
        return await real_async_sleep(seconds, *args, **kwargs)

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(asyncio, "sleep", async_sleep)
    return slept


def clock_waits(slept: list[float]) -> list[float]:
    """The sleeps that wait for a clock rather than give the loop a turn."""
    return [s for s in slept if s >= CLOCK_WAIT_S]
