"""Experiments (DESIGN §22): each call decided by its contract (effect-free live, recorded
side effects answered from the recording, new side effects stopped as needs_live_effect or
asked when listed live), replays kept out of ordinary run lists, the table's rows, bad input
(nothing started), storage read back."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import ExperimentError, ExperimentNotFoundError, PlanError
from chainlab.events import RunStatus, SkipReason
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def support_toolbox(ledger: list[str]) -> Toolbox:
    """lookup (effect-free) -> price (effect-free) -> refund (side effect, recorded in
    ``ledger`` each time it is really made)."""
    tb = Toolbox("support")

    @tb.tool
    def lookup(order: str) -> dict[str, Any]:
        ledger.append(f"lookup {order}")
        return {"order": order, "paid": 40 if order.endswith("1") else 25}

    @tb.tool
    def price(paid: int, share: float) -> int:
        ledger.append("price")
        return int(paid * share)

    @tb.tool(side_effects=True)
    def refund(order: str, amount: int) -> str:
        ledger.append(f"refund {order} {amount}")
        return f"refunded {amount} on {order}"

    return tb


def support_chain(share: Any = "{{ context.share }}") -> Chain:
    return Chain.from_dict({"name": "support", "steps": [
        {"id": "look", "tool": "lookup", "args": {"order": "{{ context.order }}"}},
        {"id": "amount", "tool": "price",
         "args": {"paid": "{{ steps.look.output.paid }}", "share": share}},
        {"id": "pay", "tool": "refund",
         "args": {"order": "{{ context.order }}", "amount": "{{ steps.amount.output }}"}},
    ], "output": "{{ steps.pay.output }}"})


async def recorded(runtime: Runtime, orders: list[str], share: float = 0.5) -> list[str]:
    ids = []
    for order in orders:
        run = await runtime.start(support_chain(), {"order": order, "share": share})
        assert (await run.wait()).status == RunStatus.SUCCEEDED
        ids.append(run.run_id)
    return ids


async def test_same_change_answers_every_side_effect_from_the_recording() -> None:
    ledger: list[str] = []
    async with Runtime(support_toolbox(ledger), MemoryStore()) as runtime:
        ids = await recorded(runtime, ["o1", "o2"])
        ledger.clear()
        exp = await runtime.experiment(ids)
        rows = exp.rows()
        assert [r["outcome"] for r in rows] == ["same", "same"]
        assert not any(entry.startswith("refund") for entry in ledger)  # never made again
        assert sorted(ledger) == ["lookup o1", "lookup o2", "price", "price"]  # live
        assert all(r["effects_made"] == 0 for r in rows)
        # the replays are kept out of ordinary run lists, listed with their experiment
        assert {r.run_id for r in runtime.runs()} == set(ids)
        assert {r.run_id for r in runtime.runs(experiment=exp.experiment_id)} == {
            r["new_run"] for r in rows}


async def test_recorded_true_answers_effect_free_calls_too() -> None:
    ledger: list[str] = []
    async with Runtime(support_toolbox(ledger), MemoryStore()) as runtime:
        ids = await recorded(runtime, ["o1"])
        ledger.clear()
        exp = await runtime.experiment(ids, recorded=True)
        assert exp.rows()[0]["outcome"] == "same"
        assert ledger == []


async def test_a_new_side_effect_stops_the_replay_and_is_not_made() -> None:
    ledger: list[str] = []
    async with Runtime(support_toolbox(ledger), MemoryStore()) as runtime:
        ids = await recorded(runtime, ["o1", "o2"])
        ledger.clear()
        plan = await runtime.experiment_plan(ids, context={"share": 0.75})
        decisions = {(r["run"], r["step"]): r["decision"] for r in plan.table()}
        assert decisions[(ids[0], "pay")] == "at_run_time"
        assert decisions[(ids[0], "look")] == "live"
        exp = await runtime.experiment(ids, context={"share": 0.75})
        rows = exp.rows()
        assert [r["outcome"] for r in rows] == ["needs_live_effect"] * 2
        assert rows[0]["needs_live_effect"] == ['pay=refund({"amount": 30, "order": "o1"})']
        assert rows[0]["args_changed"] == ["amount: share: 0.5 -> 0.75"]  # pay: not made
        assert not any(e.startswith("refund") for e in ledger)
        replay = runtime.get_run(rows[0]["new_run"]).state
        assert replay.steps["pay"].reason == SkipReason.NEEDS_LIVE_EFFECT
        assert "needs_live_effect: NOT made" in exp.diff(ids[0])


async def test_a_listed_live_tool_waits_for_approval_then_is_made_once() -> None:
    ledger: list[str] = []
    async with Runtime(support_toolbox(ledger), MemoryStore()) as runtime:
        ids = await recorded(runtime, ["o1"])
        ledger.clear()
        exp = await runtime.experiment(ids, context={"share": 0.75}, live=["refund"])
        row = exp.rows()[0]
        assert row["outcome"] == "waiting" and not any(e.startswith("refund") for e in ledger)
        run = runtime.get_run(row["new_run"])
        await runtime.decide(run.run_id, "pay", "approve")
        assert (await run.wait()).status == RunStatus.SUCCEEDED
        assert [e for e in ledger if e.startswith("refund")] == ["refund o1 30"]
        after = runtime.experiment_result(exp.experiment_id).rows()[0]
        assert after["outcome"] == "changed" and after["effects_made"] == 1


async def test_a_changed_chain_reuses_recorded_effects_where_args_stay() -> None:
    ledger: list[str] = []
    async with Runtime(support_toolbox(ledger), MemoryStore()) as runtime:
        ids = await recorded(runtime, ["o1"])
        ledger.clear()
        exp = await runtime.experiment(ids, chain=support_chain(share=0.5),
                                       scorers={"same_output": lambda a, b: a.output == b.output,
                                                "broken": lambda a, b: 1 / 0})
        row = exp.rows()[0]
        assert row["outcome"] == "same"
        assert row["score:same_output"] is True
        assert row["score:broken"].startswith("error: ZeroDivisionError")
        assert not any(e.startswith("refund") for e in ledger)


async def test_bad_input_is_listed_and_nothing_starts() -> None:
    ledger: list[str] = []
    store = MemoryStore()
    async with Runtime(support_toolbox(ledger), store) as runtime:
        ids = await recorded(runtime, ["o1"])
        other = await runtime.start(Chain.from_dict({"name": "other", "steps": [
            {"id": "x", "tool": "lookup", "args": {"order": "o9"}}]}))
        await other.wait()
        before = len(store.list_runs())
        with pytest.raises(ExperimentError) as err:
            await runtime.experiment([*ids, "nope", other.run_id],
                                     agents={"helper": object()},
                                     scorers={"s": 3})
        text = str(err.value)
        assert "run 'nope' does not exist" in text
        assert "different chains (other: " in text and "support: " in text
        assert "agent 'helper' is not used" in text
        assert "scorer 's' is not callable" in text
        with pytest.raises(PlanError):
            await runtime.experiment(ids, context={"share": float("nan")})
        assert len(store.list_runs()) == before
        assert runtime.experiments() == []
        assert store.list_runs(experiment="anything") == []
        with pytest.raises(ExperimentNotFoundError):
            runtime.experiment_result("exp-nope")


async def test_delete_removes_the_replays_and_keeps_the_recording() -> None:
    ledger: list[str] = []
    store = MemoryStore()
    async with Runtime(support_toolbox(ledger), store) as runtime:
        ids = await recorded(runtime, ["o1", "o2"])
        exp = await runtime.experiment(ids, name="again")
        assert [e.name for e in runtime.experiments()] == ["again"]
        deleted = runtime.delete_experiment(exp.experiment_id)
        assert sorted(deleted) == sorted(r["new_run"] for r in exp.rows())
        assert runtime.experiments() == []
        assert {r.run_id for r in store.list_runs()} == set(ids)


async def test_the_table_and_the_plot() -> None:
    pytest.importorskip("pandas")
    ledger: list[str] = []
    async with Runtime(support_toolbox(ledger), MemoryStore()) as runtime:
        ids = await recorded(runtime, ["o1", "o2"])
        exp = await runtime.experiment(ids, context={"share": 0.75},
                                       scorers={"ok": lambda a, b: b.status == "succeeded"})
        frame = exp.table()
        assert list(frame["run"]) == ids and list(frame["outcome"]) == ["needs_live_effect"] * 2
        assert frame.columns[-1] == "score:ok" and list(frame["score:ok"]) == [False, False]
        assert frame.loc[0, "needs_live_effect"] == 'pay=refund({"amount": 30, "order": "o1"})'
        fig = exp.plot()
        assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ids
        assert fig._repr_png_()[:4] == b"\x89PNG"


async def test_a_running_run_is_refused_and_runs_select_by_chain_status_limit() -> None:
    import anyio

    ledger: list[str] = []
    tb = support_toolbox(ledger)
    gate = anyio.Event()

    @tb.tool(name="hold")
    async def hold() -> str:
        await gate.wait()
        return "done"

    store = MemoryStore()
    async with Runtime(tb, store) as runtime:
        ids = await recorded(runtime, ["o1", "o2", "o3"])
        busy = await runtime.start(Chain.from_dict({"name": "busy", "steps": [
            {"id": "h", "tool": "hold"}]}))
        with pytest.raises(ExperimentError, match=f"run '{busy.run_id}' is still running"):
            await runtime.experiment([ids[0], busy.run_id])
        assert runtime.experiments() == [] and store.list_runs(experiment=None)[0] == \
            store.get_run(busy.run_id)
        assert [r.run_id for r in runtime.runs(chain="support", status="succeeded",
                                               limit=2)] == ids[::-1][:2]
        assert [r.run_id for r in runtime.runs(status=["running"])] == [busy.run_id]
        gate.set()
        await busy.wait()
