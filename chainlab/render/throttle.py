"""Coalesce bursts of calls: a callback runs at most ``rate`` times per second, always with
the latest value (a run emits events much faster than a browser needs redraws)."""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["ManualTimers", "Throttle"]

T = TypeVar("T")
log = logging.getLogger("chainlab.render")
CallLater = Callable[[float, Callable[[], None]], Any]


class Throttle(Generic[T]):
    """``throttle(value)`` calls ``callback(value)`` at once if the last call was at least
    ``1/rate`` s ago; otherwise it remembers ``value`` (replacing any older one) and calls
    back with the latest value when the interval is over. So a burst of 1,000 events gives
    one immediate redraw and one trailing redraw with the final state, and no update is lost.

    Timers come from the running asyncio loop (``loop.call_later``: the Jupyter kernel's loop
    in a notebook); call the throttle from that loop's thread. Without a running loop there
    is nothing to defer to, so every call goes straight through. Tests inject ``clock`` and
    ``call_later`` (see :class:`ManualTimers`). An exception from ``callback`` is logged
    (``chainlab.render``), not raised, so one failed redraw does not stop later ones.
    """

    def __init__(self, callback: Callable[[T], Any], rate: float = 10.0, *,
                 clock: Callable[[], float] = time.monotonic,
                 call_later: CallLater | None = None):
        if not rate > 0:
            raise ValueError(f"rate={rate!r}: expected calls per second > 0")
        self.callback = callback
        self.interval = 1.0 / rate
        self._clock = clock
        self._call_later = call_later
        self._last: float | None = None
        self._latest: T | None = None
        self._pending = False
        self._timer: Any = None
        self.calls = 0  # how many times the callback ran

    @property
    def pending(self) -> bool:
        """True while a value waits for its (trailing) call."""
        return self._pending

    def __call__(self, value: T) -> None:
        self._latest = value
        self._pending = True
        if self._timer is not None:
            return  # the scheduled call will take the latest value
        wait = 0.0 if self._last is None else self._last + self.interval - self._clock()
        if wait <= 0:
            self._fire()
            return
        timer = self._schedule(wait)
        if timer is None:
            self._fire()  # no loop to defer to
        else:
            self._timer = timer

    def _schedule(self, delay: float) -> Any:
        if self._call_later is not None:
            return self._call_later(delay, self._on_timer)
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._pending:
            self._fire()

    def _fire(self) -> None:
        value = self._latest
        self._latest = None
        self._pending = False
        self._last = self._clock()
        self.calls += 1
        try:
            self.callback(value)  # type: ignore[arg-type]
        except Exception:
            log.exception("throttled callback %r failed", self.callback)

    def flush(self) -> None:
        """Run the pending call now (e.g. when the run ends), if there is one."""
        self._cancel_timer()
        if self._pending:
            self._fire()

    def cancel(self) -> None:
        """Drop the pending value and its timer."""
        self._cancel_timer()
        self._pending = False
        self._latest = None

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            cancel = getattr(self._timer, "cancel", None)
            if cancel is not None:
                cancel()
            self._timer = None


class _Timer:
    __slots__ = ("cancelled", "due", "fn", "seq")

    def __init__(self, due: float, seq: int, fn: Callable[[], None]):
        self.due, self.seq, self.fn, self.cancelled = due, seq, fn, False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: _Timer) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


class ManualTimers:
    """A fake clock plus ``call_later`` for testing throttled code: time moves only in
    :meth:`advance`, which runs the timers that fall due, in order.

        timers = ManualTimers()
        throttle = Throttle(redraw, 10, clock=timers.now, call_later=timers.call_later)
    """

    def __init__(self, start: float = 0.0):
        self.time = start
        self._heap: list[_Timer] = []
        self._seq = 0

    def now(self) -> float:
        return self.time

    def call_later(self, delay: float, fn: Callable[[], None]) -> _Timer:
        self._seq += 1
        timer = _Timer(self.time + max(delay, 0.0), self._seq, fn)
        heapq.heappush(self._heap, timer)
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward, running every timer due by then at its due time."""
        end = self.time + seconds
        while self._heap and self._heap[0].due <= end:
            timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self.time = max(self.time, timer.due)
            timer.fn()
        self.time = end

    @property
    def scheduled(self) -> int:
        """Timers waiting (not cancelled)."""
        return sum(not t.cancelled for t in self._heap)
