"""Regression tests for defects found in review and by adversarial testing (issues 12, 13).
Each failed before its fix."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import textwrap
import threading
from typing import Any

import anyio
import pytest

from chainlab import Chain, RunOptions, Toolbox
from chainlab.errors import DecisionError, PermanentError, StaleEpochError, StoreError
from chainlab.events import EventKind, RunStatus
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from tests.runtime.conftest import Harness, S, chain_of

pytestmark = pytest.mark.anyio


def statuses(run: Any) -> dict[str, str]:
    return {sid: str(st.status) for sid, st in run.steps.items()}


# ------------------------------------------------------------------ issue 13 #1
@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_step_skipped_by_when_releases_its_dependant_once(h: Harness, mode: str) -> None:
    h.tracked("work")
    chain = chain_of(S("a", when="context.x == 1"), S("b", ["a"]), S("c", ["a", "b"]),
                     mode=mode)
    run, result, _ = await h.run(chain, {"x": 0})
    assert result.ok, result
    assert statuses(run) == {"a": "skipped", "b": "succeeded", "c": "succeeded"}
    assert h.starts() == ["b", "c"]


async def test_a_failed_step_skips_a_shared_dependant_once(h: Harness) -> None:
    h.tracked("work")

    async def fail(tag: str = "") -> str:
        raise PermanentError("no")

    h.toolbox.tool(fail)
    chain = chain_of(S("a", tool="fail"), S("b", ["a"]), S("c", ["a", "b"]),
                     on_failure="continue")
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.FAILED
    assert statuses(run) == {"a": "failed", "b": "skipped", "c": "skipped"}


# ------------------------------------------------------------------ issue 13 #7
async def test_a_subchain_step_skipped_by_when_skips_its_children(h: Harness) -> None:
    h.tracked("work")
    h.toolbox.chains["inner"] = Chain.from_dict(
        {"name": "inner", "steps": [S("x"), S("y", ["x"])]})
    chain = chain_of({"id": "sub", "tool": "chain:inner", "when": "context.go"},
                     S("after", ["sub"]))
    run, result, _ = await h.run(chain, {"go": False})
    assert result.ok, result
    assert statuses(run) == {"sub": "skipped", "sub/x": "skipped", "sub/y": "skipped",
                             "after": "succeeded"}
    assert h.starts() == ["after"]


# ------------------------------------------------------------------ issue 13 #2
class Weird(BaseException):
    """A BaseException subclass that is not KeyboardInterrupt/SystemExit."""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("exc", [asyncio.CancelledError, GeneratorExit, Weird],
                         ids=["CancelledError", "GeneratorExit", "BaseException"])
@pytest.mark.parametrize("unsafe", [False, True], ids=["effect-free", "unsafe"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_tool_raising_a_base_exception_fails_the_step_and_the_run_settles(
        h: Harness, exc: type[BaseException], unsafe: bool, sync: bool) -> None:
    def boom_sync(tag: str = "") -> str:
        raise exc("from the tool")

    async def boom(tag: str = "") -> str:
        raise exc("from the tool")

    h.toolbox.tool(boom_sync if sync else boom, name="boom", side_effects=unsafe)
    h.tracked("work")
    run, result, _ = await h.run(chain_of(S("a", tool="boom"), S("b", ["a"])))
    expected = "in_doubt" if unsafe else "failed"
    assert statuses(run)["a"] == expected
    assert exc.__name__ in (run.steps["a"].error or "")
    if unsafe:
        assert result.status == RunStatus.SUSPENDED
        await run.resolve("a", fail=True)
        result = await run.wait()
    assert result.status == RunStatus.FAILED and statuses(run)["b"] == "skipped"


# ------------------------------------------------------------------ issue 12 #6a, 13 #6
@pytest.mark.timeout(60)
@pytest.mark.parametrize("busy", [1, 2], ids=["one-worker", "two-workers"])
async def test_a_fenced_runtime_gets_stale_epoch_error_not_an_exception_group(busy: int) -> None:
    store = MemoryStore()
    gate = anyio.Event()
    sent: list[str] = []

    def toolbox(blocking: bool) -> Toolbox:
        tb = Toolbox("fence")

        @tb.tool(name="slow")
        async def slow(tag: str = "") -> str:
            if blocking:
                await gate.wait()
            return tag

        @tb.tool(name="send", side_effects=True)
        async def send(tag: str = "") -> str:
            sent.append(tag)
            return tag

        return tb

    steps = []
    for i in range(busy):
        steps += [S(f"s{i}", tool="slow"), S(f"e{i}", [f"s{i}"], tool="send")]
    chain = chain_of(*steps, max_concurrency=4)
    a = Runtime(toolbox(True), store)
    run_a = await a.start(chain)
    while sum(st.status == "running" for st in run_a.steps.values()) < busy:
        await anyio.sleep(0.001)
    await store.flush(run_a.run_id, 1)
    b = Runtime(toolbox(False), store)
    run_b = await b.resume(run_a.run_id, force=True)  # A is alive: take over anyway
    assert (await run_b.wait()).ok
    gate.set()
    with pytest.raises(StaleEpochError):
        await run_a.wait()
    assert sorted(sent) == [f"e{i}" for i in range(busy)]  # each effect once, by B
    await a.aclose()
    await b.aclose()


# ------------------------------------------------------------------ issue 13 #10
class FailingFlushStore(MemoryStore):
    """A store whose durable writes start failing on demand (a full disk, a lost file)."""

    broken = False

    async def flush(self, run_id: str, epoch: int) -> None:
        if self.broken:
            raise StoreError("disk full while saving run events (test double)")
        await super().flush(run_id, epoch)


@pytest.mark.timeout(30)
async def test_a_failed_write_ahead_flush_is_a_store_failure_and_the_tool_is_not_called() -> None:
    store = FailingFlushStore()
    tb = Toolbox("wal")
    charged: list[int] = []

    @tb.tool(name="prepare")
    async def prepare() -> int:
        store.broken = True
        return 1

    @tb.tool(name="charge", side_effects=True)
    async def charge(n: int) -> int:
        charged.append(n)
        return n

    chain = Chain.from_dict({"name": "wal", "steps": [
        {"id": "p", "tool": "prepare"},
        {"id": "c", "tool": "charge", "args": {"n": "{{ steps.p.output }}"}}]})
    runtime = Runtime(tb, store)
    run = await runtime.start(chain)
    with pytest.raises(StoreError, match="disk full"):
        await run.wait()
    assert charged == []
    assert run.steps["c"].status != "in_doubt"
    await runtime.aclose()


# ------------------------------------------------------------------ issue 12 #6b
@pytest.mark.timeout(60)
async def test_a_serial_key_stays_held_until_a_timed_out_sync_body_returns() -> None:
    release = threading.Event()
    log: list[tuple[str, str]] = []
    tb = Toolbox("bg")

    @tb.tool(name="write", serial_key="table:{table}", timeout_s=0.2)
    def write(table: str, tag: str) -> str:
        log.append(("start", tag))
        if tag == "first":
            release.wait(20)
        log.append(("end", tag))
        return tag

    chain = Chain.from_dict({"name": "bg", "options": {"on_failure": "continue"}, "steps": [
        {"id": "first", "tool": "write", "args": {"table": "t", "tag": "first"},
         "retry": {"max_attempts": 1}},
        {"id": "second", "tool": "write", "args": {"table": "t", "tag": "second"}}]})
    runtime = Runtime(tb, MemoryStore())
    run = await runtime.start(chain)
    while run.steps["first"].status != "failed":
        await anyio.sleep(0.01)
    assert run.steps["first"].error_kind == "timeout"
    assert run.steps["first"].background  # "still running in the background"
    await anyio.sleep(0.3)
    assert ("start", "second") not in log  # the key is still held by the first body
    release.set()
    result = await run.wait()
    assert log == [("start", "first"), ("end", "first"), ("start", "second"),
                   ("end", "second")]
    assert result.steps == {"first": "failed", "second": "succeeded"}
    kinds = [e.kind for e in run.event_list() if e.step_id == "first"]
    assert EventKind.STEP_CALL_RETURNED in kinds and not run.steps["first"].background
    await runtime.aclose()


# ------------------------------------------------------------------ issue 13 #8
@pytest.mark.timeout(60)
def test_a_sync_tool_that_never_returns_does_not_keep_the_process_alive() -> None:
    script = textwrap.dedent("""
        import threading
        from chainlab import Chain, Toolbox
        from chainlab.runtime import Runtime
        from chainlab.store import MemoryStore
        tb = Toolbox("hang")
        @tb.tool(name="hang", timeout_s=0.2)
        def hang() -> int:
            threading.Event().wait()  # never returns
            return 1
        chain = Chain.from_dict({"name": "h", "steps": [{"id": "a", "tool": "hang",
                                 "retry": {"max_attempts": 1}}]})
        result = Runtime(tb, MemoryStore()).run_sync(chain)
        print("settled", result.status)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=45)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "settled failed"


