"""Drivers, takeovers and decisions (issue 25, defects 3, 8, 9, 10, 11, 15, 18, 19, 20, 21):
a fenced driver starts no call; a forced resume takes over a busy driver; a driver is known
from the run's first moment; hung bodies never hang wait(); watching an ended run ends; the
estimates survive a clock that jumped; run ids are checked at creation; a person's decision
always gets an answer."""

from __future__ import annotations

import contextlib
import math
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import chainlab
from chainlab import Toolbox
from chainlab.errors import (
    DecisionError,
    DriverAliveError,
    PlanError,
    StaleEpochError,
)
from chainlab.events import RunStatus
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, RunRecord, SQLiteStore, Store, open_store
from tests.store.test_watch import store_url

from .conftest import Ledger, chain

pytestmark = pytest.mark.anyio
FAST: dict[str, Any] = {"heartbeat_s": 0.05, "stale_after_s": 3.0, "mailbox_poll_s": 0.02}

NOTIFY = chain(
    {"id": "a", "tool": "fetch", "args": {"n": 1}},
    {"id": "tell", "tool": "notify", "args": {"to": "ops"}, "depends_on": ["a"]},
)


async def _suspended(run: Any) -> None:
    with anyio.fail_after(20):
        result = await run.wait()
    assert result.status == RunStatus.SUSPENDED


# ---------------------------------------------------------------------------- defect 3
async def test_a_fenced_driver_starts_no_call_its_old_handle_approved(
        tools: Toolbox, ledger: Ledger, store_pair: tuple[Store, Store]) -> None:
    one, two = store_pair
    old_rt, new_rt = Runtime(tools, one), Runtime(tools, two)
    old = await old_rt.start(NOTIFY)
    await _suspended(old)
    new = await new_rt.resume(old.run_id, force=True)  # a takeover: the old handle is fenced
    await new.reject("tell", "no mail today")
    with pytest.raises(StaleEpochError):
        await old.approve("tell")
    await anyio.sleep(0.3)  # anything the old driver might start, it would start by now
    assert ledger.of("notify") == []
    assert (await new.wait()).steps["tell"] == "rejected"
    await old_rt.aclose()
    await new_rt.aclose()


# ---------------------------------------------------------------------------- defect 8
@pytest.mark.parametrize("trial", range(3))
async def test_a_forced_resume_takes_over_a_driver_that_is_busy_writing(
        tools: Toolbox, tmp_path: Path, trial: int) -> None:
    steps = [{"id": f"s{i}", "tool": "fetch", "args": {"n": i},
              **({"depends_on": [f"s{i - 1}"]} if i else {})} for i in range(400)]
    busy = chain(*steps, name="busy")
    a, b = SQLiteStore(tmp_path / "b.db"), SQLiteStore(tmp_path / "b.db")
    first, second = Runtime(tools, a), Runtime(tools, b)
    run = await first.start(busy)
    with anyio.fail_after(20):
        while run.state.last_seq < 40:
            await anyio.sleep(0.001)
    taken = await second.resume(run.run_id, force=True)  # claim first, then read the log
    assert (await taken.wait()).status == RunStatus.SUCCEEDED
    with contextlib.suppress(StaleEpochError):  # fenced, unless it was done before the claim
        await run.wait()
    assert taken.state.epoch == 2
    assert all(st.status == "succeeded" for st in taken.steps.values())
    await first.aclose()
    await second.aclose()
    a.close()
    b.close()


# ---------------------------------------------------------------------------- defect 9
async def test_a_driver_is_known_from_the_runs_first_moment(
        tools: Toolbox, store_pair: tuple[Store, Store]) -> None:
    one, two = store_pair
    release = threading.Event()
    tb = Toolbox("slow")

    @tb.tool
    def wait_here() -> int:
        release.wait(10)
        return 1

    driver, other = Runtime(tb, one, **FAST), Runtime(tb, two, **FAST)
    run = await driver.start(chain({"id": "w", "tool": "wait_here"}))
    with pytest.raises(DriverAliveError):  # at once, before any heartbeat was due
        await other.resume(run.run_id)
    release.set()
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    await driver.aclose()
    await other.aclose()


