"""Throttle: at most N callbacks per second, always the latest value, none lost; driven by a
fake clock, and once inside a real asyncio loop."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from chainlab.render import Throttle
from chainlab.render.throttle import ManualTimers


def make(rate: float = 10.0) -> tuple[Throttle[int], ManualTimers, list[tuple[float, int]]]:
    timers = ManualTimers(100.0)
    got: list[tuple[float, int]] = []
    throttle: Throttle[int] = Throttle(lambda v: got.append((timers.now(), v)), rate,
                                       clock=timers.now, call_later=timers.call_later)
    return throttle, timers, got


def test_first_call_is_immediate_and_a_burst_coalesces_to_the_latest() -> None:
    throttle, timers, got = make()
    for v in range(1000):
        throttle(v)
    assert got == [(100.0, 0)] and throttle.pending and timers.scheduled == 1
    timers.advance(0.05)
    assert got == [(100.0, 0)]
    timers.advance(0.05)
    assert got == [(100.0, 0), (100.1, 999)] and not throttle.pending
    assert throttle.calls == 2


def test_never_more_than_rate_per_second() -> None:
    throttle, timers, got = make(rate=10)
    for i in range(500):  # an event every 7 ms for 3.5 s
        throttle(i)
        timers.advance(0.007)
    timers.advance(1)
    times = [t for t, _ in got]
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(times))
    assert 30 <= len(got) <= 37 and got[-1][1] == 499


def test_calls_spaced_out_go_straight_through() -> None:
    throttle, timers, got = make()
    throttle(1)
    timers.advance(0.5)
    throttle(2)
    assert [v for _, v in got] == [1, 2] and timers.scheduled == 0


def test_flush_and_cancel() -> None:
    throttle, timers, got = make()
    throttle(1)
    throttle(2)
    throttle.flush()
    assert [v for _, v in got] == [1, 2] and timers.scheduled == 0
    throttle(3)
    throttle.cancel()
    timers.advance(1)
    assert [v for _, v in got] == [1, 2] and not throttle.pending
    throttle.flush()  # nothing pending: no call
    assert throttle.calls == 2


def test_a_failing_callback_is_logged_and_later_calls_still_run(
        caplog: pytest.LogCaptureFixture) -> None:
    timers = ManualTimers()
    seen: list[int] = []

    def redraw(v: int) -> None:
        seen.append(v)
        if v == 1:
            raise RuntimeError("browser went away")

    throttle = Throttle(redraw, 10, clock=timers.now, call_later=timers.call_later)
    with caplog.at_level(logging.ERROR, logger="chainlab.render"):
        throttle(1)
        throttle(2)
        timers.advance(1)
    assert seen == [1, 2] and "browser went away" in caplog.text


def test_without_a_loop_every_call_goes_through() -> None:
    got: list[int] = []
    throttle = Throttle(got.append, 10)
    for v in range(3):
        throttle(v)
    assert got == [0, 1, 2]


def test_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rate=0"):
        Throttle(print, 0)


@pytest.mark.anyio
async def test_in_a_running_asyncio_loop() -> None:
    got: list[int] = []
    throttle = Throttle(got.append, rate=1000)  # 1 ms interval on the loop's timers
    for v in range(5):
        throttle(v)
    assert got == [0]
    await asyncio.sleep(0.05)  # the 1 ms timer was scheduled first, so it has fired
    assert got == [0, 4]
