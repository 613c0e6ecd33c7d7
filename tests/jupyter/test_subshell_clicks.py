"""Issue 18, item 1: clicks handled on another thread (a JupyterLab comm subshell).

JupyterLab >= 4.4 sends widget comm messages to a kernel subshell, which ipykernel 7 serves
from its own thread and asyncio loop. A click handled there must still drive the run: the
widget hands the action over to the run's loop, which wakes up by itself. Before the fix,
Continue set the run's anyio event from the foreign thread, the run's loop slept on, and
the approved step started only when something else (the next cell) woke it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import anyio
import pytest

from chainlab.jupyter._loop import call_on
from chainlab.runtime import RunStatus

from .test_widgets import Env, W, until
from .test_widgets import env as env  # the fixture

pytestmark = pytest.mark.anyio


def click_in_a_subshell(action: Callable[[], None]) -> None:
    """Run ``action`` like ipykernel runs a subshell's comm handler: on its own thread,
    inside that thread's own running asyncio loop. Fire and forget: nothing on the run's
    loop is woken by this thread ending."""
    async def handler() -> None:
        action()

    threading.Thread(target=lambda: asyncio.run(handler()), daemon=True).start()


async def test_continue_clicked_in_a_subshell_thread_starts_the_approved_step(env: Env) -> None:
    steps = [W("a", tool="gated"), W("b", tool="gated"),
             {"id": "c", "tool": "pay", "args": {"amount": 5}, "depends_on": ["a", "b"]}]
    run, w = await env.start(steps)
    await until(lambda: run.steps["a"].status == "running" == run.steps["b"].status)
    w.buttons["pause"].click()
    env.gate.set()
    await until(lambda: run.steps["c"].status == "waiting_confirmation")
    w.refresh()
    w.inbox.card("c").approve_button.click()
    assert run.status == RunStatus.PAUSED and run.ready_steps() == ["c"]
    await asyncio.sleep(0.3)  # let the redraw throttle's timer (10 Hz) pass: an idle kernel

    click_in_a_subshell(w.buttons["continue"].click)

    with anyio.fail_after(10):  # a bound, not a timing claim: stuck means forever
        result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert env.calls == [("pay", 5)]
    assert w.last_error is None


async def test_call_on_runs_inline_on_its_own_loop_and_hands_over_from_another() -> None:
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    assert call_on(loop, seen.append, "inline") is False  # same loop: the caller calls it
    assert call_on(None, seen.append, "no loop") is False
    done = threading.Event()

    def other_thread() -> None:
        handed = call_on(loop, lambda: (seen.append(threading.current_thread().name),
                                        done.set()))
        seen.append(f"handed over: {handed}")

    t = threading.Thread(target=other_thread, name="subshell")
    t.start()
    t.join()
    with anyio.fail_after(5):
        while not done.is_set():
            await asyncio.sleep(0.01)
    assert seen == ["handed over: True", threading.current_thread().name]


# ---------------------------------------------------------------------- stale labels (issue 18)
async def test_breakpoint_labels_go_once_step_passed_it_and_when_the_run_ended(env: Env) -> None:
    from chainlab import RunOptions

    run, w = await env.start([W("a"), W("b", ["a"]), W("c", ["b"])],
                             options=RunOptions(breakpoints=["b"]))
    await until(lambda: run.paused and run.steps["a"].status == "succeeded")
    w.refresh()
    assert "at breakpoint <code>b</code>" in w.header.value
    assert "breakpoints: <code>b</code>" in w.queue.value
    w.buttons["step"].click()
    await until(lambda: run.steps["b"].status == "succeeded")
    w.refresh()
    assert run.paused and run.state.paused_at == "b"  # the runtime still says where it paused
    assert "at breakpoint" not in w.header.value  # ... but the label would be stale
    assert "breakpoints:" not in w.queue.value
    w.buttons["continue"].click()
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    w.refresh()
    assert "breakpoints" not in w.queue.value and "at breakpoint" not in w.header.value


async def test_a_cancelled_step_reads_cancelled_once(env: Env) -> None:
    from chainlab.render.display import run_badges

    run, w = await env.start([W("slow", tool="gated"), W("after", ["slow"])])
    await until(lambda: run.steps["slow"].status == "running")
    w.buttons["cancel"].click()
    await run.wait()
    assert run.steps["slow"].status == "cancelled"
    assert "cancelled" not in run_badges(run).get("slow", "")
