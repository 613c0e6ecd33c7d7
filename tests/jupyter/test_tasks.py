"""``eager``: run a coroutine's synchronous part now, continue the rest as a task."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from chainlab.jupyter._loop import eager, pending_tasks

pytestmark = pytest.mark.anyio


async def test_a_coroutine_that_never_suspends_finishes_at_once() -> None:
    seen = []

    async def work() -> int:
        seen.append("ran")
        return 7

    done = eager(work())
    assert done.done and done.value == 7 and seen == ["ran"]
    assert await done.result() == 7


async def test_an_error_before_the_first_suspension_is_raised_in_the_caller() -> None:
    async def bad() -> None:
        raise ValueError("no such step")

    with pytest.raises(ValueError, match="no such step"):
        eager(bad())


async def test_the_rest_continues_as_a_task_and_errors_go_to_on_error() -> None:
    log: list[str] = []
    errors: list[BaseException] = []
    gate = asyncio.get_running_loop().create_future()

    async def work() -> str:
        log.append("sync part")
        await gate
        log.append("after the flush")
        raise RuntimeError("late failure")

    started = eager(work(), on_error=errors.append)
    assert log == ["sync part"] and not started.done and started.task in pending_tasks()
    gate.set_result(None)
    with pytest.raises(RuntimeError, match="late failure"):
        await started.result()
    await asyncio.sleep(0)
    assert log == ["sync part", "after the flush"]
    assert [str(e) for e in errors] == ["late failure"] and not pending_tasks()


async def test_a_continued_task_can_be_cancelled() -> None:
    cleaned = []

    async def work() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append(True)

    started = eager(work())
    assert started.task is not None
    await asyncio.sleep(0)  # the task has taken over
    started.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await started.task
    assert cleaned == [True]
    cleaned.clear()
    early = eager(work())
    assert early.task is not None
    early.task.cancel()  # before the task ever ran: the coroutine is closed
    with pytest.raises(asyncio.CancelledError):
        await early.task
    assert cleaned == [True]


async def test_bare_yields_are_resumed() -> None:
    async def work() -> str:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return "ok"

    started = eager(work())
    assert await started.result() == "ok"


def test_without_a_loop_a_suspending_coroutine_says_what_to_do() -> None:
    async def work() -> None:
        await asyncio.sleep(0)  # suspends without asking for the loop

    with pytest.raises(RuntimeError, match="needs a running asyncio event loop"):
        eager(work())


# ---------------------------------------------------------------- the runtime never suspends
# The magics rely on it: with a store read inline (the notebook's, or memory), start, resume
# and fork do their work without a suspension, so `run = %chain run NAME` hands back a Run
# on the kernel's loop without an await (issue 24: _launch must not add one).
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_start_resume_and_fork_finish_eagerly_on_an_inline_store(
        kind: str, tmp_path: Any) -> None:
    from chainlab import Chain, Toolbox
    from chainlab.runtime import Runtime
    from chainlab.workspace import Workspace

    tb = Toolbox("eager")

    @tb.tool(requires_confirmation=True)
    def gate(x: int) -> int:
        return x

    chain = Chain.from_dict({"name": "e", "steps": [
        {"id": "g", "tool": "gate", "args": {"x": "{{ context.x }}"}}]})
    ws = Workspace(inline_reads=True)
    store = ws.store(":memory:" if kind == "memory" else str(tmp_path / "e.db"))
    rt = Runtime(tb, store)
    started = eager(rt.start(chain, {"x": 1}))
    assert started.done
    run = started.value
    await run.wait()
    await rt.aclose()
    resumed = eager(Runtime(tb, store).resume(run.run_id))
    assert resumed.done
    await resumed.value.reject("g", "no")
    await resumed.value.wait()
    forked = eager(resumed.value.runtime.fork(run.run_id, context={"x": 2}))
    assert forked.done
    assert (await forked.value.wait()).waiting == {"g": "waiting_confirmation"}
    await resumed.value.runtime.aclose()
    ws.close()
