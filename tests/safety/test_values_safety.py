"""Values that cannot be stored, and code the fingerprint must see (issue 25, defects 6,
13, 14): an integer too long for ``str()`` is a clear chainlab error everywhere a person or
a tool hands one in, the same on every store; a tool's defaults and closure values are part
of its fingerprint, so a fork reruns a step whose behaviour changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chainlab import Toolbox
from chainlab._json import code_fingerprint
from chainlab.errors import DecisionError, PlanError
from chainlab.events import RunStatus
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore, Store

from .conftest import Ledger, chain

pytestmark = pytest.mark.anyio
HUGE = 10**5000  # str() of it raises ValueError (the interpreter's 4,300-digit limit)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "v.db")


# ---------------------------------------------------------------------------- defect 13
async def test_a_huge_integer_from_a_person_is_a_clear_error(
        tools: Toolbox, ledger: Ledger, store: Store) -> None:
    rt = Runtime(tools, store)
    flow = chain({"id": "a", "tool": "fetch", "args": {"n": "{{ context.n }}"}},
                 {"id": "pay", "tool": "charge", "args": {"amount": "{{ steps.a.output }}"},
                  "confirm": True})
    with pytest.raises(PlanError, match="digits"):
        await rt.start(flow, {"n": HUGE})
    run = await rt.start(flow, {"n": 1})
    assert (await run.wait()).waiting == {"pay": "waiting_confirmation"}
    with pytest.raises(DecisionError, match="digits"):
        await run.approve("pay", args={"amount": HUGE})
    with pytest.raises(DecisionError, match="digits"):
        await rt.decide(run.run_id, "pay", "approve", args={"amount": HUGE})
    await run.reject("pay", "no")
    await run.wait()
    with pytest.raises(PlanError, match="digits"):
        await rt.fork(run.run_id, context={"n": HUGE})
    with pytest.raises((PlanError, DecisionError), match="digits"):
        await rt.fork(run.run_id, outputs={"a": HUGE})
    with pytest.raises(PlanError, match="digits"):
        await rt.fork(run.run_id, args={"a": {"n": HUGE}})
    assert ledger.of("charge") == []
    await rt.aclose()


# ---------------------------------------------------------------------------- defect 14
async def test_a_tool_returning_a_huge_integer_fails_its_step_on_every_store(
        store: Store) -> None:
    tb = Toolbox("huge")

    @tb.tool
    def big() -> int:
        return HUGE

    @tb.tool
    def nested() -> dict[str, Any]:
        return {"rows": [1, HUGE]}

    rt = Runtime(tb, store)
    for tool in ("big", "nested"):
        run = await rt.start(chain({"id": "x", "tool": tool, "retry": {"max_attempts": 1}}))
        result = await run.wait()  # no StoreError: the driver goes on
        assert result.status == RunStatus.FAILED
        assert "digits" in (run.steps["x"].error or ""), run.steps["x"].error
        resumed = await rt.resume(run.run_id)  # and again on resume: nothing to redo
        assert (await resumed.wait()).status == RunStatus.FAILED
    await rt.aclose()


# ---------------------------------------------------------------------------- defect 6
def _with_default(limit: int) -> Any:
    def check(v: int, limit: int = limit) -> bool:
        return v <= limit

    return check


def _with_closure(limit: int) -> Any:
    def check(v: int) -> bool:
        return v <= limit

    return check


def test_the_fingerprint_sees_defaults_and_closure_values() -> None:
    assert code_fingerprint(_with_default(1)) != code_fingerprint(_with_default(2))
    assert code_fingerprint(_with_closure(1)) != code_fingerprint(_with_closure(2))
    assert code_fingerprint(_with_default(1)) == code_fingerprint(_with_default(1))
    assert code_fingerprint(_with_closure((1, 2))) != code_fingerprint(_with_closure((1, 3)))
    log: list[int] = []
    before = code_fingerprint(_with_closure(log))
    log.append(1)  # a closed-over log that a tool appends to is state, not code
    assert code_fingerprint(_with_closure(log)) == before


async def test_a_fork_reruns_a_step_whose_default_changed(store: Store) -> None:
    def toolbox(limit: int) -> Toolbox:
        tb = Toolbox("defaults")

        @tb.tool
        def fetch(n: int) -> int:
            return n

        @tb.tool(name="check")
        def check(v: int, limit: int = limit) -> bool:
            return v <= limit

        return tb

    flow = chain({"id": "a", "tool": "fetch", "args": {"n": 5}},
                 {"id": "ok", "tool": "check", "args": {"v": "{{ steps.a.output }}"}})
    first = Runtime(toolbox(10), store)
    run = await first.start(flow)
    assert (await run.wait()).outputs["ok"] is True
    await first.aclose()
    second = Runtime(toolbox(1), store)  # the tool's default changed in a notebook cell
    plan = await second.fork_plan(run.run_id)
    assert plan.row("a").decision == "reuse"
    assert plan.row("ok").decision == "rerun"
    fork = await second.fork(run.run_id)
    assert (await fork.wait()).outputs["ok"] is False  # not the stale True
    await second.aclose()