# ---------------------------------------------------------------------------- defect 10
async def test_a_sync_tool_hung_past_its_timeout_twice_does_not_hang_wait() -> None:
    """Both attempts time out and their bodies still hang: the step fails and the run ends
    (two bodies of one step in the background are two, not one)."""
    release = threading.Event()
    tb = Toolbox("hung")

    @tb.tool(timeout_s=0.1)
    def hang() -> int:
        release.wait(60)  # hangs past both attempts (the default policy: 2)
        return 1

    rt = Runtime(tb, MemoryStore())
    run = await rt.start(chain({"id": "h", "tool": "hang"}))
    try:
        with anyio.fail_after(15):
            result = await run.wait()
        assert result.status == RunStatus.FAILED
        assert run.steps["h"].attempts == 2
    finally:
        release.set()
    await rt.aclose()


# ---------------------------------------------------------------------------- defect 11
async def test_watching_a_run_that_has_ended_ends(tools: Toolbox,
                                                  store_pair: tuple[Store, Store]) -> None:
    one, two = store_pair
    rt = Runtime(tools, one)
    run = await rt.start(chain({"id": "a", "tool": "fetch", "args": {"n": 1}}))
    await run.wait()
    watcher = Runtime(tools, two)
    with anyio.fail_after(10):
        got = [ev async for ev in watcher.watch(run.run_id, after_seq=run.last_seq)]
        assert got == []
        watched = watcher.watch_run(run.run_id)
        assert [ev async for ev in watched.events(history=False)] == []
        assert len([ev async for ev in watched.events()]) == run.last_seq
    await rt.aclose()


# ---------------------------------------------------------------------------- defect 15
class JumpyClock:
    """The system clock, except that it reads infinity while ``jumped`` (a clock that
    jumped while a step ran: that step's recorded duration is not finite)."""

    def __init__(self) -> None:
        self.jumped = False

    def now(self) -> float:
        import time

        return math.inf if self.jumped else time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


async def test_a_non_finite_duration_does_not_poison_the_estimates(tmp_path: Path) -> None:
    clock = JumpyClock()
    tb = Toolbox("jumpy")

    @tb.tool
    def step(n: int) -> int:
        return n

    @tb.tool
    def jump(n: int) -> int:
        clock.jumped = n == 1  # the clock jumps while this call runs (its end reads inf)
        return n

    flow = chain({"id": "a", "tool": "jump", "args": {"n": "{{ context.n }}"}},
                 {"id": "b", "tool": "step", "args": {"n": 1}},
                 {"id": "c", "tool": "step", "args": {"n": "{{ steps.a.output }}"}})
    store = SQLiteStore(tmp_path / "j.db")
    rt = Runtime(tb, store, clock=clock)
    for n in (0, 0):
        assert (await (await rt.start(flow, {"n": n})).wait()).status == RunStatus.SUCCEEDED
    jumped = await rt.start(flow, {"n": 1})
    with contextlib.suppress(Exception):  # (what this run itself records is not the point)
        await jumped.wait()
    clock.jumped = False
    for n in (0, 0, 0):  # default priority: ranked by the durations learned, inf among them
        run = await rt.start(flow, {"n": n})
        assert (await run.wait()).status == RunStatus.SUCCEEDED
    fresh = Runtime(tb, store)  # learns from the store
    assert (await (await fresh.start(flow, {"n": 0})).wait()).status == RunStatus.SUCCEEDED
    await rt.aclose()
    await fresh.aclose()
    store.close()


# ---------------------------------------------------------------------------- defect 18
@pytest.mark.parametrize("bad", ["x" * 9000, "has\nnewline", "", " lead", "tab\there"])
async def test_run_ids_are_checked_at_creation(tools: Toolbox, bad: str) -> None:
    store = MemoryStore()
    rt = Runtime(tools, store)
    with pytest.raises(PlanError, match="run id"):
        await rt.start(chain({"id": "a", "tool": "fetch", "args": {"n": 1}}), run_id=bad)
    assert store.list_runs() == []
    await rt.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_every_store_refuses_a_bad_run_id(tmp_path: Path, kind: str) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "ids.db")
    rec = RunRecord(run_id="x" * 9000, chain_name="c", status="running", epoch=1,
                    created_at=1.0, updated_at=1.0, chain={"name": "c", "steps": []})
    with pytest.raises(ValueError, match="run id"):
        store.create_run(rec)
    store.close()