# ------------------------------------------------------------------ issue 12 #6c
async def test_breakpoints_on_subchain_steps_are_accepted_at_start(h: Harness) -> None:
    h.tracked("work")
    h.toolbox.chains["inner"] = Chain.from_dict(
        {"name": "inner", "steps": [S("x"), S("y", ["x"])]})
    chain = chain_of({"id": "sub", "tool": "chain:inner"}, S("after", ["sub"]))
    run = await h.runtime.start(chain, options=RunOptions(breakpoints=["sub/y"]))
    while run.status != RunStatus.PAUSED:
        await anyio.sleep(0.001)
    assert h.starts() == ["x"] and run.state.paused_at == "sub/y"
    await run.unpause()
    assert (await run.wait()).ok and h.starts() == ["x", "y", "after"]


# ------------------------------------------------------------------ issue 13 #12
@pytest.mark.parametrize("args", [{"amount": math.nan}, {"amount": math.inf},
                                  {"amount": 1, "meta": {1: "x"}}],
                         ids=["nan", "infinity", "int-key"])
async def test_approve_with_non_json_args_is_a_decision_error(h: Harness, args: dict) -> None:
    async def pay(amount: float, meta: dict | None = None) -> float:
        return amount

    h.toolbox.tool(pay, side_effects=True, requires_confirmation=True)
    run, result, _ = await h.run(chain_of({"id": "p", "tool": "pay", "args": {"amount": 1}}))
    assert result.waiting == {"p": "waiting_confirmation"}
    with pytest.raises(DecisionError) as err:
        await run.approve("p", args=args)
    assert (err.value.step_id, err.value.field) == ("p", "args")
    assert run.steps["p"].status == "waiting_confirmation"  # nothing recorded


