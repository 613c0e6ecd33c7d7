"""The run widget's history scrubber, "Fork from here", ``%chain fork`` and ``%chain show``
of a stored run, through their Python API (``button.click()``, ``slider.value = k``)."""

from __future__ import annotations

import html
import re
from typing import Any

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import RunStateError
from chainlab.jupyter import RunWidget
from chainlab.runtime import RunStatus, Runtime
from chainlab.store import MemoryStore

from .conftest import Harness

pytestmark = pytest.mark.anyio


def caption(widget: RunWidget, step_id: str) -> str:
    """The status caption the DAG's front end was told ``step_id`` shows (what the node
    shows), without the status symbol (✓, ✗, ...)."""
    return re.sub(r"^[^a-z]+", "", widget.dag.caption(step_id))


class Env:
    def __init__(self) -> None:
        self.toolbox = Toolbox("scrub")
        self.ledger: list[str] = []
        ledger = self.ledger

        @self.toolbox.tool
        def fetch(n: int) -> int:
            ledger.append("fetch")
            return n

        @self.toolbox.tool(retry={"max_attempts": 1})
        def parse(x: int) -> int:
            ledger.append("parse")
            if x > 5:
                raise ValueError(f"{x} is too big")
            return x

        @self.toolbox.tool(side_effects=True)
        def send(v: int) -> str:
            ledger.append("send")
            return f"sent {v}"

        self.store = MemoryStore()
        self.runtime = Runtime(self.toolbox, self.store)
        self.chain = Chain.from_dict({"name": "scrub", "steps": [
            {"id": "a", "tool": "fetch", "args": {"n": "{{ context.n }}"}},
            {"id": "b", "tool": "parse", "args": {"x": "{{ steps.a.output }}"}},
            {"id": "c", "tool": "send", "args": {"v": "{{ steps.b.output }}"}},
        ]})

    async def failed_run(self) -> Any:
        run = await self.runtime.start(self.chain, {"n": 9})
        assert (await run.wait()).status == RunStatus.FAILED
        return run


def seq_of(run: Any, kind: str, step_id: str | None = None) -> int:
    return next(e.seq for e in run.event_list() if e.kind == kind
                and (step_id is None or e.step_id == step_id))


async def test_scrub_back_shows_the_past_and_live_returns() -> None:
    env = Env()
    run = await env.failed_run()
    w = RunWidget(run)
    svg = w.dag.canvas.svg
    assert w.scrubber.seq is None and w.scrubber.slider.max == run.last_seq
    assert caption(w, "b").startswith("failed")
    k = seq_of(run, "step_started", "b")
    w.scrubber.slider.value = k  # what dragging the slider does
    assert w.scrubber.seq == k
    assert caption(w, "b").startswith("running")
    assert caption(w, "a").startswith("succeeded")
    assert caption(w, "c").startswith("pending")
    assert w.dag.canvas.svg == svg  # a style patch, never a re-layout
    assert f"history: after event {k} of {run.last_seq} (read-only)" in w.header.value
    assert all(b.disabled for b in w.buttons.values())
    assert "step_started b #1" in w.scrubber.label.value
    assert "scrubbed to event" in w.event_log.value and "step_failed" not in w.event_log.value
    w.inspector.select("b")
    assert "running" in w.inspector.details.value
    w.scrubber.prev_button.click()
    assert w.scrubber.seq == k - 1 and caption(w, "b").startswith("ready")
    w.scrubber.next_button.click()
    assert w.scrubber.seq == k
    w.scrubber.live_button.click()
    assert w.scrubber.seq is None
    assert caption(w, "b").startswith("failed")
    assert "history" not in w.header.value
    assert "step_failed" in w.event_log.value
    assert w.inspector.details.value.count("failed") >= 1
    w.scrubber.scrub_to(0)
    assert {caption(w, s).split()[0] for s in "abc"} == {"pending"}
    with pytest.raises(RunStateError, match="there is no event 999"):
        w.scrubber.scrub_to(999)
    w.close()


