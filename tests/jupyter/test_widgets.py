"""The run widget through its Python API: ``button.click()`` does what a person's click does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import DecisionError, RunStateError
from chainlab.jupyter import RunWidget, wait_for_decision
from chainlab.jupyter.run_widget.inbox import ApprovalCard, DoubtCard
from chainlab.runtime import Run, RunStatus, Runtime
from chainlab.store import MemoryStore
from chainlab.testing import EventRecorder

from .conftest import Harness

pytestmark = pytest.mark.anyio


class Env:
    def __init__(self) -> None:
        self.toolbox = Toolbox("w")
        self.store = MemoryStore()
        self.runtime = Runtime(self.toolbox, self.store)
        self.calls: list[tuple[Any, ...]] = []
        self.gate = anyio.Event()
        calls = self.calls
        gate = self.gate

        @self.toolbox.tool
        def work(tag: str) -> str:
            calls.append(("work", tag))
            return f"done {tag}"

        @self.toolbox.tool
        async def gated(tag: str) -> str:
            await gate.wait()
            return tag

        @self.toolbox.tool(side_effects=True, requires_confirmation=True,
                           preview=lambda a: f"pay {a['amount']} EUR",
                           compensate=("refund", {"amount": "{{ input.amount }}"}))
        def pay(amount: int) -> str:
            calls.append(("pay", amount))
            return f"paid {amount}"

        @self.toolbox.tool(side_effects=True, idempotent=True)
        def refund(amount: int) -> str:
            calls.append(("refund", amount))
            return "refunded"

        @self.toolbox.tool(side_effects=True, timeout_s=0.05)
        async def post(text: str) -> str:
            await asyncio.sleep(5)
            return "posted"

    async def start(self, steps: list[dict[str, Any]], **kw: Any) -> tuple[Run, RunWidget]:
        chain = Chain.from_dict({"name": "w", "steps": steps})
        run = await self.runtime.start(chain, **kw)
        return run, RunWidget(run)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    e = Env()
    yield e
    await e.runtime.aclose()


def W(step_id: str, deps: list[str] = (), tool: str = "work", **args: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "depends_on": list(deps),
            "args": args or {"tag": step_id}}


PAY = [W("quote"), {"id": "charge", "tool": "pay", "args": {"amount": 30},
                    "depends_on": ["quote"]}, W("receipt", ["charge"])]


async def until(predicate: Any, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


# ---------------------------------------------------------------------- approvals inbox
async def test_approve_from_the_inbox_card(env: Env) -> None:
    run, w = await env.start(PAY)
    assert (await run.wait()).status == RunStatus.SUSPENDED
    w.refresh()
    card = w.inbox.card("charge")
    assert isinstance(card, ApprovalCard)
    assert "pay 30 EUR" in card.children[1].value and '"amount": 30' in card.children[2].value
    assert w.tabs.titles[0] == "Approvals (1)" and w.tabs.selected_index == 0
    card.approve_button.click()
    assert run.steps["charge"].status in ("ready", "running", "succeeded")  # applied at once
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED and result.outputs["charge"] == "paid 30"
    assert run.steps["charge"].approval["note"] == "approved in the widget"
    w.refresh()
    assert "charge" not in w.inbox.cards and w.tabs.titles[0] == "Approvals"


async def test_reject_needs_a_reason(env: Env) -> None:
    run, w = await env.start(PAY)
    await run.wait()
    w.refresh()
    card = w.inbox.card("charge")
    card.reject_button.click()
    assert "write a reason before rejecting" in card.message.value
    assert run.steps["charge"].status == "waiting_confirmation"
    card.reason.value = "too expensive"
    card.reject_button.click()
    assert run.steps["charge"].status == "rejected"
    await run.wait()
    assert run.steps["charge"].reason == "too expensive"
    assert run.steps["receipt"].status == "skipped"


async def test_approve_edited_args(env: Env) -> None:
    run, w = await env.start(PAY)
    await run.wait()
    w.refresh()
    card = w.inbox.card("charge")
    card.edit_toggle.value = True
    assert card.edit.layout.display == ""
    card.edit.value = '{"amount": "lots"}'
    card.approve_button.click()
    assert "args do not fit tool" in card.message.value  # validated again, shown in the card
    # issue 29 item 8: once, in the card; not a second copy above the DAG that goes stale
    assert w.error.value == "" and isinstance(w.last_error, DecisionError)
    assert card.message.value.count("args do not fit tool") == 1
    card.edit.value = "{not json"
    card.approve_button.click()
    assert "the edited args is not valid JSON" in card.message.value
    assert "args do not fit tool" not in card.message.value + w.error.value  # replaced
    card.edit.value = '{"amount": 12}'
    card.approve_button.click()
    assert card.message.value == "" and w.error.value == ""  # the next action clears it
    result = await run.wait()
    assert result.outputs["charge"] == "paid 12" and run.steps["charge"].approval["edited"]


async def test_card_survives_refreshes(env: Env) -> None:
    run, w = await env.start(PAY)
    await run.wait()
    w.refresh()
    card = w.inbox.card("charge")
    card.reason.value = "half-typed"
    w.refresh()
    assert w.inbox.card("charge") is card and card.reason.value == "half-typed"
    with pytest.raises(KeyError, match="no card for step 'quote'; waiting: charge"):
        w.inbox.card("quote")


async def test_wait_for_decision_returns_after_the_click(env: Env) -> None:
    run, w = await env.start(PAY)
    await run.wait()
    w.refresh()
    asyncio.get_running_loop().call_later(0.05, w.inbox.card("charge").approve_button.click)
    status = await wait_for_decision(run, "charge")
    assert status in ("ready", "running", "succeeded")
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    assert await wait_for_decision(run, "charge") == "succeeded"  # nothing to wait for


# ---------------------------------------------------------------------- step-through
async def test_step_button_releases_exactly_one_step(env: Env) -> None:
    run, w = await env.start([W("a"), W("b"), W("c"), W("d", ["a", "b", "c"])], paused=True)
    rec = EventRecorder()
    run.subscribe(rec)
    await until(lambda: run.ready_steps() == ["a", "b", "c"])
    w.refresh()
    assert w.next_step.options == ("a", "b", "c") and not w.buttons["step"].disabled
    assert "ready queue: <code>a</code>, <code>b</code>, <code>c</code>" in w.queue.value
    w.buttons["step"].click()
    await until(lambda: run.steps["a"].status == "succeeded")
    await asyncio.sleep(0.02)  # give the scheduler every chance to start more
    assert rec.started() == ["a"]
    assert [run.steps[s].status for s in "bcd"] == ["ready", "ready", "pending"]
    w.refresh()
    w.next_step.value = "c"
    w.buttons["step"].click()
    await until(lambda: run.steps["c"].status == "succeeded")
    await asyncio.sleep(0.02)
    assert rec.started() == ["a", "c"] and run.paused
    w.buttons["continue"].click()
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    assert rec.started() == ["a", "c", "b", "d"]


async def test_breakpoint_pauses_and_step_goes_on(env: Env) -> None:
    from chainlab import RunOptions

    run, w = await env.start([W("a"), W("b", ["a"]), W("c", ["b"])],
                             options=RunOptions(breakpoints=["b"]))
    await until(lambda: run.paused and run.steps["a"].status == "succeeded")
    w.refresh()
    assert run.state.paused_at == "b"
    assert "at breakpoint <code>b</code>" in w.header.value
    assert "breakpoints: <code>b</code>" in w.queue.value
    assert "● break" in w.dag.caption("b") or w.dag.live is None
    w.buttons["step"].click()
    await until(lambda: run.steps["b"].status == "succeeded")
    assert run.steps["c"].status in ("pending", "ready")
    w.buttons["continue"].click()
    assert (await run.wait()).status == RunStatus.SUCCEEDED


async def test_errors_are_shown_never_swallowed(env: Env) -> None:
    run, w = await env.start([W("a", tool="gated")])
    await until(lambda: run.steps["a"].status == "running")
    w.refresh()
    w.buttons["step"].click()  # nothing is ready: the runtime refuses
    assert isinstance(w.last_error, RunStateError)
    assert "could not step" in w.error.value and "no step is ready to run" in w.error.value
    w.buttons["pause"].click()
    assert w.error.value == "" and run.paused  # the next action clears the message
    with pytest.raises(ValueError, match="no button 'fly'"):
        w.press("fly")
    env.gate.set()
    w.buttons["continue"].click()
    assert (await run.wait()).status == RunStatus.SUCCEEDED


async def test_cancel_and_rollback_buttons(env: Env) -> None:
    run, w = await env.start([*PAY, W("slow", ["receipt"], tool="gated")])
    await run.wait()
    w.refresh()
    w.inbox.card("charge").approve_button.click()
    await until(lambda: run.steps["slow"].status == "running")
    w.buttons["cancel"].click()
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK  # cancel compensates completed steps
    assert env.calls[-1] == ("refund", 30)

    run2, w2 = await env.start([*PAY])
    await run2.wait()
    w2.refresh()
    w2.inbox.card("charge").approve_button.click()
    assert (await run2.wait()).status == RunStatus.SUCCEEDED
    w2.refresh()
    assert not w2.buttons["rollback"].disabled and w2.buttons["cancel"].disabled
    w2.buttons["rollback"].click()
    assert run2.status == RunStatus.SUCCEEDED and w2.rollback_confirm.is_open  # asks first
    assert "compensates, most recent first: <code>charge</code>." in (
        w2.rollback_confirm.message.value)
    w2.rollback_confirm.yes.click()
    await until(lambda: run2.status == RunStatus.ROLLED_BACK)
    assert env.calls[-1] == ("refund", 30)


# ---------------------------------------------------------------------- in doubt
async def test_doubt_card_resolves(env: Env) -> None:
    run, w = await env.start([{"id": "p", "tool": "post", "args": {"text": "hi"}},
                              W("after", ["p"])])
    result = await run.wait()
    assert result.status == RunStatus.SUSPENDED and result.waiting == {"p": "in_doubt"}
    w.refresh()
    card = w.inbox.card("p")
    assert isinstance(card, DoubtCard) and "is in doubt after attempt 1" in card.children[0].value
    card.output.value = "{oops"
    card.took_effect_button.click()
    assert "the output is not valid JSON" in card.message.value
    card.output.value = '"posted by hand"'
    card.took_effect_button.click()
    assert run.steps["p"].status == "succeeded"
    with anyio.fail_after(5):
        result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED and result.outputs["p"] == "posted by hand"
    assert result.outputs["after"] == "done after"


# ---------------------------------------------------------------------- live updates
async def test_widget_keeps_updating_after_the_cell_returned(env: Env) -> None:
    run, w = await env.start([W("a", tool="gated"), W("b", ["a"])])
    await until(lambda: run.steps["a"].status == "running")
    await asyncio.sleep(0.25)  # the redraw after "running" (throttled, from the loop)
    assert "running" in w.header.value
    env.gate.set()  # nobody calls refresh() from here on: the subscription does
    await run.wait()
    await until(lambda: "succeeded" in w.header.value and "2 succeeded" in w.header.value)
    if w.dag.live is not None:
        assert w.dag.caption("b").endswith("succeeded")
    assert "[" in w.event_log.value and "run_succeeded" in w.event_log.value


async def test_stored_run_shows_history_then_resumes(env: Env) -> None:
    run, _ = await env.start(PAY)
    await run.wait()
    await env.runtime.aclose()  # the process that drove it is gone
    other = Runtime(env.toolbox, env.store)
    stored = other.get_run(run.run_id)
    w = RunWidget(stored)
    assert not stored.active
    assert "stored run, not driven by this kernel" in w.header.value
    assert "step_waiting_confirmation charge" in w.event_log.value
    assert not w.buttons["resume"].disabled and w.buttons["pause"].disabled
    w.buttons["resume"].click()
    assert w.run.active and w.run is not stored
    w.refresh()
    w.inbox.card("charge").approve_button.click()
    assert (await w.run.wait()).status == RunStatus.SUCCEEDED
    await other.aclose()


async def test_widget_repr_is_stable(env: Env) -> None:
    run, w = await env.start([W("a")])
    assert repr(w) == f"RunWidget(run {run.run_id}, chain 'w')"
    await run.wait()


async def test_widget_from_the_magic_reuses_one_widget(shop: Harness) -> None:
    await shop.ok("run = %chain run shop\nawait run.wait()")
    run = shop.ns["run"]
    w = shop.session.widgets[run.run_id]
    await shop.ok("from chainlab.jupyter import widget\nsame = widget(run)")
    assert shop.ns["same"] is w
    w.refresh()
    w.inbox.card("out").approve_button.click()
    assert (await run.wait()).status == RunStatus.SUCCEEDED


async def test_inspector_log_and_timeline_tabs(env: Env) -> None:
    run, w = await env.start([W("a"), W("b", ["a"])])
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    w.refresh()
    w.inspector.select("b")
    details = w.inspector.details.value
    assert "<th>status</th><td>succeeded</td>" in details
    assert "<th>tool</th><td>work</td>" in details
    assert '"tag": "b"' in details and "done b" in details and "call #1" in details
    assert "<th>idempotency key</th>" in details
    with pytest.raises(ValueError, match="no step 'z'; steps: a, b"):
        w.inspector.select("z")
    assert "run_succeeded" in w.event_log.value.splitlines()[-1]
    w.tabs.selected_index = 3  # the timeline draws itself when its tab is shown
    assert w.timeline.drawing  # "drawing timeline..." until the chart replaces it
    await until(lambda: not w.timeline.drawing)
    assert list(w.timeline.frame["step_id"]) == ["a", "b"]
    assert type(w.timeline.figure).__name__ == "TimelineFigure"
    assert w.timeline.drawn_at == run.state.last_seq


async def test_event_lines() -> None:
    from chainlab.jupyter.run_widget.event_log import event_line
    from chainlab.store import Event

    ev = Event("r", 12, 0.0, 1, "step_retry_scheduled", "fetch", 2,
               {"error_kind": "transient", "error": "flaky", "delay_s": 0.5})
    assert event_line(ev) == "[12] step_retry_scheduled fetch #2  transient: flaky (retry in 0.5 s)"
    ev = Event("r", 3, 0.0, 2, "run_resumed", None, None, {"reason": "recovery", "epoch": 2})
    assert event_line(ev) == "[3] run_resumed  recovery, epoch 2"


def test_event_log_fills_gaps_from_the_store() -> None:
    from chainlab.jupyter.run_widget.event_log import EventLog
    from chainlab.store import Event

    def ev(seq: int) -> Event:
        return Event("r", seq, 0.0, 1, "step_ready", "a")

    log = EventLog(lines=2)
    log.add(ev(3))  # subscribed late: 1 and 2 were emitted before
    assert log.gap
    log.fill([ev(1), ev(2)])
    log.add(ev(3))  # a duplicate is ignored
    log.add(ev(4))
    assert not log.gap and [e.seq for e in log.events] == [1, 2, 3, 4]
    log.refresh()
    assert log.value == ('<pre class="cl-pre">... 2 earlier events (run.event_log() has them '
                         'all)\n[3] step_ready a\n[4] step_ready a</pre>')


async def test_unload_shows_runs_as_static_dags_again(shop: Harness) -> None:
    from chainlab.jupyter import load_ipython_extension, unload_ipython_extension

    await shop.ok("run = %chain run trip\nawait run.wait()")
    unload_ipython_extension(shop.ip)
    try:
        data, _ = shop.ip.display_formatter.format(shop.ns["run"])
        assert "application/vnd.jupyter.widget-view+json" not in data
        assert "image/svg+xml" in data or "not drawn" in data["text/plain"]
    finally:
        load_ipython_extension(shop.ip)
