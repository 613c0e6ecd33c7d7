"""Time as a dependency: the runtime reads the clock and sleeps (back-off) through it, so tests
can inject :class:`chainlab.testing.ManualClock` and be exact and instant."""

from __future__ import annotations

import time
from typing import Protocol

import anyio

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""

    async def sleep(self, seconds: float) -> None:
        """Sleep (cancellable)."""


class SystemClock:
    """Wall-clock time and ``anyio.sleep``."""

    now = staticmethod(time.time)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