async def test_approvals_are_read_only_in_the_past() -> None:
    env = Env()
    run = await env.failed_run()
    fork = await env.runtime.fork(run.run_id, outputs={"b": 3})
    assert (await fork.wait()).waiting == {"c": "waiting_confirmation"}
    w = RunWidget(fork)
    card = w.inbox.card("c")
    notes = [c.value for c in card.children if "cl-fork-note" in str(getattr(c, "value", ""))]
    # (issue 29: "↳ fork:", the fork sign ⑂ was an empty box with Debian's default fonts)
    assert notes == [
        f'<div class="cl-note cl-fork-note">↳ fork: skipped in run {run.run_id}</div>']
    w.scrubber.scrub_to(fork.last_seq)  # the same state, but history: read-only
    assert w.inbox.cards and all(_all_disabled(c) for c in w.inbox.cards.values())
    w.scrubber.scrub_to(2)  # before the confirmation was asked
    assert not w.inbox.cards or "c" not in w.inbox.cards
    w.scrubber.live()
    card = w.inbox.card("c")
    assert not _all_disabled(card)
    card.approve_button.click()
    assert (await fork.wait()).status == RunStatus.SUCCEEDED
    assert env.ledger.count("send") == 1
    w.close()


def _all_disabled(widget: Any) -> bool:
    buttons = [c for c in _walk(widget) if hasattr(c, "disabled") and c is not widget]
    return bool(buttons) and all(c.disabled for c in buttons)


def _walk(widget: Any) -> list[Any]:
    out = [widget]
    for child in getattr(widget, "children", ()):
        out += _walk(child)
    return out


async def test_live_run_keeps_following_while_scrubbed() -> None:
    env = Env()
    run = await env.runtime.start(env.chain, {"n": 2}, paused=True)
    w = RunWidget(run)
    w.scrubber.scrub_to(1)
    await run.unpause()
    await run.wait()
    w.refresh()
    assert w.scrubber.seq == 1 and w.scrubber.slider.max == run.last_seq
    assert caption(w, "c").startswith("pending")
    w.scrubber.live()
    assert caption(w, "c").startswith("succeeded")
    w.close()


async def test_fork_from_here() -> None:
    env = Env()
    run = await env.failed_run()
    w = RunWidget(run)
    env.ledger.clear()
    w.inspector.select("a")
    panel = w.inspector.fork
    assert not panel.open_button.disabled
    panel.open_button.click()
    assert '"n": 9' in panel.args.value
    assert "<b>rerun</b>" in panel.plan.value and "named in rerun" in panel.plan.value
    panel.args.value = '{"n": 3}'
    panel.preview_button.click()
    assert "args changed (n: 9 -&gt; 3)" in panel.plan.value
    assert "<b>confirm</b>" in panel.plan.value
    panel.fork_button.click()
    with anyio.fail_after(10):
        while panel.forked is None:
            await anyio.sleep(0.01)
    fork = panel.forked
    assert fork is not None and fork.record.meta["forked_from"] == run.run_id
    assert (await fork.wait()).waiting == {"c": "waiting_confirmation"}
    assert sorted(env.ledger) == ["fetch", "parse"]
    panel.args.value = "[1"
    panel.preview_button.click()
    assert "args are not JSON" in panel.plan.value
    w.close()


async def test_fork_magic_plan_and_start(shop: Harness) -> None:
    sh = shop
    await sh.ok("run = %chain run shop --tools tb")
    await sh.ok("await run.wait()\nawait run.approve('out')\nres = await run.wait()")
    assert sh.ns["res"].status == RunStatus.SUCCEEDED
    sh.ns["calls"].clear()
    frame = await sh.ok("%chain fork run --tools tb --plan")
    assert frame[["step", "decision"]].values.tolist() == [["get", "reuse"], ["out", "reuse"]]
    frame = await sh.ok("%chain fork run --tools tb --plan --args get='{\"n\": 2}'")
    assert frame["decision"].tolist() == ["rerun", "confirm"]
    # issue 29 item 9: the reason column is shown whole (pandas cuts cells at 50 characters)
    reasons = frame["reason"].tolist()
    assert max(map(len, reasons)) > 50, reasons
    text, page = repr(frame), frame._repr_html_()
    assert all(r in text and html.escape(r, quote=False) in page for r in reasons), text
    sh.displayed()
    fork = await sh.ok("%chain fork run --tools tb --from get")
    assert fork.record.meta["forked_from"] == sh.ns["run"].run_id
    res = await fork.wait()
    assert res.waiting == {"out": "waiting_confirmation"}
    assert sh.ns["calls"] == [("fetch", 3)]
    assert any("RunWidget" in d for d in sh.displayed())
    err = await sh.usage_error("%chain fork run --tools tb --output nope=1")
    assert "no step 'nope'" in err
    err = await sh.usage_error("%chain fork run --tools tb --args get=1")
    assert "--args get: args are a JSON object, got int" in err
    err = await sh.usage_error("%chain fork run --tools tb --output get=oops")
    assert "--output get: 'oops' is not JSON" in err
    err = await sh.usage_error("%chain fork run --tools tb --args get='{\"n\": \"x\"}'")
    assert "[invalid_args] step 'get', args.n: n='x' does not fit tool 'fetch'" in err


