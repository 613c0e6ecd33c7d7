"""Fault injection (chainlab.runtime.faults): each fault kind does what a real fault does,
goes through the same retry/in_doubt rules, and is recorded as an event; a second driver is
fenced and its refusal recorded; faults are refused on runs this process does not drive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import Chain, StaleEpochError, Toolbox
from chainlab.errors import RunNotActiveError, RunStateError, UnknownStepError
from chainlab.events import EventKind, read_run
from chainlab.runtime import Runtime
from chainlab.runtime.faults import inject
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.testing import ManualClock

pytestmark = pytest.mark.anyio

#: NO_CLOSE: after a takeover in this process, a test does not close its SQLite store: the
#: fenced driver's runtime may still be forgetting its heartbeat in a worker thread after
#: aclose() returned, and closing the connection under it crashes the interpreter


class World:
    """Tools that record every call of their body (the effects) in ``calls``."""

    def __init__(self, store: Any = None) -> None:
        self.calls: list[str] = []
        self.tb = Toolbox("faults")
        self.gate = anyio.Event()
        self.entered = anyio.Event()

        @self.tb.tool(name="safe")
        def safe(tag: str) -> str:
            self.calls.append(tag)
            return tag

        @self.tb.tool(name="unsafe", side_effects=True, idempotent=False)
        def unsafe(tag: str) -> str:
            self.calls.append(tag)
            return tag

        @self.tb.tool(name="gated")
        async def gated(tag: str) -> str:
            self.entered.set()
            await self.gate.wait()
            self.calls.append(tag)
            return tag

        self.rt = Runtime(self.tb, store or MemoryStore(), clock=ManualClock())


def chain(*steps: tuple[str, str], deps: bool = True) -> Chain:
    out = []
    for i, (step_id, tool) in enumerate(steps):
        prev = [steps[i - 1][0]] if deps and i else []
        out.append({"id": step_id, "tool": tool, "args": {"tag": step_id}, "depends_on": prev,
                    "retry": {"max_attempts": 3, "delay_s": 1.0}})
    return Chain.from_dict({"name": "f", "steps": out})


def kinds(run: Any) -> list[tuple[str, str | None]]:
    return [(str(ev.kind), ev.step_id) for ev in run.event_list()]


async def test_timeout_runs_the_call_then_loses_its_answer_and_a_safe_step_retries() -> None:
    w = World()
    run = await w.rt.start(chain(("a", "safe")))
    await inject(run, "timeout", "a", by="test")
    result = await run.wait()
    assert result.ok
    assert w.calls == ["a", "a"]  # the lost answer's call ran: retried (safe), ran again
    ev = [e for e in run.event_list() if e.kind == EventKind.FAULT_INJECTED]
    assert [(e.step_id, e.payload["fault"], e.payload["by"]) for e in ev] == [("a", "timeout",
                                                                              "test")]
    assert ("step_timed_out", "a") in kinds(run)
    att = run.state.attempts
    assert [(a.attempt, a.status, a.error_kind) for a in att] == [
        (1, "timed_out", "timeout"), (2, "succeeded", None)]
    assert run.state.faults[0]["fault"] == "timeout"  # the fold keeps the injections


async def test_timeout_of_an_unsafe_call_is_in_doubt_never_repeated() -> None:
    w = World()
    run = await w.rt.start(chain(("a", "unsafe")))
    await inject(run, "timeout", "a")
    result = await run.wait()
    assert result.suspended and result.waiting == {"a": "in_doubt"}
    assert w.calls == ["a"]


async def test_raise_once_before_effect_is_retried_even_for_an_unsafe_tool() -> None:
    w = World()
    run = await w.rt.start(chain(("a", "unsafe")))
    await inject(run, "raise", "a", error_kind="transient")
    assert (await run.wait()).ok
    assert w.calls == ["a"]  # the injected raise came before the body: one effect
    first = run.state.attempts[0]
    assert (first.status, first.error_kind) == ("failed", "transient")
    assert "injected fault" in (first.error or "")


async def test_raise_after_effect_on_an_unsafe_tool_is_in_doubt() -> None:
    w = World()
    run = await w.rt.start(chain(("a", "unsafe")))
    await inject(run, "raise", "a", error_kind="execution_failed", effect=True)
    result = await run.wait()
    assert result.waiting == {"a": "in_doubt"} and w.calls == ["a"]


async def test_raise_permanent_fails_the_step_and_hits_only_once() -> None:
    w = World()
    run = await w.rt.start(chain(("a", "safe"), ("b", "safe"), deps=False))
    await inject(run, "raise", "b", error_kind="permanent")
    result = await run.wait()
    assert result.steps["b"] == "failed" and result.errors["b"].startswith("injected fault")
    assert w.calls == ["a"]


async def test_refusals_name_the_problem() -> None:
    w = World()
    run = await w.rt.start(chain(("a", "gated"), ("b", "safe")))
    with pytest.raises(ValueError, match="unknown fault 'timout'; did you mean 'timeout'"):
        await inject(run, "timout", "a")
    with pytest.raises(UnknownStepError, match="no step 'x'"):
        await inject(run, "timeout", "x")
    with pytest.raises(ValueError, match="error_kind 'timeout' cannot be raised"):
        await inject(run, "raise", "b", error_kind="timeout")
    with pytest.raises(ValueError, match="not a disposable driver"):
        await inject(run, "kill", "b")
    with pytest.raises(ValueError, match="needs the step it hits"):
        await inject(run, "timeout")
    w.gate.set()
    await run.wait()
    with pytest.raises(RunStateError, match="is succeeded: faults hit runs that still move"):
        await inject(run, "timeout", "b")
    stored = Runtime(w.tb, w.rt.store).get_run(run.run_id)  # another process's view
    with pytest.raises(RunNotActiveError, match="not driven by this process"):
        await inject(stored, "timeout", "b")
    assert not [e for e in run.event_list() if e.kind == EventKind.FAULT_INJECTED]


async def test_a_finished_step_cannot_be_faulted() -> None:
    w = World()
    run = await w.rt.start(chain(("a", "safe"), ("b", "gated")))
    await w.entered.wait()
    with pytest.raises(RunStateError, match="step 'a' is already succeeded"):
        await inject(run, "raise", "a")
    w.gate.set()
    assert (await run.wait()).ok


async def test_second_driver_fences_the_first_and_records_the_refusal(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "f.db")
    w = World(store)
    run = await w.rt.start(chain(("a", "safe"), ("b", "gated"), ("c", "unsafe")))
    await w.entered.wait()  # b's call is in progress in the first driver
    run2 = await inject(run, "second_driver", by="test")
    assert run2 is not run and run2.active
    w.gate.set()
    with pytest.raises(StaleEpochError):
        await run.wait()
    assert (await run2.wait()).ok
    with anyio.fail_after(10):  # the refusal is recorded once the first driver has stopped
        while not run2.state.fenced:
            await anyio.sleep(0.01)
    await store.flush(run.run_id, run2.state.epoch)
    _, events, state = read_run(store, run.run_id)
    assert [f["fault"] for f in state.faults] == ["second_driver"]
    assert state.faults[0]["epoch"] == 1 and state.faults[0]["stale_epoch"] == 1
    (refusal,) = state.fenced
    assert refusal["stale_epoch"] == 1 and refusal["epoch"] == 2
    assert refusal["refused"][0] == "step_succeeded b"  # the first driver's late result
    assert {e.epoch for e in events} == {1, 2}
    assert not [e for e in events if e.epoch == 1 and e.kind == EventKind.STEP_SUCCEEDED
                and e.step_id == "b"]  # nothing of the stale driver after the claim
    assert w.calls.count("c") == 1  # c (unsafe) ran only in the new driver
    assert state.status == "succeeded"
    await run2.runtime.aclose()  # both drivers' runtimes stop before the store closes
    await w.rt.aclose()  # not store.close(): see NO_CLOSE


# ------------------------------------------------------------------ kill: a real subprocess
def _gallery_chain(*steps: dict[str, Any]) -> Chain:
    return Chain.from_dict({"name": "g", "steps": list(steps)})


async def test_kill_mid_step_in_a_subprocess_then_resume_here(tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    from chainlab.examples import gallery
    from chainlab.testing.driver import SubprocessDriver

    monkeypatch.setenv("CHAINLAB_GALLERY_LEDGER", str(tmp_path / "ledger.jsonl"))
    db = tmp_path / "k.db"
    chain = _gallery_chain(
        {"id": "extract", "tool": "work", "args": {"tag": "extract", "ms": 0}},
        {"id": "load", "tool": "load", "args": {"tag": "load", "rows": 3},
         "depends_on": ["extract"]},
        {"id": "notify", "tool": "work", "args": {"tag": "notify", "ms": 0},
         "depends_on": ["load"]},
    )
    driver = SubprocessDriver(chain, db=db, tools="chainlab.examples.gallery:toolbox",
                              run_id="crash-1", kill_at="load", by="test")
    assert driver.wait() == -9 and driver.killed, driver.output()
    store = SQLiteStore(db)
    _, _, before = read_run(store, "crash-1")
    assert [(f["fault"], f["step_id"], f["by"]) for f in before.faults] == [
        ("kill", "load", "test")]
    assert before.steps["load"].status == "running"  # the process died inside the call
    assert gallery.counts() == {"extract": 1, "load": 1}  # ... after load's effect
    rt = Runtime(gallery.toolbox, store)
    run = await driver.take_over(rt)
    assert (await run.wait()).ok
    assert gallery.counts() == {"extract": 1, "load": 1, "notify": 1}  # nothing repeated
    load_attempts = [(a.epoch, a.status) for a in run.state.attempts if a.step_id == "load"]
    assert load_attempts == [(1, "interrupted")]  # reconciled: took effect, not re-run
    await rt.aclose()
    store.close()


async def test_a_confirmation_survives_a_driver_killed_while_suspended(
        tmp_path: Path, monkeypatch: Any) -> None:
    from chainlab.examples import gallery
    from chainlab.testing.driver import SubprocessDriver

    monkeypatch.setenv("CHAINLAB_GALLERY_LEDGER", str(tmp_path / "ledger.jsonl"))
    db = tmp_path / "c.db"
    chain = _gallery_chain(
        {"id": "quote", "tool": "work", "args": {"tag": "quote", "ms": 0}},
        {"id": "pay", "tool": "pay", "args": {"tag": "pay", "to": "ada", "amount": 5},
         "depends_on": ["quote"]},
    )
    driver = SubprocessDriver(chain, db=db, tools="chainlab.examples.gallery:toolbox",
                              run_id="confirm-1", kill_when_suspended=True)
    assert driver.wait() == -9, driver.output()
    store = SQLiteStore(db)
    rt = Runtime(gallery.toolbox, store)
    run = await driver.take_over(rt)
    assert (await run.wait()).waiting == {"pay": "waiting_confirmation"}
    await run.approve("pay", note="after the kill")
    assert (await run.wait()).ok
    assert gallery.counts() == {"quote": 1, "pay": 1}
    assert [f["fault"] for f in run.state.faults] == ["kill"]
    await rt.aclose()
    store.close()


def test_the_subprocess_driver_refuses_a_memory_store() -> None:
    from chainlab.testing.driver import SubprocessDriver

    with pytest.raises(ValueError, match="lives in one process only"):
        SubprocessDriver(chain(("a", "safe")), db=":memory:", tools="x:y")


async def test_the_fenced_handle_is_no_longer_this_runtimes_live_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "h.db")
    w = World(store)
    run = await w.rt.start(chain(("a", "gated"), ("b", "unsafe")))
    await w.entered.wait()
    run2 = await inject(run, "second_driver")
    w.gate.set()
    with pytest.raises(StaleEpochError):
        await run.wait()
    await run2.wait()
    with anyio.fail_after(10):
        while not run2.state.fenced:
            await anyio.sleep(0.005)
    assert w.rt.get_run(run.run_id) is not run  # a view of the store, not the fenced handle
    assert w.rt.get_run(run.run_id).state.epoch == 2
    await run2.runtime.aclose()
    await w.rt.aclose()  # not store.close(): see NO_CLOSE


async def test_take_over_refuses_while_the_driver_runs(tmp_path: Path, monkeypatch: Any) -> None:
    from chainlab.examples import gallery
    from chainlab.testing.driver import SubprocessDriver

    monkeypatch.setenv("CHAINLAB_GALLERY_LEDGER", str(tmp_path / "ledger.jsonl"))
    chain_ = _gallery_chain({"id": "wait", "tool": "hold", "args": {"tag": "never"}})
    driver = SubprocessDriver(chain_, db=tmp_path / "t.db",
                              tools="chainlab.examples.gallery:toolbox", run_id="busy")
    store = SQLiteStore(tmp_path / "t.db")
    try:
        with pytest.raises(RunStateError, match=r"still runs: driver\.wait"):
            await driver.take_over(Runtime(gallery.toolbox, store))
    finally:
        driver.kill()
        store.close()
    assert driver.killed


async def test_faults_armed_before_a_takeover_strike_in_the_new_driver(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    w = World(store)
    run = await w.rt.start(chain(("a", "gated"), ("b", "unsafe")))
    await w.entered.wait()
    await inject(run, "raise", "b", error_kind="permanent")
    run2 = await inject(run, "second_driver")
    w.gate.set()
    with pytest.raises(StaleEpochError):
        await run.wait()
    result = await run2.wait()
    assert result.steps["b"] == "failed" and "injected fault" in result.errors["b"]
    assert w.calls.count("b") == 0  # raised before the body, in the new driver
    await run2.runtime.aclose()
    await w.rt.aclose()  # not store.close(): see NO_CLOSE