def test_the_cli_says_a_timed_out_body_still_runs() -> None:
    from chainlab.cli.views import step_note
    from chainlab.events import StepState, StepStatus
    from chainlab.events.fold import BACKGROUND_NOTE

    st = StepState("a", status=StepStatus.FAILED, error_kind="timeout", error="no answer",
                   background=True)
    assert step_note(st).startswith(BACKGROUND_NOTE)


# ------------------------------------------------------------------ worker threads end
def _tool_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "chainlab-tool" and t.is_alive())


async def test_a_closed_runtime_leaves_no_idle_worker_threads_behind() -> None:
    """A process that makes many runtimes (a test suite, a notebook re-running cells) kept
    one daemon thread per concurrent sync body of every past runtime: 356 in one pytest
    worker, which then hung in a Dask test. aclose now ends the idle ones."""
    tb = Toolbox("threads")

    @tb.tool
    def slow(i: int) -> int:
        import time
        time.sleep(0.05)
        return i

    chain = Chain.from_dict({"name": "fan", "options": {"mode": "parallel"}, "steps": [
        {"id": f"s{i}", "tool": "slow", "args": {"i": i}} for i in range(6)]})
    before = _tool_threads()
    for _ in range(3):
        runtime = Runtime(tb, MemoryStore())
        async with runtime:
            run = await runtime.start(chain)
            assert (await run.wait()).ok
        pool = runtime.executor._threads  # type: ignore[attr-defined]
        for _ in range(100):  # a body that just returned ends its thread right after
            if pool.threads == 0:
                break
            await anyio.sleep(0.02)
        assert pool.threads == 0
    for _ in range(100):  # a closed thread leaves once it takes its end-of-work marker
        if _tool_threads() <= before:
            break
        await anyio.sleep(0.02)
    assert _tool_threads() <= before


def test_an_idle_worker_thread_ends_and_the_pool_grows_again() -> None:
    from chainlab.runtime.engine.executors import _DaemonThreads

    pool = _DaemonThreads(4, idle_s=0.05)
    done = threading.Event()
    pool.submit(done.set)
    assert done.wait(5)
    for _ in range(200):
        if pool.threads == 0:
            break
        threading.Event().wait(0.01)
    assert pool.threads == 0
    again = threading.Event()
    pool.submit(again.set)  # after the idle thread ended, a new one takes the job
    assert again.wait(5)
    pool.close()


def test_a_full_pool_runs_its_backlog_even_when_closed_meanwhile() -> None:
    """Jobs queued while every thread was busy are run by those threads, also when close()
    came in between (a busy thread retires only when nothing waits for it)."""
    from chainlab.runtime.engine.executors import _DaemonThreads

    pool = _DaemonThreads(2)
    gate = threading.Event()
    done: list[int] = []
    for i in range(2):
        pool.submit(lambda i=i: (gate.wait(5), done.append(i)))
    for i in range(2, 6):
        pool.submit(lambda i=i: done.append(i))
    pool.close()
    gate.set()
    for _ in range(500):
        if len(done) == 6 and pool.threads == 0:
            break
        threading.Event().wait(0.01)
    assert sorted(done) == list(range(6))
    assert pool.threads == 0