async def test_show_a_stored_run_with_the_scrubber(shop: Harness) -> None:
    sh = shop
    db = sh.tmp_path / "runs.db"
    await sh.ok(f"run = %chain run trip --tools tb --db {db}")
    await sh.ok("res = await run.wait()")
    run_id = sh.ns["run"].run_id
    # a new session: nothing in memory but the store file
    from chainlab.jupyter import session as session_module

    old = session_module._SESSIONS.pop(id(sh.ip))
    try:
        from chainlab.jupyter import load_ipython_extension

        load_ipython_extension(sh.ip)
        sh.displayed()
        await sh.ok(f"%chain show {run_id} --db {db}")
        w = sh.session.widgets[run_id]
        assert not w.run.active
        k = seq_of(w.run, "step_succeeded", "flight")
        w.scrubber.slider.value = k
        assert caption(w, "flight").startswith("succeeded")
        assert caption(w, "hotel").split()[0] in ("pending", "ready")
        w.scrubber.live_button.click()
        assert caption(w, "car").startswith("succeeded")
    finally:
        new = session_module._SESSIONS.pop(id(sh.ip), None)
        if new is not None:
            for widget in new.widgets.values():
                widget.close()
            new.close()
        session_module._SESSIONS[id(sh.ip)] = old


async def test_a_typed_event_and_the_steps_own_events() -> None:
    """Issue 40: any event is reached by typing its number (the slider of a 10,000-event run
    moved 58 events a pixel); « » walk the events of the step shown in the Inspector."""
    env = Env()
    run = await env.failed_run()
    w = RunWidget(run)
    k = seq_of(run, "step_started", "b")
    w.scrubber.box.value = k  # what typing the number and Enter does
    assert w.scrubber.seq == k and w.scrubber.slider.value == k
    assert f"after event {k} of {run.last_seq}" in w.header.value
    w.inspector.select("b")
    b_events = [ev.seq for ev in run.event_list() if ev.step_id == "b"]
    w.scrubber.step_next_button.click()
    assert w.scrubber.seq == b_events[b_events.index(k) + 1]
    w.scrubber.step_prev_button.click()
    w.scrubber.step_prev_button.click()
    assert w.scrubber.seq == b_events[b_events.index(k) - 1]
    assert w.scrubber.box.value == w.scrubber.seq  # the box follows the slider and buttons
    w.scrubber.scrub_to(b_events[0])
    w.scrubber.step_prev_button.click()  # nothing before b's first event: stays
    assert w.scrubber.seq == b_events[0]
    w.close()


async def test_a_position_sends_only_the_nodes_that_look_different() -> None:
    """Issue 40: the DAG's restyle names only the steps whose status or caption differs
    from what the front end shows (one message per redraw), never the whole picture."""
    env = Env()
    run = await env.failed_run()
    w = RunWidget(run)
    k = seq_of(run, "step_started", "b")
    before = dict(w.dag.shown_by_step())
    patches = w.dag.patches
    w.scrubber.scrub_to(k)
    after = w.dag.shown_by_step()
    differs = {s for s in after if after[s] != before[s]}
    assert set(w.dag.last_patch) == differs and differs  # b running, c pending (not a)
    assert "a" not in w.dag.last_patch and w.dag.patches == patches + 1
    w.scrubber.scrub_to(k)  # the same position: nothing to send
    assert w.dag.last_patch == {} and w.dag.patches == patches + 1
    w.scrubber.step(+1)
    assert set(w.dag.last_patch) <= {"b"}  # one event moves one step at most
    # a view that is drawn (a cell shown again) gets the whole state once
    w.dag._front_end_msg(None, {"type": "ready"})
    assert w.dag.patches == patches + 2 + bool(w.dag.last_patch)
    w.close()