# ---------------------------------------------------------------------------- defects 19, 20
@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request.param, tmp_path)


PAY_OR_NOT = chain(
    {"id": "a", "tool": "fetch", "args": {"n": 1}},
    {"id": "tell", "tool": "notify", "args": {"to": "ops"}, "depends_on": ["a"]},
    on_failure="fail_fast",
)


@pytest.mark.parametrize("trial", range(5))
async def test_a_rejection_that_ends_the_run_is_answered_before_the_driver_closes(
        tools: Toolbox, shared: str, trial: int) -> None:
    """The driver process closes as soon as its run ends (a script: wait, then close): the
    decider still gets its answer, not a timeout."""
    a, b = open_store(shared), open_store(shared)
    driver, decider = Runtime(tools, a, **FAST), Runtime(tools, b, **FAST)
    run = await driver.start(PAY_OR_NOT)
    await _suspended(run)
    with anyio.fail_after(30):
        while a.driver_of(run.run_id) is None:
            await anyio.sleep(0.01)

    async def drive_then_close() -> None:
        while run.status == RunStatus.SUSPENDED:
            await run.wait()  # (returns at once while suspended: poll the end)
            await anyio.sleep(0.001)
        await run.wait()
        await driver.aclose()
        a.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drive_then_close)
        assert await decider.decide(run.run_id, "tell", "reject", reason="no",
                                    timeout=10) == "applied"
    assert b.get_run(run.run_id).status == RunStatus.FAILED
    await decider.aclose()
    b.close()


@pytest.mark.parametrize("trial", range(3))
async def test_of_two_decisions_at_once_the_loser_is_refused_saying_who_decided(
        tools: Toolbox, ledger: Ledger, shared: str, trial: int) -> None:
    a, b, c = open_store(shared), open_store(shared), open_store(shared)
    driver = Runtime(tools, a, **FAST)
    one, two = Runtime(tools, b, **FAST), Runtime(tools, c, **FAST)
    run = await driver.start(NOTIFY)
    await _suspended(run)
    with anyio.fail_after(30):
        while a.driver_of(run.run_id) is None:
            await anyio.sleep(0.01)
    outcomes: dict[str, Any] = {}

    async def decide(name: str, rt: Runtime) -> None:
        try:
            outcomes[name] = await rt.decide(run.run_id, "tell", "approve", by=name,
                                             timeout=20)
        except DecisionError as exc:
            outcomes[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(decide, "ann", one)
        tg.start_soon(decide, "bob", two)
    applied = [n for n, v in outcomes.items() if v == "applied"]
    refused = [v for v in outcomes.values() if isinstance(v, DecisionError)]
    assert len(applied) == 1 and len(refused) == 1, outcomes
    assert applied[0] in str(refused[0])  # it says who decided
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    assert len(ledger.of("notify")) == 1
    for rt in (driver, one, two):
        await rt.aclose()
    for s in (a, b, c):
        s.close()


# ---------------------------------------------------------------------------- defect 21
async def test_new_api_arguments_are_checked(tools: Toolbox, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "w.db")
    rt = Runtime(tools, store)
    run = await rt.start(chain({"id": "a", "tool": "fetch", "args": {"n": 1}}))
    await run.wait()
    with pytest.raises(ValueError, match="max_concurrency"):
        chainlab.whatif(run, max_concurrency=0)
    with pytest.raises(ValueError, match="after_seq"):
        async for _ in rt.watch(run.run_id, after_seq=2**63):
            pass
    with pytest.raises(ValueError, match="after_seq"):
        async for _ in rt.watch(run.run_id, after_seq=-1):
            pass
    release = threading.Event()
    tb = Toolbox("slow")

    @tb.tool
    def wait_here() -> int:
        release.wait(10)
        return 1

    rt2 = Runtime(tb, store)
    live = await rt2.start(chain({"id": "w", "tool": "wait_here"}))
    from chainlab.errors import RunStateError

    with pytest.raises(RunStateError, match="still running"):
        chainlab.whatif(live)
    release.set()
    await live.wait()
    await rt.aclose()
    await rt2.aclose()
    store.close()
