"""The team inbox (``Runtime.waiting_decisions``): every waiting confirmation and in-doubt
step of every unfinished run in a store, read by another store handle (as another process
would), on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.runtime.coordination.inbox import WaitingDecision
from chainlab.store import open_store
from tests.store.test_watch import store_url

pytestmark = pytest.mark.anyio


def toolbox() -> Toolbox:
    tb = Toolbox("inbox")

    @tb.tool
    def quote(amount: int) -> int:
        return amount

    @tb.tool(side_effects=True, requires_confirmation=True,
             preview=lambda a: f"pay {a['amount']} EUR")
    def pay(amount: int) -> str:
        return f"paid {amount}"

    @tb.tool(side_effects=True, requires_confirmation=True)  # no preview: the args show
    def delete(table: str) -> str:
        return f"deleted {table}"

    @tb.tool(side_effects=True)  # not idempotent: an unknown outcome is in doubt
    def send(text: str) -> str:
        raise ConnectionResetError(f"connection reset while sending {text!r}")

    return tb


def chain(name: str, *steps: dict[str, Any]) -> Chain:
    return Chain.from_dict({"name": name, "steps": list(steps),
                            "options": {"on_failure": "continue"}})


QUOTE = {"id": "quote", "tool": "quote", "args": {"amount": 30}}
PAY = {"id": "pay", "tool": "pay", "args": {"amount": "{{ steps.quote.output }}"}}
SEND = {"id": "send", "tool": "send", "args": {"text": "hi"}}
DELETE = {"id": "drop", "tool": "delete", "args": {"table": "t1"}}


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request.param, tmp_path)


async def test_every_waiting_decision_of_every_unfinished_run(url: str) -> None:
    store = open_store(url)
    try:
        async with Runtime(toolbox(), store) as runtime:
            for run_id, c in [("r-pay", chain("payment", QUOTE, PAY)),
                              ("r-send", chain("mail", SEND)),
                              ("r-both", chain("both", DELETE, SEND)),
                              ("r-done", chain("done", QUOTE)),
                              ("r-rejected", chain("rejected", QUOTE, PAY))]:
                run = await runtime.start(c, {}, run_id=run_id)
                await run.wait()
            rejected = runtime.get_run("r-rejected")
            await rejected.reject("pay", "too much")
            assert (await rejected.wait()).status == "failed"
        other = open_store(url)  # another handle on the same database, as another process
        try:
            items = Runtime(Toolbox("none"), other).waiting_decisions()
            events = {r: other.load_events(r) for r in ("r-pay", "r-send", "r-both")}
        finally:
            other.close()
    finally:
        store.close()

    def cause(run_id: str, step_id: str, kind: str) -> Any:
        return next(e for e in events[run_id] if e.step_id == step_id and e.kind == kind)

    error = "transient: ConnectionResetError: connection reset while sending 'hi'"
    expected = [
        WaitingDecision("r-pay", "pay", "pay", "confirm", "pay 30 EUR", 0.0, "payment",
                        args={"amount": 30}, attempt=0),
        WaitingDecision("r-send", "send", "send", "in_doubt", error, 0.0, "mail",
                        args={"text": "hi"}, error=error, attempt=1),
        WaitingDecision("r-both", "drop", "delete", "confirm", {"table": "t1"}, 0.0, "both",
                        args={"table": "t1"}, attempt=0),
        WaitingDecision("r-both", "send", "send", "in_doubt", error, 0.0, "both",
                        args={"text": "hi"}, error=error, attempt=1),
    ]
    kinds = {"confirm": "step_waiting_confirmation", "in_doubt": "step_in_doubt"}
    expected = [d.__class__(**{**d.to_dict(),
                               "since": cause(d.run_id, d.step_id, kinds[d.kind]).ts,
                               "seq": cause(d.run_id, d.step_id, kinds[d.kind]).seq})
                for d in expected]
    assert sorted(items, key=lambda d: (d.run_id, d.step_id)) == sorted(
        expected, key=lambda d: (d.run_id, d.step_id))
    assert [d.since for d in items] == sorted(d.since for d in items)  # oldest first
    assert items[0].to_dict()["run_id"] == items[0].run_id


async def test_an_empty_store_and_a_run_that_vanished(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "empty.db"))
    try:
        runtime = Runtime(Toolbox("none"), store)
        assert runtime.waiting_decisions() == []
        from chainlab.runtime.coordination.inbox import waiting_decisions

        assert waiting_decisions(store, ["no-such-run"]) == []
    finally:
        store.close()


async def test_following_the_decisions_of_a_store(url: str) -> None:
    """Issue 40, item 5: ``follow_decisions`` yields the waiting decisions now, then again
    when a run moved: woken by NOTIFY on PostgreSQL, by a poll of the run list elsewhere.
    A follower in another handle (as in another process) sees a decision come and go."""
    import anyio

    from chainlab.runtime.coordination.inbox import follow_decisions

    store, other = open_store(url), open_store(url)
    seen: list[list[tuple[str, str]]] = []
    try:
        async with Runtime(toolbox(), store) as runtime, \
                Runtime(Toolbox("none"), other) as watcher:
            async def follow() -> None:
                async for items in follow_decisions(watcher.host, poll_s=0.05):
                    seen.append(sorted((d.run_id, d.step_id) for d in items))

            async def until(want: list[tuple[str, str]]) -> None:
                with anyio.fail_after(20):  # a bound, not a timing claim
                    while not seen or seen[-1] != want:
                        await anyio.sleep(0.01)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await until([])
                run = await runtime.start(chain("payment", QUOTE, PAY), {}, run_id="f-pay")
                await run.wait()
                await until([("f-pay", "pay")])
                await run.approve("pay")
                await run.wait()
                await until([])
                tg.cancel_scope.cancel()
        assert seen[0] == [] and [("f-pay", "pay")] in seen
        # nothing is yielded twice in a row: a read that changes nothing is not a change
        assert all(a != b for a, b in itertools.pairwise(seen))
    finally:
        other.close()
        store.close()
