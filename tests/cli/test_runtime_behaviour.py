"""Runtime behaviour the command line depends on (it continues runs in new processes):
regression tests for bugs found while building it."""

from __future__ import annotations

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.runtime import RunStatus, Runtime
from chainlab.store import MemoryStore

pytestmark = pytest.mark.anyio


def _toolbox(undo_gate: anyio.Event | None = None) -> Toolbox:
    tb = Toolbox("bugs")

    @tb.tool(side_effects=True, idempotent=True, compensate=("undo", {"x": "{{ input.x }}"}))
    def do(x: int) -> int:
        return x

    @tb.tool(side_effects=True, idempotent=True)
    async def undo(x: int) -> None:
        if undo_gate is not None:
            await undo_gate.wait()

    @tb.tool(side_effects=True, requires_confirmation=True)
    def ask(x: int) -> int:
        return x

    return tb


CHAIN = Chain.from_dict({"name": "c", "steps": [
    {"id": "a", "tool": "do", "args": {"x": 1}},
    {"id": "b", "tool": "ask", "args": {"x": 2}, "depends_on": ["a"]}]})


async def _suspended(runtime: Runtime) -> str:
    run = await runtime.start(CHAIN, run_id="r1")
    assert (await run.wait()).status == RunStatus.SUSPENDED
    return run.run_id


async def test_wait_after_rollback_of_a_suspended_run_waits_for_the_rollback() -> None:
    runtime = Runtime(_toolbox(), MemoryStore())
    try:
        run = runtime.get_run(await _suspended(runtime))
        await run.rollback()
        result = await run.wait()
        assert result.status == RunStatus.ROLLED_BACK
    finally:
        await runtime.aclose()


async def test_rollback_right_after_resume_drives_the_run_once() -> None:
    store = MemoryStore()
    gate = anyio.Event()
    tb = _toolbox(undo_gate=gate)
    first = Runtime(tb, store)
    run_id = await _suspended(first)
    await first.aclose()
    second = Runtime(tb, store)
    try:
        run = await second.resume(run_id)
        await run.rollback()
        # hold the first compensation until a second one starts (or 2 s went by)
        with anyio.move_on_after(2):
            while [e.kind for e in run.event_list()].count("compensation_started") < 2:
                await anyio.sleep(0.01)
        gate.set()
        with anyio.fail_after(10):
            result = await run.wait()
        assert result.status == RunStatus.ROLLED_BACK
        assert [e.kind for e in run.event_list()].count("compensation_started") == 1
    finally:
        await second.aclose()


async def test_resolving_an_in_doubt_step_releases_its_dependants() -> None:
    tb = Toolbox("resolve")

    @tb.tool(side_effects=True)  # not idempotent: a connection reset leaves it in doubt
    def pay(amount: int) -> int:
        raise ConnectionResetError("connection reset")

    @tb.tool
    def after(x: int) -> int:
        return x + 1

    chain = Chain.from_dict({"name": "r", "steps": [
        {"id": "pay", "tool": "pay", "args": {"amount": 1}},
        {"id": "next", "tool": "after", "args": {"x": "{{ steps.pay.output }}"}}]})
    runtime = Runtime(tb, MemoryStore())
    try:
        run = await runtime.start(chain)
        assert (await run.wait()).waiting == {"pay": "in_doubt"}
        await run.resolve("pay", output=41)
        with anyio.fail_after(5):
            result = await run.wait()
        assert result.status == RunStatus.SUCCEEDED and result.outputs["next"] == 42
    finally:
        await runtime.aclose()
