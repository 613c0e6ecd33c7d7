"""chainlab.testing is product code: its fakes behave exactly as documented."""

from __future__ import annotations

import itertools

import anyio
import pytest

from chainlab import Chain, Toolbox, TransientError
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing import EventRecorder, FlakyTool, ManualClock, RecordingTool, SlowTool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_manual_clock_moves_only_when_told_or_slept_on() -> None:
    clock = ManualClock(start=100.0)
    assert clock.now() == 100.0
    clock.advance(2.5)
    await clock.sleep(4)
    assert clock.now() == 106.5 and clock.slept == [4]


async def test_flaky_tool_fails_n_times_then_answers() -> None:
    flaky = FlakyTool(failures=2, result={"ok": True})
    for _ in range(2):
        with pytest.raises(TransientError):
            await flaky(x=1)
    assert await flaky(x=1) == {"ok": True} and flaky.calls == 3
    echo = FlakyTool(failures=0)
    assert await echo(a=1) == {"a": 1}


async def test_flaky_tool_in_a_run_is_retried_through_the_clock() -> None:
    tb = Toolbox()
    flaky = FlakyTool(failures=2)
    flaky.register(tb, "fetch", retry={"max_attempts": 3, "delay_s": 5})
    clock = ManualClock()
    runtime = Runtime(tb, MemoryStore(), clock=clock)
    run = await runtime.start(Chain.from_dict({"name": "c", "steps": [
        {"id": "f", "tool": "fetch", "args": {"q": "x"}}]}))
    recorder = EventRecorder()
    run.subscribe(recorder)
    result = await run.wait()
    await runtime.aclose()
    assert result.outputs["f"] == {"q": "x"} and flaky.calls == 3
    assert clock.slept == [5, 5]
    assert recorder.kinds("f").count("step_retry_scheduled") == 2
    assert recorder.started() == ["f", "f", "f"]
    assert [e.seq for e in recorder.of("step_started")] == sorted(
        e.seq for e in recorder.of("step_started"))


async def test_slow_tool_waits_for_its_gate() -> None:
    gate = anyio.Event()
    slow = SlowTool(gate=gate, result=7)
    async with anyio.create_task_group() as tg:
        results: list[int] = []

        async def call() -> None:
            results.append(await slow())

        tg.start_soon(call)
        await anyio.sleep(0.01)
        assert results == [] and slow.calls == 1
        gate.set()
    assert results == [7]


async def test_recording_tool_records_overlap_on_a_shared_logical_timeline() -> None:
    timeline = itertools.count()
    a = RecordingTool(0.01, timeline=timeline, name="a")
    b = RecordingTool(0.01, timeline=timeline, name="b", result=lambda **kw: kw["n"] * 2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: a(n=1))
        tg.start_soon(lambda: b(n=2))
    assert RecordingTool.overlapping(a.calls[0], b.calls[0])
    assert await b(n=5) == 10
    later = b.calls[-1]
    assert not RecordingTool.overlapping(a.calls[0], later)
    assert a.calls[0].args == {"n": 1} and later.start > a.calls[0].end
