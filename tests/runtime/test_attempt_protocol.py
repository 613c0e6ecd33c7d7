"""One attempt protocol for every kind of call (DESIGN §17; the flink-agents PoC criteria):
one batch mixing an ordinary side-effecting call, a sub-chain and a remote job shows
concurrent progress and ordered results; a SIGKILL mid-batch, then resume: no recorded call
re-executed, no job submitted again; cancelling cleans up every pending handle, including
when the stop comes from a failure during a step's preparation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.events import EventKind
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.testing.driver import SubprocessDriver
from chainlab.testing.job_server import JobServer
from tests.durability.chainlib import Ledger
from tests.jobs.conftest import FakeBackend

pytestmark = pytest.mark.anyio
K = EventKind


def mixed(backend: FakeBackend, order: list[str]) -> tuple[Toolbox, Chain]:
    tb = Toolbox("mixed")
    backend.register(tb, poll_every_s=0.01)

    @tb.tool(side_effects=True)
    async def pay(amount: int) -> dict[str, Any]:
        await anyio.sleep(0.15)  # the slowest of the batch: it ends last
        order.append("pay")
        return {"paid": amount}

    @tb.tool
    async def note(tag: str) -> str:
        await anyio.sleep(0.03)
        order.append(tag)
        return tag.upper()

    @tb.tool
    def join(paid: Any, sub: Any, job: Any) -> list[Any]:
        return [paid, sub, job]

    tb.add_chain(Chain.from_dict({"name": "sub", "steps": [
        {"id": "x", "tool": "note", "args": {"tag": "sub-x"}},
        {"id": "y", "tool": "note", "args": {"tag": "sub-y"}, "depends_on": ["x"]}],
        "output": "{{ steps.y.output }}"}))
    chain = Chain.from_dict({"name": "batch", "steps": [
        {"id": "pay", "tool": "pay", "args": {"amount": 5}},
        {"id": "sub", "tool": "chain:sub"},
        {"id": "job", "tool": "remote", "args": {"payload": {"n": 7}}},
        {"id": "join", "tool": "join", "args": {"paid": "{{ steps.pay.output }}",
                                                "sub": "{{ steps.sub.output }}",
                                                "job": "{{ steps.job.output }}"}}]})
    return tb, chain


async def test_a_mixed_batch_progresses_concurrently_and_its_results_keep_their_order() -> None:
    backend = FakeBackend(polls_to_finish=2)
    order: list[str] = []
    tb, chain = mixed(backend, order)
    async with Runtime(tb, MemoryStore()) as runtime:
        run = await runtime.start(chain)
        result = await run.wait()
    assert result.status == "succeeded"
    events = run.event_list()
    starts = {e.step_id: e.seq for e in events if e.kind == K.STEP_STARTED}
    ends = {e.step_id: e.seq for e in events if e.kind == K.STEP_SUCCEEDED}
    batch = ("pay", "sub", "job")
    # every member started before any member ended: they were in flight together
    assert max(starts[s] for s in batch) < min(ends[s] for s in batch)
    assert ends["job"] < ends["sub"] < ends["pay"]  # they end in another order...
    assert result.outputs["join"] == [{"paid": 5}, "SUB-Y", {"done": {"n": 7}}]  # ...in order
    assert order[-1] == "pay" and backend.submissions and all(
        n == 1 for n in backend.submissions.values())


async def test_a_stop_cancels_every_pending_handle_even_after_a_failed_preparation() -> None:
    """A step whose args cannot be resolved (a failure before any call) fails the run under
    fail_fast while a call, a sub-chain and a waiting remote job are in flight: nothing new
    starts, the running call ends (fail_fast lets it), the job's cancel(handle) is sent, and
    the run ends with no handle left open."""
    backend = FakeBackend()  # its job never finishes by itself
    order: list[str] = []
    tb, chain = mixed(backend, order)
    data = chain.to_dict()
    data["steps"].append({"id": "bad", "tool": "note", "depends_on": ["gate"],
                          "args": {"tag": "{{ steps.gate.output.missing }}"}})
    data["steps"].append({"id": "gate", "tool": "note", "args": {"tag": "gate"}})
    async with Runtime(tb, MemoryStore()) as runtime:
        run = await runtime.start(Chain.from_dict(data))
        with anyio.fail_after(10):
            result = await run.wait()
    assert result.status == "failed"
    steps = run.steps
    assert steps["bad"].status == "failed" and steps["bad"].error_kind == "invalid_input"
    job = steps["job"]
    assert job.status == "cancelled" and backend.cancels == [job.job["handle"]["id"]]
    assert steps["pay"].status == "succeeded" and "pay" in order  # a running call ends
    assert steps["join"].status == "cancelled"  # nothing new starts
    assert all(st.status not in ("running", "ready", "pending") for st in steps.values())


async def test_cancel_mid_batch_cancels_the_call_the_sub_chain_and_the_job() -> None:
    backend = FakeBackend()
    order: list[str] = []
    tb, chain = mixed(backend, order)
    async with Runtime(tb, MemoryStore()) as runtime:
        run = await runtime.start(chain)
        with anyio.fail_after(10):
            while not (run.steps["job"].job or {}).get("handle") \
                    or run.steps["sub/x"].status != "succeeded":
                await anyio.sleep(0.005)
        await run.cancel()
        result = await run.wait()
    assert result.status == "cancelled"
    steps = run.steps
    assert backend.cancels == [steps["job"].job["handle"]["id"]]
    assert steps["job"].status == "cancelled"
    # the unsafe call was cancelled in flight: its outcome is unknown, never silently lost
    assert steps["pay"].status == "in_doubt" and "pay" not in order
    assert steps["sub"].status in ("cancelled", "failed") and steps["sub/y"].status in (
        "cancelled", "succeeded")
    assert not [s for s, st in steps.items() if st.status in ("running", "ready", "pending")]


@pytest.mark.xdist_group("durability")
async def test_a_sigkill_mid_batch_then_resume_repeats_no_call_and_submits_no_job_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger_path = tmp_path / "ledger.jsonl"
    with JobServer(tmp_path / "jobs.json", duration_s=0.6) as server:
        env = {"PROTOCOL_LEDGER": str(ledger_path), "PROTOCOL_JOBS": server.url}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        import importlib

        from tests.runtime import protocol_tools
        tools = importlib.reload(protocol_tools)  # (its ledger and job server: this test's)
        db = tmp_path / "batch.db"
        driver = SubprocessDriver(tools.BATCH, db=db, kill_at="pay", env=env,
                                  tools="tests.runtime.protocol_tools:toolbox")
        assert driver.wait() == -9 and driver.killed, driver.output()
        ledger = Ledger(ledger_path, fsync=False)
        before = ledger.read()
        assert [e["step"] for e in before if e["tool"] == "pay"] == ["pay"]  # it took effect
        assert any(e["step"] == "sub/x" for e in before)
        assert sum(server.stats()["submissions"].values()) == 1
        async with Runtime(tools.toolbox, SQLiteStore(db)) as runtime:
            run = await driver.take_over(runtime)
            result = await run.wait()
            assert result.waiting == {"pay": "in_doubt"}  # unsafe, outcome unknown: a person
            entry = ledger.effect_for(run.steps["pay"].idempotency_key or "")
            assert entry is not None
            await run.resolve("pay", output=entry["out"], note="found in the ledger")
            with anyio.fail_after(20):
                result = await run.wait()
        assert result.status == "succeeded", run.state.failure
        paid, sub, job = result.outputs["join"]
        assert (paid, sub, job["payload"], job["result"]) == ({"paid": 5}, "SUB-X-Y", {"n": 7},
                                                              "done")
        after = ledger.read()
        assert [e["step"] for e in after].count("pay") == 1  # never repeated
        assert [e["step"] for e in after].count("sub/x") == 1  # recorded: not run again
        assert list(server.stats()["submissions"].values()) == [1]  # the job: once
