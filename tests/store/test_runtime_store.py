"""The runtime on its store (issue item 2): the default store, ``runtime.runs()`` and
``runtime.get_run(run_id)`` as read-only views of stored runs, and the event stream's
history read from the store."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from chainlab import Chain, RunNotActiveError, Toolbox
from chainlab.events import Event
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore

from .conftest import STORE_KINDS, make_store

pytestmark = pytest.mark.anyio


def gated_toolbox(gates: dict[str, anyio.Event]) -> Toolbox:
    tb = Toolbox("gated")

    @tb.tool
    async def wait_for(name: str) -> str:
        await gates[name].wait()
        return name

    return tb


CHAIN = Chain.from_dict({"name": "two", "steps": [
    {"id": "a", "tool": "wait_for", "args": {"name": "a"}},
    {"id": "b", "tool": "wait_for", "args": {"name": "b"}, "depends_on": ["a"]}]})


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_runs_and_get_run(kind: str, tmp_path: Path) -> None:
    store = make_store(kind, tmp_path)
    gates = {"a": anyio.Event(), "b": anyio.Event()}
    runtime = Runtime(gated_toolbox(gates), store)
    first = await runtime.start(CHAIN, run_id="first")
    gates["a"].set()
    gates["b"].set()
    await first.wait()
    second = await runtime.start(CHAIN, run_id="second")
    assert runtime.get_run("second") is second  # driven here: the live handle
    await runtime.aclose()

    other = Runtime(gated_toolbox(gates), store)  # e.g. another process on the same file
    assert [r.run_id for r in other.runs()] == ["second", "first"]
    assert [r.status for r in other.runs(limit=1)] == ["running"]
    view = other.get_run("first")
    assert not view.active and view.status == "succeeded"
    assert view.outputs == {"a": "a", "b": "b"}
    with pytest.raises(RunNotActiveError, match=r"runtime.resume\('first'\)"):
        await view.approve("a")
    store.close()


async def test_event_stream_has_every_event_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    gates = {"a": anyio.Event(), "b": anyio.Event()}
    runtime = Runtime(gated_toolbox(gates), store)
    run = await runtime.start(CHAIN, run_id="r")
    while run.steps["a"].status != "running":
        await anyio.sleep(0)
    await store.flush("r", 1)
    blocker = sqlite3.connect(path, isolation_level=None, timeout=30)
    blocker.execute("BEGIN IMMEDIATE")  # the writer cannot commit for now
    gates["a"].set()
    while run.steps["b"].status != "running":  # a's end and b's start are only queued
        await anyio.sleep(0)
    seen: list[int] = []

    async def consume() -> None:
        async for ev in run.events():
            seen.append(ev.seq)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.sleep(0.1)
            blocker.execute("ROLLBACK")
            gates["b"].set()
            with anyio.fail_after(10):
                await run.wait()
    finally:
        blocker.close()
        await runtime.aclose()
        await anyio.to_thread.run_sync(store.close)
    assert seen == list(range(1, len(seen) + 1)) and seen[-1] == run.state.last_seq


async def test_event_stream_begun_as_the_run_ends_misses_nothing() -> None:
    """events() reads the stored history, then follows live events. A run that ends while
    the history is being read leaves events past the history: they were buffered by the
    subscription and must still come (the stream used to return early, without them)."""

    class SlowHistory(MemoryStore):
        blocking = True  # reads go to a worker thread, where this one waits

        def __init__(self) -> None:
            super().__init__()
            self.read, self.go = threading.Event(), threading.Event()

        def load_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
            events = super().load_events(run_id, after_seq)
            self.read.set()
            self.go.wait(10)  # the run ends now, after this history was read
            return events

    store = SlowHistory()
    gates = {"a": anyio.Event(), "b": anyio.Event()}
    runtime = Runtime(gated_toolbox(gates), store)
    run = await runtime.start(CHAIN, run_id="r")
    while run.steps["a"].status != "running":
        await anyio.sleep(0)
    seen: list[int] = []

    async def consume() -> None:
        async for ev in run.events():
            seen.append(ev.seq)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.to_thread.run_sync(store.read.wait)
        gates["a"].set()
        gates["b"].set()
        with anyio.fail_after(10):
            await run.wait()
            while run._kernel is not None and run._kernel.driving:
                await anyio.sleep(0.005)
        store.go.set()
    assert seen == list(range(1, run.state.last_seq + 1))
    await runtime.aclose()
